"""What finding a held answer's forced text costs the first time (token_bytes.forced_run): a fixed answer
walked byte by byte through a fresh constraint (nothing memoized), `forced_bytes()` asked at each byte as the
server's CanonicalSplit asks it; milliseconds in all and a forced byte, with the automata's next-byte hints
(json_next_bytes.py, HeldCall._next_bytes) and with the full scan of 256 bytes a state, alternated in one
process. JSON answers (benchmarks/structured_output.py's schemas), a Hermes JSON call, a Qwen3-Coder XML
call, a Mistral call. Not a test (no assertion).

    .venv/bin/python benchmarks/forced_text.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import strata.engine.held_call as held_call
import strata.engine.json_constraint as json_constraint
from strata.engine import token_bytes
from strata.engine.json_args_call import MISTRAL, JsonArgsCall
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import ANY_OBJECT, compile_call, compile_schema, tool_arguments
from strata.engine.keyed_call import KeyedCall, KeyedMarkup
from strata.engine.token_bytes import Vocabulary
from strata.engine.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from structured_output import SCHEMAS  # noqa: E402

ANSWERS = {"json_object": b'{"name": "Rex", "legs": 4, "tags": ["good", "dog"], "owner": {"city": "Lyon"}}',
           "pet schema": b'{"kind": "dog", "legs": 4, "friendly": true, "name": "Rex"}',
           "record: date, pattern, bounds": b'{"day": "2024-02-29", "code": "ABC-12", "score": 0.5, "age": 36}',
           "union: Cat | Dog, int | float": b'{"pet": {"type": "cat", "name": "Tom", "lives": 9}, "size": 3.5}'}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city"]}
TIME = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
XML = KeyedMarkup(opening=b"\n<function=", first=b">\n<parameter=", empty=b">\n</function>\n</tool_call>", mid=b">\n",
                  value_end=b"\n</parameter>\n<", next_key=b"parameter=", end=b"/function>\n</tool_call>")


def cases(vocab: Vocabulary, eos: list[int]) -> dict:
    """name -> (a fresh constraint, the answer's bytes)."""
    out = {name: (lambda s=schema: JsonConstraint(ANY_OBJECT if s is None else compile_schema(s), vocab, eos),
                  ANSWERS[name]) for name, schema in SCHEMAS.items()}
    out["hermes call"] = (
        lambda: JsonConstraint(compile_call([("get_weather", WEATHER), ("get_time", TIME)]), vocab, eos,
                               lead=b"<tool_call>\n", close=b"\n</tool_call>", spacing=(b", ", b": ")),
        b'<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>')
    out["qwen3-coder call"] = (
        lambda: KeyedCall(XML, [("get_weather", ("city", "unit"), ("city",)), ("get_time", ("city",), ("city",))],
                          vocab, eos, lead=b"<tool_call>"),
        b"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius"
        b"\n</parameter>\n</function>\n</tool_call>")
    out["mistral call"] = (
        lambda: JsonArgsCall(MISTRAL, [("get_weather", tool_arguments(WEATHER)), ("get_time", tool_arguments(TIME))],
                             vocab, eos, demanded=True),
        b'[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}')
    return out


def first_look(make, answer: bytes) -> tuple[float, int]:
    """(seconds in forced_bytes over the answer, forced bytes found): a fresh constraint, its bytes fed one by
    one (feed / _feed: no tokens), forced_bytes asked before each."""
    c = make()
    seconds, forced, ahead = 0.0, 0, b""
    for i in range(len(answer)):
        t0 = time.perf_counter()
        run = c.forced_bytes()
        seconds += time.perf_counter() - t0
        if run and not ahead.startswith(run):
            forced += len(run)
        ahead = run[1:] if run else b""
        if isinstance(c, JsonConstraint):
            c.feed(answer[i:i + 1])
        else:
            c._feed(answer[i:i + 1])
    return seconds, forced


def full_scan(step, state, may_end, memo, limit=256, next_bytes=None):
    return token_bytes.forced_run(step, state, may_end, memo, limit)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    from strata.engine import GGUFFile
    from strata.engine.models import default_model_path

    tok = Tokenizer.from_metadata(GGUFFile(str(default_model_path())).metadata)
    vocab = Vocabulary.of(tok)
    ways = {"full scan": full_scan, "hinted": token_bytes.forced_run}
    for name, (make, answer) in cases(vocab, [tok.eos_id]).items():
        times: dict[str, list[float]] = {w: [] for w in ways}
        forced = 0
        for r in range(a.rounds + 1):                 # the first round warms the caches up (schema, lru caches)
            for way, run in ways.items():
                json_constraint.forced_run = held_call.forced_run = run
                seconds, forced = first_look(make, answer)
                if r:
                    times[way].append(seconds)
        json_constraint.forced_run = held_call.forced_run = token_bytes.forced_run
        ms = {w: 1000 * statistics.median(t) for w, t in times.items()}
        print(f"{name:30s} {len(answer):3d} bytes, {forced:3d} forced:  " + "   ".join(
            f"{w} {m:6.2f} ms ({m / max(1, forced):.3f} ms a forced byte)" for w, m in ms.items())
            + f"   {ms['full scan'] / ms['hinted']:.1f}x")


if __name__ == "__main__":
    main()
