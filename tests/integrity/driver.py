"""One topology's run: concurrent clients of both generations making the mix of calls, and the
faults (replicas killed and restarted) at their times.

Every caller has its own API key; a 2025-11-25 caller opens one session per route, a 2026-07-28
caller has none. The routes are one per upstream and the member route of them all (a call
there is for one member's tool, drawn at random: one batch may reach several members). Each
caller runs `depth` workers until the run's time is up, each sending batches of one to three
calls at once on one route (in one session), the next batch when the last has ended; every
call that outlives its deadline (its tool's time plus `grace`) is marked stuck. Before the
clock starts, every client lists its route's tools (its upstream's six, or each member's as
MEMBER__TOOL): a protocol violation otherwise, and it opens the upstream session a 2026-07-28
caller's calls share, whose start (a stdio child's) would otherwise eat into the run.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import aiohttp

from tests.integrity.calls import WEIGHTS, Call, Fault, draw
from tests.integrity.legacy import LegacySession
from tests.integrity.modern import ModernClient
from tests.integrity.procs import MEMBERS, SEPARATOR, Client, Gateway, with_members
from tests.integrity.wire import LEGACY, MODERN, Balancer, Spread

#: Calls a client sends at once on one route.
MAX_BATCH = 3


@dataclass
class Plan:
    topology: str
    gateways: dict[str, Gateway]
    #: The routes of one upstream each: the members of the member route too.
    upstreams: tuple[str, ...]
    legacy: list[Client]
    modern: list[Client]
    seconds: float
    depth: int
    #: A call's deadline past its tool's own time.
    grace: float
    #: (seconds into the run, "kill" | "restart" | "start", gateway)
    faults: list[tuple[float, str, str]] = field(default_factory=list)
    #: list_changed notifications the 2025-11-25 sessions of the member route got.
    list_changes: int = 0


async def drive(
    plan: Plan,
    rng: random.Random,
    faults: list[Fault],
    lags: list[tuple[float, float]],
    problems: list[str],
) -> list[Call]:
    """Run the plan; every call made, as its client saw it. Faults done are appended to
    `faults`; `lags` gets this process's event-loop lag, sampled all along (a late answer
    is only the gateway's if the harness was not late to read it); `problems` what went
    wrong on the sessions' GET streams."""
    calls: list[Call] = []
    routes = with_members(plan.upstreams)
    balancer = Balancer({name: gw.base for name, gw in plan.gateways.items()})
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        sessions = {
            (caller.principal, route): LegacySession(http, Spread(balancer, route), caller)
            for caller in plan.legacy
            for route in routes
        }
        await asyncio.gather(*(session.open() for session in sessions.values()))
        moderns = {
            (caller.principal, route): ModernClient(http, Spread(balancer, route), caller)
            for caller in plan.modern
            for route in routes
        }
        clients: list[tuple[str, LegacySession | ModernClient]] = [
            *((route, session) for (_, route), session in sessions.items()),
            *((route, client) for (_, route), client in moderns.items()),
        ]
        await asyncio.gather(*(_listed(plan, route, c, problems) for route, c in clients))
        started = time.monotonic()
        end = started + plan.seconds

        async def one_call(call: Call) -> None:
            client = (sessions if call.generation == LEGACY else moderns)[call.client, call.route]
            try:
                async with asyncio.timeout(call.budget() + plan.grace):
                    await client.call(call)
            except TimeoutError:
                call.stuck = True

        async def worker(caller: Client, generation: str) -> None:
            """Batches of calls sent at once on one route (one session: parallel tool
            calls, as agents make them), one batch after another."""
            while time.monotonic() < end:
                route = (rng.choice(routes),)
                members = plan.upstreams if route == (MEMBERS,) else ()
                batch = [
                    draw(rng, plan.topology, generation, caller.principal, route, members)
                    for _ in range(rng.randint(1, MAX_BATCH))
                ]
                calls.extend(batch)
                await asyncio.gather(*(one_call(call) for call in batch))

        async with asyncio.TaskGroup() as group:
            for caller in plan.legacy:
                for _ in range(plan.depth):
                    group.create_task(worker(caller, LEGACY))
            for caller in plan.modern:
                for _ in range(plan.depth):
                    group.create_task(worker(caller, MODERN))
            group.create_task(_faults(plan, started, faults))
            group.create_task(_lag(end, lags))
        for session in sessions.values():
            await session.close()
            problems.extend(f"{plan.topology}: {problem}" for problem in session.problems)
            plan.list_changes += session.list_changes
    return calls


async def _listed(
    plan: Plan, route: str, client: LegacySession | ModernClient, problems: list[str]
) -> None:
    """What a client is listed before the run: each tool of the route's upstream, or on the
    member route each member's as MEMBER__TOOL, every one once."""
    tools = list(WEIGHTS)
    if route == MEMBERS:
        tools = [f"{member}{SEPARATOR}{tool}" for member in plan.upstreams for tool in tools]
    listed = await client.tools()
    if sorted(listed) != sorted(tools):
        who = f"{client.caller.principal} ({type(client).__name__})"
        problems.append(f"{plan.topology}: {route} lists {sorted(listed)} to {who}, not {tools}")


async def _lag(end: float, lags: list[tuple[float, float]]) -> None:
    """How late this loop wakes from a 5 ms sleep, until `end`: (when it woke, how late)."""
    while time.monotonic() < end:
        asked = time.monotonic()
        await asyncio.sleep(0.005)
        lags.append((time.time(), time.monotonic() - asked - 0.005))


async def _faults(plan: Plan, started: float, faults: list[Fault]) -> None:
    for offset, kind, name in sorted(plan.faults):
        await asyncio.sleep(max(0.0, started + offset - time.monotonic()))
        gateway = plan.gateways[name]
        if kind == "kill":
            faults.append(Fault("kill", name, time.time()))
            await asyncio.to_thread(gateway.kill)
        elif kind == "start":
            await asyncio.to_thread(gateway.start)
            for fault in faults:
                if fault.gateway == name and fault.back is None:
                    fault.back = time.time()
        else:
            fault = Fault("restart", name, time.time())
            faults.append(fault)
            await asyncio.to_thread(gateway.stop)
            await asyncio.to_thread(gateway.start)
            fault.back = time.time()


def fault_plan(seconds: float, cycles: int, names: list[str]) -> list[tuple[float, str, str]]:
    """Per cycle: one replica killed at 30 % of it and started again at 70 %, another
    stopped with SIGTERM and started again at 50 %; the next cycle takes the next pair."""
    out: list[tuple[float, str, str]] = []
    length = seconds / cycles
    for n in range(cycles):
        killed, restarted = names[n % len(names)], names[(n + 1) % len(names)]
        base = n * length
        out.append((base + 0.3 * length, "kill", killed))
        out.append((base + 0.5 * length, "restart", restarted))
        out.append((base + 0.7 * length, "start", killed))
    return out
