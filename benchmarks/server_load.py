"""Server load benchmark: N concurrent clients (1, 2, 4, 8) with agent-like traffic against `strata serve`
on the default model; prints aggregate generated tokens/s, time to first token p50/p99, the ratio of the
aggregate throughput at 4 clients to 1 client (goal >= 2.5x), and the server's own overhead per request
against calling the engine directly (goal < 2 ms).

Agent-like traffic: each client holds a conversation (a system prompt of ~`--system-tokens`, then
`--turns` turns of a short user message and a streamed answer of up to `--max-tokens`), so every turn
after the first continues its history, then starts a new one; each level runs `--duration` seconds of
steady load on fresh conversations (tokens received before the end count), after a discarded warm-up
level (`--warmup-clients`). `--duration 0`: each client runs one conversation to its end instead, so
the level also measures its slowest client's tail. The server runs as its own process
(`python -m strata serve`), so client and server do not share a GIL.

Overhead: the same short prompts (first token varied so nothing is reused) through
`POST /v1/completions` (non-streaming, measured by the client) and through `Engine.prefill` + `decode`
in this process after the server has stopped; the difference of the medians.

    .venv/bin/python benchmarks/server_load.py [--clients 1,2,4,8] [--turns 4] [--threads 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, args: argparse.Namespace, port: int, launcher: tuple[str, ...] = ("-m", "strata"),
                 env: dict | None = None) -> subprocess.Popen:
    """`strata serve` as its own process (`launcher`: what runs the `strata` command; server_time_split.py's
    runs it with the engine's calls timed). Its stderr goes to a temporary file, not a pipe: a pipe nobody
    reads fills up (64 KiB of log lines) and then blocks the server's next log call, the engine's
    thread included."""
    cmd = [sys.executable, *launcher, "serve", "--no-config", "--model", model, "--port", str(port),
           "--ctx", str(args.ctx), "--batch", str(args.batch), "--threads", str(args.threads),
           "--conversation-cache-mib", "0", "--log-level", "warning", *args.serve_arg]
    log_file = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_file, text=True, env=env)
    proc.log_file = log_file   # read by server_log
    return proc


def server_log(proc: subprocess.Popen) -> str:
    """The last 4,000 characters a start_server process wrote to stderr."""
    proc.log_file.seek(0)
    return proc.log_file.read()[-4000:]


async def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {server_log(proc)}")
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError("server not ready")


async def one_turn(session: aiohttp.ClientSession, url: str, messages: list[dict], max_tokens: int,
                   deadline: float = float("inf")) -> tuple[float | None, int, str, bool]:
    """Streams one chat turn; returns (ttft seconds or None, generated tokens, text, finished). At the
    deadline it stops reading (the server cancels the request) and counts the content chunks received."""
    body = {"model": "bench", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    ttft = None
    text = []
    n = 0
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for raw in r.content:
            if time.monotonic() >= deadline:
                return ttft, len(text), "".join(text), False
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices", []):
                piece = c["delta"].get("content")
                if piece:
                    if ttft is None:
                        ttft = time.monotonic() - t0
                    text.append(piece)
    return (ttft if ttft is not None else time.monotonic() - t0), n, "".join(text), True


async def client(url: str, cid: int, level: int, args: argparse.Namespace, ttfts: list[float],
                 deadline: float) -> int:
    """One agent: conversations of `--turns` turns, one after another until the deadline (with
    --duration 0: one conversation). Returns the tokens it received."""
    total = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as s:
        for conv in range(1 if deadline == float("inf") else 1 << 30):
            rng = random.Random((cid * 1000 + level) * 1000 + conv)
            words = " ".join(f"rule{rng.randrange(10000)}" for _ in range(args.system_tokens // 2))
            messages = [{"role": "system", "content": f"You are coding agent {cid}-{level}-{conv}. {words}"}]
            for turn in range(args.turns):
                messages.append({"role": "user", "content": f"Step {turn}: list the next file to edit and why."})
                ttft, n, text, finished = await one_turn(s, url, messages, args.max_tokens, deadline)
                total += n
                if ttft is not None:
                    ttfts.append(ttft)
                if not finished:
                    return total
                messages.append({"role": "assistant", "content": text})
    return total


async def load_level(url: str, n_clients: int, args: argparse.Namespace, warmup: bool = False,
                     round_no: int = 0) -> dict:
    """Aggregate generated tokens/s of n_clients agents: over `--duration` seconds of steady load (each
    agent starts its next turn, or a new conversation, as soon as an answer ends), or with
    --duration 0 until each has finished one conversation (then the slowest agent's tail counts too)."""
    ttfts: list[float] = []
    t0 = time.monotonic()
    duration = min(args.duration, 5.0) if warmup else args.duration
    deadline = t0 + duration if duration > 0 else float("inf")
    # a warm-up level, and each round, talk about other things (nothing reused from a slot)
    level = -n_clients if warmup else n_clients + 100 * round_no
    counts = await asyncio.gather(*(client(url, i, level, args, ttfts, deadline) for i in range(n_clients)))
    wall = time.monotonic() - t0 if duration <= 0 else duration
    ttfts.sort()
    # no first token before the deadline (a busy machine's warm-up: 4 clients' long prompts read at once) is
    # no TTFT, not a crash that loses the whole run
    return {"clients": n_clients, "round": round_no, "tokens": sum(counts), "seconds": round(wall, 2),
            "tok_per_s": round(sum(counts) / wall, 2),
            "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1) if ttfts else None,
            "ttft_p99_ms": round(1000 * ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 1) if ttfts else None}


def overhead_prompts(n: int, n_vocab: int, length: int) -> list[list[int]]:
    rng = random.Random(7)
    base = [rng.randrange(100, n_vocab) for _ in range(length)]
    return [[100 + i] + base for i in range(n)]


async def overhead_pairs(url: str, engine, prompts: list[list[int]], max_tokens: int) -> tuple[list, list]:
    """Each prompt through the server (POST /v1/completions, client-measured), then through the engine
    directly in this process (prefill + greedy decode): interleaved so that drift hits both alike."""
    from strata.engine.sampling import Sampler, SamplingParams

    server, direct = [], []
    async with aiohttp.ClientSession() as s:
        for p in prompts:
            t0 = time.perf_counter()
            async with s.post(url + "/v1/completions",
                              json={"prompt": p, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}) as r:
                body = await r.json()
                assert r.status == 200 and body["usage"]["completion_tokens"] == max_tokens, body
            server.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            engine.truncate(0, 0)
            engine.prefill(0, p)
            sampler = Sampler(SamplingParams(), engine.n_vocab)
            tok = sampler.sample(engine.logits(0), [])
            gen = [tok]
            for _ in range(max_tokens - 1):
                tok = sampler.sample(engine.decode([0], [tok])[0], gen)
                gen.append(tok)
            direct.append(time.perf_counter() - t0)
    return server, direct


def measure_overhead(model: str, args: argparse.Namespace) -> dict:
    from strata.engine import Engine

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(model, args, port)
    try:
        asyncio.run(wait_ready(url, proc))
        engine = Engine(model, n_ctx=args.ctx, n_threads=args.threads)
        prompts = overhead_prompts(args.overhead_requests, engine.n_vocab, 32)
        asyncio.run(overhead_pairs(url, engine, prompts[:3], 8))          # warm-up
        server, direct = asyncio.run(overhead_pairs(url, engine, prompts, 8))
        records = asyncio.run(monitor_requests(url))[-len(prompts):]
    finally:
        proc.terminate()
        proc.wait(30)
    diffs = sorted(a - b for a, b in zip(server, direct, strict=True))
    inside = [r["finished"] - r["started"] for r in records]
    return {"overhead_model": Path(model).name, "server_ms_p50": round(1000 * statistics.median(server), 3),
            "direct_ms_p50": round(1000 * statistics.median(direct), 3),
            "overhead_ms": round(1000 * statistics.median(diffs), 3),
            # the split: handler-created job to its completion inside the server (queue hop + scheduler +
            # engine), and the rest (HTTP, JSON, both processes' wake-ups, the client)
            "job_ms_p50": round(1000 * statistics.median(inside), 3),
            "http_and_client_ms_p50": round(1000 * (statistics.median(server) - statistics.median(inside)), 3)}


async def monitor_requests(url: str) -> list[dict]:
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/monitor") as r:
        return (await r.json())["requests"]


def tiny_model(folder: Path) -> str:
    """A random 2-layer model (tests/fixtures): engine time is small, so the server's own time shows."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.fixtures.tiny_gguf import make_tiny_gguf

    return str(make_tiny_gguf(folder / "tiny-overhead.gguf", ctx_len=4096, n_vocab=512))


def round_ratios(levels: list[dict], over: int, under: int) -> list[float]:
    """tok/s at `over` clients / at `under` clients, within each round (levels of one round ran minutes
    apart at most, so the machine's drift between rounds cancels)."""
    by = {(lv["round"], lv["clients"]): lv["tok_per_s"] for lv in levels}
    rounds = sorted({lv["round"] for lv in levels})
    return [round(by[r, over] / by[r, under], 2) for r in rounds if (r, over) in by and by.get((r, under))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--turns", type=int, default=4, help="turns per conversation")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the levels this many times (every other round in reverse order); the 4/1 ratio "
                         "is the median of the rounds' own ratios")
    ap.add_argument("--duration", type=float, default=20.0,
                    help="seconds of steady load per level (0: each client runs one conversation to its end)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--system-tokens", type=int, default=400)
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--overhead-requests", type=int, default=50)
    ap.add_argument("--warmup-clients", type=int, default=4,
                    help="a discarded level of this many clients first (at most 5 s; 0: none), so that no level "
                         "pays the server's first requests (template compilation, first use of each slot)")
    ap.add_argument("--overhead-model", default=None,
                    help="model for the overhead pairs (default: a generated tiny model, so engine time is small)")
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for `strata serve` (repeat it: --serve-arg=--mixed-piece --serve-arg=0)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.model is None:
        from strata.engine.models import default_model_path

        args.model = str(default_model_path())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(args.model, args, port)
    levels: list[dict] = []
    try:
        asyncio.run(wait_ready(url, proc))
        if args.warmup_clients > 0:
            asyncio.run(load_level(url, args.warmup_clients, args, warmup=True))
        clients = [int(x) for x in args.clients.split(",") if x.strip()]
        for rnd in range(args.rounds):
            # every other round in reverse order, so that a slow drift of the machine hits both ends alike
            for n in clients if rnd % 2 == 0 else clients[::-1]:
                levels.append(asyncio.run(load_level(url, n, args, round_no=rnd)))
                if not args.json:
                    print("round {round}, clients {clients}: {tok_per_s} tok/s aggregate ({tokens} tokens in "
                          "{seconds} s), TTFT p50 {ttft_p50_ms} ms, p99 {ttft_p99_ms} ms".format(**levels[-1]),
                          flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    import tempfile

    overhead: dict = {}
    if args.overhead_requests > 0:   # 0: the load levels only
        with tempfile.TemporaryDirectory() as tmp:
            overhead_model = args.overhead_model or tiny_model(Path(tmp))
            overhead = measure_overhead(overhead_model, args)
    ratios = round_ratios(levels, 4, 1)
    ratio = round(statistics.median(ratios), 2) if ratios else None
    result = {"model": Path(args.model).name, "threads": args.threads, "batch": args.batch, "levels": levels,
              "ratio_4_to_1": ratio, "ratios_4_to_1": ratios, **overhead,
              "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    if args.json:
        print(json.dumps(result))
    else:
        each = f" (median of the rounds' {', '.join(f'{r}x' for r in ratios)})" if len(ratios) > 1 else ""
        print(f"ratio 4 clients / 1 client: {ratio}x{each} (goal >= 2.5x)")
        if overhead:
            print(f"overhead per request ({result['overhead_model']}, 32-token prompt, 8 tokens): "
                  f"{result['overhead_ms']} ms (server p50 {result['server_ms_p50']} ms, engine direct p50 "
                  f"{result['direct_ms_p50']} ms; goal < 2 ms); inside the server the job took "
                  f"{result['job_ms_p50']} ms, HTTP + client {result['http_and_client_ms_p50']} ms")
        print(f"load average during the run: {result['load_average']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
