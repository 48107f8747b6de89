"""plan.py's questions: order, defaults with reasons, answers parsed or refused with the reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from strata.installer.plan import (
    QUESTION_ORDER,
    QUESTIONS_BEFORE_SEED_002,
    apply_answer,
    default_answers,
    make_plan,
    next_question,
    parse_answer,
)
from strata.installer.plan_types import AnswerError, Answers, BenchFacts, DiskFacts, PlanParameters

from tests.installer.matrix_data import MACHINES, situation


def test_questions_come_in_the_seed_order():
    s = situation("laptop", "3B")
    a, keys = Answers(), []
    while (q := next_question(s, a)) is not None:
        keys.append(q.key)
        assert q.reason  # every default says why
        a = apply_answer(a, q.key, q.default)
    assert keys == list(QUESTION_ORDER) == ["model", "concurrency", "keep_on_disk", "cold_dir", "ctx"]


def test_the_folder_is_not_asked_when_conversations_stay_off_disk():
    s = situation("laptop", "3B")
    a = Answers(model=s.model.path, concurrency="several", keep_on_disk=False)
    assert next_question(s, a).key == "ctx"


def test_the_flow_before_seed_002_asks_only_model_and_context():
    s = situation("laptop", "3B")
    a, keys = Answers(), []
    while (q := next_question(s, a, QUESTIONS_BEFORE_SEED_002)) is not None:
        keys.append(q.key)
        a = apply_answer(a, q.key, q.default)
    assert keys == ["model", "ctx"]


@pytest.mark.parametrize("key,text,message", [
    ("concurrency", "maybe", "answer 'one' (or 0: no slots, one request at a time) or 'several'"),
    ("concurrency", "2", "another number: `batch` in the configuration file or `strata serve --batch N`"),
    ("keep_on_disk", "perhaps", "answer yes or no"),
    ("ctx", "lots", "is not a number of tokens"),
    ("ctx", "100", "below the smallest context"),
    ("ctx", "262144", "beyond the 131072 the model was trained on"),
    ("ctx", "1m", "1048576 tokens is beyond the 131072"),   # read as 2^20 tokens (was 'not a number')
    ("ctx", "kk", "is not a number of tokens"),
    ("model", "7", "7 is not in the list (1..1)"),
    ("model", "notes.txt", "is not a .gguf file, nor the id of one listed (choose one from the list, or give a path)"),
])
def test_a_bad_answer_is_refused_with_the_reason(key, text, message):
    s = situation("laptop", "3B")
    a = default_answers(s, start=Answers())
    q = next_question(s, apply_answer(a, key, None))
    assert q.key == key
    with pytest.raises(AnswerError, match=re.escape(message)):
        parse_answer(q, text, s, a)


def test_a_context_too_large_for_this_machine_is_refused_with_the_sizes():
    s = situation("small-laptop", "8B")
    q = next_question(s, Answers(model=s.model.path, concurrency="one", keep_on_disk=False))
    with pytest.raises(AnswerError, match=r"131072 tokens need 16\.0 GiB of KV; this machine has"):
        parse_answer(q, "128k", s, Answers())


@pytest.mark.parametrize("key,text,value", [
    ("concurrency", "ONE", "one"), ("concurrency", "sev", "several"), ("concurrency", "0", "one"), ("keep_on_disk", "n", False),
    ("keep_on_disk", "Yes", True), ("ctx", "32k", 32768), ("ctx", "16_384", 16384), ("model", "1", "/m/x"),
    # the id `strata models` shows for a listed file (a new user typed it: "'GLM-4.7-Flash' is not a .gguf file")
    ("model", "GLM-4.7-Flash-Q4_K_M", "/models/GLM-4.7-Flash-Q4_K_M.gguf"),
    # its file name as `strata models` prints it, and either in another case (they were "no such file")
    ("model", "GLM-4.7-Flash-Q4_K_M.gguf", "/models/GLM-4.7-Flash-Q4_K_M.gguf"),
    ("model", "glm-4.7-flash-q4_k_m", "/models/GLM-4.7-Flash-Q4_K_M.gguf"),
    # a path of another name goes on to the file's own check (serve loads a GGUF file named so: an Ollama blob)
    ("model", "/models/blobs/sha256-4b1c", "/models/blobs/sha256-4b1c"), ("model", "~/m/model.bin", "~/m/model.bin"),
    ("model", "/models/notes.txt", "/models/notes.txt"),
])
def test_good_answers_are_parsed(key, text, value):
    s = situation("seed-002-desktop", "3B")
    if key == "model":
        from dataclasses import replace
        s = replace(s, models_found=("/m/x", "/models/GLM-4.7-Flash-Q4_K_M.gguf"))
    q = next_question(s, Answers(**{k: v for k, v in default_answers(s).__dict__.items() if k != key}))
    assert parse_answer(q, text, s, Answers()) == value


def test_every_choice_has_a_reason_and_the_keys_are_the_servers():
    s = situation("workstation", "8B")
    plan = make_plan(s, default_answers(s))
    assert all(c.reason for c in plan.choices)
    assert set(plan.config()) == {
        "model", "threads", "ctx", "batch", "backend", "batch_groups", "slot_ctx", "kv_type",
        "conversation_cache_mib", "conversation_cache_cold_dir", "conversation_cache_cold_mib",
        "conversation_cache_warm_dir", "conversation_cache_warm_mib", "conversation_cache_park",
        "conversation_cache_min_free_mib", "conversation_cache_park_min_free_mib", "conversation_cache_sessions_mib"}
    c = plan.config()
    assert (c["conversation_cache_min_free_mib"], c["conversation_cache_park_min_free_mib"]) == (2560, 512)
    assert c["slot_ctx"] <= c["ctx"] and c["batch_groups"] <= max(1, c["batch"])


def test_a_slow_disk_is_not_proposed_and_a_fast_one_is():
    s = situation("laptop", "1B")
    from dataclasses import replace
    slow = replace(s, cold_disk=replace(s.cold_disk, read_mib_s=5.0), bench=BenchFacts(prefill_tps=5000.0))
    fast = replace(s, cold_disk=replace(s.cold_disk, read_mib_s=2000.0), bench=BenchFacts(prefill_tps=500.0))
    q_slow = next_question(slow, Answers(model="x", concurrency="several"))
    q_fast = next_question(fast, Answers(model="x", concurrency="several"))
    assert q_slow.default is False and "does not pay" in q_slow.reason
    assert q_fast.default is True and "instead of 80.0 s of prefill" in q_fast.reason


def test_a_full_disk_gets_no_cold_level():
    s = situation("small-laptop", "135M")
    from dataclasses import replace
    s = replace(s, cold_disk=DiskFacts("/full", 2048))
    plan = make_plan(s, default_answers(s)).config()
    assert plan["conversation_cache_cold_mib"] == 0 and plan["conversation_cache_park"] == "ram"


def test_one_request_gives_the_solo_path_and_more_context():
    s = situation("laptop", "8B")
    several = make_plan(s, default_answers(s)).config()
    one = make_plan(s, default_answers(s, start=Answers(concurrency="one"))).config()
    assert several["batch"] >= 1 and one["batch"] == 0 and one["ctx"] > several["ctx"]


def test_a_model_larger_than_ram_is_planned_with_a_warning():
    s = situation("small-laptop", "32B")
    plan = make_plan(s, default_answers(s))
    assert plan.config()["batch"] == 0
    assert any("page from disk" in w for w in plan.warnings)


def test_questions_after_the_model_need_the_model_measured():
    from dataclasses import replace
    s = replace(situation("laptop", "1B"), model=None)
    with pytest.raises(ValueError, match="model must be chosen"):
        next_question(s, Answers(model="/m/x"))


@pytest.mark.parametrize("field,value", [
    ("min_free_mib", -1), ("ram_cache_share", 0.0), ("cold_disk_share", 1.5), ("target_slots", 0),
    ("ctx_ladder", (4096, 2048)), ("min_ctx", 0),
])
def test_bad_parameters_are_named(field, value):
    with pytest.raises(ValueError, match=field):
        PlanParameters(**{field: value})


def test_a_gpu_with_a_cuda_build_gets_the_cuda_backend_and_its_memory_bounds_the_kv():
    from dataclasses import replace

    s = situation("workstation", "8B")  # RTX 4090, 24 GiB; 64 GiB of RAM
    cpu = make_plan(s, default_answers(s)).config()
    cuda_s = replace(s, cuda_built=True)
    cuda = make_plan(cuda_s, default_answers(cuda_s))
    assert cpu["backend"] == "cpu" and cuda.config()["backend"] == "cuda"
    assert "RTX 4090" in cuda.reason("backend")
    kv_gib = (1 + cuda.config()["batch"]) * cuda.config()["ctx"] * s.model.kv_bytes_per_token / 2**30
    assert kv_gib <= 24 - 4.6 - 0.5  # GPU memory minus the model and the scratch
    assert (cuda.config()["ctx"], cuda.config()["batch"]) != (cpu["ctx"], cpu["batch"])


def test_a_model_with_experts_runs_on_the_cpu_beside_a_gpu_and_ram_bounds_its_kv():
    """The CUDA backend has no expert kernels: a qwen3moe model on a machine with a GPU and a CUDA build is
    planned on the CPU, its KV bounded by RAM, not VRAM (the 30B-A3B file: 17.3 GiB, 48 layers, 4 KV heads)."""
    from dataclasses import replace

    from strata.installer.plan_types import ModelFacts

    moe = ModelFacts("/m/Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf", "Qwen3-Coder-30B-A3B-Instruct", 18_556_685_056,
                     48, 4, 128, 262144, "qwen3moe", n_expert=128)
    s = replace(situation("workstation", "8B"), cuda_built=True, model=moe)   # RTX 4090 (24 GiB), 64 GiB RAM
    plan = make_plan(s, default_answers(s))
    assert plan.config()["backend"] == "cpu"
    assert "experts (128 in this one)" in plan.reason("backend")
    kv_gib = (1 + plan.config()["batch"]) * plan.config()["ctx"] * moe.kv_bytes_per_token / 2**30
    assert kv_gib > 24 - 17.3       # more KV than the GPU could have held beside the weights
    dense = make_plan(replace(s, model=replace(moe, n_expert=0)), default_answers(s))
    assert dense.config()["backend"] == "cuda"


def test_a_model_with_an_attention_temperature_runs_on_the_cpu_beside_a_gpu():
    """mistral3's query temperature (Devstral Small 2) has no CUDA kernel either: planned on the CPU."""
    from dataclasses import replace

    from strata.installer.plan_types import ModelFacts

    devstral = ModelFacts("/m/Devstral-Small-2-24B-Instruct-2512-Q4_K_M.gguf", "Devstral-Small-2-24B", 14_333_000_000,
                          40, 8, 128, 393216, "mistral3", attn_temperature=True)
    s = replace(situation("workstation", "8B"), cuda_built=True, model=devstral)
    plan = make_plan(s, default_answers(s))
    assert plan.config()["backend"] == "cpu"
    assert "models with an attention temperature" in plan.reason("backend")
    without = make_plan(replace(s, model=replace(devstral, attn_temperature=False)), default_answers(s))
    assert without.config()["backend"] == "cuda"


