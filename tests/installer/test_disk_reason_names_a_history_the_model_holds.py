"""The disk question's reason names a history the model can hold, and says the budget is a share of the free space.
A new-user trial on the default model (trained on 8192 tokens) read "a 40000-token history comes back from disk in
0.46 s instead of 129.5 s of prefill; 19.0 GiB of 78.1 GiB free": a conversation that model never has, and a
budget that read as the free space. Whether the disk pays does not change: both times scale with the history."""

from __future__ import annotations

from dataclasses import replace

from strata.installer.plan import question_for
from strata.installer.plan_types import Answers, BenchFacts

from tests.installer.matrix_data import situation


def measured(model: str, read_mib_s: float = 1893.0, prefill_tps: float = 309.0):
    s = situation("small-laptop", model)
    return replace(s, cold_disk=replace(s.cold_disk, read_mib_s=read_mib_s),
                   bench=BenchFacts(prefill_tps=prefill_tps, decode_tps=90.6, load_s=0.08))


def test_an_8k_model_is_told_of_an_8k_history():
    s = measured("135M")
    assert s.model.n_ctx_train == 8192
    q = question_for("keep_on_disk", s, Answers())
    assert q.default is True
    assert q.reason.startswith("an 8192-token history comes back from disk in 0.10 s instead of 26.5 s of prefill; ")
    assert q.reason.endswith(f" of the {s.cold_disk.free_mib / 1024:.1f} GiB free"), q.reason


def test_a_long_context_model_is_still_told_of_a_40k_history():
    s = measured("135M")
    s = replace(s, model=replace(s.model, n_ctx_train=131072))
    assert question_for("keep_on_disk", s, Answers()).reason.startswith("a 40000-token history comes back from disk")


def test_a_disk_that_does_not_pay_says_so_for_the_same_history():
    s = measured("135M", read_mib_s=1.0)
    q = question_for("keep_on_disk", s, Answers())
    assert q.default is False and q.reason.startswith("reading an 8192-token history back from this disk takes "), q.reason
