"""Each configuration file the docs show (the ```toml blocks of docs/configuration.md and docs/install.md)
is one `strata serve` accepts as written: its keys, values, [env] table and combinations, through the
server's own check (`config.file_problems`, what `strata setup --show` runs). Not here: the model file
an example names (a path on the writer's machine) or what each key does (each part's tests)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from strata.server.config import file_problems

DOCS = Path(__file__).resolve().parents[2] / "docs"
EXAMPLES = [(page, block) for page in ("configuration.md", "install.md")
            for block in re.findall(r"```toml\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), flags=re.S)]


def test_the_pages_show_examples():
    assert len(EXAMPLES) >= 3


def test_a_wrong_example_would_be_found(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('ctx = "big"\nconversation_cache_mb = 1\n[env]\nSTRATA_SLOT_TTL_MAXS = 1\n')
    assert len(file_problems(path)) == 2         # both keys named (the [env] table is checked after them)


@pytest.mark.parametrize(("page", "block"), EXAMPLES, ids=[f"{p}#{i}" for i, (p, _) in enumerate(EXAMPLES)])
def test_each_example_is_accepted(tmp_path, page, block):
    path = tmp_path / "config.toml"
    path.write_text(block, encoding="utf-8")
    assert file_problems(path) == [], f"docs/{page}'s example is refused by strata serve"