def test_a_big_model_on_a_small_machine_gets_q8_0_kv_for_a_longer_context():
    """30B-A3B (17.3 GiB) on 24 GiB: F16 KV (96 KiB a token) holds one context of 16K tokens at most, too
    few for an agent's conversation; q8_0 (51 KiB) holds 32K (with a slot kept: main 16K instead of 8K).
    With RAM to spare (the 64 GiB workstation) F16 stays."""
    from dataclasses import replace

    from strata.installer.plan_types import MachineProfile, ModelFacts

    moe = ModelFacts("/m/Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf", "Qwen3-Coder-30B-A3B-Instruct", 18_556_685_056,
                     48, 4, 128, 262144, "qwen3moe", n_expert=128)
    small = replace(situation("laptop", "8B"), model=moe, machine=MachineProfile(8, 16, 24 * 1024, 20 * 1024))
    plan = make_plan(small, default_answers(small))
    assert plan.config()["kv_type"] == "q8_0" and plan.config()["ctx"] == 16384 and plan.config()["batch"] == 1
    assert "F16 (96.0 KiB/token) would hold one context of 16384 tokens at most, q8_0 32768" in plan.reason("kv_type")
    one = make_plan(small, default_answers(small, start=Answers(concurrency="one")))
    assert one.config()["ctx"] == 32768 and one.config()["batch"] == 0
    assert "51.0 KiB/token" in plan.reason("kv_type")
    one_16k = make_plan(small, default_answers(small, start=Answers(concurrency="one", ctx=16384)))
    assert (one_16k.config()["kv_type"], one_16k.config()["ctx"]) == ("f16", 16384)   # a context F16 holds
    assert "your 16384-token context fit in F16 too" in one_16k.reason("kv_type")
    several_8k = make_plan(small, default_answers(small, start=Answers(concurrency="several", ctx=8192)))
    assert several_8k.config()["kv_type"] == "q8_0"    # F16 would hold it with fewer slots (2, not 4)
    big = replace(small, machine=MACHINES["workstation"][0])
    assert make_plan(big, default_answers(big)).config()["kv_type"] == "f16"
    with pytest.raises(ValueError, match="kv_type must be 'f16' or 'q8_0', got 'q4'"):
        replace(moe, kv_type="q4")


