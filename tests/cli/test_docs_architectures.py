"""The architectures the docs say Strata runs are the ones the engine runs: the table of
docs/chat-and-models.md ("Which models run") has a row for each architecture the engine names when it
refuses another (its own list, read from a refused file), none more, and README.md names each. Not here:
whether each runs well (tests/engine, tests/text)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from strata.engine import check_model

from tests.fixtures.tiny_gguf import make_tiny_gguf

ROOT = Path(__file__).resolve().parents[2]
MODELS_DOC = (ROOT / "docs" / "chat-and-models.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def engine_runs(tmp_path_factory) -> set[str]:
    refused = make_tiny_gguf(tmp_path_factory.mktemp("arch") / "phi3.gguf", arch="phi3")
    with pytest.raises(Exception, match="supported: ") as info:
        check_model(refused)
    return set(re.search(r"supported: ([^)]*)\)", str(info.value)).group(1).split(", "))


def documented() -> set[str]:
    section = MODELS_DOC.split("## Which models run")[1].split("\n## ")[0]
    return set(re.findall(r"^\| `([\w-]+)`", section, flags=re.M))


def test_the_engine_names_what_it_runs(engine_runs):
    assert {"llama", "qwen3moe", "deepseek2"} <= engine_runs


def test_the_models_page_has_a_row_for_each_architecture(engine_runs):
    assert documented() == engine_runs


def test_the_readme_names_each_architecture(engine_runs):
    parts = README.split("## The two commands")[0]     # the opening's list of what the engine runs
    missing = sorted(a for a in engine_runs if not re.search(rf"(?<![\w-]){re.escape(a)}(?![\w-])", parts))
    assert missing == [], f"README.md's opening does not name {missing}"
