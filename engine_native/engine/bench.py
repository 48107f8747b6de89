"""`strata bench`: prefill and decode speed of a model on this machine, with the engine alone.

What it measures (random token ids, fresh contexts, wall clock around the engine calls):
prefill tokens/s for 512 and 2048 prompt tokens, decode tokens/s over 128 tokens after a 512-token
prompt, batched decode tokens/s with 4 contexts decoding together (each after the same prompt),
model load seconds, KV bytes per token. `--json` prints one JSON object with those numbers.
`--quick` is the short version the setup wizard's machine bench runs (`strata bench --quick --json` in a process of
its own, with `--stages`). On a terminal (or with `--stages`) each stage is said on standard error as it begins.
What it is not: a comparison with llama.cpp (benchmarks/engine_vs_llamacpp.py) or a server load test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from strata.monitor.units import counted

from strata.exit_status import MODEL_NOT_LOADED

FULL = {"prefill": (512, 2048), "decode": 128, "prompt": 512, "batch": 4}
QUICK = {"prefill": (128,), "decode": 16, "prompt": 128, "batch": 4}
# llama.cpp's llama-bench / llama-server spellings of these flags, for the "did you mean" hint of an unknown one
# (strata/cli.py): `strata bench -ngl 99` was 'unrecognized arguments' alone, where `strata serve -ngl` names
# --backend cuda
FLAG_SYNONYMS: dict[str, str] = {
    "-m": "--model", "-t": "--threads", "-ctk": "--kv-type", "-ctv": "--kv-type", "--cache-type-k": "--kv-type",
    "--cache-type-v": "--kv-type", "-ngl": "--backend cuda", "--n-gpu-layers": "--backend cuda",
    "--gpu-layers": "--backend cuda", "-o": "--json", "--output": "--json",
}
STAGE_PREFIX = "bench: "   # a stage line on standard error: "bench: reading a prompt of 128 tokens..."


def stage_count(quick: bool) -> int:
    """How many stages `run_bench` says: loading, each prefill, decode, batched decode."""
    return len((QUICK if quick else FULL)["prefill"]) + 3


def run_bench(model_path, threads: int | None = None, quick: bool = False, kv_type: str = "f16",
              seed: int = 0, backend: str = "cpu", progress: Callable[[str], None] | None = None) -> dict:
    """Measures one model; returns a dict of plain numbers (see the module docstring). `progress(what)` is
    told each stage as it begins (a big model's bench takes minutes)."""
    from strata.engine import Engine

    say = progress or (lambda what: None)
    plan = QUICK if quick else FULL
    n_batch, n_prompt, n_decode = plan["batch"], plan["prompt"], plan["decode"]
    n_ctx = max(max(plan["prefill"]), n_prompt + n_decode) + 8
    say(f"loading {Path(model_path).name}")
    t0 = time.perf_counter()
    engine = Engine(model_path, n_ctx=n_ctx, n_slots=n_batch, slot_ctx=n_prompt + n_decode + 8,
                    n_threads=threads, kv_type=kv_type, backend=backend)
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    tokens = rng.integers(10, engine.n_vocab, size=n_ctx).astype(np.int32)
    result: dict = {
        "model": str(model_path), "arch": engine.arch, "threads": engine.n_threads, "backend": engine.backend,
        "large_pages": engine.large_pages, "kv_type": engine.kv_type, "load_s": round(load_s, 4),
        "kv_bytes_per_token": engine.bytes_per_token, "quick": quick,
    }
    engine.prefill(0, tokens[:32])  # warm the pages and the thread pool
    for n in plan["prefill"]:
        say(f"reading a prompt of {n} tokens")
        engine.truncate(0, 0)
        t0 = time.perf_counter()
        engine.prefill(0, tokens[:n])
        result[f"prefill_{n}_tps"] = round(n / (time.perf_counter() - t0), 2)
    result["prefill_tps"] = result[f"prefill_{plan['prefill'][0]}_tps"]

    engine.truncate(0, 0)
    engine.prefill(0, tokens[:n_prompt])
    steps = tokens[n_prompt : n_prompt + n_decode]
    say(f"generating {n_decode} tokens")
    t0 = time.perf_counter()
    for t in steps:
        engine.decode([0], [int(t)])
    result["decode_tps"] = round(n_decode / (time.perf_counter() - t0), 2)

    say(f"generating {n_decode} tokens in each of {n_batch} requests at once")
    ctxs = list(range(1, n_batch + 1))
    for c in ctxs:
        engine.copy(0, c, n_prompt)
    t0 = time.perf_counter()
    for t in steps:
        engine.decode(ctxs, [int(t)] * n_batch)
    result[f"batched{n_batch}_tps"] = round(n_batch * n_decode / (time.perf_counter() - t0), 2)
    result["batched_speedup"] = round(result[f"batched{n_batch}_tps"] / result["decode_tps"], 3)
    result["gpu"] = engine.gpu()  # device and VRAM (used by this engine, free, total) after the run, or None
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="GGUF file, or the id `strata models` shows (default: the `model` of the "
                                        "configuration file `strata serve` reads, else the default model)")
    parser.add_argument("--threads", type=int, default=None, help="threads (default: physical cores)")
    parser.add_argument("--kv-type", default="f16", choices=("f16", "q8_0"), help="KV cache type")
    parser.add_argument("--backend", default="cpu", choices=("cpu", "cuda", "auto"),
                        help="compute backend (auto: the GPU when this build has CUDA and one is present)")
    parser.add_argument("--quick", action="store_true", help="short run (128-token prefill, 16 decode steps)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--stages", action="store_true",
                        help="say each stage on standard error as it begins, also when it is not a terminal (the "
                             "setup wizard shows them)")


