"""What a 2026-07-28 call (`modern.Call`) does with the time it is given: answered at once,
parked between MRTR rounds, or made a task. Pure: the endpoint asks `plan` once per call,
before it waits, and then reads the verdict for what the call did within the plan's window.

The rule, which the spec and DESIGN ("Modern upstreams, by default") fix:

* A call that may not become a task (the request did not declare the tasks extension, or
  the tool is `forbidden`) waits as long as the call takes, under the time limit a task of
  the tool would get; a question parks it (an `InputRequiredResult`).
* An `optional` tool's call waits `tasks.sync_window_ms`: an answer within it is the
  response, a question parks it, and a call still running becomes a task.
* A `required` tool's call is a task from its first moment (no window): a question its
  upstream asks at once is the task's first input request, never an MRTR round.
* With a shared store (replicas), a call that may become a task becomes one instead of
  parking: a parked call lives in one replica, which the retry could miss, while a task's
  questions are answered through any.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gateway.config import TaskPolicy

#: How long a parked call waits for its retry when the route sets no input timeout.
PARK_LIMIT_SECONDS = 3600.0


class Heard(Enum):
    """What the call did within its window."""

    #: The upstream answered (a 2026-07-28 upstream's own MRTR round is an answer too).
    ENDED = "ended"
    #: The upstream asked the client something (elicitation, sampling, roots).
    ASKED = "asked"
    #: The window passed with neither.
    RUNNING = "running"


class Then(Enum):
    """What the request is answered with."""

    #: The call's own answer.
    ANSWER = "answer"
    #: An `InputRequiredResult`; the call waits, parked, for the client's retry.
    PARK = "park"
    #: A `CreateTaskResult`; the call runs on as a task.
    TASK = "task"


@dataclass(frozen=True, slots=True)
class CallPlan:
    """How long the request waits for its call, and what it is answered with after."""

    #: Seconds the request waits for the call to end or ask; None: until it does either.
    window: float | None
    #: The time limit of a call that cannot become a task (a task has its own); None: none.
    limit: float | None
    #: How long a parked call waits for the client's retry.
    park_seconds: float
    ended: Then
    asked: Then
    #: A call with no window is still running only when the questions it asked were all
    #: withdrawn before the wait returned; it too becomes a task then, although a request
    #: that did not declare the extension must never get one (the extension's MUST): a
    #: known gap, left to a change of behaviour.
    running: Then

    def after(self, heard: Heard) -> Then:
        """The verdict for what the call did within the window."""
        if heard is Heard.ENDED:
            return self.ended
        return self.asked if heard is Heard.ASKED else self.running


def plan(task: str | None, policy: TaskPolicy, shared_store: bool) -> CallPlan:
    """`task` is `modern.Call.task`: "optional" or "required" when the call may become a
    task, None when it may not; `shared_store`: the store is shared by replicas."""
    window = None
    if task:
        window = 0.0 if task == "required" else policy.sync_window_ms / 1000
    return CallPlan(
        window=window,
        limit=None if task else policy.time_limit_seconds,
        park_seconds=policy.input_timeout_seconds or PARK_LIMIT_SECONDS,
        ended=Then.TASK if task == "required" else Then.ANSWER,
        asked=Then.TASK if task == "required" or (task and shared_store) else Then.PARK,
        running=Then.TASK,
    )
