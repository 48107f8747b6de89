"""The memory check before the engine allocates its contexts (server/memory_check.py): a verdict per case,
the KV sizes the engine really allocates, and a live server refusing contexts no machine here has."""

from __future__ import annotations

import pytest
from strata.server.memory_check import GIB, MemoryAsk, judge, kv_bytes_per_token

# Qwen3-Coder-30B-A3B: 48 layers, 4 KV heads of 128; its Q4_K_M file
QWEN_30B = dict(kv_bytes_per_token=kv_bytes_per_token(48, 4, 128, "f16"), model_bytes=18_556_685_056)


def ask(**kw) -> MemoryAsk:
    base = dict(ctx=32768, slots=0, slot_ctx=32768, kv_type="f16", available_bytes=40 * GIB, total_bytes=64 * GIB)
    return MemoryAsk(**(base | QWEN_30B | kw))


def test_kv_beyond_the_available_memory_is_an_error_naming_the_flags():
    v = judge(ask(ctx=131072, slots=4, slot_ctx=131072))
    assert v.error and v.warning is None
    assert "need 60.0 GiB of KV (--ctx 131072 + --batch 4 x --slot-ctx 131072 = 655360 tokens x 98304 bytes" in v.error
    assert "of the 40.0 GiB of memory available: lower --ctx, --slot-ctx or --batch or --kv-type q8_0" in v.error
    q8 = judge(ask(ctx=131072, slots=4, slot_ctx=131072, kv_type="q8_0", available_bytes=20 * GIB,
                   kv_bytes_per_token=kv_bytes_per_token(48, 4, 128, "q8_0")))
    assert "31.9 GiB of KV" in q8.error and "--kv-type q8_0" not in q8.error


def test_model_and_kv_beyond_the_available_memory_is_a_warning():
    v = judge(ask(ctx=131072, available_bytes=24 * GIB))   # 12 GiB of KV fits, with the 17.3 GiB model it does not
    assert v.error is None and "the model (17.3 GiB) and the KV (12.0 GiB, --ctx 131072) are more than" in v.warning


def test_what_fits_says_nothing():
    assert judge(ask()) == judge(ask(slots=2)) == judge(ask(ctx=512, available_bytes=1 * GIB, model_bytes=0))
    assert judge(ask()).error is None and judge(ask()).warning is None


@pytest.mark.parametrize("kv_type", ["f16", "q8_0", "f32"])
@pytest.mark.parametrize("shape", [dict(n_embd=128, n_head=4, n_head_kv=2), dict(n_embd=256, n_head=4, n_head_kv=1),
                                   dict(n_embd=384, n_head=4, n_head_kv=2)])   # heads of 32, 64, 96 (q8_0: 32s)
def test_the_sizes_are_the_engines(tiny_model_factory, kv_type, shape):
    from strata.engine import Engine

    e = Engine(tiny_model_factory(dtype="F32", **shape), n_ctx=16, kv_type=kv_type)
    assert kv_bytes_per_token(e.n_layer, e.n_head_kv, e.head_dim, kv_type) == e.bytes_per_token
    with pytest.raises(ValueError, match="unknown kv_type 'q4'"):
        kv_bytes_per_token(1, 1, 32, "q4")


