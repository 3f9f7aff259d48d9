"""Recovery: what becomes of a task whose process is lost while its call runs.

A task outlives its client's request, but not the process that runs its upstream call. Each
task that process leaves live gets one decision, `tasks.recovery.after_loss`: it fails with a
message saying how its process was lost, or, if its route marks the tool safe to repeat
(`tasks.repeatable`, kept with the task when it was made) and attempts, time limit and ttl
allow, it runs again as its next attempt under the same task id. The decision is pure and
lives in `tasks/`, beside the runner that acts on it; this package does what needs the app.

* **At shutdown.** The drain (`http.drain`) lets runs end by themselves; then the app's stop
  calls `TaskRunner.interrupt_all`, which fails what still runs (`interrupted: gateway shut
  down`), while clients can still hear it, and leaves the tasks of tools safe to repeat live.
* **At restart, SQLite.** One process per file: once the port is bound, `app.py` has
  `TaskRunner.recover` claim every live task of the file (`TaskStore.claim_orphans`) and
  decide each one (`interrupted: gateway restarted`, or the next attempt begun in the store);
  `reruns.start` then runs those again from the call each kept (`tasks.recovery.kept_call`).
* **A replica's lease lapses, PostgreSQL.** `replicas.start` renews this replica's lease and
  hears the others' writes; a run here whose task another replica ended or took over is
  stopped (`TaskRunner.changed_elsewhere`). In each lease round the tasks of replicas whose
  lease has expired are claimed and decided the same way (`interrupted: the gateway replica
  running it was lost`), and those run again start here through `reruns.start`.

Where each step lives: `tasks/recovery.py` the decision and its messages; `tasks/losses.py`
the runner's writes (`interrupt_all`, `changed_elsewhere`, `recover`, `fail_lost`, reached as
the `TaskRunner`'s own); `tasks/runner.py` the re-run itself (`rerun`); `tasks/store/` the
claim, the attempt and the fenced writes; `reruns.py` the start of a re-run on an upstream
session held for the task's principal; `replicas.py` the lease rounds; `app.py` the wiring.
"""
