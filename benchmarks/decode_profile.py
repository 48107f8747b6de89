"""Where a decode step of the default model goes, op by op, at several batch shapes: the engine's own op
times (a build with the CMake option STRATA_OP_TIMES=ON: _engine.op_times()), the Python call around
the forward pass, and the server's greedy sampler per row.

    cmake -S . -B /tmp/prof -G Ninja -DSTRATA_OP_TIMES=ON -DPython_EXECUTABLE=$PWD/.venv/bin/python \\
          -DCMAKE_PREFIX_PATH=$PWD/.venv/lib/python3.11/site-packages && ninja -C /tmp/prof
    .venv/bin/python benchmarks/decode_profile.py /tmp/prof/_engine*.so --history 400 --shapes 1,2,4,4x2

A shape R or RxT is R contexts of --history tokens, each fed T tokens a step (T = 1: Engine.decode;
T > 1: Engine.extend, lookup decoding's verify step). Every shape runs in its own process, --windows
windows of 8 steps; the table gives ms a step, each op's least over the windows (and the median step). An op's time is the
caller's wall time up to its join (idle threads included); "pool idle" is threads x forward minus all threads'
time inside chunks. A second table gives each product op's weights a step (every layer's tensors, GGUF bytes)
over its time: the rate the engine streams them at. --model PATH profiles another GGUF than the default model
(a generated Q4_K_M-shaped one, say). Not a test (no assertion).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# op -> (weight tensors it reads, in the file's layer 0 or by name)
PRODUCTS = {"qkv": ("attn_q", "attn_k", "attn_v"), "wo": ("attn_output",), "gate_up": ("ffn_gate", "ffn_up"),
            "down": ("ffn_down",), "output": ("output",)}
ROWS_ORDER = ["embed", "attn_norm", "act_quant", "qkv", "rope_kv", "attention", "wo", "ffn_norm", "gate_up",
              "activation", "down", "residual", "output_norm", "output", "logits_copy"]


def parse_shape(s: str) -> tuple[int, int]:
    r, _, t = s.partition("x")
    return int(r), int(t or 1)


def worker(so: str, history: int, rows: int, per: int, windows: int, threads: int, kv_type: str,
           model: str | None = None) -> dict:
    from kv_types import load_engine_from

    load_engine_from(so)
    import strata._engine as native
    from engine_vs_llamacpp import prompt_tokens
    from strata.engine import Engine
    from strata.engine.models import default_model_path
    from strata.engine.sampling import Sampler, SamplingParams

    if not native.op_times():
        raise SystemExit(f"{so} was built without STRATA_OP_TIMES: no op times")
    e = Engine(model or str(default_model_path()), n_ctx=history + 64, n_slots=rows, slot_ctx=history + 64, n_threads=threads,
               kv_type=kv_type)
    toks = prompt_tokens(e.n_vocab, history + 8 * per + 8)
    ctxs = [0] if rows == 1 else list(range(1, rows + 1))
    for c in ctxs:
        e.prefill(c, toks[:history])
    sampler = Sampler(SamplingParams(temperature=0.0), n_vocab=e.n_vocab)
    results = []
    for w in range(windows + 1):   # the first window warms up
        for c in ctxs:
            e.truncate(c, history)
        native.op_times(reset=True)
        t_sample = 0.0
        t0 = time.perf_counter()
        for i in range(8):
            if per == 1:
                logits = e.decode(ctxs, [toks[history + i]] * rows)
            else:
                logits = e.extend([(c, toks[history + per * i: history + per * (i + 1)]) for c in ctxs])
            s0 = time.perf_counter()
            for row in logits:
                sampler.sample(row, ())
            t_sample += time.perf_counter() - s0
        wall = time.perf_counter() - t0
        ops = {k: ns / 8 / 1e6 for k, (ns, _) in native.op_times().items()}
        ops["sampler"] = t_sample / 8 * 1000
        ops["call"] = (wall - t_sample) / 8 * 1000 - ops["forward"]
        ops["step"] = wall / 8 * 1000
        if w:
            results.append(ops)
    # each op's least time over the windows (a busy machine's preemptions land in some windows, not all)
    best = {k: min(o[k] for o in results) for k in results[0]}
    best["step median"] = sorted(o["step"] for o in results)[len(results) // 2]
    return best


def weight_types(model: str | None = None) -> dict[str, str]:
    from strata.engine import GGUFFile
    from strata.engine.models import default_model_path

    f = GGUFFile(model or default_model_path())
    types = {}
    for t in f.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk" and parts[1] == "0":
            types[parts[2]] = str(t.type)
        elif parts[0] != "blk":
            types[parts[0]] = str(t.type)
    types.setdefault("output", types.get("token_embd", "?") + " (tied to token_embd)")
    return types


def weight_bytes(model: str | None = None) -> dict[str, int]:
    """Bytes of weights each product op reads a step (every layer's tensors of PRODUCTS[op])."""
    from strata.engine import GGUFFile
    from strata.engine.models import default_model_path

    f = GGUFFile(model or default_model_path())
    kind = {name: op for op, names in PRODUCTS.items() for name in names}
    out = dict.fromkeys(PRODUCTS, 0)
    names = {t.name for t in f.tensors}
    for t in f.tensors:
        parts = t.name.split(".")
        name = parts[2] if parts[0] == "blk" else parts[0]
        if name == "token_embd" and "output.weight" not in names:
            name = "output"   # tied: the output product reads token_embd
        if name in kind:
            out[kind[name]] += t.n_bytes
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", help="an _engine .so built with STRATA_OP_TIMES=ON")
    ap.add_argument("--history", type=int, default=400)
    ap.add_argument("--shapes", default="1,2,4,4x2")
    ap.add_argument("--windows", type=int, default=25)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-type", default="f16", choices=("f16", "q8_0"))
    ap.add_argument("--model", help="GGUF file (default: the default model)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        r, t = parse_shape(args.worker)
        print(json.dumps(worker(args.build, args.history, r, t, args.windows, args.threads, args.kv_type, args.model)))
        return 0
    if min(args.history, args.windows, args.threads) < 1:
        ap.error("--history, --windows and --threads must be at least 1")
    if not Path(args.build).is_file():
        ap.error(f"no file {args.build}")
    if args.model and not Path(args.model).is_file():
        ap.error(f"--model: no file {args.model}")
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for s in shapes:
        r, t = parse_shape(s)
        if r < 1 or t < 1:
            ap.error(f"bad shape {s!r}")
    table = {}
    for s in shapes:
        out = subprocess.run([sys.executable, __file__, args.build, "--worker", s, "--history", str(args.history),
                              "--windows", str(args.windows), "--threads", str(args.threads), "--kv-type", args.kv_type]
                             + (["--model", args.model] if args.model else []),
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        table[s] = json.loads(out.stdout)
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    types = weight_types(args.model)
    print("| op | weights | " + " | ".join(f"{s} ms" for s in shapes) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in shapes) + " |")
    for op in ROWS_ORDER + ["forward", "pool idle", "call", "sampler", "step", "step median"]:
        if op == "pool idle":
            vals = [args.threads * table[s]["forward"] - table[s]["pool_busy"] for s in shapes]
        else:
            vals = [table[s][op] for s in shapes]
        w = ", ".join(f"{n} {types.get(n, '?')}" for n in PRODUCTS.get(op, ()))
        print(f"| {op} | {w} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    # each product op's weights over its time: the rate the engine streams them at (one row: the whole op)
    sizes = weight_bytes(args.model)
    print("\n| product op | MB a step | " + " | ".join(f"{s} GB/s" for s in shapes) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in shapes) + " |")
    for op, size in sizes.items():
        rates = [size / (table[s][op] * 1e6) for s in shapes]
        print(f"| {op} | {size / 1e6:.1f} | " + " | ".join(f"{r:.1f}" for r in rates) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
