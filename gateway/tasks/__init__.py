"""Tasks: what the gateway adds to an upstream that knows nothing of them.

Dispatch (`protocol/`) hands over two kinds of request. **RunAsTask**, a task-augmented
`tools/call`: the runner stores the task, the client gets a CreateTaskResult at once, and
in the background a plain `tools/call` goes upstream and ends in one terminal write.
**Local** `tasks/*`: the task API of the caller's protocol generation (`session.task_api`,
`calls.task_api`) answers from the store. Nothing here imports `http/` or `session/`.

    models.py       the vocabulary: TaskStatus, TERMINAL, the lifecycle, outcome -> status,
                    and the status a 2026-07-28 reader sees
    runner.py       *when* a task runs, and its one terminal write
    runs.py         the runs in flight, which a stop or a loss acts on
    creation.py     what a new task is (its id included), from its tools/call and the
                    route's policy
    landing.py      the terminal write, which a read that meets it under way sees land
    recovery.py     the re-run-or-fail decision for a task its process lost, and the
                    messages a lost task fails with
    losses.py       the runner's writes after a loss: at shutdown, to another replica, and
                    for the tasks a lost process left (`gateway/recovery/` tells the story)
    stops.py        the runner's writes for a cancel and for expiry, before the run stops
    host.py         the runner's seam to whoever started the task (one host per kind of
                    caller: a 2025-11-25 session, or a call with no session)
    progress.py     upstream progress as the task's statusMessage, coalesced
    telemetry.py    the runner's metrics and audit events
    sweeper.py      the housekeeping timer (expired tasks, session records)
    api_common.py   what both task APIs share: finding the caller's task, the audit of
                    misses and reads
    inputs.py       the questions a task stores for its caller, and their answers (one owner
                    for both generations and every replica)
    notifier.py     in-process wake-ups; a waiter always re-reads the store
    store/          the `TaskStore` interface and its backends
"""
