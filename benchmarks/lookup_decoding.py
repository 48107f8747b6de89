"""Lookup decoding (server/lookup.py) on agent-like prompts: generation speed of `strata serve` with
`--lookup-draft 0` (off) and 8 (the default; `--drafts 8,16` compares several), and, as the anchor, llama.cpp (llama-cpp-python) plain and
with its own prompt lookup decoding (`LlamaPromptLookupDecoding`), side by side in one run.

Prompts: code the model is asked to repeat or edit (where an agent's answer copies its context) and
plain questions (where nothing repeats: lookup should cost nothing). Greedy, one request at a time.
Strata's speed is the response's `timings.predicted_per_second` (generation only); llama.cpp's is
tokens over the time of a call whose prompt was read by the call before (its prefix cache), so also
generation only. Rounds alternate the configurations; each cell is the median over rounds.

    .venv/bin/python benchmarks/lookup_decoding.py [--rounds 3] [--max-tokens 160] [--threads 2]
        [--llama-python /work/refenv/venv/bin/python] [--long-helpers 200] [--drafts 8] [--json]

Not a test (no assertion). Outputs of the two Strata servers are compared and must be equal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fixtures.agent_prompts import CODE, CONFIG  # noqa: E402

PROMPTS = {
    "copy code": "Copy this code exactly, without any change:\n```python\n" + CODE + "```",
    "add types": "Add type hints to this code. Reply with the complete code only.\n```python\n" + CODE + "```",
    "docstring": "Add a docstring to this function and show the whole function:\n```python\n" + CODE + "```",
    "edit config": "Change the port to 9090 in this file and show the whole file:\n```toml\n" + CONFIG + "```",
    "question": "Explain in a few sentences why the sky is blue.",
    "list": "Give five tips for writing readable Python code.",
}


def long_prompts(n_helpers: int) -> dict[str, str]:
    """Two prompts behind a module of n_helpers small functions (~31 tokens each): an agent's long
    conversation, where each guessed row also reads the long history's attention."""
    module = "\n".join(f"def helper_{i}(x):\n    '''Helper number {i}.'''\n    return x * {i} + {i % 7}\n"
                       for i in range(n_helpers))
    return {"long: copy a function": f"Here is a module:\n```python\n{module}\n{CODE}```\n"
                                     "Copy the function merge_intervals exactly.",
            "long: question": f"Here is a module:\n```python\n{module}\n```\n"
                              "Explain in a few sentences why the sky is blue."}


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run_strata(model: str, draft: int, args: argparse.Namespace) -> dict[str, tuple[float, int, str]]:
    """(tok/s, tokens, text) per prompt from a fresh `strata serve --lookup-draft draft`."""
    # imported here: the llama.cpp worker's Python imports this module too, and it has no aiohttp
    from server_load import free_port, start_server, wait_ready

    port = free_port()
    proc = start_server(model, argparse.Namespace(ctx=args.ctx, batch=0, threads=args.threads,
                                                  serve_arg=["--lookup-draft", str(draft)]), port)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(wait_ready(url, proc, timeout=120))
        out = {}
        for name, text in prompts(args).items():
            body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": args.max_tokens,
                    "temperature": 0}
            post(url + "/v1/chat/completions", {**body, "max_tokens": 1})   # the prompt read before timing
            r = post(url + "/v1/chat/completions", body)
            out[name] = (r["timings"]["predicted_per_second"], r["usage"]["completion_tokens"],
                         r["choices"][0]["message"]["content"])
        return out
    finally:
        proc.terminate()
        proc.wait(30)


def prompts(args: argparse.Namespace) -> dict[str, str]:
    return {**PROMPTS, **(long_prompts(args.long_helpers) if args.long_helpers else {})}


def worker_llama(model: str, lookup: bool, max_tokens: int, threads: int, ctx: int, long_helpers: int) -> dict:
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(num_pred_tokens=10) if lookup else None
    llm = Llama(model_path=model, n_ctx=ctx, n_threads=threads, n_threads_batch=threads, draft_model=draft,
                verbose=False)
    out = {}
    # llama-cpp-python 0.3.36's lookup fails on the long prompts (its logits buffer overflows: "could not
    # broadcast ... into shape (0,)"), so its lookup runs the short ones only
    for name, text in prompts(argparse.Namespace(long_helpers=0 if lookup else long_helpers)).items():
        messages = [{"role": "user", "content": text}]
        llm.reset()   # each prompt read whole (0.3.36's lookup path overflows its scores on a long reused prefix)
        llm.create_chat_completion(messages=messages, max_tokens=1, temperature=0)   # the prompt, cached
        t0 = time.perf_counter()
        r = llm.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0)
        n = r["usage"]["completion_tokens"]
        out[name] = (n / (time.perf_counter() - t0), n, r["choices"][0]["message"]["content"])
    return out


