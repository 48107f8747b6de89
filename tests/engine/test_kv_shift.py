"""Moving a context's KV cells (Engine.shift / Engine.splice, engine_native/src/engine-splice.cpp: llama.cpp's
--cache-reuse) on tiny generated models and the default model.

- The moved keys are the NumPy reference's rotation of the stored keys by the position delta (the model's own RoPE:
  adjacent pairs, a partial rotary count, linear scaling with an attn_factor, YaRN), within the stored type's
  rounding: f32 1e-5, f16 2e-3, q8_0 one quantization step of the row's largest value; values and the kept
  cells bytes unchanged; a new piece read into a gap has the bytes a fresh read gives it.
- A model whose layers add nothing to the residual stream (`script`: a key depends on its token and position only)
  shifted equals a fresh read of the same tokens (f32: 1e-5).
- Logits after a shift against a fresh read on a random tiny model (measured, not exact: the moved cells were
  computed beside the dropped ones) and the default model's greedy answers to code prompts.
- What cannot be moved (multi-head latent attention, windowed layers) is refused by name; bad pieces too.
"""

from __future__ import annotations

import os
import platform
import sys

import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_kv_q8_0 import q8_0_values
from tests.fixtures.reference import ReferenceModel

N = 53   # 4 tiles of 16 positions, the last one partial

# name -> make_tiny_gguf parameters: the rotation's variants the engine supports
ROPES = {
    "plain": {},
    "partial-linear": {"n_rot": 8, "rope_scaling": ("linear", 2.0, 256), "rope_keys": {"rope.scaling.attn_factor": 0.8}},
    "yarn": {"rope_scaling": ("yarn", 4.0, 64)},
}


def _tokens(seed: int, n: int = N) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 500, size=n)]


