"""An agent's turn at depth: reading a prompt piece (a tool result, ~1,000 tokens) on top of a long
history, the engine alone, in the chunks the server reads a lone request's prompt in (--prefill-chunk,
512: one Engine.prefill call of the whole piece, as server/scheduler.py's _prefill_chunk does when no
other request is generating).

What it does: one worker process per build (--engine-so, repeatable; default the installed engine) and
optionally llama.cpp (--llama-python), each holding the longest history in one context (the engine's
restored from a snapshot made once with one prefill and kept in --snapshot-dir, so every build reads the
same KV bytes; llama.cpp's made by one prefill). Then --rounds times, per history H (and 0: the
products alone), every worker in turn cuts its context back to H and reads the piece: the builds
alternate per measurement, so the shared cores' noise falls on all of them alike. Prints per worker the
best tokens/s and the median, the attention's multiply-adds per second of the best call (sum over the
piece's tokens of position x n_head x head_dim x 2 x n_layer: "history x 9 x 64 x 2 x 30" on the
default model) and of what the history adds alone (its multiply-adds over the call's time less the same
piece's at history 0: the products and the piece's attention to itself), and the ratios of the best
times.

    .venv/bin/python benchmarks/prefill_depth.py [--histories 500,2000,4000,8000,16000,32000] \
        [--piece 1000] [--rounds 3] [--kv-type f16,q8_0] [--engine-so A.so --engine-so B.so] \
        [--llama-python /tmp/llamavenv/bin/python] [--clock cpu]

`--clock cpu` times each read in the worker's CPU seconds (all its threads, spinning ones too) instead of
wall time: on a machine shared past its cores (use --threads 1), where a wall-clock read is mostly the
wait for a core.

What it is not: a test, or the server's rate (benchmarks/prefill_depth_server.py reads through a live
`strata serve`).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_HISTORIES = "500,2000,4000,8000,16000,32000"
LLAMA = "llama.cpp"


def tokens(n: int) -> list[int]:
    return [10 + (i * 7919) % 40000 for i in range(n)]


def attention_macs(shape: list[int], h0: int, n: int) -> float:
    """Multiply-adds of scores and values for tokens at positions h0 .. h0 + n - 1 (each sees pos + 1);
    shape: n_head, head_dim, n_layer."""
    n_head, head_dim, n_layer = shape
    positions = n * h0 + n * (n + 1) / 2
    return positions * n_head * head_dim * 2 * n_layer


def clock(a: argparse.Namespace):
    """The timed reads' clock: wall (perf_counter) or the worker's CPU seconds (--clock cpu: process_time)."""
    return time.process_time if a.clock == "cpu" else time.perf_counter


# ---- workers: set up, print "ready SHAPE", then per line H on stdin read the piece at history H and
# print its seconds (H = -1: the whole history put back, 0 s)

def engine_worker(a: argparse.Namespace, longest: int):
    from strata.engine import Engine
    from strata.engine.models import default_model_path

    model = a.model or str(default_model_path())
    e = Engine(model, n_ctx=(longest + a.piece + 255) // 256 * 256, n_threads=a.threads, kv_type=a.kv_type,
               max_chunk=a.chunk)
    toks = tokens(longest + a.piece)
    snap = Path(a.snapshot_dir) / f"depth-{Path(model).stem}-{a.kv_type}-{longest}.snap"
    if snap.is_file():
        image = snap.read_bytes()
        e.restore(0, image)
    elif longest:
        t0 = time.perf_counter()
        e.prefill(0, toks[:longest], chunk=a.chunk)
        print(f"# history of {longest} tokens made in {time.perf_counter() - t0:.1f} s (one prefill)",
              file=sys.stderr, flush=True)
        snap.parent.mkdir(parents=True, exist_ok=True)
        image = e.snapshot(0)
        snap.write_bytes(image)
    if e.context_len(0) != longest:
        raise SystemExit(f"snapshot {snap} holds {e.context_len(0)} tokens, not {longest}")

    def read(h: int) -> float:   # h < 0: the whole history back (truncation only shortens)
        if h < 0:
            e.restore(0, image)
            return 0.0
        e.truncate(0, h)
        t0 = clock(a)()
        e.prefill(0, toks[h:h + a.piece], chunk=a.chunk)
        dt = clock(a)() - t0
        e.truncate(0, h)
        return dt

    return read, [e.n_head, e.head_dim, e.n_layer]


def llama_worker(a: argparse.Namespace, longest: int):
    """llama-cpp-python's low-level API, CPU, --threads, batches of --chunk."""
    import llama_cpp as L

    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    if a.llama_no_extra:   # llama-cpp-python 0.3.36's AMX repack of Q4_1 crashes llama_decode on session 27's Xeon
        mp.use_extra_bufts = False
    mdl = L.llama_model_load_from_file(a.model.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx = (longest + a.piece + 255) // 256 * 256
    cp.n_batch = cp.n_ubatch = a.chunk
    cp.n_threads = cp.n_threads_batch = a.threads
    ctx = L.llama_init_from_model(mdl, cp)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(a.chunk, 0, 1)
    toks = tokens(longest + a.piece)

    def feed(first: int, part: list[int]) -> None:
        for b in range(0, len(part), a.chunk):
            rows = part[b:b + a.chunk]
            batch.n_tokens = len(rows)
            for i, tok in enumerate(rows):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, first + b + i, 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1 if i == len(rows) - 1 else 0
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")

    t0 = time.perf_counter()
    feed(0, toks[:longest])
    print(f"# llama.cpp: history of {longest} tokens made in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr, flush=True)
    size = L.llama_state_seq_get_size(ctx, 0)
    image = (ctypes.c_uint8 * size)()
    if L.llama_state_seq_get_data(ctx, image, size, 0) != size:
        raise RuntimeError("llama.cpp: the history's state could not be read")

    def read(h: int) -> float:
        if h < 0:
            L.llama_memory_seq_rm(mem, 0, -1, -1)
            if L.llama_state_seq_set_data(ctx, image, size, 0) != size:
                raise RuntimeError("llama.cpp: the history's state could not be set")
            return 0.0
        L.llama_memory_seq_rm(mem, 0, h, -1)
        t0 = clock(a)()
        feed(h, toks[h:h + a.piece])
        dt = clock(a)() - t0
        L.llama_memory_seq_rm(mem, 0, h, -1)
        return dt

    return read, []


def serve_worker(a: argparse.Namespace) -> int:
    longest = max(a.histories)
    if a.llama:
        read, shape = llama_worker(a, longest)
    else:
        if a.engine_so:
            from kv_types import load_engine_from

            load_engine_from(a.engine_so[0])
        read, shape = engine_worker(a, longest)
    print("ready " + ",".join(map(str, shape)), flush=True)
    for line in sys.stdin:
        print(f"{read(int(line)):.6f}", flush=True)
    return 0


# ---- the driver

def table(a: argparse.Namespace, shape: list[int], times: dict[str, dict[int, list[float]]]) -> None:
    names = [n for n in times if n != LLAMA]
    print(f"piece {a.piece} tokens in chunks of {a.chunk}, {a.threads} threads, {a.kv_type} KV, {a.clock} clock, {a.rounds} "
          f"rounds, builds alternated per measurement; tok/s best (median)")
    head, rule = "| history |", "| ---: |"
    for n in names:
        head += f" {n} tok/s | {n} attn G/s | {n} attn share G/s |"
        rule += " ---: | ---: | ---: |"
    if len(names) > 1:
        head += f" {names[-1]} / {names[0]} |"
        rule += " ---: |"
    if LLAMA in times:
        head += f" {LLAMA} tok/s |" + "".join(f" {n} / {LLAMA} |" for n in names)
        rule += " ---: |" * (1 + len(names))
    print(head)
    print(rule)

    def rate(xs: list[float]) -> str:
        return f"{a.piece / min(xs):,.0f} ({a.piece / statistics.median(xs):,.0f})"

    for h in [0, *a.histories]:
        line = f"| {h:,} |"
        macs = attention_macs(shape, h, a.piece)
        extra = macs - attention_macs(shape, 0, a.piece)   # what the history adds
        for n in names:
            best, zero = min(times[n][h]), min(times[n][0])
            line += f" {rate(times[n][h])} | {macs / best / 1e9:.0f} |"
            line += f" {extra / (best - zero) / 1e9:.0f} |" if h and best > zero else " - |"
        if len(names) > 1:
            line += f" {min(times[names[0]][h]) / min(times[names[-1]][h]):.2f}x |"
        if LLAMA in times:
            ll = min(times[LLAMA][h])
            line += f" {rate(times[LLAMA][h])} |" + "".join(f" {ll / min(times[n][h]):.2f}x |" for n in names)
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="GGUF file (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--histories", default=DEFAULT_HISTORIES, help="comma-separated tokens")
    ap.add_argument("--piece", type=int, default=1000, help="tokens read on top of each history")
    ap.add_argument("--chunk", type=int, default=512, help="the server's --prefill-chunk")
    ap.add_argument("--rounds", type=int, default=3, help="measurements per history and worker")
    ap.add_argument("--kv-type", default="f16", help="f16 or q8_0, or both comma-separated (a worker each)")
    ap.add_argument("--snapshot-dir", default="/tmp/strata-prefill-depth")
    ap.add_argument("--engine-so", action="append", default=[], help="a build to load (repeat to compare)")
    ap.add_argument("--llama-python", help="an interpreter where `import llama_cpp` works: llama.cpp alongside")
    ap.add_argument("--llama-no-extra", action="store_true",
                    help="llama.cpp without its extra weight buffers (AMX repack): use_extra_bufts = False")
    ap.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                    help="time the reads in wall seconds, or in each worker's CPU seconds (all its threads: a machine "
                         "shared past its cores, with --threads 1)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)   # one build's process
    ap.add_argument("--llama", action="store_true", help=argparse.SUPPRESS)    # with --worker: llama.cpp
    a = ap.parse_args()
    a.histories = sorted({int(h) for h in a.histories.split(",") if h})
    if a.piece < 1 or a.rounds < 1 or not a.histories or a.histories[0] < 1:
        ap.error("--piece, --rounds and the histories must be positive")
    if a.worker:
        return serve_worker(a)
    from strata.engine.models import default_model_path

    model = a.model or str(default_model_path())
    common = [__file__, "--worker", "--threads", str(a.threads), "--piece", str(a.piece), "--chunk", str(a.chunk),
              "--clock", a.clock, "--histories", ",".join(map(str, a.histories)), "--snapshot-dir",
              a.snapshot_dir, "--model", model]
    kv_types = a.kv_type.split(",")
    cmds = {}
    for b in a.engine_so or [""]:
        for kv in kv_types:
            name = (Path(b).stem if b else "installed") + (f" {kv}" if len(kv_types) > 1 else "")
            cmds[name] = [sys.executable, *common, "--kv-type", kv, *(["--engine-so", b] if b else [])]
    if a.llama_python:
        cmds[LLAMA] = [a.llama_python, *common, "--kv-type", "f16", "--llama", *(["--llama-no-extra"] if a.llama_no_extra else [])]
    procs: dict[str, subprocess.Popen] = {}
    shape: list[int] = []
    try:
        for name, cmd in cmds.items():   # one at a time: a history being made has the cores to itself
            procs[name] = p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                               stderr=subprocess.DEVNULL if name == LLAMA else None)
            ready = [""]
            while ready[0] != "ready":   # llama.cpp's loader may print lines of its own first
                line = p.stdout.readline()
                if not line:
                    raise SystemExit(f"worker {name} did not start")
                ready = line.split() or [""]
            if name != LLAMA:
                shape = [int(x) for x in ready[1].split(",")]
            print(f"# {name} ready", file=sys.stderr, flush=True)
        times: dict[str, dict[int, list[float]]] = {n: {h: [] for h in [0, *a.histories]} for n in procs}
        for r in range(a.rounds):
            for h in [-1, *reversed(a.histories), 0]:   # -1: the whole history back; then longest first
                for name, p in procs.items():
                    p.stdin.write(f"{h}\n")
                    p.stdin.flush()
                    dt = float(p.stdout.readline())
                    if h >= 0:
                        times[name][h].append(dt)
            print(f"# round {r + 1} done", file=sys.stderr, flush=True)
    finally:
        for p in procs.values():
            if p.stdin:
                p.stdin.close()
            p.wait(timeout=120)
    table(a, shape, times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
