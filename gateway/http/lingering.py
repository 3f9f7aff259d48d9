"""The transport a client connection's protocol writes to: the socket's own, with a close
that may linger (`GuardedHandler` answers an oversized header and lets the rest drain)."""

from __future__ import annotations

import asyncio
from typing import Any

LINGER_SECONDS = 2.0


class LingeringTransport(asyncio.Transport):
    """The connection's transport, whose close() may first linger (see `linger()`).

    Closing a socket with unread bytes makes the kernel send RST, and a client still sending
    a huge header would lose the 431 written just before; so after such an answer the
    gateway half-closes, reads and drops what still comes for `LINGER_SECONDS`, then closes.

    Every other method of a transport is handed on, spelled out: with a `__getattr__` for
    them, every attribute read of this object, some nine a request, took CPython's slow path.
    """

    __slots__ = ("_transport", "_loop", "_linger", "_closing")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._linger = False
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._transport.writelines(list_of_data)

    def write_eof(self) -> None:
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def abort(self) -> None:
        self._transport.abort()

    def linger(self) -> None:
        self._linger = True

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._linger or not self._transport.can_write_eof():
            self._transport.close()
            return
        self._transport.write_eof()
        self._loop.call_later(LINGER_SECONDS, self._transport.close)
