"""Decode at long histories (what an agent's main conversation pays per token once it is long): Strata
against llama.cpp on the same GGUF, same threads, each engine in its own subprocess, ROUNDS alternating
rounds; prints tokens/s and the ratio Strata / llama.cpp of the medians at each history, one row.
With --engine-so OLD, an older Strata build runs as a third engine (old / new side by side).

    .venv/bin/python benchmarks/long_decode.py --threads 2 --llama-python /work/refenv/venv/bin/python \\
        [--histories 2048,8192] [--rounds 3] [--steps 48] [--engine-so OLD.so] [--strata-only] [--backend cuda] \\
        [--kv-type q8_0] [--clock cpu]

Each engine reads the longest history once, then for each history (longest first) cuts its context
back to that length and times --steps decode steps. `--backend cuda` runs Strata's CUDA backend and
llama.cpp with every layer on the GPU (benchmarks/gpu_check.sh). `--kv-type q8_0` holds both engines'
KV in q8_0 (llama.cpp's K and V caches q8_0, with its flash attention, which a quantized V needs).
`--clock cpu` times the steps in each worker's CPU seconds (all its threads, spinning ones too) instead of
wall time: on a machine shared past its cores (use --threads 1), where a wall-clock step is mostly the
wait for a core. Not a test (no assertion).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_vs_llamacpp import prompt_tokens  # noqa: E402


def clock_of(name: str):
    """The workers' clock: wall (perf_counter) or this process's CPU seconds (process_time)."""
    return time.process_time if name == "cpu" else time.perf_counter


def worker_strata(model: str, threads: int, histories: list[int], steps: int, engine_so: str | None,
                  backend: str = "cpu", kv_type: str = "f16", clock: str = "wall") -> dict:
    if engine_so:
        from kv_types import load_engine_from

        load_engine_from(engine_so)
    from strata.engine import Engine

    longest = max(histories)
    e = Engine(model, n_ctx=longest + steps + 8, n_threads=threads, backend=backend, kv_type=kv_type)
    now = clock_of(clock)
    toks = prompt_tokens(e.n_vocab, longest + steps)
    e.prefill(0, toks[:longest])
    r = {}
    for h in sorted(histories, reverse=True):
        e.truncate(0, h)
        t0 = now()
        for t in toks[h : h + steps]:
            e.decode([0], [t])
        r[str(h)] = steps / (now() - t0)
    return r


def worker_llama(model: str, threads: int, histories: list[int], steps: int, backend: str = "cpu",
                 kv_type: str = "f16", clock: str = "wall") -> dict:
    import llama_cpp as L

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 999 if backend == "cuda" else 0
    mdl = L.llama_model_load_from_file(model.encode(), mp)
    cp = L.llama_context_default_params()
    longest = max(histories)
    cp.n_ctx = longest + steps + 64
    cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = threads
    if kv_type == "q8_0":   # a quantized V cache needs llama.cpp's flash attention
        cp.type_k = cp.type_v = L.GGML_TYPE_Q8_0
        cp.flash_attn_type = 1   # LLAMA_FLASH_ATTN_TYPE_ENABLED
    ctx = L.llama_init_from_model(mdl, cp)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(512, 0, 1)
    toks = prompt_tokens(L.llama_vocab_n_tokens(L.llama_model_get_vocab(mdl)), longest + steps)

    def run(first: int, part: list[int]) -> None:   # positions first.., logits for the last
        batch.n_tokens = len(part)
        for i, t in enumerate(part):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, first + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i == len(part) - 1 else 0
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    for b in range(0, longest, 512):
        run(b, toks[b : min(longest, b + 512)])
    r = {}
    for h in sorted(histories, reverse=True):
        L.llama_memory_seq_rm(mem, 0, h, -1)
        now = clock_of(clock)
        t0 = now()
        for i, t in enumerate(toks[h : h + steps]):
            run(h + i, [t])
        r[str(h)] = steps / (now() - t0)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(mdl)
    return r


def run_worker(python: str, which: str, args: argparse.Namespace, engine_so: str | None = None) -> dict:
    env = dict(os.environ)
    if which == "llama":
        env.pop("PYTHONPATH", None)
    cmd = [python, os.path.abspath(__file__), "--worker", which, "--model", args.model, "--threads",
           str(args.threads), "--histories", args.histories, "--steps", str(args.steps), "--backend", args.backend,
           "--kv-type", args.kv_type, "--clock", args.clock]
    if engine_so:
        cmd += ["--engine-so", engine_so]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{which} worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF file (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--histories", default="2048,8192", help="history lengths in tokens, comma-separated")
    ap.add_argument("--steps", type=int, default=48, help="decode steps timed at each history")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--llama-python", default="/work/refenv/venv/bin/python",
                    help="a Python where `import llama_cpp` works")
    ap.add_argument("--engine-so", help="an older Strata build (its _engine .so) to run beside the installed one")
    ap.add_argument("--strata-only", action="store_true", help="skip llama.cpp (no ratios to it)")
    ap.add_argument("--backend", default="cpu", choices=("cpu", "cuda"), help="Strata's backend (and llama.cpp's offload)")
    ap.add_argument("--kv-type", default="f16", choices=("f16", "q8_0"), help="both engines' KV cache type")
    ap.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                    help="time the steps in wall seconds, or in each worker's CPU seconds (all its threads: a machine "
                         "shared past its cores, with --threads 1)")
    ap.add_argument("--worker", choices=("strata", "llama"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        histories = [int(x) for x in args.histories.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--histories must be integers separated by commas, got {args.histories!r}")
    if not histories or min(histories) < 1 or args.steps < 1 or args.rounds < 1:
        ap.error(f"--histories, --steps and --rounds must be positive, got {args.histories!r}, {args.steps}, "
                 f"{args.rounds}")
    if args.engine_so and not Path(args.engine_so).is_file():
        ap.error(f"--engine-so: no file {args.engine_so}")
    if args.model is None:
        from strata.engine.models import default_model_path

        args.model = str(default_model_path())
    if args.worker == "strata":
        print(json.dumps(worker_strata(args.model, args.threads, histories, args.steps, args.engine_so, args.backend,
                                         args.kv_type, args.clock)))
        return 0
    if args.worker == "llama":
        print(json.dumps(worker_llama(args.model, args.threads, histories, args.steps, args.backend, args.kv_type,
                                        args.clock)))
        return 0

    engines = {"strata": (sys.executable, None)}
    if args.engine_so:
        engines["strata-old"] = (sys.executable, args.engine_so)
    if not args.strata_only:
        engines["llama.cpp"] = (args.llama_python, None)
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    for rnd in range(args.rounds):
        for name, (python, so) in (engines.items() if rnd % 2 == 0 else reversed(engines.items())):
            runs[name].append(run_worker(python, "llama" if name == "llama.cpp" else "strata", args, so))
            print(f"round {rnd + 1} {name}: " + ", ".join(f"{h}: {v:.1f}" for h, v in runs[name][-1].items()),
                  flush=True)
    med = {name: {h: statistics.median(r[h] for r in rs) for h in rs[0]} for name, rs in runs.items()}
    print(f"\ndecode tok/s after a history, 1 row, {args.threads} threads, backend {args.backend}, "
          f"{args.kv_type} KV, {args.clock} clock (medians of {args.rounds} rounds):")
    for h in sorted(histories):
        line = f"  history {h}: " + ", ".join(f"{name} {m[str(h)]:.1f}" for name, m in med.items())
        if "llama.cpp" in med:
            line += f"; Strata / llama.cpp {med['strata'][str(h)] / med['llama.cpp'][str(h)]:.2f}x"
        if "strata-old" in med:
            line += f"; new / old {med['strata'][str(h)] / med['strata-old'][str(h)]:.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
