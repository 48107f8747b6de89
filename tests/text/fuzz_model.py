"""Shared by the held-answer fuzz tests: `NoisyModel`, a stand-in for a model that knows a format's pieces
(its markup, the tools' names and keys, JSON punctuation) but writes them with noise: each step's logits are
seeded normal noise, plus a large bonus for the tokens that go on with what it means to write next (a piece
picked at random, or a scripted text); `drive`, an answer sampled through strata.engine.sampling.Sampler with
the constraint, which records a dead end (no token allowed) instead of raising; `random_tools`, random
offered tools (nested objects, enums, bounds, patterns, arrays, optional and required keys); `closed`, a
schema as a held tool call reads it (lenient: format / pattern passed over; closed: listed properties only).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from strata.engine.canonical_split import CanonicalSplit
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.token_bytes import Vocabulary

JSON_PIECES = (b'"', b'": ', b'", "', b", ", b"}", b"]", b"{", b"[", b'{"', b'"}', b"true", b"false", b"null",
               b"0", b"1", b"7", b"-", b".", b"5", b"e", b" ")


class NoisyModel:
    """Logits over `vocab`: N(0, 1) noise; tokens that go on with `intent` (a piece of `pieces` it picked,
    or a script) get `bonus` (a script: far more). `saw(token)` moves the intent on."""

    def __init__(self, vocab: Vocabulary, pieces: Sequence[bytes], rng: np.random.Generator,
                 p_intent: float = 0.6):
        self.vocab, self.rng, self.p_intent = vocab, rng, p_intent
        self.pieces = [p for p in pieces if p]          # a piece named twice is meant twice as often
        self.bonus = math.log(vocab.n) + 5.0     # a piece once begun is nearly always written on
        self.intent, self.scripted = b"", False
        by_first: dict[int, list[int]] = {}
        for i, tb in enumerate(vocab.bytes):
            if tb:
                by_first.setdefault(tb[0], []).append(i)
        self._by_first = by_first
        self._cache: dict[tuple[bytes, bool], tuple[np.ndarray, np.ndarray]] = {}

    def script(self, text: bytes) -> None:
        self.intent, self.scripted = text, True

    def logits(self) -> np.ndarray:
        z = self.rng.standard_normal(self.vocab.n).astype(np.float32)
        if not self.intent and self.pieces and self.rng.random() < self.p_intent:
            self.intent = self.pieces[int(self.rng.integers(len(self.pieces)))]
        if self.intent:
            ids, weights = self._going_on(self.intent, self.scripted)
            z[ids] += (60.0 if self.scripted else self.bonus) * weights
        return z

    def _going_on(self, intent: bytes, scripted: bool) -> tuple[np.ndarray, np.ndarray]:
        """The tokens that go on with `intent` (a script: only its prefixes) and their bonus weights."""
        key = (intent, scripted)
        if key not in self._cache:
            ids = [i for i in self._by_first.get(intent[0], ()) if intent.startswith(self.vocab.bytes[i])
                   or (not scripted and self.vocab.bytes[i].startswith(intent))]
            weights = [min(1.0, len(self.vocab.bytes[i]) / 2 + 0.5) for i in ids]   # longer pieces first
            self._cache[key] = (np.array(ids, dtype=np.int64), np.array(weights, dtype=np.float32))
        return self._cache[key]

    def saw(self, token: int) -> None:
        tb = self.vocab.bytes[token]
        if self.intent.startswith(tb) and tb:
            self.intent = self.intent[len(tb):]
        else:
            self.intent = b""
        if not self.intent:
            self.scripted = False


@dataclass
class Drive:
    tokens: list[int] = field(default_factory=list)
    dead_end: bool = False              # the constraint allowed no token while something was held
    refusals: int = 0

    def text(self, vocab: Vocabulary, eos: Sequence[int]) -> str:
        return b"".join(vocab.bytes[t] for t in self.tokens if t not in eos).decode("utf-8", errors="replace")


def step(model: NoisyModel, sampler: Sampler, drive: Drive, check_mask: float = 0.0) -> int | None:
    """One token through the sampler and its constraint; None at a dead end. With probability `check_mask`
    the constraint's mask is first checked against `allows` token by token (a small vocabulary's)."""
    c = sampler.constraint
    if check_mask and model.rng.random() < check_mask:
        mask = c.allowed_mask()
        each = np.array([c.allows(i) for i in range(model.vocab.n)])
        assert (mask == each).all(), f"mask and allows differ at {np.flatnonzero(mask != each)[:5]}"
    try:
        token = sampler.sample(model.logits())
    except ValueError as e:
        if "no token can continue" not in str(e):
            raise
        drive.dead_end = True
        return None
    model.saw(token)
    drive.tokens.append(token)
    drive.refusals = sampler.refusals
    return token


def sampler_for(constraint, vocab: Vocabulary, rng: np.random.Generator, tokenizer=None) -> Sampler:
    """A sampler at a random temperature; with `tokenizer`, the constraint's forced text in its split, as the
    server holds answers (canonical_split.CanonicalSplit)."""
    temperature = float(rng.choice([0.0, 0.6, 1.0, 1.4]))
    held = CanonicalSplit(constraint, tokenizer) if tokenizer is not None else constraint
    return Sampler(SamplingParams(temperature=temperature, seed=int(rng.integers(1 << 30))), vocab.n,
                   constraint=held)


def held_until(model: NoisyModel, sampler: Sampler, drive: Drive, holding: Callable[[], bool], limit: int,
               check_mask: float = 0.0) -> bool:
    """Tokens while `holding()`, at most `limit`; True when it let go (the held part is whole)."""
    for _ in range(limit):
        if not holding():
            return True
        if step(model, sampler, drive, check_mask) is None:
            return False
    return not holding()


# ----- random tools -----

def _name(rng: np.random.Generator, taken: set[str]) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz_"
    while True:
        n = int(rng.integers(2, 10))
        name = "".join(letters[int(i)] for i in rng.integers(0, 26, 1)) + \
            "".join(letters[int(i)] for i in rng.integers(0, len(letters), n))
        if rng.random() < 0.25 and taken:                    # a name that begins another's: kept apart by what follows
            name = sorted(taken)[int(rng.integers(len(taken)))] + "_" + name[:3]
        if name not in taken:
            taken.add(name)
            return name


def random_schema(rng: np.random.Generator, depth: int = 0) -> dict:
    """A parameter's schema among what a held call holds (and some keywords it only passes over)."""
    kinds = ["string", "integer", "number", "boolean", "enum", "array", "object", "nullable", "pattern", "format"]
    kind = kinds[int(rng.integers(len(kinds) - (3 if depth >= 2 else 0)))] if depth < 2 else \
        ["string", "integer", "number", "boolean", "enum", "pattern", "format"][int(rng.integers(7))]
    if kind == "string":
        s: dict = {"type": "string"}
        if rng.random() < 0.3:
            s["maxLength"] = int(rng.integers(1, 12))
        if rng.random() < 0.2:
            s["minLength"] = int(rng.integers(0, 3))
        return s
    if kind == "integer":
        s = {"type": "integer"}
        lo = int(rng.integers(-1000, 1000))
        if rng.random() < 0.7:
            s["minimum"] = lo
        if rng.random() < 0.7:
            s["maximum"] = lo + int(rng.integers(0, 50))
        return s
    if kind == "number":
        s = {"type": "number"}
        lo = round(float(rng.uniform(-100, 100)), int(rng.integers(0, 3)))
        key_lo, key_hi = ("exclusiveMinimum", "exclusiveMaximum") if rng.random() < 0.4 else ("minimum", "maximum")
        if rng.random() < 0.7:
            s[key_lo] = lo
        if rng.random() < 0.7:
            s[key_hi] = lo + round(float(rng.uniform(0.01, 20)), 2)
        return s
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        pool = ["red", "green", "blue", "gr", "a b", 'q"t', 1, 2.5, None, True, "é"]
        idx = rng.choice(len(pool), size=int(rng.integers(1, 5)), replace=False)
        return {"enum": [pool[int(i)] for i in idx]}
    if kind == "array":
        s = {"type": "array", "items": random_schema(rng, depth + 1)}
        if rng.random() < 0.5:
            s["minItems"] = int(rng.integers(0, 3))
        if rng.random() < 0.5:
            s["maxItems"] = s.get("minItems", 0) + int(rng.integers(0, 3))
        return s
    if kind == "object":
        return random_object(rng, depth + 1)
    if kind == "nullable":
        return {"anyOf": [random_schema(rng, 2), {"type": "null"}]} if rng.random() < 0.5 else \
            {"type": ["string", "null"]}
    if kind == "pattern":
        return {"type": "string", "pattern": ["^[a-z]+$", "^\\d{3}$", "x", "^(ab|cd)*$"][int(rng.integers(4))]}
    return {"type": "string", "format": ["date", "email", "uri", "uuid"][int(rng.integers(4))]}


