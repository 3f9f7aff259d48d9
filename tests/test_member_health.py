"""`MemberHealth`: a route's members as its sessions find them; a member that fails leaves
the lists until it is due a retry, and comes back once it answers, every change told once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.upstream.members import RETRY_SECONDS, MemberHealth


class Sessions:
    def __init__(self) -> None:
        self.changes = 0

    def changed(self) -> None:
        self.changes += 1


def health(**kwargs: Any) -> tuple[MemberHealth, list[tuple[str, bool]], list[float]]:
    states: list[tuple[str, bool]] = []
    now = [0.0]
    found = MemberHealth("work", lambda m, up: states.append((m, up)), lambda: now[0], **kwargs)
    return found, states, now


def test_a_member_that_fails_is_told_once_and_listed_again_when_due(
    caplog: pytest.LogCaptureFixture,
) -> None:
    members, states, now = health()
    watcher = Sessions()
    members.watch(watcher)  # type: ignore[arg-type]
    members.failed("search", "cannot connect")
    members.failed("search", "cannot connect")  # again: no second warning, no second change
    assert states == [("search", False)] and watcher.changes == 1
    assert not members.listed("search") and members.listed("files")
    now[0] = RETRY_SECONDS
    assert members.listed("search")  # due a retry: the next list asks it
    members.answered("search")
    members.answered("search")
    assert states == [("search", False), ("search", True)] and watcher.changes == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "route work: member search failed (cannot connect); its tools are left out of the "
        "lists until it answers again"
    ]


def test_a_stdio_members_child_failing_says_nothing_of_the_member() -> None:
    members, states, _ = health(own_children=frozenset({"files"}))
    members.failed("files", "the child exited")
    assert states == [] and members.listed("files") and not members.is_down("files")


def test_a_session_that_ended_is_told_nothing() -> None:
    members, _, _ = health()
    watcher = Sessions()
    members.watch(watcher)  # type: ignore[arg-type]
    members.unwatch(watcher)  # type: ignore[arg-type]
    members.failed("search", "gone")
    assert watcher.changes == 0
