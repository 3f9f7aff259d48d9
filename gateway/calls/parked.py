"""Calls parked between MRTR rounds, and the `requestState` that names one.

When the upstream asks a question during a 2026-07-28 call, the gateway answers the client
with an `InputRequiredResult` and keeps the upstream call open (parked) until the client
retries with the answers. The retry must find that call again, and only that caller's
retry of that request may: `requestState` is attacker-controlled input (spec: MUST be
verified), so it is `<payload>.<mac>`, where the payload names the parked call and when the
state expires, and the HMAC also covers the caller's principal and a digest of the request
(method and parameters without `_meta`, `inputResponses` and `requestState`), neither of
which is written into the state. A state is good for one retry: resuming takes the call out.
A parked call nobody resumes is abandoned when its state expires.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.aio import TaskSet
from gateway.calls.call import UpstreamCall
from gateway.calls.holdings import Holdings
from gateway.protocol import jsonrpc
from gateway.protocol.errors import INVALID_PARAMS, GatewayError, LimitExceeded

#: Parameters of a retry that are not part of the request it retries.
ROUND_PARAMS = ("_meta", "inputResponses", "requestState")
ABANDONED = "the client did not retry with its answers in time"


class BadRequestState(GatewayError):
    code = INVALID_PARAMS
    http_status = 400


@dataclass(slots=True)
class _Parked:
    call: UpstreamCall
    #: Whom the per-caller limits count (`admission.Caller.limit_key`).
    holder: str
    expires: float
    timer: asyncio.Task[None] | None = None


def request_digest(request: jsonrpc.Request) -> bytes:
    """What identifies a request across its retries: its method and salient parameters."""
    params = {k: v for k, v in (request.params or {}).items() if k not in ROUND_PARAMS}
    canonical = json.dumps([request.method, params], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


class ParkedCalls:
    def __init__(self, secret: bytes, clock: Callable[[], float] = time.time) -> None:
        # A key of its own, so a list cursor can never pass for a request state.
        self._key = hmac.new(secret, b"mcp-task-gateway requestState", hashlib.sha256).digest()
        self._clock = clock
        self._parked: dict[str, _Parked] = {}
        #: Per holder, its calls that may park running now (see `running`).
        self._running = Holdings()
        self._tasks = TaskSet("parked calls")

    def __len__(self) -> int:
        return len(self._parked)

    def held_by(self, holder: str) -> int:
        """Calls `holder` has parked, and calls of its that may park running now."""
        parked = sum(1 for entry in self._parked.values() if entry.holder == holder)
        return parked + self._running.of(holder)

    def running(self, holder: str, cap: int | None) -> contextlib.AbstractContextManager[None]:
        """Count a call that may park against `holder` while it runs, from before it starts
        (a call parks only later: a count of the parked alone lets a burst of calls all pass
        it, each then holding an upstream session while it waits for its retry). Parked,
        the call counts as parked. A `cap` of None counts it without a check (a retry,
        which held its place while parked).

        Raises:
            LimitExceeded: `holder` has `cap` such calls parked or running (raised here,
                before the call starts, not on entering the context).
        """
        if cap is not None and self.held_by(holder) >= cap:
            raise LimitExceeded(
                f"Too many calls waiting for this caller's answers: {cap} "
                "(limits.sessions_per_principal); answer or let one expire first"
            )
        return self._running.holding(holder)

    def park(
        self,
        call: UpstreamCall,
        owner: str,
        holder: str,
        request: jsonrpc.Request,
        ttl_seconds: float,
    ) -> str:
        """Keep `call` for the retry of `request` by `owner` for `ttl_seconds`; returns its
        requestState. `holder` is whom the call counts against."""
        handle = secrets.token_urlsafe(16)
        expires = self._clock() + ttl_seconds
        parked = self._parked[handle] = _Parked(call, holder, expires)
        parked.timer = self._tasks.spawn(self._expire(handle), name="parked call expiry")
        payload = _b64(json.dumps({"h": handle, "x": int(expires)}).encode())
        return f"{payload}.{_b64(self._mac(payload, owner, request))}"

    def resume(self, state: object, owner: str, request: jsonrpc.Request) -> UpstreamCall:
        """The call a retry continues, taken out of the parked set.

        Raises:
            BadRequestState: the state is malformed, altered, another caller's or another
                request's, expired, or names a call no longer held.
        """
        if not isinstance(state, str) or state.count(".") != 1:
            raise BadRequestState("params.requestState is not a request state this gateway made")
        payload, mac = state.split(".")
        try:
            given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
        except (binascii.Error, ValueError):
            given = b""
        if not hmac.compare_digest(given, self._mac(payload, owner, request)):
            raise BadRequestState(
                "params.requestState does not verify: it was altered, or was issued to another "
                "caller or for another request"
            )
        try:
            fields = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except (binascii.Error, ValueError):
            fields = None
        if not isinstance(fields, dict) or not isinstance(expires := fields.get("x"), int):
            raise BadRequestState("params.requestState is not a request state this gateway made")
        if self._clock() >= expires:
            raise BadRequestState("params.requestState has expired: call again without it")
        parked = self._parked.pop(str(fields.get("h")), None)
        if parked is None:
            raise BadRequestState(
                "params.requestState names a call that is no longer held (already retried, "
                "expired, the gateway restarted, or held by another replica): call again "
                "without it"
            )
        if parked.timer is not None:
            parked.timer.cancel()
        return parked.call

    def _mac(self, payload: str, owner: str, request: jsonrpc.Request) -> bytes:
        signed = b"\0".join((payload.encode(), owner.encode(), request_digest(request)))
        return hmac.new(self._key, signed, hashlib.sha256).digest()

    async def _expire(self, handle: str) -> None:
        parked = self._parked.get(handle)
        if parked is None:
            return
        await asyncio.sleep(max(0.0, parked.expires - self._clock()))
        if self._parked.get(handle) is parked:
            del self._parked[handle]
            await parked.call.end(ABANDONED)

    async def close(self) -> None:
        await self._tasks.close()
        parked, self._parked = list(self._parked.values()), {}
        for entry in parked:
            await entry.call.end("the gateway is shutting down")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
