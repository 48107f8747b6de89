"""Strata's engine against llama.cpp on the same GGUF, same threads, alternating runs in one session.

What it does: runs each engine in its own subprocess (Strata with this interpreter, llama.cpp with
--llama-python, an environment where `import llama_cpp` works), ROUNDS times, alternating, and
prints every figure and the ratio Strata / llama.cpp of the medians: prefill tokens/s at 512 and
2048 tokens, decode tokens/s over 128 tokens after a 512-token prompt, and batched decode tokens/s
with 4 sequences (each after its own 512-token prompt). Same random prompt tokens for both.
llama.cpp runs through its C API (llama-cpp-python's bindings) with its default context settings
(flash attention auto, f16 KV, n_batch = n_ubatch = 512), one KV stream per sequence.

    .venv/bin/python benchmarks/engine_vs_llamacpp.py --threads 2 \\
        --llama-python /work/refenv/venv/bin/python [--model PATH] [--rounds 3] [--json]

`--clock cpu` times each figure in the worker's CPU seconds (all its threads, spinning ones too) instead of
wall seconds (load_s stays wall time): with --threads 1, each engine's own work on a machine shared past its
cores, where a wall-clock figure is mostly the wait for a core (session 33's VM at load 8-16).

`--backend cuda` runs Strata's CUDA backend and llama.cpp with every layer offloaded (n_gpu_layers 999;
its wheel must be a CUDA build for that to mean anything). `--strata-only` skips llama.cpp (a machine
without llama-cpp-python): the figures are printed without ratios.

What it is not: a test (no assertion), or a server benchmark (benchmarks/server_load.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

N_PROMPT, N_DECODE, N_BATCH, PREFILLS = 512, 128, 4, (512, 2048)
# what the workers time with (load_s is always wall time): --clock cpu sets process_time
clock = time.perf_counter
KEYS = ("prefill_512_tps", "prefill_2048_tps", "decode_tps", "batched4_tps", "load_s")


def prompt_tokens(n_vocab: int, n: int) -> list[int]:
    # deterministic pseudo-random ids (no numpy needed in the llama.cpp environment)
    x, out = 12345, []
    for _ in range(n):
        x = (1103515245 * x + 12345) % (1 << 31)
        out.append(10 + x % (n_vocab - 10))
    return out


# ---------------------------------------------------------------------------------------------
# workers (each run in its own process)

def worker_strata(model: str, threads: int, backend: str = "cpu") -> dict:
    from strata.engine import Engine

    t0 = time.perf_counter()
    n_ctx = max(PREFILLS) + 8
    e = Engine(model, n_ctx=n_ctx, n_slots=N_BATCH, slot_ctx=N_PROMPT + N_DECODE + 8, n_threads=threads,
               backend=backend)
    r = {"load_s": time.perf_counter() - t0, "engine": e.backend, "large_pages": e.large_pages, "gpu": e.gpu()}
    toks = prompt_tokens(e.n_vocab, n_ctx)
    e.prefill(0, toks[:32])
    for n in PREFILLS:
        e.truncate(0, 0)
        t0 = clock()
        e.prefill(0, toks[:n])
        r[f"prefill_{n}_tps"] = n / (clock() - t0)
    e.truncate(0, 0)
    e.prefill(0, toks[:N_PROMPT])
    steps = toks[N_PROMPT : N_PROMPT + N_DECODE]
    t0 = clock()
    for t in steps:
        e.decode([0], [t])
    r["decode_tps"] = N_DECODE / (clock() - t0)
    ctxs = list(range(1, N_BATCH + 1))
    for c in ctxs:
        e.prefill(c, toks[:N_PROMPT])
    t0 = clock()
    for t in steps:
        e.decode(ctxs, [t] * N_BATCH)
    r["batched4_tps"] = N_BATCH * N_DECODE / (clock() - t0)
    return r


def worker_llama(model: str, threads: int, backend: str = "cpu") -> dict:
    import llama_cpp as L

    L.llama_backend_init()
    t0 = time.perf_counter()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 999 if backend == "cuda" else 0
    mdl = L.llama_model_load_from_file(model.encode(), mp)
    cp = L.llama_context_default_params()
    n_seq_ctx = max(PREFILLS) + 64
    cp.n_ctx = n_seq_ctx * N_BATCH  # one KV stream of n_seq_ctx cells per sequence
    cp.n_batch = cp.n_ubatch = 512
    cp.n_seq_max = N_BATCH
    cp.n_threads = cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(mdl, cp)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    offload = ", all layers on the GPU" if backend == "cuda" and L.llama_supports_gpu_offload() else ""
    r = {"load_s": time.perf_counter() - t0, "engine": f"llama.cpp (llama-cpp-python {L.__version__}{offload})"}
    mem = L.llama_get_memory(ctx)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(mdl))
    batch = L.llama_batch_init(512, 0, N_BATCH)

    def run(rows: list[tuple[int, int, int]]) -> None:  # (token, pos, seq); logits for every row
        batch.n_tokens = len(rows)
        for i, (tok, pos, seq) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if (len(rows) <= N_BATCH or i == len(rows) - 1) else 0
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def prefill(seq: int, toks: list[int]) -> None:
        for b in range(0, len(toks), 512):
            run([(t, b + i, seq) for i, t in enumerate(toks[b : b + 512])])

    toks = prompt_tokens(n_vocab, max(PREFILLS))
    prefill(0, toks[:32])
    for n in PREFILLS:
        L.llama_memory_clear(mem, True)
        t0 = clock()
        prefill(0, toks[:n])
        r[f"prefill_{n}_tps"] = n / (clock() - t0)
    L.llama_memory_clear(mem, True)
    prefill(0, toks[:N_PROMPT])
    steps = toks[N_PROMPT : N_PROMPT + N_DECODE]
    t0 = clock()
    for i, t in enumerate(steps):
        run([(t, N_PROMPT + i, 0)])
    r["decode_tps"] = N_DECODE / (clock() - t0)
    L.llama_memory_clear(mem, True)
    for s in range(N_BATCH):
        prefill(s, toks[:N_PROMPT])
    t0 = clock()
    for i, t in enumerate(steps):
        run([(t, N_PROMPT + i, s) for s in range(N_BATCH)])
    r["batched4_tps"] = N_BATCH * N_DECODE / (clock() - t0)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(mdl)
    return r


# ---------------------------------------------------------------------------------------------
# driver

def run_worker(python: str, which: str, model: str, threads: int, backend: str = "cpu", clock_name: str = "wall") -> dict:
    env = dict(os.environ)
    if which == "llama":
        env.pop("PYTHONPATH", None)
    out = subprocess.run([python, os.path.abspath(__file__), "--worker", which, "--model", model,
                          "--threads", str(threads), "--backend", backend, "--clock", clock_name], capture_output=True, text=True,
                         env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{which} worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="GGUF file (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--llama-python", default="/work/refenv/venv/bin/python",
                    help="interpreter where `import llama_cpp` works")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"), help="Strata's backend (and llama.cpp's offload)")
    ap.add_argument("--strata-only", action="store_true", help="skip llama.cpp (no ratios)")
    ap.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                    help="time the figures in wall seconds, or in each worker's CPU seconds (all its threads: a machine "
                         "shared past its cores, with --threads 1)")
    ap.add_argument("--worker", choices=("strata", "llama"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.clock == "cpu":
        global clock
        clock = time.process_time
    model = args.model
    if model is None:
        if args.worker == "llama":
            raise SystemExit("--model is required for the llama worker")
        from strata.engine.models import default_model_path

        model = str(default_model_path())
    if args.worker:
        fn = worker_strata if args.worker == "strata" else worker_llama
        print(json.dumps(fn(model, args.threads, args.backend)))
        return 0

    runs: dict[str, list[dict]] = {"strata": [], "llama": []}
    engines = (("strata", sys.executable),) if args.strata_only else (("strata", sys.executable),
                                                                        ("llama", args.llama_python))
    for i in range(args.rounds):
        for which, python in engines:
            r = run_worker(python, which, model, args.threads, args.backend, args.clock)
            runs[which].append(r)
            if not args.json:
                print(f"round {i + 1} {which:7s} " + "  ".join(f"{k} {r[k]:8.2f}" for k in KEYS), flush=True)
    med = {w: {k: statistics.median(r[k] for r in rs) for k in KEYS} for w, rs in runs.items() if rs}
    if args.strata_only:
        summary = {"model": model, "threads": args.threads, "rounds": args.rounds, "backend": args.backend,
                   "strata": med["strata"], "strata_engine": runs["strata"][0]["engine"],
                   "gpu": runs["strata"][0].get("gpu"),
                   "strata_batched_over_single": med["strata"]["batched4_tps"] / med["strata"]["decode_tps"]}
        print(json.dumps(summary) if args.json else "\n".join(f"{k:18s} {v:10.2f}" for k, v in med["strata"].items()))
        return 0
    ratio = {k: med["strata"][k] / med["llama"][k] for k in KEYS}
    summary = {"model": model, "threads": args.threads, "rounds": args.rounds, "strata": med["strata"],
               "llama_cpp": med["llama"], "ratio_strata_over_llama": ratio,
               "strata_batched_over_single": med["strata"]["batched4_tps"] / med["strata"]["decode_tps"],
               "llama_batched_over_single": med["llama"]["batched4_tps"] / med["llama"]["decode_tps"],
               "strata_engine": runs["strata"][0]["engine"], "llama_engine": runs["llama"][0]["engine"]}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"\nmedians of {args.rounds} rounds, {args.threads} threads, {os.path.basename(model)}")
    print(f"{'figure':18s} {'strata':>10s} {'llama.cpp':>10s} {'ratio':>7s}")
    for k in KEYS:
        print(f"{k:18s} {med['strata'][k]:10.2f} {med['llama'][k]:10.2f} {ratio[k]:7.2f}")
    print(f"batched4 / decode: strata {summary['strata_batched_over_single']:.2f}x, "
          f"llama.cpp {summary['llama_batched_over_single']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
