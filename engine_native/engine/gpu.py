"""strata.engine.gpu: which compute backend to use, and what the GPU reports.

What it is: `cuda_built()` (the native module was built with STRATA_CUDA), `cuda_devices()` (usable
CUDA devices with their VRAM), `resolve_backend(name)` ("auto" -> "cuda" when a CUDA build finds a
device, else "cpu"; a clear ValueError for "cuda" where it cannot run), and `describe_gpu(info)`,
the one-line text the INFO line and `strata bench` print. The CUDA backend itself is
engine_native/cuda (docs/cuda.md).
What it is not: a device manager (the engine takes device 0), or any policy about memory.
"""

from __future__ import annotations

from strata import _engine

BACKEND_CHOICES = ("cpu", "cuda", "auto")
MIB = 1 << 20


def cuda_built() -> bool:
    """Whether this native module has the CUDA backend compiled in."""
    return bool(dict(_engine.build_info()).get("cuda"))


def cuda_devices() -> list[dict]:
    """Usable CUDA devices: index, name, compute_capability ("9.0"), vram_total, vram_free (bytes).

    Empty without a CUDA build, a driver or a device; never raises for those.
    """
    if not cuda_built():
        return []
    return [dict(d) for d in _engine.cuda_devices()]


def selftest() -> list[dict]:
    """Every CUDA kernel against host loops on small random inputs: [{name, error, limit, ok}, ...].

    For diagnosis on a GPU (benchmarks/gpu_check.sh runs it first); raises ValueError naming why it
    cannot run (no CUDA build) and RuntimeError from the runtime (no device).
    """
    if not cuda_built():
        raise ValueError("selftest: this build has no CUDA backend (see docs/cuda.md)")
    return [dict(r) for r in _engine.cuda_selftest()]


def cuda_lacks_of(path) -> str:
    """What the CUDA backend lacks to run the GGUF at `path` (model_shape.cuda_lacks: "" when it runs it), so
    that `--backend cuda` names it before the build's own check (rebuilding with CUDA would not help)."""
    from strata.engine import GGUFFile

    from strata.model_shape import attention_temperature, cuda_lacks, expert_count

    md = GGUFFile(path).metadata
    return cuda_lacks(md.get("general.architecture"), expert_count(md), attention_temperature(md),
                      md.get("general.file_type"))


def resolve_backend(backend: str) -> str:
    """"cpu" or "cuda" for a requested `cpu|cuda|auto`; raises ValueError naming why "cuda" cannot run."""
    if backend not in BACKEND_CHOICES:
        raise ValueError(f"backend must be one of {BACKEND_CHOICES}, got {backend!r}")
    if backend == "cpu":
        return "cpu"
    if not cuda_built():
        if backend == "auto":
            return "cpu"
        raise ValueError("backend 'cuda' is not available: this build has no CUDA backend "
                         "(in a checkout, rebuild with `pip install --no-build-isolation -Ccmake.define.STRATA_CUDA=ON -e .`; "
                         "see docs/cuda.md)")
    if not cuda_devices():
        if backend == "auto":
            return "cpu"
        raise ValueError("backend 'cuda' is not available: no CUDA device found (no NVIDIA driver, no GPU, or "
                         "CUDA_VISIBLE_DEVICES hides them)")
    return "cuda"


def describe_gpu(info: dict | None) -> str:
    """'NVIDIA H200 (sm 9.0), VRAM: 1.2 GiB used by the engine, 130.0 GiB free of 139.8 GiB' or ''."""
    if not info:
        return ""
    gib = 1 << 30
    used = info.get("vram_used")
    head = f"{info['name']} (sm {info['compute_capability']}), VRAM: "
    used_s = f"{used / gib:.1f} GiB used by the engine, " if used is not None else ""
    return head + used_s + f"{info['vram_free'] / gib:.1f} GiB free of {info['vram_total'] / gib:.1f} GiB"