def test_serve_refuses_contexts_no_memory_here_holds_before_listening(default_model_path):
    """The default model with a main context and 8 slots of 1M tokens: 193 GiB of KV. It started allocating
    (and swapped, or was killed with no word); now it stops with the flags to change, status 2."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--model", str(default_model_path), "--port", "0",
                           "--ctx", "1000000", "--batch", "8", "--slot-ctx", "1000000", "--threads", "1",
                           "--no-config"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "the contexts asked for need" in done.stderr and "lower --ctx, --slot-ctx or --batch" in done.stderr
    assert "listening on" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_packed_copy_that_does_not_fit_beside_the_kv_is_not_made():
    """The engine copies Q8_0 / Q4_1 / IQ4_NL / Q4_K / Q5_K / Q6_K / Q3_K / Q2_K / IQ4_XS product weights into
    packed buffers of its own at load (anonymous memory, about the file's size; measured: +145 MiB anonymous for
    the 94 MiB Q4_1 default model with 34 MiB of arena). With the KV they must fit, or the load swaps or is
    killed: when they do not, the weights are read in place (slower prompts) rather than the model refused, as
    it ran before the copies existed; a KV that does not fit by itself is still an error."""
    v = judge(ask(ctx=131072, available_bytes=20 * GIB, packed_bytes=10 * GIB))   # 12 GiB KV + 10 GiB held
    assert v.error is None and v.pack_weights is False
    assert ("packed copy of the model's Q8_0 / Q4_1 / IQ4_NL / Q4_K / Q5_K / Q6_K / Q3_K / Q2_K / IQ4_XS weights "
            "(10.0 GiB) does not fit beside the KV (12.0 GiB, --ctx 131072)") in v.warning and "read in place" in v.warning
    fits = judge(ask(ctx=131072, available_bytes=40 * GIB, packed_bytes=10 * GIB))
    assert fits.pack_weights is True and fits.error is None
    unpacked = judge(ask(ctx=131072, available_bytes=20 * GIB, packed_bytes=10 * GIB, pack_weights=False))
    assert unpacked.error is None and "packed copy" not in (unpacked.warning or "")   # --no-pack-weights: none held
    assert judge(ask(ctx=400_000, available_bytes=20 * GIB, packed_bytes=10 * GIB)).error   # the KV alone


def test_the_error_names_the_limit_it_applies():
    """36.6 GiB of KV with 40 GiB available is refused (90 percent): the message must not read as if it fits."""
    v = judge(ask(ctx=400_000, available_bytes=40 * GIB))   # 36.6 GiB of KV
    assert v.error and "need 36.6 GiB of KV" in v.error
    assert "more than 90 percent (36.0 GiB) of the 40.0 GiB of memory available" in v.error, v.error


def _config(model, **values):
    import argparse

    from strata.server.cli import add_arguments
    from strata.server.config import config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = ["--no-config", "--model", str(model)]
    for k, val in values.items():
        flag = k.replace("_", "-")
        flags += ([f"--{flag}" if val else f"--no-{flag}"] if isinstance(val, bool) else [f"--{flag}", str(val)])
    return config_from_args(parser.parse_args(flags))


def test_ask_for_counts_the_weights_the_engine_packs(default_model_path):
    """SmolLM2-135M Q4_1: every matrix Q4_1, token_embd Q8_0 and tied to the output (packed too) where this
    build packs them (AVX-512 VNNI); nothing where it does not (AVX2, scalar: the products read the file)."""
    from strata.engine import GGUFFile
    from strata.server.memory_check import ask_for, packed_bytes

    from strata import _engine

    tensors = GGUFFile(str(default_model_path)).tensors
    assert "output.weight" not in {t.name for t in tensors}
    k = _engine.kernels
    want = sum(k.packed_bytes(t.type_id, t.shape[1], t.shape[0]) for t in tensors
               if t.type in ("Q4_1", "Q8_0") and k.packed_supported(t.type_id))
    if k.packed_supported(next(t.type_id for t in tensors if t.type == "Q4_1")):
        assert want > 90 * 2**20
    got = ask_for(_config(default_model_path, ctx=256), default_model_path, "cpu")
    assert got is not None and got.packed_bytes == want
    assert packed_bytes(tensors, supported=lambda type_id: False, size=k.packed_bytes) == 0
    everything = packed_bytes(tensors, supported=lambda type_id: True, size=lambda t, rows, cols: rows * cols)
    assert everything == sum(t.shape[0] * t.shape[1] for t in tensors if len(t.shape) == 2)   # all products


def test_backend_auto_with_a_gpu_checks_a_model_with_experts_which_runs_on_the_cpu(tiny_model_factory):
    """`--backend auto` on a CUDA machine runs a model with experts on the CPU (Engine's fallback): its KV
    is in RAM and must be checked; a dense model's is in VRAM (the CUDA backend checks it)."""
    from strata.server.memory_check import ask_for

    moe = tiny_model_factory(dtype="F32", n_expert=4, n_expert_used=2)
    dense = tiny_model_factory(dtype="F32")
    assert ask_for(_config(moe, ctx=64, backend="auto"), moe, "cuda") is not None
    assert ask_for(_config(dense, ctx=64, backend="auto"), dense, "cuda") is None
    assert ask_for(_config(dense, ctx=64, backend="auto"), dense, "cpu") is not None


def test_serve_with_backend_auto_on_a_gpu_machine_refuses_an_expert_models_huge_contexts(tiny_model_factory,
                                                                                         monkeypatch):
    import asyncio

    import strata.engine.gpu as gpu
    from strata.server.cli import serve

    monkeypatch.setattr(gpu, "resolve_backend", lambda b: "cuda" if b in ("auto", "cuda") else "cpu")
    moe = tiny_model_factory(dtype="F32", n_expert=4, n_expert_used=2)
    # 8 slots of 2**24 tokens (the most --ctx takes) of this tiny model's KV: far beyond this machine
    cfg = _config(moe, backend="auto", ctx=1 << 24, batch=8, slot_ctx=1 << 24, port=0)
    assert asyncio.run(serve(cfg)) == 2


def test_q8_0_is_not_advised_for_heads_the_engine_refuses_it_for():
    """The engine's q8_0 KV needs heads that are a multiple of 32, up to 256 (a model with heads of 80 or
    100 is refused with --kv-type q8_0): the error and the warning must not advise it there."""
    heads_80 = dict(kv_bytes_per_token=kv_bytes_per_token(32, 8, 80, "f16"), q8_0_allowed=False)
    v = judge(ask(ctx=1_000_000, **heads_80))
    assert v.error and "q8_0" not in v.error, v.error
    w = judge(ask(ctx=131072, available_bytes=20 * GIB, kv_bytes_per_token=kv_bytes_per_token(48, 4, 128, "f16") // 2,
                  q8_0_allowed=False))
    assert w.warning and "q8_0" not in w.warning, w.warning
    assert "--kv-type q8_0" in judge(ask(ctx=1_000_000)).error
    already = judge(ask(ctx=131072, available_bytes=22 * GIB, kv_type="q8_0",
                        kv_bytes_per_token=kv_bytes_per_token(48, 4, 128, "q8_0")))
    assert already.warning and "q8_0 leaves" not in already.warning, already.warning   # it is q8_0 already


@pytest.mark.parametrize("head_dim,allowed", [(64, True), (128, True), (256, True), (80, False), (100, False),
                                              (512, False)])
def test_ask_for_knows_which_heads_take_q8_0(tiny_model_factory, head_dim, allowed):
    from strata.server.memory_check import ask_for

    model = tiny_model_factory(dtype="F32", n_embd=head_dim * 2, n_head=2, n_head_kv=1)
    got = ask_for(_config(model, ctx=64), model, "cpu")
    assert got is not None and got.q8_0_allowed is allowed


def test_pack_weights_false_loads_without_packed_copies_and_the_same_answers(default_model_path):
    """`--no-pack-weights` (or the memory check's verdict): the engine makes no packed copy and reads the
    weights in place; the logits stay within the quantized products' tolerance against the NumPy
    reference (6%, test_logits_reference.py) of the packed ones (not bitwise: the packed kernels add
    block sums in another order; over 30 layers that moves the logits ~4% here)."""
    import numpy as np
    from strata.engine import Engine

    packed = Engine(default_model_path, n_ctx=64, n_threads=1)
    plain = Engine(default_model_path, n_ctx=64, n_threads=1, pack_weights=False)
    assert sum(plain._native.packed_bytes.values()) == 0
    tokens = packed.tokenize("def add(a, b):\n    return")
    a = packed.prefill(0, tokens) or packed.logits(0)
    b = plain.prefill(0, tokens) or plain.logits(0)
    assert np.abs(a - b).max() <= 0.06 * np.abs(a).max()
    assert int(np.argmax(a)) == int(np.argmax(b))
    with pytest.raises(ValueError, match="pack_weights must be True or False"):
        Engine(default_model_path, n_ctx=16, pack_weights="no")


def test_no_pack_weights_reaches_the_memory_check(default_model_path):
    from strata.server.memory_check import ask_for

    on, off = _config(default_model_path), _config(default_model_path, pack_weights=False)
    assert on.pack_weights is True and off.pack_weights is False
    assert ask_for(on, default_model_path, "cpu").pack_weights and not ask_for(off, default_model_path, "cpu").pack_weights


def test_ask_for_sizes_glm4moe_as_the_engine_loads_it(tiny_model_factory):
    """glm4moe's trailing multi-token-prediction layer is neither loaded nor given KV: strata serve's memory
    check counts the KV a token takes and the packed copies exactly as the engine makes them (block_count 4,
    trunk 3; shared experts packed)."""
    from strata.engine import Engine
    from strata.server.memory_check import ask_for

    path = tiny_model_factory(arch="glm4moe", dtype="Q8_0", n_layer=3, n_ff=64, n_expert=8, n_expert_used=2,
                              n_rot=8)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f16")
    got = ask_for(_config(path, ctx=64, kv_type="f16"), path, "cpu")
    assert got is not None
    assert (got.kv_bytes_per_token, got.packed_bytes) == (engine.bytes_per_token, engine.packed_bytes)


def test_ask_for_sizes_deepseek2_as_the_engine_loads_it(tiny_model_factory):
    """deepseek2 (GLM-4.7-Flash's layout): K and V of the one latent head (kv_lora_rank + n_rot wide) per trunk
    layer, the nextn layer left out, the q LoRA's and the latent's products packed (attn_k_b / attn_v_b per head
    are not); q8_0 KV where the latent head is a multiple of 32 (32 + 32)."""
    from strata.engine import Engine
    from strata.server.memory_check import ask_for

    path = tiny_model_factory(arch="deepseek2", dtype="Q8_0", n_layer=3, n_ff=32, n_expert=8, n_expert_used=2,
                              n_rot=32, mla={"kv_lora_rank": 32, "q_lora_rank": 32, "nope": 32, "vh": 32})
    for kv_type in ("f16", "q8_0"):
        engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type)
        got = ask_for(_config(path, ctx=64, kv_type=kv_type), path, "cpu")
        assert got is not None and got.q8_0_allowed
        assert (got.kv_bytes_per_token, got.packed_bytes) == (engine.bytes_per_token, engine.packed_bytes)


