"""The audit trail: one function every security-relevant event goes through.

Each event is one JSON object on the `gateway.audit` logger, so an operator can route it
to its own file and a log shipper can parse it. Events name the principal, never a
credential; tool arguments are never included.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from .models import iso, utcnow

log = logging.getLogger("gateway.audit")


def audit(event: str, **fields: Any) -> None:
    """Record one event, e.g. audit("auth_failed", route="demo", reason="token expired")."""
    record = {"time": iso(utcnow()), "event": event}
    record.update({key: value for key, value in fields.items() if value is not None})
    log.info(json.dumps(record, separators=(",", ":"), default=str))
