"""docs/slot-policy.md's "Variables" tables list every `STRATA_SLOT_*` variable the slot policy reads, each with
the default the code has (`PolicyConfig` and its `LearnConfig`), and no variable it does not read; the
configuration page's `STRATA_SLOT_LEARNED` row quotes the learned policy's defaults the same way. Not here:
what each threshold does (tests/policy)."""

from __future__ import annotations

import re
from pathlib import Path

from strata.server.slot_policy import ENV_NAMES, LEARN_ENV_NAMES, LearnConfig, PolicyConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROW = re.compile(r"^\| `(STRATA_SLOT_[A-Z0-9_]+)` \| ([^|]+) \|", re.M)


def code_defaults() -> dict[str, float]:
    policy, learn = PolicyConfig(), LearnConfig()
    found = {name: getattr(policy, field) for field, name in ENV_NAMES.items()}
    found.update({name: getattr(learn, field) for field, name in LEARN_ENV_NAMES.items()})
    return {name: float(value) for name, value in found.items()}     # booleans as 1 / 0, as the variables take them


def test_both_tables_are_read():
    assert len(code_defaults()) == len(ENV_NAMES) + len(LEARN_ENV_NAMES) >= 18


def test_every_variable_is_in_the_tables_with_its_default():
    table = {name: cell.strip() for name, cell in ROW.findall((DOCS / "slot-policy.md").read_text(encoding="utf-8"))}
    wrong = {name: (table.get(name), value) for name, value in code_defaults().items()
             if name not in table or float(table[name]) != value}
    assert wrong == {}, f"docs/slot-policy.md (documented, code): {wrong}"
    assert sorted(set(table) - set(code_defaults())) == [], "rows for variables the policy does not read"


def test_the_configuration_page_quotes_the_learned_defaults():
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    quoted = dict(re.findall(r"`(STRATA_SLOT_LEARN_[A-Z_]+)` \(([\d.]+)\)", text))
    defaults = code_defaults()
    assert quoted and {n: float(v) for n, v in quoted.items()} == {n: defaults[n] for n in quoted}
