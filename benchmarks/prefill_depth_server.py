"""An agent's conversation growing turn by turn through a live `strata serve`: each turn appends a tool
result of about --turn-tokens tokens to the history and asks for one token, so the turn's time is the
prompt's read on top of everything before it. Prints per turn the history it read on top of, the tokens
it read (`timings.prompt_n`), the server's own prompt time (`timings.prompt_ms`) and the client's wall
time, as tokens/s; compare with the engine alone at the same history (benchmarks/prefill_depth.py).

    .venv/bin/python benchmarks/prefill_depth_server.py [--max-history 16000] [--turn-tokens 1000] \
        [--ctx 40000] [--threads 2] [--serve-arg=--prefill-slice-ms=250 ...]

What it is not: a test, or several clients (benchmarks/server_load.py).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_load import free_port, server_log, start_server, wait_ready  # noqa: E402

WORDS = ("self", "value", "return", "items", "index", "config", "path", "result", "error", "count", "name",
         "args", "data", "cache", "request", "token", "line", "file", "test", "assert")


def tool_result(rng: random.Random, n_lines: int) -> str:
    """Text like a tool's output (a file excerpt): numbered code lines, ~19 tokens each (SmolLM2)."""
    out = []
    for _ in range(n_lines):
        a, b, c = (rng.choice(WORDS) for _ in range(3))
        out.append(f"{rng.randrange(1, 9999):5d}  {a}_{rng.randrange(100)} = {b}.{c}({rng.randrange(1000)})")
    return "\n".join(out)


async def conversation(url: str, a: argparse.Namespace) -> list[dict]:
    rng = random.Random(0)
    messages = [{"role": "system", "content": "You are a coding agent. Read each tool result and say the next step."}]
    rows: list[dict] = []
    history = 0
    lines = max(1, a.turn_tokens // 19)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as s:
        while history < a.max_history:
            messages.append({"role": "user", "content": "Tool result:\n" + tool_result(rng, lines)})
            body = {"model": "bench", "messages": messages, "max_tokens": 1, "temperature": 0}
            t0 = time.monotonic()
            async with s.post(url + "/v1/chat/completions", json=body) as r:
                reply = await r.json()
                if r.status != 200:
                    raise RuntimeError(f"turn at history {history}: {r.status} {reply}")
            wall = time.monotonic() - t0
            t = reply["timings"]
            rows.append({"history": t["cache_n"], "read": t["prompt_n"], "prompt_ms": t["prompt_ms"], "wall": wall})
            print(f"# history {t['cache_n']:6d} read {t['prompt_n']:5d} in {t['prompt_ms']:8.0f} ms "
                  f"(wall {wall * 1000:8.0f} ms)", file=sys.stderr, flush=True)
            messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"] or "ok"})
            history = t["cache_n"] + t["prompt_n"]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-history", type=int, default=16000)
    ap.add_argument("--turn-tokens", type=int, default=1000)
    ap.add_argument("--ctx", type=int, default=40000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG")
    a = ap.parse_args()
    if a.max_history < 1 or a.turn_tokens < 19:
        ap.error("--max-history must be positive and --turn-tokens at least 19")
    from strata.engine.models import default_model_path

    port = free_port()
    proc = start_server(str(default_model_path()), a, port)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(wait_ready(url, proc))
        rows = asyncio.run(conversation(url, a))
    except Exception:
        print(server_log(proc), file=sys.stderr)
        raise
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(f"one client, turns of ~{a.turn_tokens} tokens, --ctx {a.ctx}, {a.threads} threads, "
          f"serve args {a.serve_arg or 'default'}")
    print("| history | read | server prompt ms | tok/s (server) | tok/s (wall) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['history']:,} | {r['read']:,} | {r['prompt_ms']:,.0f} | "
              f"{r['read'] * 1000 / r['prompt_ms']:,.0f} | {r['read'] / r['wall']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