def run_llama(python: str, model: str, lookup: bool, args: argparse.Namespace) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); import lookup_decoding as b; "
            f"print(json.dumps(b.worker_llama({model!r}, {lookup!r}, {args.max_tokens}, {args.threads}, {args.ctx}, "
            f"{args.long_helpers})))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"llama.cpp worker failed: {done.stderr[-2000:]}")
    return {k: tuple(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--long-helpers", type=int, default=0,
                    help="also two prompts behind a module of this many small functions (200: ~6,200 tokens)")
    ap.add_argument("--llama-python", default=None, help="a Python where `import llama_cpp` works (the anchor)")
    ap.add_argument("--drafts", default="8", help="Strata's --lookup-draft values to compare with off (1..31)")
    ap.add_argument("--json", action="store_true", help="print one JSON object at the end")
    args = ap.parse_args()
    try:
        drafts = [int(d) for d in args.drafts.split(",")]
    except ValueError:
        ap.error(f"--drafts {args.drafts!r}: expected whole numbers separated by commas")
    if not drafts or not all(1 <= d <= 31 for d in drafts):
        ap.error(f"--drafts {args.drafts!r}: each must be 1..31")
    if args.rounds < 1 or args.max_tokens < 2 or args.threads < 1 or not 0 <= args.long_helpers <= 220:
        ap.error("--rounds and --threads must be >= 1, --max-tokens >= 2, --long-helpers 0..220")
    if args.model is None:
        from strata.engine.models import default_model_path

        args.model = str(default_model_path())
    configs = {"strata off": lambda: run_strata(args.model, 0, args)}
    for d in drafts:
        configs[f"strata lookup {d}"] = lambda d=d: run_strata(args.model, d, args)
    lookup = f"strata lookup {drafts[0]}"   # the one compared with llama.cpp
    if args.llama_python:
        configs["llama.cpp"] = lambda: run_llama(args.llama_python, args.model, False, args)
        configs["llama.cpp lookup"] = lambda: run_llama(args.llama_python, args.model, True, args)
    args.ctx = 2048 if not args.long_helpers else 8192
    names = list(prompts(args))
    speeds: dict[str, dict[str, list[float]]] = {c: {p: [] for p in names} for c in configs}
    tokens: dict[str, dict[str, int]] = {c: {} for c in configs}
    for rnd in range(args.rounds):
        order = list(configs) if rnd % 2 == 0 else list(reversed(configs))
        texts = {}
        for name in order:
            res = configs[name]()
            texts[name] = {p: v[2] for p, v in res.items()}
            for p, (tps, n, _) in res.items():
                speeds[name][p].append(tps)
                tokens[name][p] = n
            print(f"round {rnd + 1} {name}: " + ", ".join(f"{p} {v[0]:.0f}" for p, v in res.items()), flush=True)
        if any(texts["strata off"] != texts[f"strata lookup {d}"] for d in drafts):
            raise SystemExit("Strata's outputs differ with and without lookup decoding: a bug")
    med = {c: {p: statistics.median(v) for p, v in per.items() if v} for c, per in speeds.items()}
    head = "| prompt | tokens | Strata off |" + "".join(f" Strata lookup {d} | / off |" for d in drafts)
    if args.llama_python:
        head += f" llama.cpp | llama.cpp lookup | its lookup / off | Strata lookup {drafts[0]} / llama.cpp lookup |"
    print(f"\ngeneration tok/s, median of {args.rounds} rounds, {args.threads} threads, greedy, "
          f"max {args.max_tokens} tokens\n\n{head}\n|" + " --- |" * (head.count("|") - 1))
    for p in names:
        off = med["strata off"][p]
        row = f"| {p} | {tokens['strata off'][p]} | {off:.0f} |" + "".join(
            f" {med[f'strata lookup {d}'][p]:.0f} | {med[f'strata lookup {d}'][p] / off:.2f}x |" for d in drafts)
        if args.llama_python and p in med["llama.cpp lookup"]:
            a, b = med["llama.cpp"][p], med["llama.cpp lookup"][p]
            row += f" {a:.0f} | {b:.0f} | {b / a:.2f}x | {med[lookup][p] / b:.2f}x |"
        elif args.llama_python:
            row += f" {med['llama.cpp'][p]:.0f} | fails | | |"
        print(row)
    if args.json:
        print(json.dumps({"rounds": args.rounds, "threads": args.threads, "median_tps": med, "tokens": tokens}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