def kv_arrays(e: Engine, ctx: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """K and V of positions [0, n) as floats: (n_layer, n, n_head_kv, head_dim) each."""
    L, H, D = e.n_layer, e.n_head_kv, e.head_dim
    raw = e.kv_read(ctx, 0, n)
    if e.kv_type == "q8_0":
        b = np.frombuffer(raw, dtype=np.uint8).reshape(L, 2, n, H * D // 32, 34)
        d = b[..., :2].copy().view(np.float16).astype(np.float32)
        q = b[..., 2:].copy().view(np.int8).astype(np.float32)
        x = (q * d).reshape(L, 2, n, H, D)
    else:
        x = np.frombuffer(raw, dtype=np.float32 if e.kv_type == "f32" else np.float16).astype(np.float32)
        x = x.reshape(L, 2, n, H, D)
    return x[:, 0], x[:, 1]


def rotate(ref: ReferenceModel, k: np.ndarray, delta: int) -> np.ndarray:
    """The reference's RoPE of `delta` without its cos / sin scale (attn_factor, YaRN's mscale): a pure
    rotation of the first n_rot dimensions. k: (n_layer, n, n_head_kv, head_dim)."""
    n_rot = ref.config.n_rot
    unit = np.zeros((1, 1, k.shape[-1]))
    unit[..., 0] = 1.0
    mscale = ref._rope(unit, np.zeros(1))[0, 0, 0]
    out = np.stack([ref._rope(k[il].astype(np.float64), np.full(k.shape[1], delta)) for il in range(k.shape[0])])
    out[..., :n_rot] /= mscale
    return out


def tolerance(kv_type: str, k: np.ndarray) -> float:
    scale = float(np.abs(k).max())
    return {"f32": 1e-5, "f16": 2e-3, "q8_0": 1.0 / 127}[kv_type] * scale * (1.0 if kv_type == "q8_0" else 4.0)


@pytest.mark.parametrize("kv_type", ["f32", "f16", "q8_0"])
@pytest.mark.parametrize("rope", list(ROPES))
def test_shift_rotates_the_stored_keys(tiny_model_factory, kv_type, rope):
    path = tiny_model_factory(n_embd=128, n_head=4, n_head_kv=2, **ROPES[rope])   # head size 32 (q8_0's blocks)
    ref = ReferenceModel(path)
    e = Engine(path, n_ctx=128, kv_type=kv_type, n_threads=2)
    t = _tokens(1)
    e.prefill(0, t)
    k0, v0 = kv_arrays(e, 0, N)
    a, b = 10, 25
    e.shift(0, a, b)
    assert e.context_tokens(0) == t[:a] + t[b:]
    assert not e.has_logits(0)
    k1, v1 = kv_arrays(e, 0, N - (b - a))
    assert np.array_equal(k1[:, :a], k0[:, :a]) and np.array_equal(v1[:, :a], v0[:, :a])
    assert np.array_equal(v1[:, a:], v0[:, b:])             # values hold no position
    want = rotate(ref, k0[:, b:], a - b)
    if kv_type == "q8_0":   # requantized: the rotated keys' own q8_0 rows
        flat = want.reshape(*want.shape[:2], e.n_head_kv * e.head_dim)
        want = q8_0_values(flat, True).reshape(want.shape)
    err = np.abs(k1[:, a:] - want).max()
    assert err <= tolerance(kv_type, k0), (err, tolerance(kv_type, k0))
    # the next token reads after the moved cells
    e.prefill(0, [7])
    assert e.context_len(0) == N - (b - a) + 1 and e.has_logits(0)


def test_splice_moves_right_and_reads_the_gaps(tiny_model_factory):
    """A keystroke: new tokens read in front of a moved piece (which moves right), another gap after it, the
    kept start; the read pieces have a fresh read's bytes, the moved piece's keys the rotation of theirs."""
    path = tiny_model_factory(n_embd=128, n_head=4, n_head_kv=2)
    ref = ReferenceModel(path)
    e = Engine(path, n_ctx=128, kv_type="f32", n_threads=2)
    t, x, y = _tokens(2, 40), [5, 6, 7], [8, 9]
    e.prefill(0, t)
    k0, v0 = kv_arrays(e, 0, 40)
    e.splice(0, 10, [x, range(12, 40), y])
    want_tokens = t[:10] + x + t[12:40] + y
    assert e.context_tokens(0) == want_tokens and e.has_logits(0)
    k1, v1 = kv_arrays(e, 0, len(want_tokens))
    assert np.array_equal(v1[:, 13:41], v0[:, 12:40])
    assert np.abs(k1[:, 13:41] - rotate(ref, k0[:, 12:40], 1)).max() <= 1e-5 * np.abs(k0).max() * 4
    fresh = Engine(path, n_ctx=128, kv_type="f32", n_threads=2)
    fresh.prefill(0, t[:10] + x)
    assert fresh.kv_read(0, 10, 13) == e.kv_read(0, 10, 13)   # read where a fresh read reads them
    # the last piece, read, attends to the moved cells: its logits are the context's
    fresh.prefill(0, t[12:40] + y)
    assert np.abs(fresh.logits(0) - e.logits(0)).max() < 0.5 * np.abs(fresh.logits(0)).max()


@pytest.mark.parametrize("kv_type", ["f32", "f16", "q8_0"])
def test_a_model_whose_layers_add_nothing_shifted_equals_a_fresh_read(tiny_model_factory, kv_type):
    """`script` models' layers add nothing to the residual stream: a key is its token's at its position, so the
    moved cells must be what a fresh read stores there (within the type's rounding)."""
    path = tiny_model_factory(n_embd=128, n_head=4, n_head_kv=2, script=(3, 4, 5, 6), n_rot=16,
                              rope_scaling=("linear", 2.0, 256))
    t = _tokens(3)
    e = Engine(path, n_ctx=128, kv_type=kv_type, n_threads=2)
    e.prefill(0, t)
    e.splice(0, 5, [range(20, 30), [11, 12], range(35, N)])
    want = t[:5] + t[20:30] + [11, 12] + t[35:]
    fresh = Engine(path, n_ctx=128, kv_type=kv_type, n_threads=2)
    fresh.prefill(0, want)
    got_k, got_v = kv_arrays(e, 0, len(want))
    want_k, want_v = kv_arrays(fresh, 0, len(want))
    assert np.array_equal(got_v, want_v)
    err = np.abs(got_k - want_k).max()
    assert err <= tolerance(kv_type, want_k), err
    e.prefill(0, [9])
    fresh.prefill(0, [9])
    assert int(np.argmax(e.logits(0))) == int(np.argmax(fresh.logits(0)))


def test_layers_without_rope_keep_their_keys_when_moved(tiny_model_factory):
    """SmolLM3 leaves every fourth layer unrotated (layer_weights.rope false): a moved key there is the stored one,
    byte for byte, and in a `script` model (a key depends on its token and position only) the whole shifted cache
    is a fresh read's; the rotated layers' keys did change."""
    path = tiny_model_factory(arch="smollm3", n_layer=4, n_embd=128, n_head=4, n_head_kv=2, script=(3, 4, 5, 6))
    t = _tokens(4)
    e = Engine(path, n_ctx=128, kv_type="f32", n_threads=2)
    e.prefill(0, t)
    k0, v0 = kv_arrays(e, 0, N)
    e.shift(0, 10, 25)
    k1, _ = kv_arrays(e, 0, N - 15)
    assert np.array_equal(k1[3, 10:], k0[3, 25:])
    assert all(not np.allclose(k1[il, 10:], k0[il, 25:]) for il in range(3))
    fresh = Engine(path, n_ctx=128, kv_type="f32", n_threads=2)
    fresh.prefill(0, t[:10] + t[25:])
    want_k, want_v = kv_arrays(fresh, 0, N - 15)
    got_k, got_v = kv_arrays(e, 0, N - 15)
    assert np.array_equal(got_v, want_v)
    assert np.abs(got_k - want_k).max() <= tolerance("f32", want_k)


def test_logits_after_a_shift_against_a_fresh_read(tiny_model_factory):
    """A random tiny model (f32 KV): A + X + B shifted to A + B, then C read, against A + B + C read fresh. Not
    equal (B's cells were computed beside X): measured 0.09-0.12 of the logits' largest magnitude over these four
    seeds (bound 0.2), where A + X + B + C (X left in) is 0.22-0.45 away. Dropping nothing (b == a) changes no byte."""
    path = tiny_model_factory(n_embd=128, n_head=4, n_head_kv=2, n_layer=2)

    def logits(tokens: list[int], cut: tuple[int, int] | None = None, then: list[int] = ()) -> np.ndarray:
        e = Engine(path, n_ctx=128, kv_type="f32", n_threads=2)
        e.prefill(0, tokens)
        if cut is not None:
            e.shift(0, *cut)
            e.prefill(0, then)
        return e.logits(0)

    for seed in range(4):
        a_, x_, b_, c_ = _tokens(10 + seed, 20), _tokens(20 + seed, 6), _tokens(30 + seed, 30), _tokens(40 + seed, 3)
        want = logits(a_ + b_ + c_)
        scale = np.abs(want).max()
        shifted = np.abs(logits(a_ + x_ + b_, (20, 26), c_) - want).max() / scale
        left_in = np.abs(logits(a_ + x_ + b_ + c_) - want).max() / scale
        assert shifted < 0.2 and shifted < left_in, (seed, shifted, left_in)
    e = Engine(path, n_ctx=128, kv_type="f32", n_threads=2)
    e.prefill(0, a_ + b_)
    before = e.kv_read(0, 0, len(a_ + b_))
    e.shift(0, 20, 20)
    assert e.kv_read(0, 0, len(a_ + b_)) == before


def test_what_cannot_be_moved_is_refused(tiny_model_factory):
    from tests.engine.test_deepseek2 import ds2_model
    from tests.engine.test_gemma3 import gemma_model

    for path, why in ((ds2_model(tiny_model_factory, mla={}), "multi-head latent attention"),
                      (gemma_model(tiny_model_factory), "sliding window")):
        e = Engine(path, n_ctx=64, n_threads=1)
        assert why in e.shift_refusal
        e.prefill(0, [3, 4, 5, 6])
        with pytest.raises(ValueError, match=f"cannot be moved.*|.*{why}"):
            e.shift(0, 1, 2)
        assert e.context_tokens(0) == [3, 4, 5, 6]


def test_bad_pieces_are_refused_by_name(tiny_model_factory):
    e = Engine(tiny_model_factory(), n_ctx=32, n_threads=1)
    assert e.shift_refusal is None
    e.prefill(0, list(range(3, 23)))
    cases = [((0, 25, []), "keep 25 outside context 0's 20 tokens"),
             ((0, 5, [range(2, 8)]), r"moves cells \[2, 8\): they must lie in \[5, 20\)"),
             ((0, 5, [range(10, 15), range(12, 18)]), r"moves cells \[12, 18\): they must lie in \[15, 20\)"),
             ((0, 5, [range(5, 21)]), r"moves cells \[5, 21\)"),
             ((0, 5, [range(5, 20), list(range(3, 16))]), "33 tokens exceed context 0's capacity 32"),
             ((0, 5, [[3, 9999]]), "token id 9999"),
             ((0, 5, [range(8, 8)]), "piece 0 is empty")]
    for args, msg in cases:
        with pytest.raises(ValueError, match=msg):
            e.splice(*args)
        assert e.context_tokens(0) == list(range(3, 23))


def test_huge_negative_and_reversed_ranges_are_refused_with_the_context_unchanged(tiny_model_factory):
    """Review of 3af2ce7: a length that made `src + n` wrap around passed the bounds check (two such pieces: the
    splice dropped the history past `keep` and said nothing; one: 'vector::_M_range_insert'); a shift dropping
    past the end truncated to its start; a range starting at -1 read as the native call's new-token mark ('the new
    pieces' lengths exceed the 0 tokens given'). Each is refused by name, the tokens and the logits kept."""
    e = Engine(tiny_model_factory(), n_ctx=32, n_threads=1)
    t = list(range(3, 23))
    e.prefill(0, t)
    logits = e.logits(0).copy()
    wrap = range(2**62 + 2, 2**63 + 2)   # len 2**62: start + len wraps int64
    cases = [(lambda: e.splice(0, 2, [wrap, wrap]), r"moves cells \[4611686018427387906, 9223372036854775810\)"),
             (lambda: e.splice(0, 2, [range(2, 2**63)]), r"moves cells \[2, 9223372036854775808\): they must lie"),
             (lambda: e.splice(0, 2, [[5] * 31]), "33 tokens exceed context 0's capacity 32"),
             (lambda: e.shift(0, 3, 1000), r"shift: cannot drop \[3, 1000\) of context 0's 20 tokens"),
             (lambda: e.shift(0, 8, 4), r"shift: cannot drop \[8, 4\)"),
             (lambda: e.shift(0, -1, 4), r"shift: cannot drop \[-1, 4\)"),
             (lambda: e.splice(0, 2, [range(-1, 3)]), r"a moved range must start at a position of the history, "
                                                      r"got range\(-1, 3\)"),
             (lambda: e.splice(0, 2, [range(-3, 3)]), "a moved range must start at a position"),
             (lambda: e.splice(0, 2, [range(8, 4)]), "piece 0 is empty")]
    for call, msg in cases:
        with pytest.raises(ValueError, match=msg):
            call()
        assert e.context_tokens(0) == t and e.has_logits(0)
        assert np.array_equal(e.logits(0), logits)
    with pytest.raises(TypeError):
        e.splice(0, 2.5, [])
    assert e.context_tokens(0) == t


# Run in a child with one malloc arena and a fixed mmap threshold, so that RLIMIT_AS refuses the move's scratch
# buffers (one per thread, 371 KiB each here) at some limits and not at others: the move then fails on one thread
# after another has written its heads. Prints what each limit left.
_SPLICE_UNDER_A_MEMORY_LIMIT = """
import json, resource, sys
import numpy as np
from strata.engine import Engine

e = Engine(sys.argv[1], n_ctx=4096, n_threads=2, kv_type="f32")
t = [int(x) for x in np.random.default_rng(0).integers(3, 500, size=3000)]
e.prefill(0, t)
before, before_kept = e.kv_read(0, 0, 3000), e.kv_read(0, 0, 10)
keep, want = 10, t[:10] + t[50:]


def vm_size() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))


seen = []
for kib in range(0, 2400, 100):
    e.truncate(0, 0)
    e.kv_write(0, t, before)
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + kib * 1024, resource.RLIM_INFINITY))
    try:
        e.splice(0, keep, [range(50, 3000)])
        failed = False
    except MemoryError:
        failed = True
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    held = e.context_tokens(0)
    if not failed and held == want:
        seen.append("moved")
    elif held == t and e.kv_read(0, 0, 3000) == before:
        seen.append("unchanged")
    elif held == t[:keep] and e.kv_read(0, 0, keep) == before_kept:
        seen.append("cut")
    else:
        seen.append("inconsistent")
print(json.dumps(seen))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc's malloc tunables and /proc/self/status")
def test_a_splice_that_fails_midway_leaves_the_history_at_keep(tiny_model_factory, tmp_path):
    """Review of 3af2ce7: a failure in the move (a scratch buffer refused on one thread after another had moved its
    heads) left the old history in the context's tokens over partly overwritten cells: a later read took them as
    that history ('inconsistent' at 3 of 24 limits before the fix). Now any failure past the checks leaves
    [0, keep), which no piece writes; a failure in the checks leaves the context unchanged."""
    import json
    import subprocess

    path = tiny_model_factory(n_embd=128, n_head=4, n_head_kv=2)
    script = tmp_path / "splice_under_a_memory_limit.py"
    script.write_text(_SPLICE_UNDER_A_MEMORY_LIMIT)
    env = dict(os.environ, MALLOC_ARENA_MAX="1", MALLOC_MMAP_THRESHOLD_="131072")
    done = subprocess.run([sys.executable, str(script), str(path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "inconsistent" not in seen, seen
    assert "cut" in seen and "moved" in seen, seen     # the limits did fail the move midway, and let it through


def test_the_default_models_greedy_answer_after_a_small_shift(default_model_path):
    """Code (the standard library's, fixed for a Python version): 700 tokens of a file with 12 tokens at 300
    dropped by a shift, then 8 more read, against the same tokens read fresh; 8 greedy tokens each. Measured on
    22 cases (benchmarks/kv_shift_greedy.py: server/*.py, a 12- and a 256-token cut, f16): the first token equal in
    20-22, all 16 in 6-7 (a greedy answer, once one token differs, goes its own way). Here: the first token equal
    in at least 3 of 4 files."""
    import inspect
    import json.decoder
    import shlex
    import string
    import textwrap

    e = Engine(default_model_path, n_ctx=1024, n_threads=2)

    def answer() -> list[int]:
        out = []
        for _ in range(8):
            out.append(int(np.argmax(e.logits(0))))
            e.prefill(0, out[-1:])
        return out

    firsts = []
    for module in (textwrap, shlex, json.decoder, string):
        toks = e.tokenize(inspect.getsource(module), special=False)[:708]
        e.truncate(0, 0)
        e.prefill(0, toks[:700])
        e.shift(0, 300, 312)
        e.prefill(0, toks[700:])
        got = answer()
        e.truncate(0, 0)
        e.prefill(0, toks[:300] + toks[312:])
        want = answer()
        firsts.append(got[0] == want[0])
    assert sum(firsts) >= 3, firsts
