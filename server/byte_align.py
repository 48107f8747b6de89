"""Byte alignment: a prompt that goes on as the same bytes as a context's history in other tokens reuses the
history's own tokens for those bytes.

A client sends the model's last answer back as text; the server renders and tokenizes the prompt canonically,
but the model had written that answer as other tokens for the same bytes (it split a word otherwise than the
tokenizer does; a tool call's ' ' + '">' against the tokenizer's ' "' + '>'; the answer's first characters
joined the template's last token, 'assistant\\n' + '\\n<read_file>' reading '\\n\\n'). The prompt then shares
only the tokens before that split with the history, and everything after it was read again: a Cline trial
parted so on 9 of 14 turns, session 34's long agent trial re-read 21-82 tokens on 4 turns past 16K.

`walk` follows both token lists past their common prefix, byte by byte, and returns the furthest point where
both have consumed exactly the same bytes; `aligned_prompt` picks the context whose history then holds the most
of the prompt and returns history[:j] + prompt[m:] (the same bytes; nothing is tokenized again).

Where it applies: the scheduler aligns each request's prompt once, as it arrives on the worker thread and
before any context is chosen, against the engine's contexts (main and the slots) and the conversation cache's
entries sharing the most tokens with it (their token lists taken under the cache's lock, walked outside it):
placement, the main / slot match, parking, the conversation cache's lookup, lookup decoding and the ledger of
histories then all see the aligned tokens. The cache's entries are needed because a history keeps the model's
tokens from the conversation's first split on: a parked one matched its next turn only up to that split, and the
restore read everything after it again (session 35's soak: 244 of 827 tokens). Past the walk's bounds the model may
read a conversation's next turn in other tokens warm (its own) than cold (the tokenizer's, with nothing held), and
answer it otherwise. Not for code
completions (their contexts' KV is moved into place by --cache-reuse, approximate past a point).

Tokens parsed whole in text (specials such as <|im_end|>, a vocabulary's user-defined tokens) align only with
themselves: the tokenizer's token_bytes renders a special as its text, so a <|im_end|> against the literal text
"<|im_end|>" read as plain tokens would otherwise compare equal, and the model reads them differently.

Pure: no engine, no I/O. A request's walks compare a bounded number of bytes token by token (ALIGN_MAX_BYTES,
ALIGN_MAX_TOTAL; runs of the same token ids are skipped at list-compare speed and not counted), so a long history
costs the scheduler's thread little.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

# The walk's bounds, in bytes compared token by token (runs of the same ids are skipped at list speed and not
# counted); where one is reached the walk stops, keeping where it was last in step. A history keeps the model's
# tokens, so every later turn walks again through each split of the conversation so far: an answer's splits are a
# few tokens here and there (5-10 bytes each), and a history of thousands of them must stay aligned. So the first
# bound is on one stretch in which the two never hold the same token (a word split otherwise: a few bytes; a text
# split otherwise all through: the cost) and the second on all of a request's walks together, the contexts'
# histories included: a request walked 5 histories of a text split otherwise all through in 4-17 ms (8 KB) on the
# shared 2-core VM at load 4.6-5.3, an agent's turn (a 160-token answer with 3 splits) in 0.4 ms
# (benchmarks/align_walk_cost.py; RESULTS.md, session 35). Once a conversation's splits are past the bound in all, each turn is aligned up to where it stopped
# and reads the rest as tokenized; its history then holds the tokenizer's tokens from there, so the next turn's walk
# stops at the same place and reads from the last answer's first split on again, as before session 35
ALIGN_MAX_BYTES = 4096        # in one stretch out of step
ALIGN_MAX_TOTAL = 8192        # in all a request's walks
_RUN = 64          # tokens a list compare skips at once while both sides are in step on the same ids


@dataclass(frozen=True)
class Alignment:
    """Where a walk ended. history[:history_at] and prompt[:prompt_at] are the same bytes (history_at >= the
    common prefix). `covered`: every byte of the history past the common prefix is a start of the prompt's
    bytes past it (the history ends inside the prompt, at a token boundary of the prompt or not). `compared`: the
    bytes compared token by token (what the bound counts)."""

    history_at: int
    prompt_at: int
    covered: bool
    compared: int = 0


def _same_run(a: Sequence[int], i: int, b: Sequence[int], k: int) -> int:
    """How many tokens a[i:] and b[k:] share from their start (compared _RUN at a time)."""
    limit = min(len(a) - i, len(b) - k)
    if limit <= 0 or a[i] != b[k]:       # the walk's usual case past a split: no slices made
        return 0
    n = 0
    while n + _RUN <= limit and a[i + n: i + n + _RUN] == b[k + n: k + n + _RUN]:
        n += _RUN
    while n < limit and a[i + n] == b[k + n]:
        n += 1
    return n


def walk(history: Sequence[int], prompt: Sequence[int], held: int, token_bytes: Callable[[int], bytes],
         atoms: Collection[int] = frozenset(), max_bytes: int = ALIGN_MAX_BYTES,
         max_total: int = ALIGN_MAX_TOTAL) -> Alignment:
    """Walks `history` and `prompt` past `held` (their common prefix) and returns the furthest point where both
    have consumed the same bytes, every byte equal so far. `atoms`: token ids that match only themselves (tokens
    parsed whole in text). Stops at the first differing byte, at an atom against anything else, at either end,
    once `max_bytes` bytes were compared token by token since both last held the same token, or `max_total` in
    all."""
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
    if max_total < 0:
        raise ValueError(f"max_total must be >= 0, got {max_total!r}")
    if not 0 <= held <= min(len(history), len(prompt)):
        raise ValueError(f"held {held!r} is outside the common range of {len(history)} and {len(prompt)} tokens")
    i = k = held                 # the next token of each side
    best = (held, held)
    ahead_h = ahead_p = b""      # bytes one side has consumed past the other (one of the two is empty)
    compared = 0
    since = 0                    # bytes compared since both last held the same token
    while True:
        if not ahead_h and not ahead_p:          # in step: a point both sides reached with the same bytes
            run = _same_run(history, i, prompt, k)
            if run:
                i, k, since = i + run, k + run, 0
            best = (i, k)
            if i == len(history) or k == len(prompt):
                return Alignment(i, k, i == len(history), compared)
            th, tp = history[i], prompt[k]
            if th in atoms or tp in atoms:       # not the same id (the run stopped): an atom matches only itself
                return Alignment(i, k, False, compared)
            ahead_h, ahead_p = token_bytes(th), token_bytes(tp)
            i, k = i + 1, k + 1
        elif ahead_h:                            # the history is ahead: the prompt's next token
            if k == len(prompt) or prompt[k] in atoms:
                return Alignment(*best, False, compared)
            ahead_p = token_bytes(prompt[k])
            k += 1
        else:                                    # the prompt is ahead: the history's next token
            if i == len(history):
                return Alignment(*best, True, compared)    # the history ended inside the prompt's bytes
            if history[i] in atoms:
                return Alignment(*best, False, compared)
            ahead_h = token_bytes(history[i])
            i += 1
        # the shorter side's bytes must start the other's (no min() or double slicing: ~1 us each here)
        if len(ahead_h) <= len(ahead_p):
            n = len(ahead_h)
            if not ahead_p.startswith(ahead_h):
                return Alignment(*best, False, compared + n)
            ahead_h, ahead_p = b"", ahead_p[n:]
        else:
            n = len(ahead_p)
            if not ahead_h.startswith(ahead_p):
                return Alignment(*best, False, compared + n)
            ahead_h, ahead_p = ahead_h[n:], b""
        compared, since = compared + n, since + n
        if since > max_bytes or compared > max_total:
            return Alignment(*best, False, compared)


@dataclass(frozen=True)
class AlignedPrompt:
    """`prompt`: the request's prompt with the chosen history's tokens for the bytes they share; `source`: the
    index (of the histories given) it was aligned with, None where no history holds more of it aligned than
    by its tokens (`prompt` is then the one given); `held_before` / `held_after`: the most of it any history
    held before, and what `source`'s holds now."""

    prompt: list[int]
    source: int | None
    held_before: int
    held_after: int