def test_q8_0_kv_only_for_a_head_size_the_engine_quantizes():
    """The engine refuses q8_0 KV unless the head size is a multiple of 32 (whole q8_0 blocks per head):
    a model with heads of 80 on the same small machine keeps F16 KV, and the reason says why."""
    from dataclasses import replace

    from strata.installer.plan_types import MachineProfile, ModelFacts

    odd = ModelFacts("/m/odd.gguf", "odd", 18_556_685_056, 48, 8, 80, 262144, "llama")
    small = replace(situation("laptop", "8B"), model=odd, machine=MachineProfile(8, 16, 24 * 1024, 20 * 1024))
    plan = make_plan(small, default_answers(small))
    assert plan.config()["kv_type"] == "f16"
    assert "head size 80 is not a multiple of 32" in plan.reason("kv_type")
    assert make_plan(replace(small, model=replace(odd, head_dim=96)), default_answers(small)).config()["kv_type"] == "q8_0"
    # deepseek2's latent head (GLM-4.7-Flash: one head of 512 + 64) is whole blocks but over 256: the reason
    # said "head size 576 is not a multiple of 32"
    glm = replace(odd, n_head_kv=1, head_dim=576, arch="deepseek2", size_bytes=20_000_000_000)
    why = make_plan(replace(small, model=glm), default_answers(replace(small, model=glm))).reason("kv_type")
    assert why.endswith("takes heads of whole 32-element blocks, up to 256, and head size 576 is over 256"), why


