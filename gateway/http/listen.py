"""Listening: bind the port, run the app on the guarded server, stop on a signal.

The port is bound before the app starts, so a second gateway on a taken port stops before it
opens the store; a port in use is `ListenError`, one line for the command to print. The soft
file descriptor limit is raised to the hard one, and the total connection cap derived from it.
`serve()` runs until SIGTERM or SIGINT, drains (the app's `drain`: running tasks end while new
work is refused) until that ends or a second signal comes, then stops as aiohttp's `run_app`
does. `Signals` (http.signals) holds what each signal means, SIGHUP's reload included.
`serve_side()` runs a side listener's app (admin.listen, metrics.listen) on the same guarded
server, with caps for the few clients it has.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import resource
import signal
import socket
from collections.abc import Awaitable, Callable

import uvloop
from aiohttp import web

from gateway.config import HttpConfig, ListenConfig
from gateway.http.keys import BOUND
from gateway.http.server import ConnectionGuard, GuardedRunner
from gateway.http.signals import Signals

log = logging.getLogger(__name__)

#: Connections asyncio accepts in one go, before any of them is counted by the guard.
_BACKLOG = 128

#: Connections a side listener (admin.listen, metrics.listen) holds at once: a few operators
#: and their scripts, a few Prometheus servers. At the cap the oldest one idle or still
#: sending its head makes room, so a flood cannot shut them out.
_SIDE_CONNECTIONS = 64
#: Connections a side listener accepts in one turn of the loop (and the kernel queues): a few
#: clients need few. asyncio accepts up to the backlog at once, before the cap above can
#: close the oldest; with the gateway's 128, a flood of the admin port took the process to
#: EMFILE under a low descriptor limit, and asyncio logged a traceback for it.
_SIDE_BACKLOG = 16

#: Allocations between two collections of the youngest generation (Python's default: 700).
_GC_YOUNG = 10_000
#: Descriptors kept for the store, logs, upstream connections and stdio children's pipes.
_FD_RESERVE = 64


class ListenError(Exception):
    """The gateway cannot listen where it was told to; the message says what to change."""


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one (as servers do); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # a container may forbid it: the soft limit is what we have
    return int(soft)


def guard_for(http: HttpConfig) -> ConnectionGuard:
    limit = raise_fd_limit()
    # Half the descriptors for clients, and never so many that one burst of accepts (which
    # asyncio takes before our count sees them) on top of them runs out: EMFILE would stop
    # the listener, /healthz included, for a second at a time.
    default = max(16, min(limit // 2, limit - _BACKLOG - _FD_RESERVE))
    return ConnectionGuard(http, http.max_connections or default)


async def start(app: web.Application, listen: ListenConfig, http: HttpConfig) -> web.AppRunner:
    """Bind, then start `app` on the guarded server; the caller cleans the runner up.

    Raises:
        ListenError: the address is in use or cannot be bound.
    """
    # Bound before the app starts: a second gateway on a taken port must stop before it
    # opens the store and recovers (fails) the first one's running tasks.
    sockets = bind(listen)
    app[BOUND]["listen"] = bound(listen, sockets)
    runner = GuardedRunner(
        app,
        guard_for(http),
        # A client that goes away cancels its handler at once (a dropped tasks/result stream
        # hands its question back for the next call), rather than at the next keep-alive write.
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=http.shutdown_grace_seconds,
        keepalive_timeout=75.0,
    )
    try:
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock, backlog=_BACKLOG).start()
    except BaseException:
        await runner.cleanup()
        for sock in sockets:
            sock.close()
        raise
    return runner


async def serve_side(
    app: web.Application, sockets: list[socket.socket], http: HttpConfig
) -> web.AppRunner:
    """Serve `app` on the bound `sockets` of a side listener (admin.listen, metrics.listen), on
    the guarded server the gateway's port runs (a deadline per request head, caps per address
    and in all, bad requests answered without a traceback: `http.server`); the caller cleans
    it up."""
    runner = GuardedRunner(app, ConnectionGuard(http, _SIDE_CONNECTIONS), access_log=None)
    await runner.setup()
    try:
        for sock in sockets:
            await web.SockSite(runner, sock, backlog=_SIDE_BACKLOG).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def serve(
    app: web.Application,
    listen: ListenConfig,
    http: HttpConfig,
    on_started: Callable[[], None] = lambda: None,
    drain: Callable[[], Awaitable[None]] | None = None,
    hangup: Callable[[], None] = lambda: None,
) -> None:
    """Serve `app` until SIGTERM or SIGINT; then await `drain()` until it returns or a second
    signal comes, and stop as aiohttp's run_app does (open requests get
    http.shutdown_grace_seconds, then the app's cleanup runs). SIGHUP calls `hangup()`.

    Raises:
        ListenError: the address is in use or cannot be bound.
    """
    signals = Signals(asyncio.get_running_loop(), hangup)
    try:
        runner = await start(app, listen, http)
    except BaseException:
        signals.remove()
        raise
    try:
        _settle_heap()
        on_started()
        signals.serving()
        await signals.stop.wait()
        if drain is not None:
            await signals.unless_now(drain())
        log.info("shutting down")
    finally:
        # The handlers stay until the loop closes (`run` then ignores the signals): removed
        # here, a signal during the cleanup would take their default action, and kill.
        signals.stopping()
        await runner.cleanup()


def _settle_heap() -> None:
    """What start-up made (modules, configuration, the app) lives as long as the process:
    frozen out of the cyclic collector's reach, so that its collections walk only what
    requests make, and less often (every allocation of a request counts towards one).
    Measured under load: a collection of the oldest generation took some 40 ms and the
    collector some 3 % of the CPU before."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_YOUNG, *gc.get_threshold()[1:])


