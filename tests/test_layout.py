"""The house rules the import contracts cannot hold: how long a module and the README may grow.

A module stays under 300 lines, so that one reading holds it; one that grows past the limit
splits (or hands something to a neighbour) in the same change. The README is a manual of about
300 lines, with the reference in docs/: a feature that would grow it past its limit moves
something there.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GATEWAY = ROOT / "gateway"
LIMIT = 300
#: About 300: its examples are run as written (tests/test_docs.py), so they stay whole.
README_LIMIT = 320


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_grows_past_300_lines() -> None:
    over = {
        str(path.relative_to(GATEWAY)): lines(path)
        for path in GATEWAY.rglob("*.py")
        if lines(path) > LIMIT
    }
    assert over == {}, f"split these (at most {LIMIT} lines a module): {over}"


def test_the_readme_stays_a_manual_of_about_300_lines() -> None:
    assert lines(ROOT / "README.md") <= README_LIMIT, "move reference from README.md to docs/"
