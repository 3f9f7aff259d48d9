"""The SQL both backends share, written once.

Both schemas have the same tables and columns, so many statements differ only by their
placeholders: `?` for SQLite, `$1, $2, ...` for PostgreSQL. Each is built here from a
placeholder function (`Mark`, given the 1-based number of each parameter), once per backend.
Every parameter is numbered in the order it appears and used once, so that `?` binds the
same arguments as `$n`. What differs in more than placeholders stays in the backend's own
modules: PostgreSQL's fencing on `runner` and its row locks, SQLite's lists as JSON arrays.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.tasks.store.rows import HISTORY_COLUMNS, INPUT_COLUMNS, TASK_COLUMNS

#: A placeholder for the parameter of the given number (from 1).
Mark = Callable[[int], str]


def qmark(number: int) -> str:
    """SQLite's placeholder."""
    return "?"


def dollar(number: int) -> str:
    """PostgreSQL's placeholder."""
    return f"${number}"


#: The statuses of a running task, spelled exactly as the partial indexes' WHERE in both
#: schemas, so that the planners match them: SQLite uses such an index only for a query that
#: repeats its condition literally (bound parameters do not count).
LIVE_SQL = "status IN ('working', 'input_required')"


class Statements:
    """The shared statements in one backend's placeholders (`mark`)."""

    def __init__(self, mark: Mark) -> None:
        #: For the statements a backend builds per call (`filters`).
        self.mark = m = mark
        tasks = f"SELECT {TASK_COLUMNS} FROM tasks"
        self.task = f"{tasks} WHERE task_id = {m(1)}"
        self.owners_task = f"{tasks} WHERE task_id = {m(1)} AND owner = {m(2)}"
        self.list_tasks = (
            f"{tasks} WHERE owner = {m(1)} AND (expires_at IS NULL OR expires_at > {m(2)})"
            f" ORDER BY created_at, task_id LIMIT {m(3)}"
        )
        self.list_tasks_after = (
            f"{tasks} WHERE owner = {m(1)} AND (created_at, task_id) > ({m(2)}, {m(3)})"
            f" AND (expires_at IS NULL OR expires_at > {m(4)})"
            f" ORDER BY created_at, task_id LIMIT {m(5)}"
        )
        self.history = f"SELECT {HISTORY_COLUMNS} FROM tasks WHERE task_id = {m(1)}"
        # Counted up to the cap only: a caller at the cap with thousands of tasks live would
        # otherwise cost every creation of theirs a scan of them all (ms on the loop).
        self.count_live = (
            f"SELECT count(*) FROM (SELECT 1 FROM tasks WHERE owner = {m(1)} AND {LIVE_SQL}"
            f" LIMIT {m(2)}) AS live"
        )
        self.outcome = f"SELECT kind, body FROM outcomes WHERE task_id = {m(1)}"
        self.insert_outcome = f"INSERT INTO outcomes VALUES ({m(1)}, {m(2)}, {m(3)})"
        # Their outcomes, input rows and kept requests go with them: the foreign keys cascade.
        self.delete_expired = f"DELETE FROM tasks WHERE expires_at <= {m(1)} RETURNING task_id"
        # The owner of a principal's task names its route (`owner_of`): matched whole, so that
        # one principal's name never matches the end of another's.
        self.erase_tasks = (
            f"DELETE FROM tasks WHERE owner = 'principal:' || route || ':' || {m(1)}"
            " RETURNING task_id"
        )
        self.erase_sessions = f"DELETE FROM sessions WHERE principal = {m(1)}"

        self.pending_inputs = (
            f"SELECT {INPUT_COLUMNS} FROM task_inputs WHERE task_id = {m(1)}"
            " AND state = 'pending' ORDER BY created_at, key"
        )
        self.answered_inputs = (
            f"SELECT key, response FROM task_inputs WHERE task_id = {m(1)} AND state = 'answered'"
        )
        self.answer_input = (
            f"UPDATE task_inputs SET state = 'answered', response = {m(1)}, settled_at = {m(2)}"
            f" WHERE task_id = {m(3)} AND key = {m(4)} AND state = 'pending'"
            f" RETURNING {INPUT_COLUMNS}"
        )
        #: Every pending row: each backend adds which task's (and which keys).
        self.withdraw_inputs = (
            f"UPDATE task_inputs SET state = 'withdrawn', settled_at = {m(1)}"
            " WHERE state = 'pending'"
        )

        self.save_request = f"INSERT INTO task_calls (task_id, request) VALUES ({m(1)}, {m(2)})"
        self.request = (
            f"SELECT request FROM task_calls WHERE task_id = {m(1)} AND request IS NOT NULL"
        )
        self.upstream_call = (
            "SELECT task_id, upstream_session_id, upstream_request_id FROM task_calls"
            f" WHERE task_id = {m(1)} AND upstream_request_id IS NOT NULL"
        )

        self.session = f"SELECT * FROM sessions WHERE session_id = {m(1)}"
        self.update_session = (
            f"UPDATE sessions SET protocol_version = {m(1)}, initialize = {m(2)},"
            f" initialized = {m(3)}, upstream_session_id = {m(4)},"
            f" upstream_protocol_version = {m(5)} WHERE session_id = {m(6)}"
        )
        self.delete_session = f"DELETE FROM sessions WHERE session_id = {m(1)}"
        self.caller_sessions = (
            f"SELECT session_id FROM sessions WHERE route = {m(1)} AND principal = {m(2)}"
            f" ORDER BY last_seen, session_id LIMIT {m(3)}"
        )
        self.prune_sessions = f"DELETE FROM sessions WHERE last_seen < {m(1)} RETURNING session_id"
