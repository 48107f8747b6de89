"""Seed 002's installer measurement as a table test: 5 machines x 5 model sizes x (--yes, Enter).

"No answer means the previous behaviour": for every case the configuration is identical between
`--yes` (asks nothing), Enter at every question, and the flow without the two new questions (one
request or several; conversations kept on disk). Run through the pure plan and through the
terminal wizard itself.
"""

from __future__ import annotations

import argparse
import io
from dataclasses import replace

import pytest
from strata.installer import config_file
from strata.installer.cli import run_terminal
from strata.installer.plan import (
    QUESTION_ORDER,
    QUESTIONS_BEFORE_SEED_002,
    apply_answer,
    default_answers,
    make_plan,
    next_question,
    parse_answer,
)
from strata.installer.plan_types import Answers

from tests.installer.matrix_data import MACHINES, MODELS, situation

CASES = [(m, s, mode) for m in MACHINES for s in MODELS for mode in ("yes", "enter")]


def _enter_everywhere(s):
    """Enter at every question of the new flow, through parse_answer as the wizards do."""
    a, asked = Answers(), []
    while (q := next_question(s, a, QUESTION_ORDER)) is not None:
        asked.append(q.key)
        a = apply_answer(a, q.key, parse_answer(q, "", s, a))
    return a, asked


def _previous_flow(s):
    a = default_answers(s, QUESTIONS_BEFORE_SEED_002)
    assert a.concurrency is None and a.keep_on_disk is None  # the two questions were never asked
    return make_plan(s, a).config()


def test_the_matrix_is_fifty_cases():
    assert len(MACHINES) == 5 and len(MODELS) == 5 and len(CASES) == 50


@pytest.mark.parametrize("machine,model,mode", CASES)
def test_no_answer_means_the_previous_behaviour(machine, model, mode):
    s = situation(machine, model)
    if mode == "yes":
        a = default_answers(s)
    else:
        a, asked = _enter_everywhere(s)
        assert asked[:3] == ["model", "concurrency", "keep_on_disk"] and asked[-1] == "ctx"
    assert make_plan(s, a).config() == _previous_flow(s)


def test_fifty_identical_results_and_the_plans_differ_across_the_matrix():
    identical = sum(make_plan(situation(m, z), default_answers(situation(m, z))).config()
                    == _previous_flow(situation(m, z)) for m, z, _ in CASES)
    assert identical == 50
    # The matrix is not degenerate: the machines and sizes really give different plans.
    distinct = {tuple(sorted(_previous_flow(situation(m, z)).items())) for m in MACHINES for z in MODELS}
    assert len(distinct) >= 15
    defaults = {default_answers(situation(m, z)).concurrency for m in MACHINES for z in MODELS}
    assert defaults == {"one", "several"}


def test_a_typed_answer_changes_the_plan():
    s = situation("seed-002-desktop", "8B")
    base = make_plan(s, default_answers(s)).config()
    one = make_plan(s, default_answers(s, start=Answers(concurrency="one"))).config()
    assert base["batch"] >= 1 and one["batch"] == 0
    assert one["ctx"] >= base["ctx"]  # one request: the main context may take the whole KV budget
    off = make_plan(s, default_answers(s, start=Answers(keep_on_disk=False))).config()
    assert off["conversation_cache_cold_dir"] == "" and off["conversation_cache_cold_mib"] == 0
    assert off["conversation_cache_park"] == "ram"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Untouchable(io.StringIO):
    def isatty(self) -> bool:
        return True

    def readline(self, *args):
        raise AssertionError("--yes must ask nothing")


def _args(config, yes):
    return argparse.Namespace(yes=yes, config=config, show=False, model=None, cold_dir=None,
                              skip_bench=True, disk_bench_mib=8)


@pytest.mark.parametrize("machine", list(MACHINES))
def test_the_terminal_wizard_writes_the_same_file_for_yes_and_enter(machine, tmp_path):
    for model in MODELS:
        s = situation(machine, model)
        s = replace(s, cold_disk=replace(s.cold_disk, folder=str(tmp_path / "cold")))
        yes, enter = tmp_path / f"{model}-yes.toml", tmp_path / f"{model}-enter.toml"
        out_yes, out_enter = io.StringIO(), io.StringIO()
        assert run_terminal(_args(yes, True), _Untouchable(), out_yes, situation=s) == 0
        assert run_terminal(_args(enter, False), _Terminal("\n" * 10), out_enter, situation=s) == 0
        assert config_file.read(yes)[0] == config_file.read(enter)[0] == _previous_flow(s)
        assert "One request at a time, or several?" in out_enter.getvalue()
