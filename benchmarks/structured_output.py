"""What holding answers to JSON costs: the default model generating the same prompts greedily with and
without a `response_format`-style constraint (strata.engine.json_constraint), side by side in one process.

Prints, per schema, tokens/s of the constrained and the free answers (prompt reading included) and the
sampler's own milliseconds per token with the constraint, held as the engine alone holds it and as the server
does (canonical_split.CanonicalSplit: the forced text in the tokenizer's split). Not a test (no assertion).

    .venv/bin/python benchmarks/structured_output.py [--threads 2] [--rounds 3] [--max-tokens 120] [--only union]
"""

from __future__ import annotations

import argparse
import time

from strata.engine import Engine
from strata.engine.canonical_split import CanonicalSplit
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import ANY_OBJECT, compile_schema
from strata.engine.models import default_model_path
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.token_bytes import Vocabulary

PROMPTS = ["A dog named Rex with four legs who loves people. Describe it.", "Describe a grumpy cat.",
           "List three fruits with their colors.", "Give me a user profile for Ada, 36, engineer in Lyon."]
SCHEMAS = {
    "json_object": None,
    "pet schema": {"type": "object", "additionalProperties": False, "required": ["kind", "legs", "friendly"],
                   "properties": {"kind": {"enum": ["cat", "dog", "bird"]}, "legs": {"type": "integer"},
                                  "friendly": {"type": "boolean"}, "name": {"type": "string", "maxLength": 20}}},
    "record: date, pattern, bounds": {
        "type": "object", "additionalProperties": False, "required": ["day", "code", "score", "age"],
        "properties": {"day": {"type": "string", "format": "date"},
                       "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                       "score": {"type": "number", "minimum": 0, "maximum": 1},
                       "age": {"type": "integer", "minimum": 0, "maximum": 130}}},
    # Pydantic's discriminated union of two models and `int | float` (branches that begin alike: json_union.py)
    "union: Cat | Dog, int | float": {
        "$defs": {"Cat": {"type": "object", "additionalProperties": False, "required": ["type", "name", "lives"],
                          "properties": {"type": {"const": "cat", "type": "string"},
                                         "name": {"type": "string", "maxLength": 20},
                                         "lives": {"type": "integer", "minimum": 0, "maximum": 9}}},
                  "Dog": {"type": "object", "additionalProperties": False, "required": ["type", "name", "good"],
                          "properties": {"type": {"const": "dog", "type": "string"},
                                         "name": {"type": "string", "maxLength": 20}, "good": {"type": "boolean"}}}},
        "type": "object", "additionalProperties": False, "required": ["pet", "size"],
        "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                               "discriminator": {"propertyName": "type"}},
                       "size": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}},
}


def generate(e: Engine, prompt: list[int], max_tokens: int, constraint) -> tuple[int, float, float]:
    """(tokens, seconds in all, seconds in the sampler)."""
    e.truncate(0, 0)
    t0 = time.perf_counter()
    e.prefill(0, prompt)
    logits = e.logits(0)
    sampler = Sampler(SamplingParams(), e.n_vocab, constraint=constraint)
    eos = set(e.eos_token_ids)
    n, in_sampler = 0, 0.0
    for _ in range(max_tokens):
        s0 = time.perf_counter()
        t = sampler.sample(logits)
        in_sampler += time.perf_counter() - s0
        if t in eos:
            break
        n += 1
        logits = e.decode([0], [t])[0]
    return n, time.perf_counter() - t0, in_sampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=120)
    ap.add_argument("--only", default="", help="the schemas whose name holds this text")
    a = ap.parse_args()
    e = Engine(str(default_model_path()), n_ctx=1024, n_threads=a.threads)
    vocab = Vocabulary.of(e.tokenizer)
    prompts = [e.tokenizer.encode(e.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True))
               for p in PROMPTS]
    eos = list(e.eos_token_ids)
    for name, schema in SCHEMAS.items():
        if a.only not in name:
            continue
        root = ANY_OBJECT if schema is None else compile_schema(schema)
        free, held = 0.0, {}
        ways = {"held": lambda root=root: JsonConstraint(root, vocab, eos),
                "served": lambda root=root: CanonicalSplit(JsonConstraint(root, vocab, eos), e.tokenizer)}
        for _ in range(a.rounds):
            f = [generate(e, p, a.max_tokens, None) for p in prompts]
            free = max(free, sum(x[0] for x in f) / sum(x[1] for x in f))
            for way, make in ways.items():
                h = [generate(e, p, a.max_tokens, make()) for p in prompts]
                seconds = sum(x[1] for x in h)
                ms = 1000 * sum(x[2] for x in h) / max(1, sum(x[0] for x in h))
                if way not in held or seconds < held[way][0]:
                    held[way] = (seconds, ms, sum(x[0] for x in h))
        print(f"{name:12s} free {free:7.1f} tok/s   " + "   ".join(
            f"{way} {n / s:7.1f} tok/s ({n / s / free:.2f}x), {s:.2f} s for the answers, sampler {ms:.2f} ms a token, "
            f"{n} tokens" for way, (s, ms, n) in held.items()))


if __name__ == "__main__":
    main()