def test_a_model_the_cuda_backend_does_not_run_names_that_before_the_build():
    # a GPU and a CPU-only build with GLM-4.7-Flash said "this build has no CUDA backend" (rebuilding would not
    # run it on the GPU either)
    from dataclasses import replace

    from strata.installer.plan_types import ModelFacts

    glm = ModelFacts("/m/GLM-4.7-Flash.gguf", "GLM-4.7-Flash", 18_000_000_000, 47, 1, 576, 202752, "deepseek2")
    for built in (False, True):
        s = replace(situation("workstation", "8B"), model=glm, cuda_built=built)
        plan = make_plan(s, default_answers(s))
        assert plan.config()["backend"] == "cpu"
        assert "the CUDA backend does not run models with deepseek2's multi-head latent attention: the CPU runs it" \
            in plan.reason("backend")
    s = replace(situation("workstation", "8B"), cuda_built=False)
    assert "this build has no CUDA backend" in make_plan(s, default_answers(s)).reason("backend")


@pytest.mark.parametrize("n_ctx_train,machine,said", [
    (202752, "server", "131072 tokens = 6.6 GiB of KV, the largest step within the model's trained context (202752 tokens)"),
    (131072, "server", "the largest step within the model's trained context"),
    (1048576, "server", "262144 tokens = 13.2 GiB of KV, the largest step Strata plans (the model was trained on 1048576"),
    (202752, "laptop", "the largest step within all of the"),
])
def test_the_context_default_names_what_stopped_it(n_ctx_train, machine, said):
    # a GLM-4.7-Flash-shaped model (47 layers of one 576-wide latent head, 202752 trained tokens; 5 GB) with memory to
    # spare: 131072 said "the largest step within all of the 14.7 GiB left for KV", where the trained context stopped it
    from dataclasses import replace

    from strata.installer.plan_types import ModelFacts

    glm = ModelFacts("/m/GLM-4.7-Flash-Q4_K_M.gguf", "GLM-4.7-Flash", 5_000_000_000, 47, 1, 576, n_ctx_train,
                     "deepseek2")
    s = replace(situation(machine, "8B"), model=glm, models_found=(glm.path,), default_model=glm.path)
    a = apply_answer(apply_answer(Answers(), "model", glm.path), "concurrency", "one")
    a = apply_answer(apply_answer(a, "keep_on_disk", False), "cold_dir", None)
    q = next_question(s, a)
    assert q.key == "ctx" and said in q.reason, q.reason


