"""The machine profile: cores, RAM, free disk of a folder, the GPU if any (nvidia-smi present).

Mechanism: reads psutil (its RAM lowered to a cgroup memory limit: a container's), shutil.disk_usage and `nvidia-smi` (5 s limit); never raises for a missing
tool, a missing GPU yields None. It does not benchmark anything (that is `bench.py`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import psutil
from strata.installer.plan_types import MIB, DiskFacts, MachineProfile


def machine_profile(cgroup=None) -> MachineProfile:
    """`cgroup`: where this process's memory limit is read (server/cache/cgroup_memory.py; tests give a folder):
    in a container or a slice the RAM is what the limit allows, not the host's, so the plan fits in it."""
    from strata.server.cache.cgroup_memory import within_limit

    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical
    vm = psutil.virtual_memory()
    total, available, _ = within_limit(int(vm.total), int(vm.available), cgroup)
    gpu_name, gpu_mib = detect_gpu()
    return MachineProfile(n_cores=physical, n_logical=logical, ram_total_mib=total // MIB,
                          ram_available_mib=available // MIB, gpu_name=gpu_name, gpu_vram_mib=gpu_mib)


def detect_gpu() -> tuple[str | None, int | None]:
    """(name, memory MiB) of the first NVIDIA GPU, or (None, None) without nvidia-smi or a GPU."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        # CREATE_NO_WINDOW (Windows): run from the app (no console), a console program opened a window. Its
        # bytes read as UTF-8 whatever the locale (text=True alone took the ANSI code page on Windows), a byte
        # that is not UTF-8 replaced: a UnicodeDecodeError escaped here and ended the setup
        out = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, encoding="utf-8", errors="replace", timeout=5, check=True,
                             creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0)).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return parse_nvidia_smi(out)


def parse_nvidia_smi(out: str) -> tuple[str | None, int | None]:
    """The first line of `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`,
    e.g. "NVIDIA H200, 143771" -> ("NVIDIA H200", 143771); a name with commas keeps them."""
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    name, _, mib = first.rpartition(",")
    try:
        return (name.strip() or None), int(float(mib))
    except ValueError:  # "[N/A]" or an unexpected line: the name alone, when there is one
        return (first or None), None


def existing_parent(folder: str | Path) -> Path:
    """The folder itself or its nearest existing parent (a cold folder may not exist yet)."""
    p = Path(folder).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def disk_facts(folder: str | Path) -> DiskFacts:
    """Free space where `folder` is (or would be created); speeds are left to the bench."""
    usage = shutil.disk_usage(existing_parent(folder))
    return DiskFacts(folder=str(Path(folder).expanduser()), free_mib=usage.free // MIB, reports_size=usage.total > 0)
