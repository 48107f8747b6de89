"""docs/slot-policy.md says which policies `strata replay` runs when `--policies` is not given (the
command's help says "all", which it is not: learned+protect and oracle-belady run only when named).
Not here: what each policy does (tests/replay)."""

from __future__ import annotations

from pathlib import Path

from strata.server.replay.cli import DEFAULT_POLICIES
from strata.server.replay.policies import POLICY_NAMES

DOC = Path(__file__).resolve().parents[2] / "docs" / "slot-policy.md"


def test_the_default_policy_list_is_the_one_documented():
    assert f"`{DEFAULT_POLICIES}`" in DOC.read_text(encoding="utf-8")


def test_the_policies_left_out_by_default_are_named_in_the_docs():
    text = DOC.read_text(encoding="utf-8")
    run = {name.split(":")[0] for name in DEFAULT_POLICIES.split(",")}
    left_out = [name for name in POLICY_NAMES if name.split(":")[0] not in run]
    assert left_out, "every policy runs by default: the docs' sentence is then out of date"
    for name in left_out:
        assert f"`{name}`" in text, name


def test_the_configuration_reference_lists_every_policy_replay_takes():
    """docs/configuration.md's `--policies` row ("Comma-separated, from: ...") left out oracle-opt, which the
    command's help and `strata replay`'s refusal of an unknown name both list."""
    doc = DOC.parent / "configuration.md"
    row = next(line for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("| `--policies` |"))
    listed = row.split("from:", 1)[1].split(".", 1)[0].strip().split(", ")
    assert listed == list(POLICY_NAMES)
