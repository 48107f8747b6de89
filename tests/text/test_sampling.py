"""Sampler: validation, greedy, llama.cpp's penalties, top-k/top-p/min-p sets, seeded draws."""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine.sampling import Sampler, SamplingParams


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1), ("temperature", float("nan")), ("temperature", "hot"),
        ("top_k", 1.5), ("top_p", 0.0), ("top_p", 1.01), ("min_p", -0.1), ("min_p", 2.0),
        ("repeat_penalty", 0.0), ("presence_penalty", 2.5), ("frequency_penalty", -3.0),
        ("repeat_last_n", -2), ("seed", -1), ("seed", 1.5), ("top_k", True),
    ],
)
def test_bad_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"sampling: {field}"):
        SamplingParams(**{field: value})


def test_params_are_frozen():
    with pytest.raises(AttributeError):
        SamplingParams().temperature = 1.0  # type: ignore[misc]


def test_logits_shape_is_checked():
    s = Sampler(SamplingParams(), n_vocab=8)
    with pytest.raises(ValueError, match="logits have 7 entries, the vocabulary 8"):
        s.sample(np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="one row"):
        s.sample(np.zeros((2, 8), np.float32))
    with pytest.raises(ValueError, match="n_vocab"):
        Sampler(SamplingParams(), n_vocab=0)


def test_greedy_is_argmax_and_lowest_id_on_tie():
    s = Sampler(SamplingParams(temperature=0.0))
    logits = np.array([0.1, 3.0, -1.0, 3.0], np.float32)
    assert [s.sample(logits) for _ in range(5)] == [1] * 5


def test_greedy_on_full_vocab_is_deterministic():
    logits = np.random.default_rng(3).standard_normal(49152).astype(np.float32)
    a = Sampler(SamplingParams(), 49152)
    b = Sampler(SamplingParams(), 49152)
    assert a.sample(logits, [5, 6]) == b.sample(logits, [5, 6]) == int(np.argmax(logits))


def llamacpp_penalties(logits, history, last_n, repeat, freq, presence):
    """llama.cpp's llama_sampler_penalties_apply, written out token by token."""
    out = [float(x) for x in logits]
    window = history[-last_n:] if last_n > 0 else list(history)
    counts = {}
    for t in window:
        counts[t] = counts.get(t, 0) + 1
    for t, c in counts.items():
        if out[t] <= 0:
            out[t] *= repeat
        else:
            out[t] /= repeat
        out[t] -= c * freq + (1 if c > 0 else 0) * presence
    return np.array(out, np.float32)


def test_penalties_match_llamacpp_formula():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(50).astype(np.float32) * 2
    history = [int(x) for x in rng.integers(0, 50, 200)]
    params = SamplingParams(repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.5, repeat_last_n=64)
    got = Sampler(params).apply_penalties(logits, history)
    want = llamacpp_penalties(logits, history, 64, 1.3, 0.2, 0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # tokens outside the window are untouched
    outside = set(range(50)) - set(history[-64:])
    assert all(got[t] == logits[t] for t in outside)


def test_penalties_window_all_and_none():
    logits = np.array([1.0, 2.0, -1.0], np.float32)
    hist = [2, 0, 0, 0]
    whole = Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=-1)).apply_penalties(logits, hist)
    np.testing.assert_allclose(whole, [0.5, 2.0, -2.0])
    last1 = Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=1)).apply_penalties(logits, hist)
    np.testing.assert_allclose(last1, [0.5, 2.0, -1.0])
    none = Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=0))
    assert none.sample(logits, hist) == 1 and not none.params.has_penalties


def test_penalty_changes_the_greedy_choice():
    logits = np.array([2.0, 1.9, 0.0], np.float32)
    assert Sampler(SamplingParams()).sample(logits, [0, 0]) == 0
    assert Sampler(SamplingParams(repeat_penalty=1.2)).sample(logits, [0, 0]) == 1
    assert Sampler(SamplingParams(frequency_penalty=0.1)).sample(logits, [0, 0]) == 1
    assert Sampler(SamplingParams(presence_penalty=0.05)).sample(logits, [0, 0, 0]) == 0


def candidates(params, logits):
    ids = Sampler(params)._candidates(np.asarray(logits, np.float32))
    return None if ids is None else sorted(int(i) for i in ids)


