"""A clean stop's time with and without writing the histories the disk levels let go within it (cache.stop_writes).

Session 37's soak: the first stop parked four slot histories of 172.4, 143.3, 159.9 and 209.1 MiB (each over warm's
128 MiB) straight to cold (320 MiB), which kept the last and let the others go within three seconds: 685 MiB
written for 209. This replays that stop on real files with the simulated engine (1 MiB of KV a token, so the sizes
are the soak's): the parks, then the cache's close, timed together, bare (as before) and inside stop_writes (as
the scheduler's stop now runs them), alternated on fresh folders. It prints each run's seconds, the image MiB it
wrote and what cold holds after it (the same in both). The bare parks overlap the first writes (the spill writer
starts at once); the held ones do not.

    .venv/bin/python benchmarks/stop_unkept_writes.py [--rounds 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata.server.cache import CacheConfig, ConversationCache  # noqa: E402
from strata.server.cache.fileio import FileIO  # noqa: E402
from strata.server.cache.memory import FixedMemory  # noqa: E402

from tests.cache.sim_engine import SimEngine, SimFormat  # noqa: E402

MIB = 1 << 20
SIZES_MIB = (172, 143, 160, 209)   # the soak's four slot histories, in the stop's order (tokens of 1 MiB)


class CountingIO(FileIO):
    def __init__(self) -> None:
        self.image_bytes = 0

    def write(self, f, data) -> None:
        if ".img." in f.name:
            self.image_bytes += len(data)
        super().write(f, data)


def one_stop(root: Path, held: bool) -> tuple[float, float, float, list[int]]:
    io = CountingIO()
    cfg = CacheConfig.from_values({
        "conversation_cache_mib": 0, "conversation_cache_park": "disk",
        "conversation_cache_warm_dir": str(root / "warm"), "conversation_cache_warm_mib": 128,
        "conversation_cache_cold_dir": str(root / "cold"), "conversation_cache_cold_mib": 320,
        "conversation_cache_min_free_mib": 2560, "conversation_cache_park_min_free_mib": 512}, {})
    engine = SimEngine(n_slots=len(SIZES_MIB), piece_bytes=16 * MIB, bytes_per_token=MIB)
    for ctx, n in enumerate(SIZES_MIB, start=1):
        engine.prefill(ctx, [1 + ctx] + [100 + (ctx * 31 + i) % 5000 for i in range(n - 1)])
    cache = ConversationCache(cfg, engine, image_format=SimFormat, memory=FixedMemory(100_000), io=io,
                              piece_bytes=16 * MIB)
    t0 = time.monotonic()
    if held:
        with cache.stop_writes():
            for ctx in range(1, len(SIZES_MIB) + 1):
                cache.park(ctx, "server stopped")
    else:
        for ctx in range(1, len(SIZES_MIB) + 1):
            cache.park(ctx, "server stopped")
    parked = time.monotonic() - t0   # the captures (the simulated engine's copies); the writes are close's
    cache.close(progress=lambda *a: None)
    seconds = time.monotonic() - t0
    cold = cache.cascade.levels[-1]
    kept = [int(e.tokens[0]) - 1 for e in sorted(cold.entries.values(), key=lambda e: e.sealed_at)]
    return seconds, parked, io.image_bytes / MIB, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the runs' folders are made")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    times: dict[str, list[float]] = {"bare": [], "held": []}
    closes: dict[str, list[float]] = {"bare": [], "held": []}   # the stop after its parks: the writes left
    for r in range(args.rounds):
        for name in (("bare", "held") if r % 2 == 0 else ("held", "bare")):
            root = Path(tempfile.mkdtemp(prefix=f"stop-{name}-", dir=args.dir))
            try:
                s, parked, mib, kept = one_stop(root, name == "held")
            finally:
                shutil.rmtree(root, ignore_errors=True)
            times[name].append(s)
            closes[name].append(s - parked)
            print(f"round {r + 1} {name}: {s:.2f} s ({parked:.2f} s of it the parks), {mib:.1f} MiB of images written, cold holds contexts {kept}",
                  flush=True)
    for what, d in (("whole stop", times), ("after the parks", closes)):
        b, h = sorted(d["bare"]), sorted(d["held"])
        mb, mh = b[len(b) // 2], h[len(h) // 2]
        print(f"{what}: median bare {mb:.2f} s, held {mh:.2f} s: {mb / mh:.2f}x")


if __name__ == "__main__":
    main()
