"""Tasks: what the gateway adds to an upstream that knows nothing of them.

Dispatch (`protocol/`) hands over two kinds of request. **RunAsTask**, a task-augmented
`tools/call`: the runner stores the task, the client gets a CreateTaskResult at once, and
in the background a plain `tools/call` goes upstream and ends in one terminal write.
**Local** `tasks/*`: the task API of the caller's protocol generation answers from the
store alone. Nothing here imports `http/`.

    models.py       the vocabulary: TaskStatus, TERMINAL, the lifecycle, outcome -> status,
                    and the status a 2026-07-28 reader sees
    runner.py       *when* a task runs, and its one terminal write
    recovery.py     the re-run-or-fail decision for a task its process lost (today's runner
                    still fails every such task at start-up)
    host.py         the runner's seam to the session that started the task
    progress.py     upstream progress as the task's statusMessage, coalesced
    telemetry.py    the runner's metrics and audit events
    sweeper.py      the housekeeping timer (expired tasks, session records)
    api_2025.py     the 2025-11-25 task API: tasks/get, result, list, cancel
    api_modern.py   the tasks extension's API (2026-07-28): tasks/get, update, cancel
    api_common.py   what both share: finding the caller's task, the audit of misses and reads
    notifier.py     in-process wake-ups; a waiter always re-reads the store
    store/          the `TaskStore` interface and its backends
"""
