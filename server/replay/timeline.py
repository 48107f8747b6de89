"""Request timelines for `strata replay`: the Request record and the two input formats.

A prompt is a sequence of segments (id, length in tokens). Two prompts share a prefix as long as
their segments are equal (a segment with the same id but a different length shares the shorter
length, then stops). Mooncake's 512-token block hashes are segments; Strata timelines build
segments from "tokens shared with the previous turn". Not here: simulation and policies.

Strata timeline format (JSONL, one request a line, in time order; documented in
docs/slot-policy.md):
    {"conversation": "a1", "time": 12.5, "prompt_tokens": 40000, "shared_tokens": 38000,
     "output_tokens": 500}
`shared_tokens`: leading tokens of this prompt equal to the previous turn of the same
conversation (its prompt followed by its output); 0 for a first turn or a changed top of prompt.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class Request:
    """One request. `ids`/`lens`: the prompt's segments; `n_prompt == sum(lens)`. `parent`: index
    of the request whose history this one continues (None: none). `conversation`: thinning unit."""

    time: float
    n_prompt: int
    n_output: int
    ids: tuple[int, ...]
    lens: tuple[int, ...]
    conversation: str
    parent: int | None = None
    out_id: int = -1  # segment id of its output in the history a slot keeps (unique per request)


def common_prefix(a_ids: Sequence[int], a_lens: Sequence[int], b_ids: Sequence[int], b_lens: Sequence[int]) -> int:
    """Tokens two segment sequences share at their start."""
    n = 0
    for i in range(min(len(a_ids), len(b_ids))):
        if a_ids[i] != b_ids[i]:
            break
        la, lb = a_lens[i], b_lens[i]
        if la != lb:
            return n + min(la, lb)
        n += la
    return n


def cut(ids: Sequence[int], lens: Sequence[int], n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The first n tokens of a segment sequence."""
    out_i: list[int] = []
    out_l: list[int] = []
    left = n
    for i, ln in zip(ids, lens, strict=True):
        if left <= 0:
            break
        out_i.append(i)
        out_l.append(min(ln, left))
        left -= ln
    return tuple(out_i), tuple(out_l)


class TimelineError(ValueError):
    """A timeline file that cannot be read; the message names the file and line."""