def test_q8_0_kv_the_engine_cannot_hold_is_refused_naming_the_kv_type_to_use():
    v = judge(ask(kv_type="q8_0", q8_0_allowed=False, head_dim=576))
    assert v.error == ("--kv-type q8_0 cannot hold this model's KV: its heads are 576 wide, and the engine's q8_0 KV "
                       "takes heads of up to 256 in whole blocks of 32: use --kv-type f16 (kv_type = \"f16\" in the "
                       "configuration file)")
    assert judge(ask(kv_type="f16", q8_0_allowed=False, head_dim=576)).error is None


def test_serve_refuses_q8_0_kv_on_a_latent_head_over_256_before_listening(tiny_model_factory):
    """deepseek2's latent head (GLM-4.7-Flash: 512 + 64): the engine refuses q8_0 KV for it, but only once the
    server listened (status 1, retried by the app); now start-up stops first, status 2, saying to use f16."""
    import subprocess
    import sys

    from strata.engine import Engine

    path = tiny_model_factory(arch="deepseek2", n_layer=2, n_ff=32, n_expert=4, n_expert_used=2, n_rot=32,
                              mla={"kv_lora_rank": 256})   # a latent head of 288: whole blocks of 32, over 256
    with pytest.raises(ValueError, match="q8_0 KV supports head sizes up to 256, this model has 288"):
        Engine(path, n_ctx=16, kv_type="q8_0")
    for extra in ([], ["--no-memory-check"]):   # no matter of memory: refused without the memory check too
        done = subprocess.run([sys.executable, "-m", "strata", "serve", "--model", str(path), "--port", "0",
                               "--ctx", "256", "--batch", "0", "--threads", "1", "--kv-type", "q8_0", "--no-config",
                               *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "its heads are 288 wide" in done.stderr and "use --kv-type f16" in done.stderr, done.stderr
        assert "listening on" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_q8_0_is_not_advised_where_it_takes_more_bytes_than_f16(tiny_model_factory):
    """deepseek2's f16 KV holds the latent row once (the values read the keys); q8_0 keeps V rows beside its K
    tiles, 2 x 34 / 32 = 2.125 bytes an element against f16's 2: the engine takes q8_0 for a latent head of
    32 + 32, but neither the error nor the warning may call it the cheaper KV."""
    import dataclasses

    from strata.engine import Engine
    from strata.server.memory_check import ask_for

    path = tiny_model_factory(arch="deepseek2", dtype="F32", n_layer=3, n_ff=32, n_expert=8, n_expert_used=2,
                              n_rot=32, mla={"kv_lora_rank": 32})
    f16, q8 = (Engine(path, n_ctx=16, n_threads=2, kv_type=t).bytes_per_token for t in ("f16", "q8_0"))
    assert q8 > f16
    got = ask_for(_config(path, ctx=64, kv_type="f16"), path, "cpu")
    assert got is not None and got.q8_0_allowed and got.kv_bytes_per_token == f16
    error = judge(dataclasses.replace(got, ctx=1 << 40)).error
    assert error and "q8_0" not in error, error
    kv = 65536 * f16
    warning = judge(dataclasses.replace(got, ctx=65536, available_bytes=2 * kv, model_bytes=2 * kv)).warning
    assert warning and "q8_0" not in warning, warning


@pytest.mark.parametrize("kw,example", [
    (dict(ctx=131072, slots=4, slot_ctx=131072), "(393216 tokens fit, e.g. --ctx 65536 --slot-ctx 65536;"),
    (dict(ctx=131072, slots=4, slot_ctx=131072, n_ctx_train=32768), "(393216 tokens fit, e.g. --ctx 32768 --slot-ctx 32768;"),
    (dict(ctx=131072, slots=4, slot_ctx=131072, available_bytes=2 * GIB), "(19660 tokens fit, e.g. --ctx 2048 --slot-ctx 2048;"),
    (dict(ctx=131072, slots=8, slot_ctx=131072, available_bytes=1 * GIB), "(9830 tokens fit, e.g. --ctx 8192 --batch 0;"),
    (dict(ctx=1000000, n_ctx_train=202752), "(393216 tokens fit, e.g. --ctx 202752;"),
])
def test_the_refusal_gives_contexts_that_fit(kw, example):
    # it said "lower --ctx, --slot-ctx or --batch" and left the user to guess by how much (a new-user trial on a
    # GLM-4.7-Flash-shaped file with --ctx 202752: 51 GiB asked, 20 GiB available)
    v = judge(ask(**kw))
    assert example in v.error, v.error
    size = int(example.split("--ctx ")[1].split()[0].rstrip(";"))
    slots = 0 if "--batch 0" in example or "--slot-ctx" not in example else kw.get("slots", 0)
    assert judge(ask(**(kw | dict(ctx=size, slot_ctx=size, slots=slots)))).error is None   # the example fits


def test_ask_for_reads_the_memory_a_cgroup_limit_leaves(default_model_path, tmp_path):
    """In a container (a 512 MiB limit, 100 MiB used) the host's available RAM is not what this process may take:
    the start-up check counts what the limit leaves, and its refusal says the limit applies."""
    from strata.server.cache.cgroup_memory import CgroupMemory
    from strata.server.memory_check import ask_for, judge

    from tests.fixtures.cgroup_tree import MIB as mib
    from tests.fixtures.cgroup_tree import limited_group

    ask = ask_for(_config(default_model_path, ctx=32768), default_model_path, "cpu",
                  cgroup=limited_group(tmp_path, "docker/c0ffee", 512, 100))
    assert ask.available_bytes <= 412 * mib and ask.total_bytes <= 512 * mib and ask.limit_bytes == 512 * mib
    verdict = judge(ask)   # 32K tokens of SmolLM2's f16 KV (~0.7 GiB) do not fit in 90 % of 412 MiB
    assert verdict.error and "under this process's memory limit of 0.5 GiB" in verdict.error, verdict
    free = ask_for(_config(default_model_path, ctx=32768), default_model_path, "cpu",
                   cgroup=CgroupMemory(str(tmp_path / "none"), str(tmp_path / "sys_fs_cgroup")))   # no group
    assert free.limit_bytes == 0 and free.available_bytes > ask.available_bytes
