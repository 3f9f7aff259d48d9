"""The README and docs/ as a set of linked pages: every relative link reaches a file, and every
`#anchor` a heading of the page it names (as GitHub spells heading anchors).

Files move (a module split, a doc renamed); a link that silently points nowhere is the first
thing a newcomer meets. Links to the web are not followed.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gateway.config.loading import parse_settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # link text may wrap
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def _prose(text: str) -> str:
    """The page without code: a `[x](y)` inside code is not a link."""
    return _CODE.sub("", _FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation dropped, spaces to hyphens,
    and -1, -2, ... on repeats."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.name}: {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{page.name}: {target}: no such heading")
    return broken


def test_every_relative_link_in_the_readme_and_docs_reaches_a_file_and_heading() -> None:
    assert len(PAGES) > 1, "docs/ holds the reference pages the README links to"
    assert [problem for page in PAGES for problem in broken_links(page)] == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = _prose((ROOT / "README.md").read_text(encoding="utf-8"))
    linked = {Path(target.partition("#")[0]).name for target in _LINK.findall(readme)}
    assert [page.name for page in PAGES[1:] if page.name not in linked] == []


def test_anchors_follow_githubs_spelling(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Tasks\n## Elicitation during a task: `input_required`\n## What crosses, and why\n"
        "```\n# not a heading\n```\n## Tasks\n",
        encoding="utf-8",
    )
    assert anchors(page) == {
        "tasks",
        "elicitation-during-a-task-input_required",
        "what-crosses-and-why",
        "tasks-1",
    }


def test_the_replica_pages_working_config_is_one_the_gateway_takes() -> None:
    page = (ROOT / "docs" / "replicas.md").read_text(encoding="utf-8")
    block = page.split("A working config")[1].split("```yaml\n")[1].split("```")[0]
    settings = parse_settings(yaml.safe_load(block), "replicas.md", env={"CI_BOT_KEY": "k" * 32})
    assert settings.store.backend == "postgres" and settings.store.shared
    assert settings.routes[0].tasks.repeatable == ("build_status",)