def progress_on_a_terminal(stages: bool = False) -> Callable[[str], None] | None:
    """A line on standard error as each stage begins, where a person watches it (a terminal): the bench was
    silent until its end (seconds on the default model, minutes on a big one). Piped, nothing, unless `stages`
    (`--stages`: the setup wizard's bench reads them from its pipe and shows them)."""
    if sys.stderr is None or not (stages or sys.stderr.isatty()):
        return None
    return lambda what: print(f"{STAGE_PREFIX}{what}...", file=sys.stderr, flush=True)


def run(args) -> int:
    from strata.engine.chat import model_to_run

    try:
        model, _ = model_to_run(args.model)   # the model set up, as `strata chat` and `strata serve` run it
    except FileNotFoundError as e:   # no such model file: strata serve's status for it, as for one it cannot load
        print(f"strata bench: {e}", file=sys.stderr)
        return MODEL_NOT_LOADED
    except ValueError as e:
        print(f"strata bench: {e}", file=sys.stderr)
        return 2
    from strata.server.options import MAX_THREADS  # serve's bound, one place

    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:   # above: pybind11's overflow traceback
        print(f"strata bench: --threads must be 1 to {MAX_THREADS}, got {args.threads}", file=sys.stderr)
        return 2
    if getattr(args, "backend", "cpu") == "cuda":
        from strata.engine.gpu import cuda_lacks_of, resolve_backend

        # what the flag asks cannot be: exit status 2, as `strata serve` gives both (the bench said 1). The
        # model's lack first: a CPU-only build would say to rebuild, for a model CUDA refuses anyway
        try:
            lacks = cuda_lacks_of(model)
        except (OSError, ValueError) as e:
            # a damaged or non-GGUF file: a traceback here, where the bench says it without --backend cuda
            from strata.engine.models import damaged_file_advice

            print(f"strata bench: {e}{damaged_file_advice(e)}", file=sys.stderr)
            return MODEL_NOT_LOADED
        if lacks:
            print(f"strata bench: --backend cuda: the CUDA backend has no {lacks}; this model runs on the CPU "
                  "(--backend cpu, or auto)", file=sys.stderr)
            return 2
        try:
            resolve_backend("cuda")   # a CPU-only build, or no device
        except ValueError as e:
            print(f"strata bench: --backend cuda: {e}", file=sys.stderr)
            return 2
    try:
        r = run_bench(model, args.threads, quick=args.quick, kv_type=args.kv_type,
                      backend=getattr(args, "backend", "cpu"), progress=progress_on_a_terminal(getattr(args, "stages", False)))
    except (OSError, ValueError) as e:
        from strata.engine.models import damaged_file_advice

        print(f"strata bench: {e}{damaged_file_advice(e)}", file=sys.stderr)
        return MODEL_NOT_LOADED   # strata serve's status for a model it cannot load (it was 1)
    if args.json:
        print(json.dumps(r))
        return 0
    print(f"model        {r['model']} ({r['arch']})")
    print(f"engine       {r['backend']}, {counted(r['threads'], 'thread')}, large pages: {r['large_pages']}, KV {r['kv_type']}")
    if r.get("gpu"):
        from strata.engine.gpu import describe_gpu

        print(f"GPU          {describe_gpu(r['gpu'])}")
    print(f"load         {r['load_s']:.3f} s")
    for key, value in r.items():
        if key.startswith("prefill_") and key != "prefill_tps":
            print(f"prefill {key.split('_')[1]:>4} {value:9.1f} tok/s")
    print(f"decode       {r['decode_tps']:9.1f} tok/s")
    bkey = next(k for k in r if k.startswith("batched") and k.endswith("_tps"))
    print(f"batched x{bkey[7:-4]}   {r[bkey]:9.1f} tok/s ({r['batched_speedup']:.2f}x single)")
    print(f"KV           {r['kv_bytes_per_token']} bytes/token")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="strata bench")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