def test_candidate_sets():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
    assert candidates(SamplingParams(temperature=1, top_k=2), logits) == [0, 1]
    assert candidates(SamplingParams(temperature=1), logits) is None  # every token
    # top-p: include the token that crosses p (0.5 + 0.2 = 0.7 < 0.75 -> + 0.15)
    assert candidates(SamplingParams(temperature=1, top_p=0.75), logits) == [0, 1, 2]
    assert candidates(SamplingParams(temperature=1, top_p=0.7), logits) == [0, 1]
    assert candidates(SamplingParams(temperature=1, top_p=0.1), logits) == [0]
    # min-p relative to the best: 0.29 * 0.5 = 0.145 keeps 0.15, drops 0.1
    assert candidates(SamplingParams(temperature=1, min_p=0.29), logits) == [0, 1, 2]
    # chain order: top-k 4 then top-p renormalised over the 4 (0.5/0.95 + 0.2/0.95 = 0.737 < 0.74)
    assert candidates(SamplingParams(temperature=1, top_k=4, top_p=0.74), logits) == [0, 1, 2]


def test_top_p_first_look_and_full_sort_agree():
    rng = np.random.default_rng(1)
    flat = rng.standard_normal(5000) * 0.1  # needs far more than the first 256 candidates
    peaked = rng.standard_normal(5000) * 8
    for logits in (flat, peaked):
        got = candidates(SamplingParams(temperature=1, top_p=0.9), logits)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        cut = int(np.searchsorted(np.cumsum(p[order]), 0.9)) + 1
        assert got == sorted(order[:cut].tolist())


def test_seeded_draws_repeat_and_differ_by_seed():
    logits = np.random.default_rng(2).standard_normal(1000).astype(np.float32)

    def seq(seed):
        s = Sampler(SamplingParams(temperature=1.0, seed=seed))
        return [s.sample(logits) for _ in range(30)]

    assert seq(7) == seq(7)
    assert seq(7) != seq(8)


def test_draws_follow_the_softmax_law():
    probs = np.array([0.6, 0.3, 0.1])
    s = Sampler(SamplingParams(temperature=1.0, seed=123))
    n = 6000
    counts = np.bincount([s.sample(np.log(probs)) for _ in range(n)], minlength=3)
    # 5 standard deviations of a binomial: fails only if the law is wrong
    sd = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) < 5 * sd), counts


def test_temperature_sharpens():
    logits = np.log(np.array([0.6, 0.4]))
    s = Sampler(SamplingParams(temperature=0.05, seed=0))
    assert sum(s.sample(logits) == 0 for _ in range(200)) >= 199


def test_sampled_ids_stay_in_the_candidate_set():
    logits = np.random.default_rng(4).standard_normal(2000).astype(np.float32)
    params = SamplingParams(temperature=1.5, top_k=10, top_p=0.9, min_p=0.05, seed=9)
    allowed = set(candidates(params, logits))
    s = Sampler(params)
    assert {s.sample(logits) for _ in range(300)} <= allowed


def test_two_level_draw_equals_one_cumulative_sum():
    from strata.engine.sampling import _draw

    rng = np.random.default_rng(5)
    weights = rng.random(1000).astype(np.float32)
    weights[rng.random(1000) < 0.3] = 0.0
    weights[256:512] = 0.0  # a whole empty block
    cdf = np.cumsum(weights, dtype=np.float64)
    for u in rng.random(500):
        want = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
        got = _draw(weights, float(u))
        # equal, up to float rounding at a boundary between two tokens
        assert got == want or abs(cdf[min(got, want)] - u * cdf[-1]) < 1e-3
        assert weights[got] > 0


def test_nan_and_infinite_logits_are_clear_errors():
    bad = np.array([0.0, np.nan, 1.0], np.float32)
    with pytest.raises(ValueError, match="NaN"):
        Sampler(SamplingParams()).sample(bad)
    with pytest.raises(ValueError, match="no finite maximum"):
        Sampler(SamplingParams(temperature=1.0, seed=0)).sample(np.array([-np.inf, -np.inf], np.float32))
    # masked tokens (-inf) are simply never drawn
    masked = np.array([-np.inf, 0.0, -np.inf, 0.5], np.float32)
    s = Sampler(SamplingParams(temperature=1.0, seed=0))
    assert {s.sample(masked) for _ in range(100)} <= {1, 3}


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-40])
def test_a_temperature_near_zero_draws_the_arg_max(temperature):
    """logit / temperature overflowed to inf and the draw raised 'no finite maximum': a 500 that failed the
    scheduler's step (found by generated bodies, tests/server/body_fuzz.py: /completion temperature 5e-324)."""
    logits = np.array([0.0, 2.5, -1.0, 2.0], np.float32)
    for top_k in (0, 2):
        s = Sampler(SamplingParams(temperature=temperature, top_k=top_k, seed=0))
        assert {s.sample(logits) for _ in range(20)} == {1}


