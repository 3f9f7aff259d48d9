"""The reader of upstream event streams (`gateway.upstream.sse_reader`), on chunks cut where a
network could cut them: the fields, comments, multi-line data, the three line ends, and what
ends a stream early."""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import AsyncIterator

import pytest

from gateway.protocol.errors import INTERNAL_ERROR, UpstreamProtocolError
from gateway.upstream import sse_reader
from gateway.upstream.sse_reader import Event


async def chunked(body: bytes, size: int | None = None) -> AsyncIterator[bytes]:
    """`body` in chunks of `size` bytes (all at once without one), as a response yields it."""
    size = size or len(body) or 1
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def read(body: bytes, size: int | None = None) -> list[Event]:
    return [event async for event in sse_reader.events(chunked(body, size))]


async def test_every_field_is_read_and_the_event_type_defaults_to_message() -> None:
    body = b"event: endpoint\nid: 7\nretry: 1500\ndata: /messages?s=1\n\ndata: {}\n\n"
    first, second = await read(body)
    assert first == Event(event="endpoint", data="/messages?s=1", id="7", retry=1500)
    assert second == Event(event="message", data="{}", id=None, retry=None)


async def test_only_one_space_after_the_colon_is_dropped_and_a_bare_field_name_is_empty() -> None:
    (event,) = await read(b"data:no space\ndata:  two spaces\ndata\n\n")
    assert event.data == "no space\n two spaces\n"


async def test_data_lines_join_with_newlines_into_one_event() -> None:
    (event,) = await read(b'data: {"jsonrpc": "2.0",\ndata:  "id": 1,\ndata:  "result": {}}\n\n')
    assert event.data == '{"jsonrpc": "2.0",\n "id": 1,\n "result": {}}'


async def test_comments_and_unknown_fields_are_skipped() -> None:
    body = b": keep-alive\n\n:another\nfoo: bar\ndata: x\n: inside an event\n\n"
    assert [e.data for e in await read(body)] == ["x"]


async def test_a_retry_that_is_not_a_whole_number_is_ignored() -> None:
    (event,) = await read(b"retry: soon\nretry: 1.5\ndata: x\n\n")
    assert event.retry is None


async def test_an_event_with_an_id_and_no_data_is_delivered_as_a_priming_event() -> None:
    # Servers prime a stream with an id and empty data, so the client can resume from it.
    events = await read(b"id: abc:0\ndata: \n\nid: abc:1\n\n\n\n")
    assert [(e.id, e.data) for e in events] == [("abc:0", ""), ("abc:1", "")]


async def test_blank_lines_alone_dispatch_nothing() -> None:
    assert await read(b"\n\n\r\n\r\r") == []


async def test_an_event_cut_off_before_its_blank_line_is_never_delivered() -> None:
    assert [e.data for e in await read(b"data: whole\n\ndata: cut off\n")] == ["whole"]


@pytest.mark.parametrize("end", [b"\n", b"\r", b"\r\n"], ids=["LF", "CR", "CRLF"])
async def test_lines_may_end_in_lf_cr_or_crlf(end: bytes) -> None:
    body = end.join([b"id: 1", b"data: a", b"data: b", b"", b"data: c", b"", b""])
    events = await read(body)
    assert [(e.data, e.id) for e in events] == [("a\nb", "1"), ("c", None)]


async def test_sse_lines_end_at_cr_lf_or_crlf_wherever_the_chunks_are_cut() -> None:
    # Over HTTP the cuts fall where the network puts them; here they fall on purpose, also
    # between the CR and the LF of one line end (which must not count as two).
    stream = b"data: a\r\ndata: b\rid: 1\n\r\n: note\rdata: c\r\r"
    for size in range(1, len(stream) + 1):
        events = [(e.data, e.id) for e in await read(stream, size)]
        assert events == [("a\nb", "1"), ("c", None)], size


async def test_empty_chunks_change_nothing() -> None:
    async def with_gaps() -> AsyncIterator[bytes]:
        for chunk in (b"", b"data: x\r", b"", b"\n", b"", b"\n"):
            yield chunk

    assert [e.data async for e in sse_reader.events(with_gaps())] == ["x"]


async def test_an_event_whose_bytes_are_not_utf8_is_delivered_marked_broken() -> None:
    first, second = await read(b"data: caf\xe9\n\ndata: fine\n\n")
    assert first.broken is not None and "not valid UTF-8" in first.broken
    assert first.data == "caf\ufffd"  # as the spec decodes it, but marked as not to be trusted
    assert second.broken is None and second.data == "fine"


async def test_a_whole_line_over_the_cap_ends_the_stream_with_a_protocol_error() -> None:
    body = b"data: {}\n\ndata: " + b"x" * 100 + b"\n\n"
    seen: list[str] = []
    with pytest.raises(UpstreamProtocolError) as raised:
        async for event in sse_reader.events(chunked(body), limit=50):
            seen.append(event.data)
    assert seen == ["{}"] and raised.value.code == INTERNAL_ERROR


async def test_sse_line_over_the_cap_ends_the_stream_with_a_protocol_error() -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        while True:  # a line that never ends, a chunk at a time
            yield b"x" * 1000

    seen: list[str] = []
    with pytest.raises(UpstreamProtocolError):
        async for event in sse_reader.events(endless(), limit=10_000):
            seen.append(event.data)
    assert seen == ["{}"]


async def test_a_line_exactly_at_the_cap_is_read() -> None:
    line = b"data: " + b"x" * 44  # 50 bytes
    (event,) = [e async for e in sse_reader.events(chunked(line + b"\n\n", 7), limit=50)]
    assert event.data == "x" * 44


async def test_a_reader_stopped_at_its_answer_leaves_the_loop_no_generator_to_close() -> None:
    """An async generator left suspended is closed by the loop's finalizer hook: a thread-safe
    call and a task, for each generator of each answer read from a stream that had not ended.
    Closing `events` closes what it reads, down to the body's own chunks."""
    hooks = sys.get_asyncgen_hooks()
    finalized: list[object] = []
    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalized.append)
    try:
        body = chunked(b"data: answer\n\ndata: after\n\n", 3)
        async with contextlib.aclosing(sse_reader.events(body)) as events:
            async for event in events:
                assert event.data == "answer"
                break
        gc.collect()
    finally:
        sys.set_asyncgen_hooks(*hooks)
    assert finalized == []
