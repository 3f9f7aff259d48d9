"""How many of something each caller holds now: its calls that may park (`parked`), its
exclusive held sessions (`held`). Both are capped by `limits.sessions_per_principal`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class Holdings:
    """Counts per holder; a holder down to none is forgotten, so the map stays as small as
    the holders active now."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def of(self, holder: str) -> int:
        return self._counts.get(holder, 0)

    def take(self, holder: str) -> None:
        self._counts[holder] = self.of(holder) + 1

    def give_back(self, holder: str) -> None:
        left = self._counts[holder] - 1
        if left:
            self._counts[holder] = left
        else:
            del self._counts[holder]

    def holding(self, holder: str) -> contextlib.AbstractContextManager[None]:
        """Counts one for `holder` now (not on entering), until the block it is entered for
        ends."""
        self.take(holder)
        return self._given_back_after(holder)

    @contextlib.contextmanager
    def _given_back_after(self, holder: str) -> Iterator[None]:
        try:
            yield
        finally:
            self.give_back(holder)
