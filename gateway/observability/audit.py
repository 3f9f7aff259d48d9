"""The audit trail: one function every security-relevant event goes through.

Each event is one JSON object on the `gateway.audit` logger, so an operator can route it
to its own file and a log shipper can parse it. Events name the principal where there is
one, never a credential; tool arguments only with `audit.include_arguments`.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from typing import Any

from gateway.config import AuditConfig
from gateway.tasks.models import iso, utcnow

log = logging.getLogger("gateway.audit")


def configure(config: AuditConfig) -> None:
    """Send audit events, as bare JSON lines, to the configured file or to stderr."""
    handler: logging.Handler
    if config.file is not None:
        handler = logging.handlers.RotatingFileHandler(
            config.file, maxBytes=config.max_bytes, backupCount=config.backups, encoding="utf-8"
        )
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    # Not into the gateway's own log as well: one line per event, in one place.
    log.propagate = False


def audit(event: str, **fields: Any) -> None:
    """Record one event, e.g. audit("auth_failed", route="demo", reason="token expired")."""
    record = {"time": iso(utcnow()), "event": event}
    record.update({key: value for key, value in fields.items() if value is not None})
    log.info(json.dumps(record, separators=(",", ":"), default=str))
