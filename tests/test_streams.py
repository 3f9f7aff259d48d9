"""A session's event streams (`gateway.session.streams`): events numbered and buffered so a
dropped connection can resume after Last-Event-ID, one reader at a time, the buffer bounded,
and where a message goes once its own stream has closed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.protocol import jsonrpc
from gateway.session import streams as streams_module
from gateway.session.streams import EventStream, Streams

from .helpers import take, until_end


def note(n: int) -> jsonrpc.Notification:
    return jsonrpc.Notification(jsonrpc="2.0", method="notifications/message", params={"n": n})


# -- EventStream


async def test_events_are_numbered_from_one_and_named_by_their_stream() -> None:
    stream = EventStream("ab12cd3", capacity=8)
    for data in ("a", "b", "c"):
        stream.push(data)
    assert await take(stream, 0, 3) == [(1, "a"), (2, "b"), (3, "c")]
    assert stream.event_id(2) == "ab12cd3:2" and stream.pushed == 3


async def test_a_reader_resuming_after_an_event_gets_only_what_came_after_it() -> None:
    stream = EventStream("s", capacity=8)
    for data in ("a", "b", "c", "d"):
        stream.push(data)
    assert await take(stream, 0, 2) == [(1, "a"), (2, "b")]  # then the connection drops
    assert await take(stream, 2, 2) == [(3, "c"), (4, "d")]  # Last-Event-ID: s:2
    assert await take(stream, 1, 1) == [(2, "b")]  # any event still buffered can be replayed


async def test_a_reader_waits_for_events_pushed_after_it_started() -> None:
    stream = EventStream("s", capacity=8)
    reading = asyncio.ensure_future(take(stream, 0, 2))
    await asyncio.sleep(0)  # the reader is waiting now
    stream.push("later")
    stream.push("and later")
    async with asyncio.timeout(5):
        assert await reading == [(1, "later"), (2, "and later")]


async def test_a_full_buffer_drops_its_oldest_event_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A reader that falls behind is worth a WARNING, once per stream; a stream nobody ever
    read (the GET stream of a client that only polls) fills with task statuses as a matter of
    course, and says so only at DEBUG, or a busy gateway's log would hold little else."""
    stream = EventStream("s", capacity=2)
    stream.push("first")
    assert await take(stream, 0, 1) == [(1, "first")]  # a reader came, and went
    with caplog.at_level(logging.DEBUG, logger="gateway.session.streams"):
        for data in ("a", "b", "c", "d", "e"):
            stream.push(data)
    stream.close()
    assert await until_end(stream, 1) == [(5, "d"), (6, "e")]
    drops = [r for r in caplog.records if "dropped its oldest unread event" in r.message]
    assert [r.levelno for r in drops] == [logging.WARNING]

    unread = EventStream("t", capacity=2)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="gateway.session.streams"):
        for data in ("a", "b", "c", "d"):
            unread.push(data)
    drops = [r for r in caplog.records if "dropped its oldest unread event" in r.message]
    assert [r.levelno for r in drops] == [logging.DEBUG]


async def test_a_closed_stream_ends_each_reader_after_what_it_holds_and_refuses_more() -> None:
    stream = EventStream("s", capacity=8)
    stream.push("last words")
    stream.close()
    assert await until_end(stream, 0) == [(1, "last words")]
    assert await until_end(stream, 1) == []
    with pytest.raises(RuntimeError):
        stream.push("too late")


async def test_a_quiet_stream_gives_its_reader_none_so_it_can_send_a_keep_alive() -> None:
    stream = EventStream("s", capacity=8)
    assert await take(stream, 0, 1, idle=0.01) == [None]


async def test_a_second_reader_takes_over_and_the_first_ends_without_the_new_events() -> None:
    stream = EventStream("s", capacity=8)
    first = stream.follow(0, 60)
    stream.push("a")
    async with asyncio.timeout(5):
        assert await anext(first) == (1, "a")
        waiting = asyncio.ensure_future(anext(first))
        await asyncio.sleep(0)  # the first reader waits for more
        second = stream.follow(1, 60)
        stream.push("b")
        assert await anext(second) == (2, "b")  # a message goes to one connection only
        with pytest.raises(StopAsyncIteration):
            await waiting
        assert stream.attached
        await second.aclose()
    assert not stream.attached


async def test_an_interrupted_stream_ends_the_reading_connection_and_the_next_one_resumes() -> None:
    stream = EventStream("s", capacity=8)
    stream.push("before")
    stream.interrupt()  # the upstream closed its stream here (SSE polling)
    stream.push("after")
    assert stream.sse
    assert await until_end(stream, 0) == [(1, "before")]
    assert await take(stream, 1, 1) == [(2, "after")]


