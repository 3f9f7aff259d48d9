"""JSON-RPC 2.0 envelopes: bytes in, typed messages out, and back.

Only the envelope is parsed; `params` and `result` stay as the peer sent them so that fields
the gateway does not act on cross it untouched. Every module past this one handles these
models, never raw dicts of envelopes.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError

from gateway.protocol.errors import InvalidRequest, ParseError

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
#: What answers a request: its result or its error.
Answer: TypeAlias = Response | ErrorResponse


#: Deepest nesting of arrays and objects a message may have. The gateway re-serialises what it
#: relays, and pydantic's serialiser gives up at a few hundred levels (Python's parser at about
#: a thousand); 128 is serde_json's limit too, and no MCP message comes near it.
MAX_DEPTH = 128

# A lone surrogate can only arrive as a \u escape (raw surrogate bytes are not UTF-8), so
# the costly check runs only for bodies that hold such an escape.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _too_deep(obj: Any) -> bool:
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite)


def parse(raw: bytes | str) -> Message:
    """Parse one JSON-RPC message.

    Beyond JSON's grammar it refuses what the gateway could not store or relay: NaN and
    Infinity (not JSON), numbers beyond a double, lone surrogates (not encodable as UTF-8),
    and nesting deeper than `MAX_DEPTH`.

    Raises:
        ParseError: the body is not JSON, or JSON the gateway refuses as above.
        InvalidRequest: it is JSON but not a single JSON-RPC 2.0 message.
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    try:
        # As json.loads does with bytes, with a decoder made once rather than per message.
        # An object opening with an ASCII character is UTF-8 (what every peer sends; UTF-16
        # and -32 have a NUL beside it): json.detect_encoding's verdict, without its call.
        encoding = "utf-8" if data[:1] == b"{" and data[1:2] != b"\x00" else None
        text = data.decode(encoding or json.detect_encoding(data), "surrogatepass")
        obj = _DECODER.decode(text)
    except RecursionError:
        raise ParseError(
            f"Parse error: JSON nested deeper than {MAX_DEPTH} levels is not accepted"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ParseError(f"Parse error: body is not valid JSON ({exc})") from None
    if (data.count(b"[") + data.count(b"{") > MAX_DEPTH) and _too_deep(obj):
        raise ParseError(f"Parse error: JSON nested deeper than {MAX_DEPTH} levels is not accepted")
    # (A substring test first: bytes search at C speed; the regex engine costs a thousand
    # instructions even on a body without a backslash, and every message is checked.)
    if b"\\u" in data and _SURROGATE_ESCAPE.search(data):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ParseError(
                "Parse error: the body holds a lone UTF-16 surrogate (\\ud800-\\udfff), which "
                "is not a Unicode character"
            ) from None
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
    elif "result" in obj and "error" in obj:
        raise InvalidRequest('Invalid Request: a response has "result" or "error", never both')
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


def is_request_id(value: object) -> bool:
    """Whether a JSON value can be a JSON-RPC id (a string or an integer, never a bool)."""
    return isinstance(value, int | str) and not isinstance(value, bool)


def dump(message: Message) -> str:
    return message.model_dump_json(exclude_unset=True)


def cancelled(request_id: RequestId, reason: str) -> Notification:
    """`notifications/cancelled` for the request `request_id`, saying why."""
    params = {"requestId": request_id, "reason": reason}
    return Notification(jsonrpc="2.0", method="notifications/cancelled", params=params)


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
    return _replaced(message, "id", new_id)


_M = TypeVar("_M", bound=_Envelope)
_setattr = object.__setattr__


def _replaced(message: _M, field: str, value: Any) -> _M:
    """What `message.model_copy(update={field: value})` makes, made directly: a relayed
    call takes two such copies and a task several, and model_copy's generic path was a
    measurable part of their cost. The models are frozen, so the copy shares field values."""
    cls = type(message)
    copied = cls.__new__(cls)
    fields = message.__dict__.copy()
    fields[field] = value
    extra = message.__pydantic_extra__
    _setattr(copied, "__dict__", fields)
    _setattr(copied, "__pydantic_extra__", extra.copy() if extra else extra)
    _setattr(copied, "__pydantic_fields_set__", message.__pydantic_fields_set__ | {field})
    _setattr(copied, "__pydantic_private__", None)
    return copied


def progress_token(request: Request) -> RequestId | None:
    token = request.meta.get("progressToken")
    return token if isinstance(token, int | str) and not isinstance(token, bool) else None


def with_progress_token(request: Request, token: RequestId) -> Request:
    params = request.params or {}
    meta = {**request.meta, "progressToken": token}
    return _replaced(request, "params", {**params, "_meta": meta})


def param(message: Request | Notification, key: str) -> Any:
    return (message.params or {}).get(key)


_WithParams = TypeVar("_WithParams", bound=Request | Notification)


def with_param(message: _WithParams, key: str, value: Any) -> _WithParams:
    return _replaced(message, "params", {**(message.params or {}), key: value})


def with_meta(message: _WithParams, key: str, value: Any) -> _WithParams:
    """The message with one `_meta` entry added to its params."""
    return with_param(message, "_meta", {**(param(message, "_meta") or {}), key: value})


def without_param(message: _WithParams, key: str) -> _WithParams:
    params = {k: v for k, v in (message.params or {}).items() if k != key}
    return _replaced(message, "params", params)
