"""JSON-RPC 2.0 envelopes: bytes in, typed messages out, and back.

Only the envelope is parsed; `params` and `result` stay as the peer sent them so that fields
the gateway does not act on cross it untouched. Every module past this one handles these
models, never raw dicts of envelopes.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias, TypeVar, cast

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError

from .errors import InvalidRequest, ParseError

RequestId: TypeAlias = StrictInt | StrictStr
JsonObject: TypeAlias = dict[str, Any]


class _Envelope(BaseModel):
    # extra="allow" keeps unknown top-level members so relaying never drops them.
    model_config = ConfigDict(extra="allow", frozen=True)
    jsonrpc: str = "2.0"


class Request(_Envelope):
    id: RequestId
    method: str
    params: JsonObject | None = None

    @property
    def meta(self) -> JsonObject:
        meta = (self.params or {}).get("_meta")
        return meta if isinstance(meta, dict) else {}


class Notification(_Envelope):
    method: str
    params: JsonObject | None = None


class Response(_Envelope):
    id: RequestId
    result: JsonObject


class ErrorObject(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    code: int
    message: str
    data: Any = None


class ErrorResponse(_Envelope):
    id: RequestId | None
    error: ErrorObject


Message: TypeAlias = Request | Notification | Response | ErrorResponse


def parse(raw: bytes | str) -> Message:
    """Parse one JSON-RPC message.

    Raises:
        ParseError: the body is not JSON.
        InvalidRequest: it is JSON but not a single JSON-RPC 2.0 message.
    """
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"Parse error: body is not valid JSON ({exc})") from exc
    if isinstance(obj, list):
        raise InvalidRequest(
            "JSON-RPC batching is not supported: the 2025-06-18 revision removed it; "
            "send one message per POST"
        )
    return from_object(obj)


def from_object(obj: Any) -> Message:
    """Classify and validate an already-decoded JSON value.

    Raises:
        InvalidRequest: it is not a single JSON-RPC 2.0 message.
    """
    if not isinstance(obj, dict) or obj.get("jsonrpc") != "2.0":
        raise InvalidRequest('Invalid Request: expected one JSON-RPC object with "jsonrpc": "2.0"')
    model: type[Message]
    if "method" in obj:
        model = Request if "id" in obj else Notification
    elif "result" in obj:
        model = Response
    elif "error" in obj:
        model = ErrorResponse
    else:
        raise InvalidRequest("Invalid Request: neither a request, a notification nor a response")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "message"
        raise InvalidRequest(f"Invalid Request: {where}: {first['msg']}") from exc


def dump(message: Message) -> str:
    return message.model_dump_json(exclude_unset=True)


def error_response(
    request_id: RequestId | None, code: int, message: str, data: Any = None
) -> ErrorResponse:
    fields: JsonObject = {"code": code, "message": message}
    if data is not None:
        fields["data"] = data
    return ErrorResponse(jsonrpc="2.0", id=request_id, error=ErrorObject(**fields))


_WithId = TypeVar("_WithId", bound=Request | Response | ErrorResponse)


def with_id(message: _WithId, new_id: RequestId) -> _WithId:
    """The same message under another id (ids are remapped between id spaces)."""
    # model_copy returns Self, which mypy loses through a union-bound TypeVar.
    return cast(_WithId, message.model_copy(update={"id": new_id}))


def progress_token(request: Request) -> RequestId | None:
    token = request.meta.get("progressToken")
    return token if isinstance(token, int | str) and not isinstance(token, bool) else None


def with_progress_token(request: Request, token: RequestId) -> Request:
    params = request.params or {}
    meta = {**request.meta, "progressToken": token}
    return request.model_copy(update={"params": {**params, "_meta": meta}})


def param(message: Request | Notification, key: str) -> Any:
    return (message.params or {}).get(key)


_WithParams = TypeVar("_WithParams", bound=Request | Notification)


def with_param(message: _WithParams, key: str, value: Any) -> _WithParams:
    return cast(
        _WithParams, message.model_copy(update={"params": {**(message.params or {}), key: value}})
    )


def with_meta(message: _WithParams, key: str, value: Any) -> _WithParams:
    """The message with one `_meta` entry added to its params."""
    return with_param(message, "_meta", {**(param(message, "_meta") or {}), key: value})


def without_param(message: _WithParams, key: str) -> _WithParams:
    params = {k: v for k, v in (message.params or {}).items() if k != key}
    return cast(_WithParams, message.model_copy(update={"params": params}))
