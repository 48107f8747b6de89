"""Where a load level's time goes inside the server: one level of benchmarks/server_load.py's agent traffic
(N clients, --duration seconds), `/metrics` read before and after; prints the decode steps (count, rows a
step, ms a step, rows/s while decoding), lookup decoding's guesses (made, taken), the prompt pieces
(tokens read, ms a token) and the rest of the wall time (the worker between engine calls, turn changes).

    .venv/bin/python benchmarks/server_breakdown.py --clients 4 [--duration 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_load import free_port, load_level, start_server, wait_ready  # noqa: E402

COUNTERS = ("strata_decode_steps_total", "strata_decode_rows_total", "strata_decode_seconds_total",
            "strata_prefill_seconds_total", "strata_prompt_tokens_read_total", "strata_generated_tokens_total",
            "strata_lookup_drafted_tokens_total", "strata_lookup_taken_tokens_total")


def metric(text: str, name: str) -> float:
    """The sum of every series of `name` in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.split()[-1])
    return total


async def measure(url: str, args: argparse.Namespace) -> dict:
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/metrics") as r:
            before = await r.text()
        level = await load_level(url, args.clients, args)
        async with s.get(url + "/metrics") as r:
            after = await r.text()
    return {"level": level, **{k: metric(after, k) - metric(before, k) for k in COUNTERS}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--system-tokens", type=int, default=40)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG")
    args = ap.parse_args()
    if args.clients < 1 or args.duration <= 0:
        ap.error(f"--clients must be at least 1 and --duration positive, got {args.clients} and {args.duration}")
    from strata.engine.models import default_model_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(str(default_model_path()), args, port)
    try:
        asyncio.run(wait_ready(url, proc))
        m = asyncio.run(measure(url, args))
    finally:
        proc.terminate()
        proc.wait(30)
    lv, steps = m["level"], max(1.0, m["strata_decode_steps_total"])
    rest = args.duration - m["strata_decode_seconds_total"] - m["strata_prefill_seconds_total"]
    print(f"{args.clients} client(s): {lv['tok_per_s']} tok/s over {args.duration:.0f} s")
    print(f"  decode: {m['strata_decode_seconds_total']:.2f} s, {steps:.0f} steps of "
          f"{m['strata_decode_rows_total'] / steps:.2f} rows, {1000 * m['strata_decode_seconds_total'] / steps:.2f} ms "
          f"a step, {m['strata_decode_rows_total'] / max(1e-9, m['strata_decode_seconds_total']):.0f} rows/s while "
          f"decoding (with lookup decoding a row may take several tokens)")
    read = max(1.0, m["strata_prompt_tokens_read_total"])
    print(f"  prompts: {m['strata_prefill_seconds_total']:.2f} s, {read:.0f} tokens read, "
          f"{1000 * m['strata_prefill_seconds_total'] / read:.3f} ms a token, "
          f"{read / max(1.0, m['strata_generated_tokens_total']):.2f} prompt tokens per generated token")
    drafted = m["strata_lookup_drafted_tokens_total"]
    if drafted:
        print(f"  lookup: {drafted:.0f} tokens guessed, {m['strata_lookup_taken_tokens_total']:.0f} taken "
              f"({100 * m['strata_lookup_taken_tokens_total'] / drafted:.0f}%), "
              f"{m['strata_generated_tokens_total']:.0f} tokens generated")
    print(f"  the rest: {rest:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
