"""Where a server load level's engine time goes: server_load.py's agent-like traffic at 1 and 4 clients
against a `strata serve` whose Engine.decode / step / prefill calls are timed (rows, tokens, seconds, to a
log), levels alternated over `--rounds`; then per level the calls by kind and rows, and the 4 / 1 ratio a
server could reach at this traffic with these engine costs:

    ceiling = (d1 + p * c) / (d4 / 4 + p * c)

d1, d4: seconds of a 1-row and of a 4-row decode call; p: prompt tokens read per generated token (the
traffic's, from /metrics); c: seconds of prefill per prompt token (the 1-client level's Engine.prefill
calls). It assumes every 4-client step holds 4 rows and no second of the engine's is idle: the measured
ratio can only be lower. Turned around it says what a 4-row step must cost for a ratio R at this traffic:
d4 <= 4 * ((d1 + p * c) / R - p * c).

    .venv/bin/python benchmarks/server_time_split.py [--rounds 2] [--duration 20] [--serve-arg=--lookup-draft --serve-arg=0]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server_load  # noqa: E402
from server_breakdown import metric  # noqa: E402

LOG_VAR = "STRATA_TIME_SPLIT_LOG"


def serve_timed() -> int:
    """The `strata` command with Engine.decode / step / prefill each logged as `kind rows tokens seconds
    end` (end: time.monotonic(), comparable with the parent's marks on one machine)."""
    import atexit

    import strata.engine as engine_module

    log = open(os.environ[LOG_VAR], "w", buffering=1 << 16)
    atexit.register(log.close)

    def timed(name: str, shape) -> None:
        call = getattr(engine_module.Engine, name)

        def wrapper(self, *a, **k):
            t0 = time.perf_counter()
            try:
                return call(self, *a, **k)
            finally:
                rows, tokens = shape(*a)
                log.write(f"{name} {rows} {tokens} {time.perf_counter() - t0:.6f} {time.monotonic():.4f}\n")

        setattr(engine_module.Engine, name, wrapper)

    timed("decode", lambda ctxs, tokens: (str(len(ctxs)), len(ctxs)))
    timed("prefill", lambda ctx, tokens, **_: ("1", len(tokens)))
    # a mixed step: prompt pieces + riders
    timed("step", lambda pieces, ctxs, *_: (f"{len(pieces)}+{len(ctxs)}",
                                            sum(len(p) for _, p in pieces) + len(ctxs)))
    from strata.cli import main

    sys.argv = ["strata", *sys.argv[2:]]
    return main()


async def scrape(url: str) -> dict[str, float]:
    """The counters a level's p needs, from /metrics (server_breakdown.metric reads them)."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    return {name: metric(text, f"strata_{name}_total") for name in ("prompt_tokens_read", "generated_tokens")}


def calls_between(log: Path, t0: float, t1: float) -> list[tuple[str, str, int, float]]:
    out = []
    for line in log.read_text().splitlines():
        kind, rows, tokens, seconds, end = line.split()
        if t0 <= float(end) <= t1:
            out.append((kind, rows, int(tokens), float(seconds)))
    return out


def level_summary(calls: list[tuple[str, str, int, float]]) -> dict:
    by: dict[tuple[str, str], list] = collections.defaultdict(lambda: [0, 0, 0.0])
    for kind, rows, tokens, seconds in calls:
        entry = by[kind, rows]
        entry[0] += 1
        entry[1] += tokens
        entry[2] += seconds
    return {f"{k} {r}": {"calls": c, "tokens": t, "seconds": round(s, 3), "ms_per_call": round(1000 * s / c, 2)}
            for (k, r), (c, t, s) in sorted(by.items(), key=lambda kv: -kv[1][2])}


def ceiling(d1: float, d4: float, p: float, c: float) -> float:
    """The 4 / 1 ratio at these costs with every 4-client step 4 rows and the engine never idle."""
    return (d1 + p * c) / (d4 / 4 + p * c)


def needed_d4(d1: float, p: float, c: float, ratio: float) -> float:
    """The most a 4-row decode call may cost for `ratio` at this traffic (ceiling solved for d4)."""
    return 4 * ((d1 + p * c) / ratio - p * c)


def ms_per_call(levels: list[dict], clients: int, key: str) -> float | None:
    values = [lv["calls"][key]["ms_per_call"] for lv in levels if lv["clients"] == clients and key in lv["calls"]]
    return statistics.median(values) if values else None


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-timed":
        return serve_timed()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    ap.add_argument("--rounds", type=int, default=2, help="1- and 4-client levels, alternated, this many times each")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of steady load per level")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--system-tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for `strata serve` (repeat it)")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.duration <= 0:
        ap.error(f"--duration must be positive, got {args.duration}")
    if args.model is None:
        from strata.engine.models import default_model_path

        args.model = str(default_model_path())
    port = server_load.free_port()
    url = f"http://127.0.0.1:{port}"
    levels: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "engine-calls.log"
        proc = server_load.start_server(args.model, args, port, launcher=(str(Path(__file__).resolve()), "--serve-timed"),
                                        env={**os.environ, LOG_VAR: str(log)})
        marks = []
        try:
            asyncio.run(server_load.wait_ready(url, proc))
            asyncio.run(server_load.load_level(url, 4, args, warmup=True))
            for rnd in range(args.rounds):
                for n in (1, 4) if rnd % 2 == 0 else (4, 1):
                    before = asyncio.run(scrape(url))
                    t0 = time.monotonic()
                    level = asyncio.run(server_load.load_level(url, n, args, round_no=rnd))
                    t1 = time.monotonic()
                    after = asyncio.run(scrape(url))
                    delta = {k: after[k] - before[k] for k in after}
                    marks.append((level, delta, t0, t1))
        finally:
            proc.terminate()
            proc.wait(30)
        for level, delta, t0, t1 in marks:
            calls = calls_between(log, t0, t1)
            level["calls"] = level_summary(calls)
            level["engine_busy_s"] = round(sum(c[3] for c in calls), 2)
            level["prompt_per_generated"] = round(delta["prompt_tokens_read"] / max(1.0, delta["generated_tokens"]), 3)
            level["wall_s"] = round(t1 - t0, 2)
            levels.append(level)
    for lv in levels:
        print(f"round {lv['round']}, {lv['clients']} client(s): {lv['tok_per_s']} tok/s, engine busy "
              f"{lv['engine_busy_s']} s of {lv['wall_s']}, prompt tokens read per generated token "
              f"{lv['prompt_per_generated']}")
        for key, c in lv["calls"].items():
            print(f"    {key:12s} {c['calls']:6d} calls {c['tokens']:7d} tokens {c['seconds']:7.2f} s "
                  f"{c['ms_per_call']:7.2f} ms a call")
    d1, d4 = ms_per_call(levels, 1, "decode 1"), ms_per_call(levels, 4, "decode 4")
    prefills = [lv["calls"]["prefill 1"] for lv in levels if lv["clients"] == 1 and "prefill 1" in lv["calls"]]
    c = 1000 * sum(x["seconds"] for x in prefills) / max(1, sum(x["tokens"] for x in prefills))
    p = statistics.median(lv["prompt_per_generated"] for lv in levels)
    measured = server_load.round_ratios(levels, 4, 1)
    if d1 is None or d4 is None:
        print("no 1-row or no 4-row decode calls were seen: no ceiling")
        return 1
    need = needed_d4(d1, p, c, 2.5)
    print(f"d1 {d1:.2f} ms, d4 {d4:.2f} ms (d4 / d1 {d4 / d1:.2f}), p {p:.2f}, c {c:.3f} ms a prompt token")
    print(f"4 / 1 measured {statistics.median(measured):.2f}x (rounds {measured}); ceiling at these costs "
          f"{ceiling(d1, d4, p, c):.2f}x; 2.5x needs d4 <= {need:.2f} ms ({need / d1:.2f} x d1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