def random_object(rng: np.random.Generator, depth: int = 0) -> dict:
    taken: set[str] = set()
    props = {_name(rng, taken): random_schema(rng, depth) for _ in range(int(rng.integers(0, 4)))}
    required = [k for k in props if rng.random() < 0.5]
    out: dict = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if rng.random() < 0.2:
        out["additionalProperties"] = False
    return out


def random_tools(rng: np.random.Generator, listed: bool = False) -> list[dict]:
    """1-3 tools; `listed`: each lists its properties (else one in ten is any object)."""
    taken: set[str] = set()
    tools = []
    for _ in range(int(rng.integers(1, 4))):
        params = random_object(rng) if listed or rng.random() < 0.9 else {"type": "object"}
        tools.append({"type": "function", "function": {"name": _name(rng, taken), "description": "x",
                                                         "parameters": params}})
    return tools


def closed(schema):
    """The schema as a held call holds it: format / pattern passed over (a tool checks its own arguments),
    an object that lists properties and says nothing of others takes only those."""
    s = copy.deepcopy(schema)

    def walk(x):
        if isinstance(x, dict):
            x.pop("format", None)
            x.pop("pattern", None)
            if "properties" in x and "additionalProperties" not in x:
                x["additionalProperties"] = False
            for v in list(x.values()):
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(s)
    return s


def tool_pieces(tools: list[dict]) -> list[bytes]:
    """The names, keys and enum values a model that read the tools would write."""
    import json

    out: list[bytes] = []

    def walk(s):
        if isinstance(s, dict):
            for k, v in (s.get("properties") or {}).items():
                out.append(k.encode())
                out.append(json.dumps(k).encode() + b": ")
                walk(v)
            for v in s.get("enum", ()):
                out.append(json.dumps(v, ensure_ascii=False).encode())
            for key in ("items",):
                walk(s.get(key))
            for b in s.get("anyOf", ()):
                walk(b)
    for t in tools:
        out.append(t["function"]["name"].encode())
        walk(t["function"].get("parameters"))
    return out
