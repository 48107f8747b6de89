"""Reading an answer whose code blocks name a call's marker: the stream gate (prompting.AnswerStream fed one
~4-character token at a time), its finish and split_answer, each with code_fences.CodeScan reading every
line once (B) and with each question reading the prefix again as in_code_block did before it (A),
alternated in one process. Usage: .venv/bin/python benchmarks/code_scan.py [--tokens 1000,4000,16000]
[--rounds 3]. Prints the min of the rounds per side and the ratio A / B."""

from __future__ import annotations

import argparse
import time

import strata.engine.code_fences as code_fences
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}}}}} for n in ("read_file", "search")]
BLOCK = "Here is how:\n```python\nprint('<tool_call>')\n```\n"      # ~12 tokens, a marker in code
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>\n'   # ~20 tokens


def rescan(self: code_fences.CodeScan, before: str) -> bool:
    """in_code_block as it was: the prefix read again on every question."""
    fresh = code_fences.CodeScan.__new__(code_fences.CodeScan)
    fresh._start()
    return SCAN(fresh, before)


SCAN = code_fences.CodeScan.__call__


def once(text: str) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    stream = AnswerStream(AnswerFormat(), TOOLS)
    for i in range(0, len(text), 4):
        stream.feed(text[i:i + 4])
    t1 = time.perf_counter()
    stream.finish(text, cut=True)
    t2 = time.perf_counter()
    split_answer(text, AnswerFormat(), TOOLS, cut=True)
    return t1 - t0, t2 - t1, time.perf_counter() - t2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="1000,4000,16000")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for n in (int(t) for t in args.tokens.split(",")):
        for label, text in (("code blocks naming <tool_call>", "Intro.\n" + BLOCK * (n // 12)),
                            ("<tool_call> blocks, last cut", CALL * (n // 20) + CALL[:40]),
                            ("prose, no marker (the base)", "word " * n)):
            times: dict[str, list[tuple[float, float, float]]] = {"A": [], "B": []}
            for _ in range(args.rounds):
                for side in ("A", "B"):
                    code_fences.CodeScan.__call__ = rescan if side == "A" else SCAN
                    times[side].append(once(text))
            code_fences.CodeScan.__call__ = SCAN
            a, b = ([min(t[i] for t in times[s]) for i in range(3)] for s in ("A", "B"))
            print(f"{n:6d} tokens {label:31s} {len(text):6d} chars | feed A {a[0] * 1e3:7.1f} B {b[0] * 1e3:6.1f} ms"
                  f" ({a[0] / b[0]:4.1f}x) | finish A {a[1] * 1e3:7.1f} B {b[1] * 1e3:6.1f} ms ({a[1] / b[1]:5.1f}x)"
                  f" | split A {a[2] * 1e3:7.1f} B {b[2] * 1e3:6.1f} ms ({a[2] / b[2]:5.1f}x)")


if __name__ == "__main__":
    main()
