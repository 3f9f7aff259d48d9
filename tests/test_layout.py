"""The house rule the import contracts cannot hold: how long a module may grow.

A module stays under about 300 lines, so that one reading holds it; one that grows past the
limit splits (or hands something to a neighbour) in the same change.
"""

from __future__ import annotations

from pathlib import Path

GATEWAY = Path(__file__).resolve().parent.parent / "gateway"
LIMIT = 320


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_grows_past_about_300_lines() -> None:
    over = {
        str(path.relative_to(GATEWAY)): lines(path)
        for path in GATEWAY.rglob("*.py")
        if lines(path) > LIMIT
    }
    assert over == {}, f"split these (at most {LIMIT} lines a module): {over}"