@pytest.mark.parametrize("kept", [dict(top_k=40), dict(top_p=0.5), dict(top_k=40, top_p=0.9)])
def test_a_temperature_near_zero_on_a_tie_picks_greedys_token(kept):
    """That arg-max is greedy's, the lowest id of a tie at the top, with top-k or top-p too: it took the first of
    the tie in the kept ids' order (a partition's, a quicksort's), another id for half of these rows."""
    for seed in range(10):
        rng = np.random.default_rng(seed)
        logits = rng.standard_normal(5000).astype(np.float32)
        logits[rng.choice(5000, 3, replace=False)] = logits.max() + 1
        greedy = Sampler(SamplingParams()).sample(logits)
        assert Sampler(SamplingParams(temperature=1e-40, seed=1, **kept)).sample(logits) == greedy, seed


def test_logit_bias_comes_first_and_bans_or_forces():
    logits = np.array([0.0, 5.0, 1.0, 4.9], np.float32)
    assert Sampler(SamplingParams(), n_vocab=4).sample(logits) == 1
    assert Sampler(SamplingParams(logit_bias=((1, -100.0),)), n_vocab=4).sample(logits) == 3
    assert Sampler(SamplingParams(logit_bias=((0, 100.0),)), n_vocab=4).sample(logits) == 0
    # before the penalties: a repeat penalty divides the biased logit (llama.cpp's order)
    s = Sampler(SamplingParams(repeat_penalty=2.0, logit_bias=((3, 4.0),)), n_vocab=4)
    assert s.sample(logits, history=[3]) == 1          # (4.9 + 4) / 2 = 4.45 < 5
    hot = Sampler(SamplingParams(temperature=1.0, seed=3, logit_bias=((2, -100.0),)), n_vocab=4)
    assert 2 not in {hot.sample(logits) for _ in range(200)}
    assert np.array_equal(logits, np.array([0.0, 5.0, 1.0, 4.9], np.float32))   # the caller's are untouched


@pytest.mark.parametrize("bias", [((1, float("nan")),), ((-1, 1.0),), ((True, 1.0),), (("1", 1.0),), ((1,),)])
def test_bad_logit_bias_is_refused(bias):
    with pytest.raises(ValueError, match="sampling: logit_bias"):
        SamplingParams(logit_bias=bias)
    with pytest.raises(ValueError, match="logit_bias names token 9, outside the vocabulary of 4"):
        Sampler(SamplingParams(logit_bias=((9, 1.0),)), n_vocab=4)


@pytest.mark.parametrize("n_vocab", [4, 5000, 49152])
@pytest.mark.parametrize("top_k", [0, 2, 40])
def test_top_p_zero_picks_what_greedy_picks_on_a_tie(n_vocab, top_k):
    """top_p 0 (the server asks for the smallest nucleus, 1e-9) must be greedy: the lowest id of a tie at the top.
    A quicksort of the pool (or top-k's partition) left the tie in any order, and the nucleus of one kept any
    of them: on 5,000 logits with a three-way tie at ids 165 / 908 / 2726 it drew 2726 every time, greedy 165."""
    rng = np.random.default_rng(n_vocab + top_k)
    for _ in range(5):
        logits = rng.standard_normal(n_vocab).astype(np.float32)
        tied = rng.choice(n_vocab, 3, replace=False)
        logits[tied] = logits.max() + 1
        greedy = Sampler(SamplingParams(temperature=0.0)).sample(logits)
        assert greedy == tied.min()
        s = Sampler(SamplingParams(temperature=1.0, top_p=1e-9, top_k=top_k, seed=1))
        assert {s.sample(logits) for _ in range(3)} == {greedy}


