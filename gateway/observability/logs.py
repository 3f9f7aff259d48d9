"""Log set-up: one line per record, whatever a client put in it.

Client-supplied text (method names, paths, header values) reaches log messages; a newline or
an ANSI escape in it could forge a line or repaint a terminal. `printable()` escapes such text
where a call site knows it holds client input, and `SafeFormatter` escapes every message
again, so a call site that forgets cannot open the hole. Tracebacks keep their newlines.

Third-party loggers stay at INFO even when the gateway logs at DEBUG: aiosqlite's debug lines
print stored results and session ids, and the asyncio and aiohttp ones are noise to an
operator. `--debug-libraries` lets them through when a developer asks.
"""

from __future__ import annotations

import logging
import re

# Lone surrogates too: a header byte that is not UTF-8 arrives as one (aiohttp decodes with
# surrogateescape), and neither a UTF-8 log nor a JSON body can hold it.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_MAX_CHARS = 200


def printable(text: str, limit: int = _MAX_CHARS) -> str:
    """`text` with control characters and lone surrogates escaped, cut to `limit` characters."""
    cut = text if len(text) <= limit else text[:limit] + f"...({len(text)} chars)"
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), cut)


class SafeFormatter(logging.Formatter):
    """Escapes control characters in the message; the traceback is left as it is."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = _UNPRINTABLE.sub(
            lambda m: m.group().encode("unicode_escape").decode("ascii"), record.message
        )
        return super().formatMessage(record)


def configure(level: str, debug_libraries: bool = False) -> None:
    """Log to stderr: the gateway at `level`, other libraries at INFO or above unless asked.

    Raises:
        ValueError: `level` is not a logging level name.
    """
    wanted = logging.getLevelName(level.upper())
    if not isinstance(wanted, int):
        raise ValueError(f"unknown log level {level!r}: use DEBUG, INFO, WARNING or ERROR")
    handler = logging.StreamHandler()
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(wanted if debug_libraries else max(wanted, logging.INFO))
    logging.getLogger("gateway").setLevel(wanted)