def test_a_model_answer_that_names_no_listed_file_says_the_id_meant():
    from dataclasses import replace

    s = replace(situation("seed-002-desktop", "3B"), models_found=("GLM", "/m/x", "/models/GLM-4.7-Flash-Q4_K_M.gguf"))
    q = next_question(s, Answers())
    with pytest.raises(AnswerError, match=r"nor the id of one listed .*; did you mean GLM-4\.7-Flash-Q4_K_M\?"):
        parse_answer(q, "GLM", s, Answers())


def test_setup_model_flag_given_an_id_takes_the_listed_file():
    # `strata setup --model GLM-4.7-Flash-Q4_K_M`: starting_situation puts the text itself first in the list, so
    # the id matched two entries and was refused
    from dataclasses import replace

    s = replace(situation("seed-002-desktop", "3B"),
                models_found=("GLM-4.7-Flash-Q4_K_M", "/m/x", "/models/GLM-4.7-Flash-Q4_K_M.gguf"))
    q = next_question(s, Answers())
    assert parse_answer(q, "GLM-4.7-Flash-Q4_K_M", s, Answers()) == "/models/GLM-4.7-Flash-Q4_K_M.gguf"


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_no_reason_a_user_reads_names_the_design_seeds(machine):
    """'seed 002' and 'the seed's 4' mean nothing to a user (a new-user trial read them in the plan)."""
    s = situation(machine, "3B")
    a, texts = Answers(), []
    while (q := next_question(s, a)) is not None:
        texts.append(q.reason)
        a = apply_answer(a, q.key, q.default)
    texts += [c.reason for c in make_plan(s, a).choices]
    assert not [t for t in texts if "seed" in t.lower()], texts


def test_a_folder_too_small_for_a_cold_level_is_asked_again(tmp_path):
    """A new-user trial: a folder with 872 KiB free was taken, and the plan wrote it with
    conversation_cache_cold_mib = 0 (the level off) under 'conversations kept on disk (your answer)'."""
    from dataclasses import replace

    from strata.installer.flow import accept
    from strata.installer.plan import cold_folder_problem
    small = DiskFacts(str(tmp_path), 3000)
    assert cold_folder_problem(small) == (
        f"only 3000 MiB free at {tmp_path}: the cold level gets 25% of it in whole GiB, 0 MiB, and would keep "
        "nothing; choose a folder with at least 4096 MiB free (or run setup again and answer no to keeping "
        "conversations on disk)")
    assert cold_folder_problem(DiskFacts(str(tmp_path), 4096)) == ""
    s = replace(situation("laptop", "3B"), cold_disk=small)
    a = Answers(model=s.model.path, concurrency="several", keep_on_disk=True)
    q = next_question(s, a)
    assert q.key == "cold_dir"
    with pytest.raises(AnswerError, match="only 3000 MiB free"):
        accept(s, a, q, str(tmp_path))


def test_an_iq4_file_runs_on_the_cpu_beside_a_gpu():
    """IQ4_NL / IQ4_XS weights have CPU kernels only (general.file_type 25 / 30): planned on the CPU, and
    `backend auto` (model_shape.cpu_only) says the same."""
    from dataclasses import replace

    from strata.installer.plan_types import ModelFacts

    from strata.model_shape import cpu_only

    iq4 = ModelFacts("/m/Qwen2.5-Coder-7B-Instruct-IQ4_XS.gguf", "Qwen2.5-Coder-7B", 4_200_000_000, 28, 4, 128, 32768,
                     "qwen2", file_type=30)
    s = replace(situation("workstation", "8B"), cuda_built=True, model=iq4)
    plan = make_plan(s, default_answers(s))
    assert plan.config()["backend"] == "cpu" and "IQ4_XS weights" in plan.reason("backend")
    assert make_plan(replace(s, model=replace(iq4, file_type=15)), default_answers(s)).config()["backend"] == "cuda"
    assert cpu_only({"general.architecture": "llama", "general.file_type": 25})
    assert cpu_only({"general.architecture": "llama", "general.file_type": 12})       # Q3_K_M
    assert not cpu_only({"general.architecture": "llama", "general.file_type": 15})