def _lines(path: Path) -> Iterable[tuple[int, dict]]:
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise TimelineError(f"{path}: cannot open ({e.strerror})") from None
    with fh:
        for no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TimelineError(f"{path}:{no}: not JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise TimelineError(f"{path}:{no}: expected a JSON object")
            yield no, obj


def _int_field(obj: dict, key: str, where: str, minimum: int = 0) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise TimelineError(f"{where}: {key!r} must be an integer >= {minimum}, got {v!r}")
    return v


def _num_field(obj: dict, key: str, where: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise TimelineError(f"{where}: {key!r} must be a number >= 0, got {v!r}")
    return float(v)


def read_mooncake(path: str | Path) -> list[Request]:
    """Mooncake JSONL (`timestamp` ms, `input_length`, `output_length`, `hash_ids`). A request's
    parent is the latest earlier request whose full blocks (at least two: block 0 is a prompt
    shared by everyone) lead its own; conversations are the roots of those chains."""
    path = Path(path)
    raw: list[tuple[float, int, int, tuple[int, ...]]] = []
    for no, obj in _lines(path):
        where = f"{path}:{no}"
        t = _num_field(obj, "timestamp", where) / 1000.0
        n_in = _int_field(obj, "input_length", where, 1)
        n_out = _int_field(obj, "output_length", where)
        h = obj.get("hash_ids")
        if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
            raise TimelineError(f"{where}: 'hash_ids' must be a list of integers")
        if len(h) != math.ceil(n_in / MOONCAKE_BLOCK_TOKENS):
            raise TimelineError(f"{where}: {len(h)} hash_ids for input_length {n_in} (expected ceil(n/512))")
        raw.append((t, n_in, n_out, tuple(h)))
    raw.sort(key=lambda r: r[0])  # stable: file order within a timestamp
    out: list[Request] = []
    latest_by_full: dict[tuple[int, ...], int] = {}
    for idx, (t, n_in, n_out, h) in enumerate(raw):
        n_full = n_in // MOONCAKE_BLOCK_TOKENS
        parent = None
        for k in range(min(n_full, len(h)), 1, -1):
            p = latest_by_full.get(h[:k])
            if p is not None:
                parent = p
                break
        lens = [MOONCAKE_BLOCK_TOKENS] * len(h)
        lens[-1] = n_in - MOONCAKE_BLOCK_TOKENS * (len(h) - 1)
        conv = out[parent].conversation if parent is not None else f"m{idx}"
        out.append(Request(t, n_in, n_out, h, tuple(lens), conv, parent, -(idx + 1)))
        if n_full >= 2:
            latest_by_full[h[:n_full]] = idx
    return out


def read_strata(path: str | Path) -> list[Request]:
    """Strata's own timeline format (module docstring). Output tokens get fresh segment ids, so a
    next turn shares them only through `shared_tokens`."""
    path = Path(path)
    rows = []
    for no, obj in _lines(path):
        where = f"{path}:{no}"
        conv = obj.get("conversation")
        if not isinstance(conv, (str, int)) or isinstance(conv, bool) or conv == "":
            raise TimelineError(f"{where}: 'conversation' must be a non-empty string, got {conv!r}")
        t = _num_field(obj, "time", where)
        n_in = _int_field(obj, "prompt_tokens", where, 1)
        shared = _int_field(obj, "shared_tokens", where) if "shared_tokens" in obj else 0
        n_out = _int_field(obj, "output_tokens", where) if "output_tokens" in obj else 0
        if shared > n_in:
            raise TimelineError(f"{where}: shared_tokens {shared} exceeds prompt_tokens {n_in}")
        rows.append((t, no, str(conv), n_in, shared, n_out))
    rows.sort(key=lambda r: (r[0], r[1]))
    return build_requests((t, c, n, s, o) for t, _, c, n, s, o in rows)


def build_requests(rows: Iterable[tuple[float, str, int, int, int]]) -> list[Request]:
    """(time, conversation, prompt, shared with previous turn, output) in time order -> Requests.
    A shared count past the previous turn's prompt + output is clipped to it."""
    out: list[Request] = []
    last: dict[str, tuple[int, tuple[int, ...], tuple[int, ...]]] = {}  # conv -> (idx, full ids, full lens)
    next_id = 0
    for t, conv, n_in, shared, n_out in rows:
        parent = None
        ids: tuple[int, ...] = ()
        lens: tuple[int, ...] = ()
        prev = last.get(conv)
        if prev is not None and shared > 0:
            parent = prev[0]
            ids, lens = cut(prev[1], prev[2], shared)
        n_have = sum(lens)
        if n_in > n_have:
            ids, lens = ids + (next_id,), lens + (n_in - n_have,)
            next_id += 1
        out_id = next_id
        next_id += 1
        last[conv] = (len(out), ids + (out_id,), lens + (n_out,))
        out.append(Request(float(t), n_in, n_out, ids, lens, conv, parent, out_id))
    return out


def write_strata(requests: Sequence[Request], path: str | Path | TextIO) -> None:
    """Write requests in Strata's timeline format (shared tokens against the conversation's previous turn)
    to a file, or to an open text stream (sys.stdout: Windows has no /dev/stdout), left open."""
    prev_full: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    opened = contextlib.nullcontext(path) if hasattr(path, "write") else open(path, "w", encoding="utf-8")
    with opened as fh:
        for r in requests:
            shared = 0
            p = prev_full.get(r.conversation)
            if p is not None:
                shared = common_prefix(r.ids, r.lens, *p)
            fh.write(json.dumps({"conversation": r.conversation, "time": round(r.time, 3),
                                 "prompt_tokens": r.n_prompt, "shared_tokens": shared,
                                 "output_tokens": r.n_output}) + "\n")
            prev_full[r.conversation] = (r.ids + (r.out_id,), r.lens + (r.n_output,))


def thin(requests: Sequence[Request], share: float, seed: int) -> list[Request]:
    """Keep a random share of the conversations (all their requests); parents re-indexed."""
    if not 0 < share <= 1:
        raise ValueError(f"--thin {share!r}: expected a share in (0, 1]")
    convs = sorted({r.conversation for r in requests})
    rng = random.Random(seed)
    keep = set(rng.sample(convs, max(1, round(share * len(convs)))))
    new_index: dict[int, int] = {}
    out: list[Request] = []
    for i, r in enumerate(requests):
        if r.conversation not in keep:
            continue
        new_index[i] = len(out)
        parent = new_index.get(r.parent) if r.parent is not None else None
        out.append(Request(r.time, r.n_prompt, r.n_output, r.ids, r.lens, r.conversation, parent, r.out_id))
    return out


MAX_OVERLAY = 1024


def overlay(requests: Sequence[Request], copies: int, shift_s: float = 37.0) -> list[Request]:
    """The timeline laid over itself `copies` times (renamed copies sharing nothing, copy c shifted by
    c x shift_s seconds), as seed 001 does to load 32 to 128 slots from one user's traffic."""
    if not 1 <= copies <= MAX_OVERLAY:   # 10^11 copies ran out of memory after minutes
        raise ValueError(f"--overlay {copies!r}: expected 1 to {MAX_OVERLAY}")
    if copies == 1:
        return list(requests)
    span = 1 + max((max(max(r.ids, default=0), abs(r.out_id)) for r in requests), default=0)
    rows = []
    for c in range(copies):
        off = c * span
        for i, r in enumerate(requests):
            rows.append((r.time + c * shift_s, c, i, r, off))
    rows.sort(key=lambda x: (x[0], x[1], x[2]))
    new_index = {(c, i): k for k, (_, c, i, _, _) in enumerate(rows)}
    out = []
    for t, c, _, r, off in rows:
        parent = new_index[(c, r.parent)] if r.parent is not None else None
        out_id = r.out_id - off if r.out_id < 0 else r.out_id + off
        out.append(Request(t, r.n_prompt, r.n_output, tuple(x + off for x in r.ids), r.lens,
                           f"{r.conversation}#{c}", parent, out_id))
    return out


def load(path: str | Path) -> list[Request]:
    """Read either format, told apart by the first record's keys."""
    path = Path(path)
    for _, obj in _lines(path):
        if "hash_ids" in obj:
            return read_mooncake(path)
        return read_strata(path)
    raise TimelineError(f"{path}: empty timeline")
