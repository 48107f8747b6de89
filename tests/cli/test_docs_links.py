"""The documentation's links resolve: each relative link of README.md and docs/*.md names a file that
exists and, with `#anchor`, a heading of that page (GitHub's anchors: lower case, punctuation dropped,
spaces to dashes), each `benchmarks/RESULTS.md "Section"` a page cites holds that text, and each file or
folder of the repository a page names in its text (`server/slot_policy.py`, `tests/native/test_x*.py`) is
there. Not here: whether what the linked section says is right (each part's tests)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
RESULTS_CITED = re.compile(r"RESULTS\.md`?,? \"([^\"]+)\"")
# a path under one of the repository's top folders (`strata/...` is also a platform folder's name: not checked)
REPO_PATH = re.compile(r"(?<![\w/.~-])((?:server|app|installer|monitor|engine_native|tests|benchmarks|scripts|resources|docs)"
                       r"/[\w./*-]*[\w*])")


# a fence line: a backtick fence's info string holds no backtick (CommonMark), so a line opening with inline code
# (```` ```xml ```` ...) is prose
FENCE = re.compile(r"^ {0,3}(?:`{3,}[^`]*|~{3,}.*)$")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a '# comment' in a shell block is no heading)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+ (.*)$", prose(page.read_text(encoding="utf-8")), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue                                      # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading)")
    return broken


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n\n```sh\n# not a heading\n```\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#real-heading) [gone](c.md) [bad](b.md#not-a-heading) [web](https://x.org/#y)\n")
    assert broken_links(page) == ["c.md (no such file)", "b.md#not-a-heading (no such heading)"]


def test_a_line_opening_with_inline_code_is_no_fence(tmp_path):
    # api.md's line 303 ("```` ```xml ```` and it holds ...") was taken for a fence: every heading after it was unseen
    page = tmp_path / "a.md"
    page.write_text("# First\n\n```` ```xml ```` is prose\n\n# After it\n\n```sh\n# not a heading\n```\n")
    assert anchors(page) == {"first", "after-it"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_results_section_cited_is_there(page):
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    text = " ".join(page.read_text(encoding="utf-8").split())     # a citation may wrap across lines
    missing = [s for s in RESULTS_CITED.findall(text) if s not in results]
    assert missing == [], f"{page.name} cites sections benchmarks/RESULTS.md does not have: {missing}"


def missing_paths(page: Path, root: Path = ROOT) -> list[str]:
    named = set(REPO_PATH.findall(prose(page.read_text(encoding="utf-8"))))
    return sorted(p for p in named if not any(root.glob(p)))


def test_a_missing_path_is_found(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a1.py").write_text("")
    page = tmp_path / "a.md"
    page.write_text("`tests/test_a*.py`, tests/test_a1.py and `server/gone.py`\n```\nserver/in_code.py\n```\n")
    assert missing_paths(page, tmp_path) == ["server/gone.py"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_repository_path_named_is_there(page):
    assert missing_paths(page) == [], f"{page.name} names files that are not in the repository"
