"""The Slot decisions tab explains each reason in plain words: a new-user trial read `own_prefix`, `least_loss` and
`main_low_value` with nothing to say what they meant. The reasons are read from the modules that decide them, so a
new one cannot go unexplained."""

from __future__ import annotations

import ast
from pathlib import Path

from strata.monitor.reason_texts import PARK_SKIPS, REASONS
from strata.monitor.widgets.requests import DECISION_HEADERS

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model

SERVER = Path(__file__).resolve().parents[2] / "server"
# the modules that name a decision's reason or a park's skip (slot_policy's rules, the learned policy's choice,
# the placer's too-long park, the main context's own placements, the code completion class's rules)
DECIDERS = ("slot_policy.py", "slot_returns.py", "placement.py", "context_choice.py", "editor_place.py")
# calls whose argument at these positions is a reason; ParkDecision(None, "skip", why): why is a park skip
REASON_ARGS = {"Decision": (1,), "ParkDecision": (1,), "_with_source": (1,), "decide_to": (1,)}


def _strings(node: ast.AST | None) -> set[str]:
    """The string constants of an expression (a constant, or the branches of a conditional of constants)."""
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)} \
        if node is not None else set()


def _named(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def policy_reasons() -> tuple[set[str], set[str]]:
    """(reasons, park skips) as the deciding modules write them: the reason argument of a Decision, a
    ParkDecision, _with_source or decide_to; a `return slot, "why"` (reclaim_slot); `reason = ...`
    (context_choice); the third argument of a ParkDecision (its park_skip)."""
    reasons: set[str] = set()
    skips: set[str] = set()
    for name in DECIDERS:
        for node in ast.walk(ast.parse((SERVER / name).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _named(node.func) in REASON_ARGS:
                for i in REASON_ARGS[_named(node.func)]:
                    if len(node.args) > i:
                        reasons |= _strings(node.args[i])
                if _named(node.func) == "ParkDecision" and len(node.args) > 2:
                    skips |= _strings(node.args[2])
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2:
                reasons |= _strings(node.value.elts[1])
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "reason"
                                                      for t in node.targets):
                reasons |= _strings(node.value)
    return reasons, skips


def test_every_reason_the_policy_gives_is_explained():
    reasons, skips = policy_reasons()
    # the reading finds the reasons docs/slot-policy.md names (else it reads nothing and proves nothing)
    assert {"own_prefix", "least_loss", "learned", "expired", "blank", "own_copy", "solo", "skip"} <= reasons
    assert {"main_low_value", "kept_share", "no_target", "too_long_for_slot"} <= skips
    assert {"editor_file", "editor_busy", "editor_main", "editor_held_main"} <= reasons   # editor_place.py's
    assert reasons - set(REASONS) == set(), "reasons with no explanation in monitor/reason_texts.py"
    assert skips - set(PARK_SKIPS) == set(), "park skips with no explanation in monitor/reason_texts.py"
    # and nothing explained that no module gives any more
    assert set(REASONS) - reasons == set() and set(PARK_SKIPS) - skips == set()
    for name, text in [*REASONS.items(), *PARK_SKIPS.items()]:
        assert len(text.split()) >= 4, (name, text)     # words, not the name again


def test_the_decisions_tab_shows_the_explanation_as_each_reason_cells_tooltip(qtbot):
    def decided(last: dict) -> None:
        t = last["time"]
        last["decisions"] = [
            {"time": t - 2.0, "request": 5, "slot": 1, "group": 0, "reason": "least_loss", "reused": 12,
             "source_slot": None, "park": False, "park_skip": None, "lost_tokens": 300},
            {"time": t - 1.0, "request": 6, "slot": None, "group": None, "reason": "skip", "reused": 0,
             "source_slot": "main", "park": False, "park_skip": "main_low_value", "lost_tokens": 0}]
    window = shown_window(qtbot, recorded_model(decided))
    table = window.activity.decisions
    reason, skip = DECISION_HEADERS.index("reason"), DECISION_HEADERS.index("park skipped")
    tips = {table.item(r, reason).text(): table.item(r, reason).toolTip() for r in range(table.rowCount())}
    assert tips["least_loss"] == f"least_loss: {REASONS['least_loss']}", tips
    assert tips["skip"] == f"skip: {REASONS['skip']}", tips
    skipped = [table.item(r, skip).toolTip() for r in range(table.rowCount()) if table.item(r, skip).text()]
    assert skipped == [f"main_low_value: {PARK_SKIPS['main_low_value']}"]
    assert "each cell's tooltip" in table.horizontalHeaderItem(reason).toolTip()


def test_the_reason_column_shows_the_whole_reason_at_800_px(qtbot):
    """The reason column was the stretched one: it took what the others left, `s…` and `l…` at 800 px."""
    def decided(last: dict) -> None:
        last["decisions"] = [{"time": last["time"] - 2.0, "request": 5, "slot": 1, "group": 0,
                              "reason": "blank_less_loaded", "reused": 12, "source_slot": None, "park": False,
                              "park_skip": None, "lost_tokens": 300}]
    window = shown_window(qtbot, recorded_model(decided), (800, 760))
    window.activity.setCurrentIndex(1)
    qtbot.wait(50)
    table = window.activity.decisions
    reason = DECISION_HEADERS.index("reason")
    needed = table.fontMetrics().horizontalAdvance("blank_less_loaded")
    assert table.columnWidth(reason) >= needed, (table.columnWidth(reason), needed)
