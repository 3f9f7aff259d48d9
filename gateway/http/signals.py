"""The process's signals while the gateway runs, and what each means: `Signals`; and
`hold_hangups`, SIGHUP's meaning from the command's first moments until `Signals` takes over."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

# Named as before the class moved out of listen.py: operators filter their logs on this name.
log = logging.getLogger("gateway.http.listen")

#: Holds SIGHUP once one came after `hold_hangups` and before a `Signals` took them over
#: (several are one reload, as while the gateway starts).
_early_hangups: set[int] = set()


def hold_hangups() -> None:
    """Hold SIGHUPs from now until a `Signals` takes them over, which applies them once the
    gateway serves. SIGHUP's default action kills, and one sent while the process starts
    (`systemctl reload` just after `start`, `docker kill -s HUP` as the container starts: the
    imports alone take a second) asks for the file to be read again, not for a dead gateway.
    The command calls this first; what comes before it (the interpreter's start) stays exposed."""
    signal.signal(signal.SIGHUP, lambda signum, _frame: _early_hangups.add(signum))


class Signals:
    """What the process's signals mean while it serves: the first SIGTERM or SIGINT asks for
    a drain (`stop`), the second for the stop now (`now`); later ones are only logged, as
    the stop is bounded by http.shutdown_grace_seconds already. SIGHUP calls `hangup` (the
    reload) while the app serves, its drain included; one that comes while it starts waits
    until it serves, and one from `stopping()` on (the app's cleanup) is only logged.

    Every handler is installed in `__init__`, before the port is bound: the kernel completes
    connections to a listening port before the app has started, and a signal sent the moment
    the port answers (as an orchestrator or a test may) must not take its default action,
    which for each of these is to kill the process.
    """

    HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(
        self, loop: asyncio.AbstractEventLoop, hangup: Callable[[], None] = lambda: None
    ) -> None:
        self._loop = loop
        self._hangup = hangup
        self.stop = asyncio.Event()
        self.now = asyncio.Event()
        #: "starting" until `serving()`, "stopping" once the app's cleanup has begun.
        self._phase = "starting"
        self._held = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop_received, sig)
        loop.add_signal_handler(signal.SIGHUP, self._hangup_received)
        if _early_hangups:
            _early_hangups.clear()
            self._hangup_received()

    def remove(self) -> None:
        for sig in self.HANDLED:
            self._loop.remove_signal_handler(sig)

    def serving(self) -> None:
        """The app runs: a SIGHUP held while it started is applied now."""
        self._phase = "serving"
        if self._held:
            self._held = False
            self._hangup_received()

    def stopping(self) -> None:
        """The app's cleanup begins: a SIGHUP now is only logged."""
        self._phase = "stopping"

    def _stop_received(self, sig: signal.Signals) -> None:
        if not self.stop.is_set():
            log.info("%s received", sig.name)
            self.stop.set()
        elif not self.now.is_set():
            log.info("%s again: stopping now, without waiting for running tasks", sig.name)
            self.now.set()
        else:
            log.info("%s: stopping already", sig.name)

    def _hangup_received(self) -> None:
        if self._phase == "stopping":
            log.info("SIGHUP: the gateway is stopping; the configuration is not reloaded")
        elif self._phase == "starting":
            # Several while it starts are one reload: each re-reads the whole file.
            if not self._held:
                log.info("SIGHUP while the gateway starts: applied once it serves")
            self._held = True
        else:
            self._hangup()

    async def unless_now(self, work: Awaitable[None]) -> None:
        """Await `work` until it returns, or a second signal cancels it. A failure of the
        work is logged: the stop goes on all the same."""
        job = asyncio.ensure_future(work)
        now = asyncio.ensure_future(self.now.wait())
        try:
            await asyncio.wait({job, now}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            job.cancel()
            now.cancel()
            failed, _ = await asyncio.gather(job, now, return_exceptions=True)
        if isinstance(failed, Exception):
            log.error("the drain failed; stopping now", exc_info=failed)