def bind(listen: ListenConfig, key: str = "listen") -> list[socket.socket]:
    """Listening sockets for every address `listen.host` names (as asyncio would bind);
    `key` is where the settings say so, for the error.

    Raises:
        ListenError: an address is in use or cannot be bound.
    """
    try:
        infos = socket.getaddrinfo(
            listen.host or None,
            listen.port,
            type=socket.SOCK_STREAM,
            flags=socket.AI_PASSIVE,
        )
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {listen.host}: {exc.strerror} ({key}.host)") from None
    sockets: list[socket.socket] = []
    port = listen.port
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            # With port 0 the OS chooses one for the first address; the others take the same,
            # or the one URL the log gives (`bound`) would reach only one of them.
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
            sock.listen(_BACKLOG)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ListenError(_bind_error(f"{listen.host}:{port}", exc, key)) from None
    return sockets


def bound(listen: ListenConfig, sockets: list[socket.socket]) -> ListenConfig:
    """`listen` with the port its `sockets` (from `bind`) hold: the OS's choice for port 0."""
    return listen.model_copy(update={"port": sockets[0].getsockname()[1]})


def _bind_error(where: str, exc: OSError, key: str) -> str:
    # The gateway's own address can also be set on the command line.
    port, host = (
        ("--port or listen.port", "listen.host or --host")
        if key == "listen"
        else (f"{key}.port", f"{key}.host")
    )
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is in use (another gateway?); "
            f"choose another with {port}"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {where}: no such local address ({host})"
    if exc.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need privileges)"
    return f"cannot listen on {where}: {exc.strerror or exc}"


def run(
    app: web.Application,
    listen: ListenConfig,
    http: HttpConfig,
    drain: Callable[[], Awaitable[None]] | None = None,
    on_started: Callable[[], None] = lambda: None,
    hangup: Callable[[], None] = lambda: None,
) -> None:
    """Run `serve()` on a new event loop until signals stop it.

    Raises:
        ListenError: as `serve()`.
    """
    # uvloop: libuv's loop and transports in C. On the final code it cut a relayed call's
    # instructions by a tenth (801,000 to 719,000; the bare forwarder is at 753,000) and a
    # task's requests by 5 to 9 % (docs/performance.md, "uvloop on the final shape").
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    main = loop.create_task(
        serve(app, listen, http, on_started=on_started, drain=drain, hangup=hangup)
    )
    try:
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        if not main.done():
            main.cancel()
            try:
                loop.run_until_complete(main)
            except asyncio.CancelledError:
                pass
        _cancel_rest(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        # Closing the loop gives the signals it handles their default actions back, and one
        # arriving while it closes its self-pipe would be written to a closed descriptor: they
        # are held back (no other thread is left to take them) until they are ignored. The
        # process has stopped; a signal now must not kill it before it exits.
        # Every other thread still running (the audit writer) blocks them from its start.
        handled = Signals.HANDLED
        signal.pthread_sigmask(signal.SIG_BLOCK, handled)
        loop.close()
        for sig in handled:
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
    # Last, so that no line of the stop (a late SIGHUP's, say) comes after it.
    log.info("stopped")


def _cancel_rest(loop: asyncio.AbstractEventLoop) -> None:
    rest = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in rest:
        task.cancel()
    if rest:
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
