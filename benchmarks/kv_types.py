"""Decode speed of the two KV types (f16, q8_0) on the default model: 1 and 4 rows after a history of
N tokens each, 2 threads, the best of R repetitions of 32 steps; with --kl, how far q8_0's first-token
distribution is from f16's (KL divergence, max |logit difference|) after a chat prompt and after the
history; with --prefill, the prompt-reading speed of N tokens in one context instead. Not a test;
figures in RESULTS.md.

    .venv/bin/python benchmarks/kv_types.py [--history 2048] [--reps 3] [--kl | --prefill] [--engine-so PATH]

--engine-so loads strata._engine from that file instead of the installed one (an old build side by
side with the new, without swapping the installed file under other users).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = 32
CHAT = ("<|im_start|>system\nYou are a helpful coding assistant.<|im_end|>\n<|im_start|>user\nHere is a "
        "function:\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n\nWhat happens when xs is empty, and how "
        "should I fix it?<|im_end|>\n<|im_start|>assistant\n")


def load_engine_from(so: str) -> None:
    """Make `strata._engine` the module in `so` (before strata.engine imports it)."""
    import strata

    spec = importlib.util.spec_from_file_location("strata._engine", so)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--engine-so: cannot load {so}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["strata._engine"] = mod
    spec.loader.exec_module(mod)
    strata._engine = mod


def best_rates(kv_type: str, n_hist: int, reps: int) -> dict[int, float]:
    from engine_vs_llamacpp import prompt_tokens
    from strata.engine import Engine
    from strata.engine.models import default_model_path

    e = Engine(str(default_model_path()), n_ctx=n_hist + 64, n_slots=4, slot_ctx=n_hist + 64, n_threads=2,
               kv_type=kv_type)
    toks = prompt_tokens(e.n_vocab, n_hist + STEPS)
    for c in range(1, 5):
        e.prefill(c, toks[:n_hist])
    best: dict[int, float] = {}
    for _ in range(reps):
        for n in (1, 4):
            ctxs = list(range(1, n + 1))
            for c in ctxs:
                e.truncate(c, n_hist)
            t0 = time.perf_counter()
            for t in toks[n_hist:n_hist + STEPS]:
                e.decode(ctxs, [t] * n)
            best[n] = max(best.get(n, 0.0), n * STEPS / (time.perf_counter() - t0))
    return best


def prefill_rate(kv_type: str, n_hist: int, reps: int) -> float:
    """Best tokens/s of reading n_hist prompt tokens into an empty context (2 threads)."""
    from engine_vs_llamacpp import prompt_tokens
    from strata.engine import Engine
    from strata.engine.models import default_model_path

    e = Engine(str(default_model_path()), n_ctx=n_hist + 64, n_threads=2, kv_type=kv_type)
    toks = prompt_tokens(e.n_vocab, n_hist)
    best = 0.0
    for _ in range(reps):
        e.truncate(0, 0)
        t0 = time.perf_counter()
        e.prefill(0, toks)
        best = max(best, n_hist / (time.perf_counter() - t0))
    return best


def first_token_divergence(n_hist: int) -> None:
    """KL(f16 || q8_0) of the next-token distributions and the largest logit difference."""
    from engine_vs_llamacpp import prompt_tokens
    from strata.engine import Engine
    from strata.engine.models import default_model_path

    logits: dict[str, dict[str, np.ndarray]] = {}
    for kv in ("f16", "q8_0"):
        e = Engine(str(default_model_path()), n_ctx=n_hist + 512, n_threads=2, kv_type=kv)
        chat = e.tokenize(CHAT)
        cases = {"chat prompt": chat, f"history {n_hist} + chat": prompt_tokens(e.n_vocab, n_hist) + chat}
        logits[kv] = {}
        for name, toks in cases.items():
            e.truncate(0, 0)
            e.prefill(0, toks)
            logits[kv][name] = e.logits(0).astype(np.float64)
    for name, a in logits["f16"].items():
        b = logits["q8_0"][name]
        pa, pb = np.exp(a - a.max()), np.exp(b - b.max())
        pa, pb = pa / pa.sum(), pb / pb.sum()
        kl = float(np.sum(pa * (np.log(pa + 1e-300) - np.log(pb + 1e-300))))
        same = int(np.argmax(a)) == int(np.argmax(b))
        print(f"first token after {name}: KL(f16 || q8_0) {kl:.4f}, max |logit diff| {np.abs(a - b).max():.3f}, "
              f"same argmax {same}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--kl", action="store_true", help="print q8_0's first-token divergence from f16 and stop")
    ap.add_argument("--prefill", action="store_true", help="prefill speed of --history tokens instead of decode")
    ap.add_argument("--engine-so", help="load strata._engine from this .so (an old build, side by side)")
    args = ap.parse_args()
    if args.history < 1 or args.reps < 1:
        ap.error(f"--history and --reps must be at least 1, got {args.history} and {args.reps}")
    if args.engine_so:
        if not Path(args.engine_so).is_file():
            ap.error(f"--engine-so: no file {args.engine_so}")
        load_engine_from(args.engine_so)
    if args.kl:
        first_token_divergence(args.history)
        return 0
    for kv in ("f16", "q8_0"):
        if args.prefill:
            print(f"{kv:5s} prefill {args.history}: {prefill_rate(kv, args.history, args.reps):.0f} tok/s", flush=True)
            continue
        r = best_rates(kv, args.history, args.reps)
        print(f"{kv:5s} history {args.history}: 1 row {r[1]:.0f} tok/s, 4 rows {r[4]:.0f} tok/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