def test_the_model_default_reads_without_brackets_in_brackets():
    """The terminal shows a default's reason in brackets: it read '(the default model (the only one found))'."""
    from dataclasses import replace

    s = situation("seed-002-desktop", "3B")
    for found, said in (((s.default_model,), "the default model, the only one found"),
                        ((s.default_model, "/m/x"), "the default model, of 2 GGUF files found")):
        q = next_question(replace(s, models_found=found), Answers())
        assert q.reason == said and "(" not in q.reason


def test_a_model_trained_on_fewer_tokens_than_the_first_step_is_not_blamed_on_the_memory():
    """A 1,024-token model on a 32 GiB desktop: the default context's reason said 'only 14.8 GiB left after the
    model and the floors', as if memory stopped it."""
    from dataclasses import replace

    s = situation("seed-002-desktop", "3B")
    s = replace(s, model=replace(s.model, n_ctx_train=1024))
    q = next_question(s, Answers(model=s.model.path, concurrency="several", keep_on_disk=False))
    assert q.key == "ctx" and q.default == 1024
    assert "the model's whole trained context (shorter than the smallest step, 2048)" in q.reason
    assert "left after the model" not in q.reason


def test_the_default_model_installed_with_strata_is_written_by_its_id():
    """The packaged app's default model lives in the app's own folder: its path in the file broke when the app
    was moved or a new version unpacked elsewhere (the app waited for the old folder forever). By its id
    `strata serve` finds it wherever Strata is; another file of that id, or any other model, keeps its path."""
    from dataclasses import replace

    s = situation("seed-002-desktop", "3B")
    packaged = replace(s, packaged_model=s.model.path)
    choice = next(c for c in make_plan(packaged, default_answers(packaged)).choices if c.key == "model")
    assert choice.value == Path(s.model.path).stem and "by its id" in choice.reason
    assert make_plan(s, default_answers(s)).config()["model"] == s.model.path              # not the packaged one
    twin = replace(packaged, models_found=(s.model.path, f"/home/u/models/{Path(s.model.path).name}"))
    assert make_plan(twin, default_answers(twin)).config()["model"] == s.model.path       # the id would be ambiguous


def test_a_rerun_keeps_the_files_slots_only_where_this_machine_holds_them():
    """a08ad4a keeps the file's batch and slot_ctx for the same model and context, and 3a9c749 proposes the file's
    context only where this machine holds it; the slots were kept whatever their KV: a file with 4 slots of
    32768 tokens (written on a bigger machine, or by hand) re-run on the laptop, whose plan gives 1 slot, kept 4
    (17.5 GiB of KV against 7.6 GiB left for it). Slots that still fit are kept; these get the plan's, and say why."""
    from dataclasses import replace

    from strata.installer.plan_types import PreviousAnswers

    s = situation("laptop", "3B")
    plan = make_plan(s, default_answers(s)).config()
    ctx = plan["ctx"]
    assert (plan["batch"], plan["slot_ctx"]) == (1, ctx)

    def rerun(batch: int, slot_ctx: int):
        previous = PreviousAnswers(model=s.model.path, ctx=ctx, batch=batch, slot_ctx=slot_ctx, cold_dir="", cold_mib=0)
        again = replace(s, previous=previous)
        return make_plan(again, default_answers(again))

    too_many = rerun(4, ctx)
    assert (too_many.config()["batch"], too_many.config()["slot_ctx"]) == (1, ctx)
    why = next(c.reason for c in too_many.choices if c.key == "batch")
    assert "not the configuration there's batch = 4" in why and "7.6 GiB" in why, why
    kept = rerun(2, 4096).config()          # a hand-set smaller slot that fits: the user's
    assert (kept["batch"], kept["slot_ctx"]) == (2, 4096)
