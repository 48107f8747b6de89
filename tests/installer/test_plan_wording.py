"""How the plan and the wizard say numbers (a new-user trial): a small KV in MiB, not "2048 tokens = 0.0 GiB of
KV"; "1 slot" and "4 slots", never "slot(s)"; a bench's speeds with thousands separators, as the monitor shows
them ("2,173 tok/s", not "2173")."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from strata.installer.bench import BenchReport
from strata.installer.plan import apply_answer, make_plan, next_question
from strata.installer.plan_types import Answers, BenchFacts, DiskFacts

from tests.installer.matrix_data import MACHINES, MODELS, situation


def _texts(machine: str, model: str) -> list[str]:
    """Every reason the questions and the plan give for `model` on `machine`, the defaults answered."""
    s, a, said = situation(machine, model), Answers(), []
    while (q := next_question(s, a)) is not None:
        said.append(q.reason)
        a = apply_answer(a, q.key, q.default)
    plan = make_plan(s, a)
    return said + [c.reason for c in plan.choices] + list(plan.warnings)


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_no_plural_in_brackets_and_no_size_that_reads_as_none(machine, model):
    for text in _texts(machine, model):
        assert "(s)" not in text and not re.search(r"\b1 slots\b", text), text
        assert not re.search(r"(?<![\d.])0\.0 GiB", text), text


def test_a_small_models_kv_is_said_in_mib():
    said = " | ".join(_texts("small-laptop", "135M"))   # 23,040 bytes a token: 8192 tokens are 180 MiB
    assert "8192 tokens = 180 MiB of KV" in said, said
    assert re.search(r"\b4 slots of \d+ tokens \(\d+ MiB of KV\)", said), said


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_kv_per_token_is_said_as_the_monitor_says_it(machine, model):
    """The KV type's reason said "23040 bytes per token" where the monitor's header says "22.5 KiB/token"."""
    for text in _texts(machine, model):
        assert "bytes per token" not in text and not re.search(r"F16 \(\d+\)", text), text
    plan_kv = [t for t in _texts("small-laptop", "135M") if t.startswith("F16 KV")]
    assert plan_kv and plan_kv[0].startswith("F16 KV, 22.5 KiB/token: "), plan_kv


def test_the_bench_results_have_thousands_separators():
    pytest.importorskip("PySide6")
    from strata.installer.wizard.bench_page import _describe

    report = BenchReport(BenchFacts(prefill_tps=2173.4, decode_tps=102.68, load_s=0.12),
                         DiskFacts("/d", 1000, write_mib_s=1534.2, read_mib_s=12_345.0), 16384, 8192)
    lines = _describe(report)
    assert lines[0].startswith("Model: prefill <b>2,173</b> tok/s, decode <b>103</b> tok/s"), lines
    assert lines[2] == "Disk /d: write <b>1,534</b> MiB/s, read <b>12.3k</b> MiB/s", lines


def test_the_models_size_is_the_files_as_strata_models_says_it():
    # 98,917,792 bytes are 94.3 MiB (`strata models`: 94.3 MiB); the plan said the budget's whole MiB rounded up,
    # "95.0 MiB" (the real default model: 93.8 in `strata models`, 94.0 in setup's plan, a new-user trial)
    said = " | ".join(_texts("small-laptop", "135M"))
    assert "SmolLM2-135M-Instruct: 94.3 MiB, trained on 8192 tokens" in said, said


def test_without_slots_the_slot_context_says_it_is_not_read():
    # a new-user trial answered "one request at a time": slot_ctx's reason still said "so a conversation can move
    # between them", of slots there were none
    s, a = situation("small-laptop", "135M"), Answers()
    while (q := next_question(s, a)) is not None:
        a = apply_answer(a, q.key, "one" if q.key == "concurrency" else q.default)
    reasons = {c.key: c.reason for c in make_plan(s, a).choices}
    assert reasons["slot_ctx"].startswith("no slots (batch = 0), so not read"), reasons
    several = {c.key: c.reason for c in make_plan(situation("small-laptop", "135M"),
                                                  _answered("small-laptop", "135M")).choices}
    assert several["slot_ctx"] == "as large as the main context, so a conversation can move between them"


def _answered(machine: str, model: str) -> Answers:
    s, a = situation(machine, model), Answers()
    while (q := next_question(s, a)) is not None:
        a = apply_answer(a, q.key, q.default)
    return a


ARTICLE_WRONG = re.compile(r"\b[Aa] (8\d*|11(\d{3}|,\d{3})*|18(\d{3}|,\d{3})*)\b")   # eight..., eleven, eighteen...


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_number_read_with_a_vowel_takes_an(machine, model):
    """ "an 8192-token history", not "a 8192-token history" (the default model's disk reason in a new-user trial)."""
    for text in _texts(machine, model):
        assert not ARTICLE_WRONG.search(text), text


def test_the_default_models_disk_reasons_say_an_8192_token_history():
    from strata.installer.plan import question_for
    from strata.installer.plan_types import Answers

    from tests.installer.test_disk_reason_names_a_history_the_model_holds import measured
    for read_mib_s in (1893.0, 1.0):       # the disk pays, and it does not
        reason = question_for("keep_on_disk", measured("135M", read_mib_s=read_mib_s), Answers()).reason
        assert "an 8192-token history" in reason and not ARTICLE_WRONG.search(reason), reason
    s = measured("135M")                   # read speed alone, no prefill measured
    reason = question_for("keep_on_disk", replace(s, bench=None), Answers()).reason
    assert "an 8192-token history" in reason, reason


@pytest.mark.parametrize(("n", "word"), [(8, "an"), (8192, "an"), (11, "an"), (11000, "an"), (18432, "an"),
                                         (80, "an"), (890, "an"), (81920, "an"), (1, "a"), (110, "a"), (1100, "a"),
                                         (40000, "a"), (262144, "a"), (180, "a"), (1800, "a"), (0, "a")])
def test_article(n, word):
    from strata.monitor.units import article
    assert article(n) == word


def test_the_disk_reason_without_a_bench_says_what_was_measured_and_where():
    # a new-user trial's Set up again (no bench while the server runs) read "(a measured case: 274 ms against
    # 197 s)": of what, and on which machine?
    from strata.installer.plan import question_for

    from tests.installer.test_disk_reason_names_a_history_the_model_holds import measured
    s = measured("135M")
    for case in (replace(s, bench=None), replace(s, bench=None, cold_disk=replace(s.cold_disk, read_mib_s=None))):
        reason = question_for("keep_on_disk", case, Answers()).reason
        assert "measured on another machine: a 95,661-token history back from disk in 274 ms, its prefill 197 s" \
            in reason, reason
        assert "a measured case" not in reason, reason