def aligned_prompt(histories: Sequence[Sequence[int]], prompt: list[int], token_bytes: Callable[[int], bytes],
                   atoms: Collection[int] = frozenset(), max_bytes: int = ALIGN_MAX_BYTES,
                   max_total: int = ALIGN_MAX_TOTAL,
                   common: Callable[[Sequence[int], Sequence[int]], int] | None = None) -> AlignedPrompt:
    """The prompt aligned with the history (of `histories`) that holds the most of it once aligned, where that
    is more than any history holds of it as it is. The histories are walked from the one sharing the most tokens
    with it, all of them within one `max_total` (`max_bytes`: each walk's stretch out of step). `common`: the
    common-prefix length of two token lists (the slot table's, at C speed; by default compared here)."""
    if common is None:
        def common(a: Sequence[int], b: Sequence[int]) -> int:
            return _same_run(a, 0, b, 0)
    held = [common(h, prompt) for h in histories]
    best_before = max(held, default=0)
    best: tuple[int, int, int] | None = None     # (history_at, prompt_at, index)
    left = max_total
    for x in sorted(range(len(histories)), key=lambda x: -held[x]):
        h = histories[x]
        if held[x] >= len(h) or held[x] >= len(prompt):
            continue         # nothing of it past the prefix, or the prompt ends there: nothing to align
        if left < 0:
            break
        a = walk(h, prompt, held[x], token_bytes, atoms, max_bytes, left)
        left -= a.compared
        if a.history_at > best_before and (best is None or a.history_at > best[0]):
            best = (a.history_at, a.prompt_at, x)
    if best is None:
        return AlignedPrompt(prompt, None, best_before, best_before)
    j, m, x = best
    return AlignedPrompt(list(histories[x][:j]) + prompt[m:], x, best_before, j)