def test_a_tie_at_the_top_p_or_top_k_cut_keeps_the_lowest_ids():
    """Ties below the cut are kept whole or by lowest id first; the set is the one a stable sort would keep."""
    logits = np.full(600, -5.0, np.float32)
    logits[[590, 7, 300]] = 2.0          # three equal best; p ~ 0.28 each
    assert candidates(SamplingParams(temperature=1, top_p=0.1), logits) == [7]
    assert candidates(SamplingParams(temperature=1, top_p=0.3), logits) == [7, 300]
    assert candidates(SamplingParams(temperature=1, top_k=2), logits) == [7, 300]
    assert candidates(SamplingParams(temperature=1, top_k=4), logits) == [0, 7, 300, 590]


def _stable_candidates(logits: np.ndarray, top_k: int, top_p: float) -> list[int]:
    """The set a stable sort keeps (best logit first, the lower id first on a tie): what the sampler must keep."""
    order = np.lexsort((np.arange(len(logits)), -logits))
    if 0 < top_k < len(logits):
        order = order[:top_k]
    if top_p < 1.0:
        pool = logits[order]
        cum = np.cumsum(np.exp(pool - pool.max()), dtype=np.float64) / np.exp(pool - pool.max()).sum(dtype=np.float64)
        order = order[: int(np.searchsorted(cum, top_p)) + 1]
    return sorted(int(i) for i in order)


@pytest.mark.parametrize("seed", range(6))
def test_every_tie_at_a_cut_keeps_what_a_stable_sort_keeps(seed):
    """Logits of few values (ties everywhere, some wider than top-p's first look of 256 best), every top-k / top-p
    cut: the set kept is the stable sort's, whether the tie crosses the cut or not, with top-k before top-p too."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice([7, 600, 5000]))
    logits = rng.integers(-4, 3, n).astype(np.float32) * np.float32(rng.choice([0.5, 3.0]))
    for top_k in (0, 1, 2, 5, 40, 300):
        for top_p in (1e-9, 0.05, 0.3, 0.6, 0.9, 1.0):
            want = _stable_candidates(logits, top_k, top_p)
            got = candidates(SamplingParams(temperature=1, top_k=top_k, top_p=top_p), logits)
            assert got == want or (got is None and want == list(range(n))), (n, top_k, top_p)


def test_a_tie_running_past_top_ps_first_look_keeps_the_lowest_ids():
    """top-p sorts the best 256 first; a cut at the 256th of a wider tie cannot see the rest of it there."""
    logits = np.full(600, -20.0, np.float32)
    tied = np.random.default_rng(2).permutation(600)[:300]
    logits[tied] = 0.0
    assert candidates(SamplingParams(temperature=1, top_p=255.5 / 300), logits) == sorted(tied)[:256]


class _FullPasses(np.ndarray):
    """A logits row that counts the NumPy operations reading all of it (a negation, a comparison, a max, ...)."""
    count = 0

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(isinstance(x, _FullPasses) and x.size > 1000 for x in inputs):
            _FullPasses.count += 1
        return getattr(ufunc, method)(*(x.view(np.ndarray) if isinstance(x, _FullPasses) else x for x in inputs),
                                      **kwargs)


@pytest.mark.parametrize("params", [dict(top_k=40), dict(top_p=1e-9)])
def test_the_tie_check_reads_the_vocabulary_only_where_a_tie_crosses_the_cut(params):
    """The lowest ids on a tie must not slow every sample: top-k and top-p find whether a tie crosses their cut
    from the token just below it (O(k) / O(1)), and only then scan the vocabulary for the tie's lowest ids.
    db23805 scanned it on every sample: top-k 40 went 187 -> 209 us a sample on 49,152 logits, llama.cpp's
    chain (top-k 40, top-p 0.95, min-p 0.05) 268 -> 313 us."""
    rng = np.random.default_rng(1)
    plain = rng.standard_normal(49152).astype(np.float32)
    tied = plain.copy()
    if "top_k" in params:
        tied[np.argsort(-plain)[39:41]] = plain[np.argsort(-plain)[39]]   # the 40th and 41st equal: across the cut
    else:
        tied[[900, 30, 7000]] = plain.max() + 1                         # three best equal: top-p 0 keeps one of them
    passes = {}
    for name, row in (("plain", plain), ("tied", tied)):
        _FullPasses.count = 0
        Sampler(SamplingParams(temperature=1, **params))._candidates(row.view(_FullPasses))
        passes[name] = _FullPasses.count
    assert passes["plain"] < passes["tied"], passes
