"""Property tests of plan.py over arbitrary machines and models (hypothesis): the seed's identity
holds beyond the 5 x 5 matrix, and every plan is one the server accepts and the machine holds."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from strata.installer.plan import QUESTIONS_BEFORE_SEED_002, default_answers, make_plan
from strata.installer.plan_types import MIB, BenchFacts, DiskFacts, MachineProfile, ModelFacts, Situation

machines = st.builds(
    lambda cores, smt, ram, gpu: MachineProfile(cores, cores * smt, ram, ram // 2,
                                                "GPU" if gpu else None, gpu or None),
    st.integers(1, 128), st.sampled_from([1, 2]), st.integers(1024, 1024 * 1024),
    st.sampled_from([0, 8192, 24576, 81920]))
models = st.builds(
    lambda size_mib, layers, kv_heads, head_dim, ctx: ModelFacts("/m/x.gguf", "x", size_mib * MIB, layers,
                                                                 kv_heads, head_dim, ctx),
    st.integers(50, 200_000), st.integers(1, 128), st.integers(1, 16), st.sampled_from([64, 80, 128, 256]),
    st.sampled_from([2048, 4096, 8192, 32768, 131072, 262144]))
disks = st.builds(lambda free, read: DiskFacts("/d", free, 500.0 if read else None, read or None),
                  st.integers(0, 4_000_000), st.sampled_from([0, 5, 200, 3000]))
benches = st.one_of(st.none(), st.builds(lambda p: BenchFacts(prefill_tps=p), st.sampled_from([20.0, 500.0, 20000.0])))


def _situation(machine, model, disk, bench, cuda):
    return Situation(machine, disk, (model.path,), model.path, model, bench, cuda)


@settings(max_examples=300, deadline=None)
@given(machines, models, disks, benches, st.booleans())
def test_no_answer_means_the_previous_behaviour_on_any_machine(machine, model, disk, bench, cuda):
    s = _situation(machine, model, disk, bench, cuda)
    assert make_plan(s, default_answers(s)).config() == make_plan(s, default_answers(s, QUESTIONS_BEFORE_SEED_002)).config()


@settings(max_examples=300, deadline=None)
@given(machines, models, disks, benches, st.booleans(), st.sampled_from([None, "one", "several"]),
       st.sampled_from([None, True, False]))
def test_every_plan_is_consistent(machine, model, disk, bench, cuda, concurrency, keep):
    from strata.installer.plan_types import Answers

    s = _situation(machine, model, disk, bench, cuda)
    plan = make_plan(s, default_answers(s, start=Answers(concurrency=concurrency, keep_on_disk=keep)))
    c = plan.config()
    assert all(choice.reason for choice in plan.choices)
    assert 0 <= c["batch"] <= 4 and c["batch_groups"] == 1 and c["slot_ctx"] == c["ctx"] <= model.n_ctx_train
    assert c["threads"] == machine.n_cores and c["kv_type"] in ("f16", "q8_0")
    assert c["kv_type"] == "f16" or model.head_dim % 32 == 0     # the engine refuses q8_0 KV otherwise
    model = replace(model, kv_type=c["kv_type"])      # the KV bytes the plan sized for
    assert c["backend"] == ("cuda" if cuda and machine.gpu_name else "cpu")
    if concurrency == "one":
        assert c["batch"] == 0
    if c["batch"] > 0:  # slots only when main + slots fit in what is left for KV
        kv_mib = (1 + c["batch"]) * c["ctx"] * model.kv_bytes_per_token / MIB
        assert kv_mib <= machine.ram_total_mib - model.size_bytes / MIB - c["conversation_cache_mib"] - 2560
    assert 0 <= c["conversation_cache_mib"] <= 8192
    if c["conversation_cache_cold_dir"] == "":
        assert c["conversation_cache_cold_mib"] == 0 and keep is not True
    elif keep is None:  # kept by default only with at least 1 GiB for it
        assert c["conversation_cache_cold_mib"] >= 1024
    assert 0 <= c["conversation_cache_cold_mib"] <= 20480
    assert c["conversation_cache_park"] in ("ram", "auto")
    if not c["conversation_cache_cold_dir"]:
        assert c["conversation_cache_park"] == "ram"
    assert (c["conversation_cache_min_free_mib"], c["conversation_cache_park_min_free_mib"]) == (2560, 512)
