"""The machine's available RAM as admission reads it: psutil's `available`, taken from /proc/meminfo's
MemAvailable directly where psutil takes it as it is, and psutil's own answer everywhere else."""

from __future__ import annotations

import os

import psutil
import pytest
from strata.server.cache.memory import MIB, MemoryProbe, available_from_meminfo

MEMINFO = b"MemTotal:       16384000 kB\nMemFree:         1024000 kB\nMemAvailable:    8192000 kB\nBuffers: 1 kB\n"


def test_mem_available_is_read_as_psutil_reads_it():
    assert available_from_meminfo(MEMINFO) == 8192000 * 1024


@pytest.mark.parametrize("text", [
    MEMINFO.replace(b"MemAvailable:    8192000 kB\n", b""),            # a kernel before 3.14: psutil estimates it
    MEMINFO.replace(b"8192000", b"0"),                               # 0: psutil estimates it
    MEMINFO.replace(b"8192000", b"99999999"),                        # above MemTotal (a container): psutil's free
    MEMINFO.replace(b"MemTotal:       16384000 kB\n", b""),
])
def test_figures_psutil_works_out_otherwise_are_left_to_psutil(text):
    assert available_from_meminfo(text) is None


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="Linux's /proc/meminfo")
def test_the_probe_agrees_with_psutil_here():
    probe = MemoryProbe()
    for _ in range(5):       # the figure moves between two reads: some pair read within a page or so of memory
        a = probe.available_mib()
        b = psutil.virtual_memory().available / MIB
        if abs(a - b) < 1:
            return
    pytest.fail(f"probe {a:.1f} MiB, psutil {b:.1f} MiB")
