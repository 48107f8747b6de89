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
    assert "40.0 GiB of memory is available: lower --ctx, --slot-ctx or --batch or --kv-type q8_0" in v.error
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
