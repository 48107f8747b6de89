"""Choosing the next token from logits: greedy, temperature, top-k, top-p, min-p, penalties, seed.

What it is: `SamplingParams` (frozen, validated; defaults are "off" except the temperature, which
follows the OpenAI APIs' 1.0 only when asked for: the default here is greedy, 0.0) and
`Sampler(params, n_vocab)` whose `.sample(logits, history)` returns one token id. The order is
llama.cpp's default sampler chain (common/sampling.cpp):

    logit bias -> penalties -> top-k -> top-p -> min-p -> temperature -> draw

- logit bias (OpenAI's `logit_bias`): `logit_bias` pairs (token id, bias) add the bias to that token's
  logit (-100 in effect bans a token, +100 forces it), before everything else.
- penalties, over the last `repeat_last_n` tokens of `history` (llama.cpp's `penalty_last_n`,
  default 64; -1 = the whole history): for each distinct token seen c times, a positive logit is
  divided by `repeat_penalty` and a negative one multiplied by it, then
  `c * frequency_penalty + (c > 0) * presence_penalty` is subtracted.
- greedy (temperature == 0): the arg-max after penalties, the lowest id on a tie; no randomness.
- top-k keeps the k largest logits (k <= 0: all); top-p keeps the smallest set of the most
  probable tokens (softmax at temperature 1, as llama.cpp) whose probability reaches p; min-p keeps
  tokens whose probability is at least min_p times the best one's (a tie at the top-k or top-p cut keeps
  the lowest ids, so top_p near 0 keeps greedy's token); then logits are divided by the
  temperature and one token is drawn from their softmax with a NumPy PCG64 generator seeded by
  `seed` (None: fresh OS entropy). The draw cannot match llama.cpp's mt19937 stream, only its law.

A `constraint` (json_constraint.JsonConstraint: JSON answers for `response_format`) limits the tokens a
sample may return; the sampler otherwise works as above. One with `forced_token()` (canonical_split.py)
names the token outright where the answer's text is fixed: no choice is made there.

What it is not: the decode loop (Engine.generate, the server), stop strings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# how many best tokens top-p looks at before falling back to a full sort (exact either way)
_TOP_P_FIRST_LOOK = 256


_DRAW_BLOCK = 256  # the draw sums blocks of this many weights first (a long cumsum is slow in NumPy)


def _draw(weights: np.ndarray, u: float) -> int:
    """The index i with cdf[i-1] <= u * total < cdf[i] over non-negative `weights` (n,), u in [0, 1).

    Two levels (block sums, then one block's running sum) instead of one long cumulative sum.
    """
    n = weights.shape[0]
    pad = (-n) % _DRAW_BLOCK
    w = np.concatenate([weights, np.zeros(pad, weights.dtype)]) if pad else weights
    block_sums = w.reshape(-1, _DRAW_BLOCK).sum(axis=1, dtype=np.float64)  # (n_blocks,)
    block_cdf = np.cumsum(block_sums)
    target = u * block_cdf[-1]
    b = min(int(np.searchsorted(block_cdf, target, side="right")), len(block_cdf) - 1)
    inner = np.cumsum(w[b * _DRAW_BLOCK : (b + 1) * _DRAW_BLOCK], dtype=np.float64)  # (_DRAW_BLOCK,)
    rest = target - (block_cdf[b - 1] if b else 0.0)
    i = b * _DRAW_BLOCK + min(int(np.searchsorted(inner, rest, side="right")), _DRAW_BLOCK - 1)
    if i >= n or weights[i] <= 0:  # rounding at the very end of the range: the last token with weight
        i = int(np.flatnonzero(weights[: min(i, n - 1) + 1])[-1]) if weights[: min(i, n - 1) + 1].any() \
            else int(np.flatnonzero(weights)[0])
    return i


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # <= 0: off
    top_p: float = 1.0  # 1.0: off
    min_p: float = 0.0  # 0.0: off
    repeat_penalty: float = 1.0  # 1.0: off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64  # tokens of history the penalties look at; -1 = all, 0 = none
    seed: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit); ids < n_vocab

    def __post_init__(self) -> None:
        def number(name: str) -> float:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"sampling: {name} must be a finite number, got {value!r}")
            return float(value)

        def integer(name: str) -> int:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"sampling: {name} must be an integer, got {value!r}")
            return int(value)

        if number("temperature") < 0:
            raise ValueError(f"sampling: temperature must be >= 0, got {self.temperature!r}")
        integer("top_k")
        if not 0.0 < number("top_p") <= 1.0:
            raise ValueError(f"sampling: top_p must be in (0, 1], got {self.top_p!r}")
        if not 0.0 <= number("min_p") <= 1.0:
            raise ValueError(f"sampling: min_p must be in [0, 1], got {self.min_p!r}")
        if number("repeat_penalty") <= 0:
            raise ValueError(f"sampling: repeat_penalty must be > 0, got {self.repeat_penalty!r}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= number(name) <= 2.0:
                raise ValueError(f"sampling: {name} must be in [-2, 2], got {getattr(self, name)!r}")
        if integer("repeat_last_n") < -1:
            raise ValueError(f"sampling: repeat_last_n must be >= -1, got {self.repeat_last_n!r}")
        if self.seed is not None and (integer("seed") < 0):
            raise ValueError(f"sampling: seed must be a non-negative integer or None, got {self.seed!r}")
        for pair in self.logit_bias:
            ok = isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], int | np.integer) \
                and pair[0] >= 0 and isinstance(pair[1], int | float) and math.isfinite(pair[1])
            if not ok or isinstance(pair[0], bool):
                raise ValueError(f"sampling: logit_bias must hold (token id >= 0, finite bias) pairs, got {pair!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
        )


class Sampler:
    """Draws tokens for one sequence. Not thread-safe (it owns a random generator)."""

    def __init__(self, params: SamplingParams | None = None, n_vocab: int | None = None, constraint: Any = None):
        self.params = params if params is not None else SamplingParams()
        if not isinstance(self.params, SamplingParams):
            raise TypeError(f"Sampler needs SamplingParams, got {type(self.params).__name__}")
        if n_vocab is not None and (not isinstance(n_vocab, int) or n_vocab <= 0):
            raise ValueError(f"sampling: n_vocab must be a positive integer, got {n_vocab!r}")
        bad = [t for t, _ in self.params.logit_bias if n_vocab is not None and t >= n_vocab]
        if bad:
            raise ValueError(f"sampling: logit_bias names token {bad[0]}, outside the vocabulary of {n_vocab}")
        self._bias_ids = np.array([t for t, _ in self.params.logit_bias], dtype=np.int64)
        self._bias = np.array([b for _, b in self.params.logit_bias], dtype=np.float32)
        self.n_vocab = n_vocab
        self._rng_made: np.random.Generator | None = None
        # what may come next (json_constraint.JsonConstraint: allows / advance / best_allowed / allowed_mask)
        self.constraint = constraint
        self.refusals = 0      # first choices the constraint refused (the server's /metrics)

    @property
    def _rng(self) -> np.random.Generator:
        """Made at the first draw (seeding costs ~10 us; a greedy request never draws): the same stream."""
        if self._rng_made is None:
            self._rng_made = np.random.Generator(np.random.PCG64(self.params.seed))
        return self._rng_made

    def _check(self, logits: np.ndarray) -> np.ndarray:
        logits = np.asarray(logits)
        if logits.ndim != 1:
            raise ValueError(f"sampling: logits must be one row (n_vocab,), got shape {logits.shape}")
        if self.n_vocab is not None and logits.shape[0] != self.n_vocab:
            raise ValueError(f"sampling: logits have {logits.shape[0]} entries, the vocabulary {self.n_vocab}")
        if logits.shape[0] == 0:
            raise ValueError("sampling: empty logits")
        return logits

    def apply_penalties(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """A penalized copy of `logits` (float32), as llama.cpp's penalties sampler computes it."""
        p = self.params
        out = np.array(logits, dtype=np.float32, copy=True)
        window = history if p.repeat_last_n == -1 else history[-p.repeat_last_n :] if p.repeat_last_n else ()
        if len(window) == 0:
            return out
        ids, counts = np.unique(np.asarray(window, dtype=np.int64), return_counts=True)
        ok = (ids >= 0) & (ids < out.shape[0])
        ids, counts = ids[ok], counts[ok].astype(np.float32)
        vals = out[ids]
        if p.repeat_penalty != 1.0:
            vals = np.where(vals <= 0, vals * p.repeat_penalty, vals / p.repeat_penalty)
        vals = vals - counts * p.frequency_penalty - p.presence_penalty
        out[ids] = vals
        return out

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """One token id from a (n_vocab,) row of logits; `history` is the sequence so far (for penalties).
        With a constraint, a token it does not allow is never returned: the sampler's choice is checked
        first (nearly always allowed), and only when it is not are the other tokens looked at (greedy:
        the best allowed one; else a draw over the allowed ones), so the law is p given "allowed"."""
        logits = self._check(logits)
        c = self.constraint
        forced = c.forced_token() if c is not None and hasattr(c, "forced_token") else None
        if forced is not None:          # text the answer must write, in the tokenizer's split (canonical_split.py)
            c.advance(forced)
            return forced
        prepared = self._prepare(logits, history)
        token = self._choose(prepared)
        if c is not None:
            # asked even while it waits for its trigger: a token may write the marker and more
            if not c.allows(token):
                self.refusals += 1
                best = c.best_allowed(prepared) if self.params.greedy else self._redraw(prepared, token)
                if best is None:
                    raise ValueError("sampling: no token can continue the constrained answer")
                token = best
            if hasattr(c, "resplit"):
                token = c.resplit(token)
            c.advance(token)
        return token

    def _redraw(self, prepared: np.ndarray, refused: int, tries: int = 4) -> int | None:
        """A draw among the tokens the constraint allows, `refused` not among them: the refused ones
        banned and the draw repeated (cheap: a refusal is rare where most tokens are allowed), then,
        after `tries`, one draw over the constraint's whole mask (a scan of the vocabulary)."""
        c = self.constraint
        masked = np.array(prepared, dtype=np.float32, copy=True)
        masked[refused] = -np.inf
        for _ in range(tries):
            if not np.isfinite(masked.max()):
                return None
            token = self._choose(masked)
            if c.allows(token):
                return token
            masked[token] = -np.inf
        masked = np.where(c.allowed_mask(), masked, np.float32(-np.inf)).astype(np.float32)
        return self._choose(masked) if np.isfinite(masked.max()) else None

    def _prepare(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        """The logits after the logit bias and the penalties."""
        p = self.params
        if p.logit_bias:
            logits = np.array(logits, dtype=np.float32, copy=True)
            np.add.at(logits, self._bias_ids, self._bias)     # a token named twice gets both biases
        if p.has_penalties:
            logits = self.apply_penalties(logits, history)
        return logits

    def _choose(self, logits: np.ndarray) -> int:
        """Greedy arg-max, or top-k / top-p / min-p / temperature and a draw."""
        p = self.params
        if p.greedy:
            best = int(np.argmax(logits))
            if not logits[best] == logits[best]:  # argmax stops at the first NaN
                raise ValueError(f"sampling: logits contain NaN (at token {best})")
            return best
        logits = np.asarray(logits, dtype=np.float32)
        ids = self._candidates(logits)  # None: every token
        kept = logits if ids is None else logits[ids]
        with np.errstate(over="ignore", invalid="ignore"):   # a temperature near 0: the overflow is handled below
            chosen = kept * np.float32(1.0 / p.temperature)
        top = chosen.max()
        if not np.isfinite(top):
            if not np.isfinite(kept.max()):
                raise ValueError(f"sampling: logits have no finite maximum ({kept.max()}): NaN, +inf or all -inf")
            # a temperature so near 0 (5e-324 is a valid one) that logit / temperature overflowed: its law is the
            # arg-max's (the lowest id on a tie, as greedy); the draw was a 500 that failed the scheduler's step.
            # Kept ids come in no id order (a partition's, top-p's sort): the tie's lowest id, not its first
            return int(np.argmax(kept)) if ids is None else int(ids[kept == kept.max()].min())
        weights = np.exp(chosen - top)  # float32: exact enough for a draw, 10x cheaper
        i = _draw(weights, self._rng.random())
        return i if ids is None else int(ids[i])

    def _candidates(self, logits: np.ndarray) -> np.ndarray | None:
        """Ids that survive top-k, top-p and min-p (never empty), or None when every token does."""
        p = self.params
        n = logits.shape[0]
        ids = None
        if 0 < p.top_k < n:
            ids = _top_k(logits, p.top_k)
        if p.top_p < 1.0:
            ids = self._top_p(logits, ids)
        if p.min_p > 0.0:
            pool = logits if ids is None else logits[ids]
            keep = pool >= pool.max() + math.log(p.min_p)
            ids = np.flatnonzero(keep) if ids is None else ids[keep]
        return ids

    def _top_p(self, logits: np.ndarray, ids: np.ndarray | None) -> np.ndarray:
        """The most probable ids (softmax over the pool) whose mass first reaches top_p, best first."""
        pool = logits if ids is None else logits[ids]  # float32
        top = pool.max()
        total = np.exp(pool - top).sum(dtype=np.float64)
        look = min(len(pool), _TOP_P_FIRST_LOOK)
        while True:
            order = np.argpartition(-pool, look - 1)[:look] if look < len(pool) else np.arange(len(pool))
            order = order[np.argsort(-pool[order])]  # quicksort: 7x faster than stable; ties are equiprobable
            cum = np.cumsum(np.exp(pool[order] - top), dtype=np.float64) / total
            if cum[-1] >= self.params.top_p or look == len(pool):
                cut = min(int(np.searchsorted(cum, self.params.top_p)) + 1, len(order))  # include the crossing token
                edge = pool[order[cut - 1]]
                # a tie crosses the cut where the next best equals the edge (`order` is the best `look`, sorted: the
                # next is known, but past a first look's end); only then is the pool read again (O(1) otherwise)
                crosses = edge == pool[order[cut]] if cut < len(order) else look < len(pool)
                order = _lowest_ids_at_cut(pool, order[:cut], edge, ids) if crosses else order[:cut]
                return order if ids is None else ids[order]
            look = len(pool)  # the best few were not enough: sort them all (exact either way)


def _top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest logits (0 < k < n), in no order; a tie at the cut keeps its lowest ids."""
    part = np.argpartition(-logits, k)[: k + 1]   # k + 1: the one just below the cut says whether a tie crosses it
    kept = part[:k]
    edge = logits[kept].min()
    if not edge <= logits[part[k]]:   # below the cut is lower (the common case: O(k)), or NaN, left for the draw
        return kept
    return _lowest_ids_at_cut(logits, kept, edge, None)


def _lowest_ids_at_cut(pool: np.ndarray, kept: np.ndarray, edge: np.floating, ids: np.ndarray | None) -> np.ndarray:
    """`kept` (indices into `pool`, the logits of `ids`, None: every id; the best of the pool, `edge` the lowest
    logit among them, tied with one left out) with its members at `edge` swapped for the pool's of the lowest
    token ids at that logit, the others' order kept (top-p's best first). A partition or a quicksort leaves a tie
    at the cut in any order, so top-p 0 (one token kept) picked any of a tie where greedy picks the lowest id.
    One O(n) scan, done only where a tie crosses the cut (the set kept is otherwise the same)."""
    above = kept[pool[kept] > edge]
    tied = np.flatnonzero(pool == edge)
    if ids is not None:
        tied = tied[np.argsort(ids[tied], kind="stable")]
    return np.concatenate([above, tied[: len(kept) - len(above)]])


def token_logprobs(logits: np.ndarray, token: int, top: int) -> tuple[int, float, list[tuple[int, float]]]:
    """(token, its log-probability under the model's distribution (the softmax of the raw logits, before
    temperature or any penalty), the `top` likeliest tokens with theirs, likeliest first): what the APIs'
    `logprobs` report."""
    x = np.asarray(logits, dtype=np.float64)
    m = float(np.max(x))
    lse = m + float(np.log(np.exp(x - m).sum()))
    alts: list[tuple[int, float]] = []
    if top > 0:
        idx = np.argpartition(-x, min(top, x.shape[0]) - 1)[:top]
        idx = idx[np.lexsort((idx, -x[idx]))]
        alts = [(int(i), float(x[i] - lse)) for i in idx]
    return int(token), float(x[int(token)] - lse), alts