async def test_the_json_window_ends_at_the_first_event_or_when_its_time_is_up() -> None:
    loop = asyncio.get_running_loop()
    answered = EventStream("s", 8)
    async with asyncio.TaskGroup() as group:
        waiting = group.create_task(answered.first_change(30))
        await asyncio.sleep(0)
        answered.push("answer")
        answered.close()
        await asyncio.wait_for(waiting, 1)  # long before the 30 s window
    quiet = EventStream("q", 8)
    started = loop.time()
    await quiet.first_change(0.05)
    assert 0.04 <= loop.time() - started < 1
    await answered.first_change(30)  # changed already: no wait at all
    framed = EventStream("f", 8)
    async with asyncio.TaskGroup() as group:
        turned = group.create_task(framed.first_change(30))
        framed.want_sse()
        await asyncio.sleep(0.05)
        # The upstream's SSE framing alone does not end the window: an answer that comes
        # within it goes out whole (`take_rest`). Its stream closed early (SSE polling) does.
        assert not turned.done()
        framed.interrupt()
        await asyncio.wait_for(turned, 1)


async def test_a_closed_stream_is_handed_out_whole_and_an_open_or_cut_one_is_not() -> None:
    stream = EventStream("s", capacity=8)
    stream.push("progress")
    assert stream.take_rest(0) is None  # still open: to be followed
    stream.push("answer")
    stream.close()
    assert stream.take_rest(0) == [(1, "progress"), (2, "answer")]
    assert stream.sent == 2 and stream.ever_read and not stream.attached
    assert stream.take_rest(2) == []  # a resumption after the last event: nothing more
    cut = EventStream("c", capacity=8)
    cut.push("before")
    cut.interrupt()
    cut.close()
    assert cut.take_rest(0) is None  # the reading connection must end at the cut


async def test_an_event_can_be_taken_back_only_until_a_reader_was_handed_it() -> None:
    stream = EventStream("s", capacity=8)
    for data in ("a", "b", "c"):
        stream.push(data)
    assert await take(stream, 0, 1) == [(1, "a")]
    assert not stream.retract(1)  # already handed out: it stays delivered where it went
    assert stream.retract(2)
    assert not stream.retract(2)  # gone already
    stream.close()
    assert await until_end(stream, 1) == [(3, "c")]


# -- Streams: one session's streams


def test_stream_keys_are_unique_per_session_and_per_incarnation() -> None:
    streams, again = Streams(8, "tag"), Streams(8, "tag")  # the same session after a restart
    keys = [streams.new().key for _ in range(3)]
    assert len({streams.standalone.key, *keys}) == 4
    assert streams.standalone.key.endswith("0")
    # Old Last-Event-IDs must not name the new incarnation's streams.
    assert again.get(keys[0]) is None and again.get(streams.standalone.key) is None
    assert all(streams.get(key) is not None for key in keys)


def test_old_closed_streams_are_pruned_while_one_left_open_is_kept() -> None:
    streams = Streams(8, "tag")
    waiting = streams.new()  # a tasks/result still waiting on a long task
    closed = []
    for _ in range(100):
        stream = streams.new()
        stream.close()
        closed.append(stream.key)
    assert streams.get(waiting.key) is waiting
    assert streams.get(closed[0]) is None and streams.get(closed[-1]) is not None


def test_closed_streams_are_kept_to_the_bound_the_oldest_going_first() -> None:
    streams = Streams(8, "tag")
    keys = []
    for _ in range(3 * streams_module._KEPT_STREAMS):
        stream = streams.new()
        stream.close()
        keys.append(stream.key)
    kept = [key for key in keys if streams.get(key) is not None]
    assert kept == keys[-streams_module._KEPT_STREAMS :]


async def test_a_message_for_a_closed_stream_goes_to_the_get_stream_then_nowhere() -> None:
    streams = Streams(8, "tag")
    answered = streams.new()
    answered.close()
    streams.push(answered, note(1))
    assert streams.standalone.pushed == 1
    streams.close()
    streams.push(answered, note(2))  # the session ended: no client can read it
    assert await until_end(streams.standalone, 0) == [(1, jsonrpc.dump(note(1)))]


def test_a_tasks_messages_go_to_its_open_tasks_result_stream_else_to_the_get_stream() -> None:
    streams = Streams(8, "tag")
    assert streams.of_task("t1") is streams.standalone
    result = streams.open_result("t1")
    assert streams.of_task("t1") is result and streams.of_task("t2") is streams.standalone
    older = result
    newer = streams.open_result("t1")  # the client called tasks/result again
    streams.close_result("t1", older)  # the first call's end leaves the second in place
    assert streams.of_task("t1") is newer
    streams.close_result("t1", newer)
    assert streams.of_task("t1") is streams.standalone
