"""For the tests that compile engine sources themselves with other instruction sets: g++ and the CPU
flags a variant needs, or a skip that says which is missing."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest


def gxx_and_cpu_or_skip(cpu_flags: list[str]) -> str:
    """The g++ path; skips the test without g++ or on a CPU without all of `cpu_flags`
    (/proc/cpuinfo names)."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++")
    if cpu_flags:
        try:
            cpu = Path("/proc/cpuinfo").read_text()
        except OSError:
            pytest.skip("no /proc/cpuinfo")
        if not all(re.search(rf"\b{f}\b", cpu) for f in cpu_flags):
            pytest.skip(f"CPU without {cpu_flags}")
    return compiler
