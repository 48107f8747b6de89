"""What keeping an answer off calls costs (tool_choice none: server/no_call_rule.py, engine no_call.NoCall,
asked of every sampled token): the default model on a live server writes a long text answer with one tool
offered, `auto` and `none` alternating in one run (the same load for both), `ignore_eos` so that every answer
is `--tokens` long. Prints each answer's milliseconds a token, the ratio none / auto of the medians and of each round's pair; then
the constraint alone (allows + advance over the answer's tokens, as the sampler asks it, over them 20 times, a
longer answer, over a JSON answer that is no call, and over 2,000 blank-line tokens, bare or after ```) in
microseconds a token, for this model's rule and for Llama 3's (the `<|python_tag|>` marker and the bare JSON
call's start, server/no_call_rule.py, on this vocabulary), and Llama 3's whole-vocabulary mask inside a JSON
answer. Not a test (no assertion).

    .venv/bin/python benchmarks/tool_choice_none_cost.py [--rounds 4] [--tokens 400]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from strata.server.no_call_rule import no_call_rule  # noqa: E402
from strata.server.prompting import answer_format  # noqa: E402

from tests.conftest import find_default_model  # noqa: E402
from tests.server.live import LiveServer  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ASK = [{"role": "user", "content": "Write a long essay about the history of bread, with many paragraphs."}]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=400)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"auto": [], "none": []}
    texts: dict[str, str] = {}
    with LiveServer(model=str(find_default_model()), ctx=2048, batch=1, threads=2, conversation_cache_mib=0) as s:
        client = httpx.Client(base_url=s.url, timeout=600)
        for r in range(args.rounds):
            for choice in (("auto", "none") if r % 2 == 0 else ("none", "auto")):
                body = {"model": "m", "messages": ASK, "tools": TOOLS, "tool_choice": choice, "temperature": 0,
                        "max_tokens": args.tokens, "ignore_eos": True}
                t0 = time.perf_counter()
                out = client.post("/v1/chat/completions", json=body).json()
                dt = time.perf_counter() - t0
                n = out["usage"]["completion_tokens"]
                times[choice].append(dt / n * 1000)
                texts[choice] = out["choices"][0]["message"]["content"] or ""
                print(f"round {r} {choice}: {n} tokens, {dt:.2f} s, {dt / n * 1000:.2f} ms/token, "
                      f"finish {out['choices'][0]['finish_reason']}", flush=True)
        engine = s.state.engine
        fmt = answer_format(engine, [])
        ids = list(engine.tokenize(texts["none"], special=False))
        # a JSON answer that is no call, its first object the whole answer: the bare-call check's longest watch
        json_ids = list(engine.tokenize(json.dumps({"name": "bread", "text": texts["none"]}), special=False))
        # blank lines before anything else, or after a fence's opening (a small model's loop): the bare-call
        # watch's start, not yet decided (the server gives every vocabulary reasoning tags: the first is the
        # watch before a reasoning block may open, the second the one after)
        blank_ids = list(engine.tokenize("\n\n", special=False)) * 2000
        fence_blank_ids = list(engine.tokenize("```", special=False)) + blank_ids
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"median ms/token: auto {med['auto']:.2f}, none {med['none']:.2f}, none/auto {med['none'] / med['auto']:.3f}")
    pairs = [n / a for n, a in zip(times["none"], times["auto"], strict=True)]     # each round's two side by side
    print("each round's none/auto: " + ", ".join(f"{x:.3f}" for x in pairs) + f"; median {statistics.median(pairs):.3f}")
    rules = {"this model's rule": no_call_rule(fmt),
             # Llama 3's (its vocabulary's <|python_tag|>): the tag and a bare JSON call's start, on this vocabulary
             "Llama 3's rule": no_call_rule(replace(fmt, llama_calls=True))}
    for name, rule in rules.items():
        for label, answer in (("the answer", ids), ("the answer 20x", ids * 20), ("a JSON answer", json_ids),
                              ("blank lines", blank_ids), ("``` and blank lines", fence_blank_ids)):
            print(f"NoCall alone, {name}, {label}: {len(answer)} tokens, "
                  f"{constraint_cost(rule, engine.tokenizer, answer):.1f} us/token")
    mask_cost(rules["Llama 3's rule"], engine.tokenizer, json_ids[:8])


def constraint_cost(rule, tokenizer, ids: list[int]) -> float:
    """Microseconds a token of allows + advance over `ids`, as the sampler asks a constraint (the best of 3)."""
    best = float("inf")
    for _ in range(3):
        constraint = rule.constraint_for(tokenizer, ())
        t0 = time.perf_counter()
        for t in ids:
            constraint.allows(t)
            constraint.advance(t)
        best = min(best, (time.perf_counter() - t0) / len(ids) * 1e6)
    return best


def mask_cost(rule, tokenizer, head: list[int]) -> None:
    """The whole-vocabulary mask after a refusal (the sampler's fallback) while a JSON object is watched."""
    constraint = rule.constraint_for(tokenizer, ())
    for t in head:
        constraint.advance(t)
    constraint.allowed_mask()                     # the vocabulary's per-byte index, built once
    t0 = time.perf_counter()
    constraint.allowed_mask()
    print(f"allowed_mask inside a JSON answer (Llama 3's rule): {(time.perf_counter() - t0) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
