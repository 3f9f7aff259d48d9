"""The audit trail: one function every security-relevant event goes through.

Each event is one JSON object on the `gateway.audit` logger, so an operator can route it
to its own file and a log shipper can parse it. Events name the principal where there is
one, never a credential; tool arguments only with `audit.include_arguments`.

Once `configure`d, the lines are written by a thread of their own (`_Writer`): a slow disk,
a full pipe or a rotation never holds up the event loop, and `stop()` at a clean shutdown
writes everything queued before it returns. The event loop only encodes the line and queues
it; the log record its handler needs is made on the writer's thread (a `LogRecord` costs
more than the line: two per task, in the lifecycle's profile). The handlers `configure` makes
take the lines queued meanwhile as one record, joined: one record, one write and one turn of
the GIL for each, where a record a line (each write handing the GIL to the event loop and
taking it back) cost creations a tenth of their rate.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import signal
import sys
import threading
import time
from typing import Any

import orjson

from gateway.config import AuditConfig

log = logging.getLogger("gateway.audit")

_writer: _Writer | None = None

#: How long the writer rests after writing out its queue: the events of a busy moment are
#: queued while it rests, without waking it one by one (each wake-up is a system call on
#: the event loop's thread, and a turn of the GIL), and then written together.
_REST_SECONDS = 0.02

_json = json.JSONEncoder(separators=(",", ":"), default=str)
#: Datetimes and dataclasses to `default` as well, so that each is written as `_json` writes it.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _encode(record: dict[str, Any]) -> str:
    """`_json.encode(record)`, made by orjson where that gives the same line: the standard
    encoder took some 13,000 instructions an event (a float's digits above all), three
    events a task. What orjson refuses (a lone surrogate, an integer beyond 64 bits) or
    writes otherwise (non-ASCII, which the standard one escapes) goes the standard way."""
    try:
        line = orjson.dumps(record, default=str, option=_ORJSON_OPTIONS)
    except orjson.JSONEncodeError:
        return _json.encode(record)
    return line.decode() if line.isascii() else _json.encode(record)


#: The most a joined record holds (a line longer goes alone): a rotating file's a quarter of
#: its size, so that it rotates before a record, never in the middle of one, and stays below it.
_JOINED_BYTES = 64 * 1024


def configure(config: AuditConfig) -> None:
    """Send audit events, as bare JSON lines, to the configured file or stream (stdout
    unless asked: the human log is on stderr, and the two are not mixed unless asked)."""
    handler: logging.Handler
    joined = _JOINED_BYTES
    if config.file is not None:
        handler = logging.handlers.RotatingFileHandler(
            config.file, maxBytes=config.max_bytes, backupCount=config.backups, encoding="utf-8"
        )
        joined = min(joined, config.max_bytes // 4)
    else:
        handler = logging.StreamHandler(sys.stdout if config.stream == "stdout" else sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    start(handler, joined)


def where(config: AuditConfig) -> str:
    """Where `configure` sends the lines, for the start-up log."""
    return config.file if config.file is not None else config.stream


class _Writer(threading.Thread):
    """Hands the queued lines to `handler`, in order, until `stop()`: a record each, or with
    `joined` (bytes, roughly: a line's characters) the lines queued meanwhile as one record
    of up to that many, joined by newlines."""

    def __init__(self, handler: logging.Handler, joined: int | None):
        super().__init__(name="audit-writer", daemon=True)
        self.handler = handler
        self._joined = joined
        #: Finished lines, then None: the end mark.
        self.lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._stopping = threading.Event()

    def run(self) -> None:
        # Signals are the event loop's: the kernel gives a process's signal to any thread not
        # blocking it, and one taken here while the loop closes its self-pipe (the writer
        # outlives the loop) was written to a closed descriptor, or took its default action.
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        lines, limit = self.lines, self._joined or 0
        while True:
            line = lines.get()
            batch: list[str] = []
            size = 0
            while line is not None:
                if batch and size + len(line) > limit:
                    self._write(batch)
                    batch, size = [], 0
                batch.append(line)
                size += len(line) + 1
                try:
                    line = lines.get_nowait()
                except queue.Empty:
                    break
            if batch:
                self._write(batch)
            if line is None:
                return  # the end mark: every record queued before it is written
            self._stopping.wait(_REST_SECONDS)

    def _write(self, lines: list[str]) -> None:
        text = "\n".join(lines)
        self.handler.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, text, (), None))

    def stop(self) -> None:
        self.lines.put(None)
        self._stopping.set()
        self.join()


def start(handler: logging.Handler, joined: int | None = None) -> None:
    """Audit events go to `handler`, written on a thread of their own (any earlier one is
    stopped first, its queue written out): a record a line, or with `joined` the lines queued
    meanwhile in records of up to that many characters (see `_Writer`)."""
    global _writer
    stop()
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    _writer = _Writer(handler, joined)
    _writer.start()


def stop() -> None:
    """Write out what is queued, then stop the writing thread (and close its handler)."""
    global _writer
    if _writer is None:
        return
    writer, _writer = _writer, None
    writer.stop()
    writer.handler.close()


_second: tuple[int, str] = (0, "")


def _now() -> str:
    """This moment as `tasks.models.iso` prints it (UTC, milliseconds, "Z"). A task's two
    events a lifecycle each formatted a new datetime, the costliest step of an event; the
    date and time to the second change once a second."""
    global _second
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_second[1]}.{int((now - second) * 1000):03d}Z"


def audit(event: str, **fields: Any) -> None:
    """Record one event, e.g. audit("auth_failed", route="demo", reason="token expired").

    Unconfigured (a library use, a test), the line goes to the `gateway.audit` logger."""
    writer = _writer
    if writer is None and not log.isEnabledFor(logging.INFO):
        return
    record = {"time": _now(), "event": event}
    record.update({key: value for key, value in fields.items() if value is not None})
    line = _encode(record)
    if writer is not None:
        writer.lines.put(line)
        return
    # A record made here rather than by log.info(): that one looks up the calling frame,
    # which no audit line shows, on every event.
    log.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, line, (), None))
