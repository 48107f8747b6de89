"""Admission inside a memory-limited container: the figure is the least of the host's available RAM and what this
process's cgroup limit still leaves (limit - usage + inactive file cache), the tightest ancestor counting. Real files
laid out as /sys/fs/cgroup and /proc/self/cgroup are, in a tmp folder."""

from __future__ import annotations

import logging
import os
import time

from strata.server.cache.cgroup_memory import CgroupMemory, field_of, limit_of
from strata.server.cache.memory import MIB, MemoryProbe

from tests.cache.conftest import history, park_history


def write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def v2_tree(tmp_path, *, leaf_max="max", parent_max="max", leaf_usage=100 * MIB, parent_usage=100 * MIB,
            inactive=0, high="max"):
    """A v2 host: /sys/fs/cgroup/system.slice/strata.service, this process in the service."""
    root = tmp_path / "sys_fs_cgroup"
    write(root / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
    parent, leaf = root / "system.slice", root / "system.slice" / "strata.service"
    for folder, limit, usage in ((parent, parent_max, parent_usage), (leaf, leaf_max, leaf_usage)):
        write(folder / "memory.max", f"{limit}\n")
        write(folder / "memory.high", "max\n")
        write(folder / "memory.current", f"{usage}\n")
        write(folder / "memory.stat", f"anon 1000\nfile 5000\nactive_anon 10\ninactive_anon 20\n"
                                      f"active_file 30\ninactive_file {inactive}\nunevictable 0\n")
    write(leaf / "memory.high", f"{high}\n")
    proc = tmp_path / "proc_self_cgroup"
    write(proc, "0::/system.slice/strata.service\n")
    return str(proc), str(root), leaf


def test_a_v2_limit_leaves_limit_minus_usage_plus_inactive_file_cache(tmp_path):
    proc, root, _ = v2_tree(tmp_path, leaf_max=1024 * MIB, leaf_usage=700 * MIB, inactive=100 * MIB)
    cg = CgroupMemory(proc, root)
    assert cg.limit_bytes() == 1024 * MIB
    assert cg.available_bytes() == (1024 - 700 + 100) * MIB
    probe = MemoryProbe(lambda: 50_000.0, cgroup=cg)      # the host has 50 GB available: the container has not
    assert probe.available_mib() == 424 and probe.limit_mib() == 1024
    assert MemoryProbe(lambda: 300.0, cgroup=cg).available_mib() == 300   # the host's figure when it is less


def test_the_tightest_ancestor_counts_and_so_does_its_usage(tmp_path):
    # the slice allows 2 GiB and its other services use 1.8 GiB of it: 200 MiB are left for all, whatever the
    # service's own 4 GiB limit says
    proc, root, _ = v2_tree(tmp_path, leaf_max=4096 * MIB, parent_max=2048 * MIB, leaf_usage=300 * MIB,
                            parent_usage=1848 * MIB)
    cg = CgroupMemory(proc, root)
    assert cg.limit_bytes() == 2048 * MIB and cg.tightest().folder.endswith("system.slice")
    assert cg.available_bytes() == 200 * MIB


def test_memory_high_is_a_limit_too(tmp_path):
    """systemd's MemoryHigh= (memory.high): above it the kernel throttles and reclaims hard."""
    proc, root, _ = v2_tree(tmp_path, leaf_max=4096 * MIB, high=str(1024 * MIB), leaf_usage=24 * MIB)
    assert CgroupMemory(proc, root).available_bytes() == 1000 * MIB


def test_max_and_huge_figures_mean_no_limit(tmp_path):
    proc, root, _ = v2_tree(tmp_path)
    cg = CgroupMemory(proc, root)
    assert (cg.limit_bytes(), cg.available_bytes()) == (None, None)
    assert MemoryProbe(lambda: 5000.0, cgroup=cg).available_mib() == 5000
    assert MemoryProbe(lambda: 5000.0, cgroup=cg).limit_note() is None
    assert limit_of("9223372036854771712\n") is None and limit_of("max\n") is None and limit_of("junk") is None
    assert limit_of("536870912\n") == 512 * MIB


def test_v1_hybrid_layout_reads_the_memory_controller(tmp_path):
    """A v1 (or hybrid: v2 mounted at unified/ without the memory controller) Docker host."""
    root = tmp_path / "sys_fs_cgroup"
    write(root / "unified" / "cgroup.controllers", "hugetlb\n")
    group = root / "memory" / "docker" / "c0ffee"
    write(root / "memory" / "memory.limit_in_bytes", "9223372036854771712\n")
    write(group / "memory.limit_in_bytes", f"{2048 * MIB}\n")
    write(group / "memory.usage_in_bytes", f"{1500 * MIB}\n")
    write(group / "memory.stat", f"cache 1\ninactive_file 7\ntotal_cache 2\ntotal_inactive_file {52 * MIB}\n")
    proc = tmp_path / "proc_self_cgroup"
    write(proc, "12:pids:/docker/c0ffee\n4:memory:/docker/c0ffee\n1:name=systemd:/docker/c0ffee\n0::/docker/c0ffee\n")
    cg = CgroupMemory(str(proc), str(root))
    assert (cg.limit_bytes(), cg.available_bytes()) == (2048 * MIB, 600 * MIB)


def test_a_container_without_a_cgroup_namespace_finds_its_group_at_the_mount(tmp_path):
    """/proc/self/cgroup names the host-side path; the container's mount shows only its own group."""
    root = tmp_path / "sys_fs_cgroup"
    write(root / "memory" / "memory.limit_in_bytes", f"{512 * MIB}\n")
    write(root / "memory" / "memory.usage_in_bytes", f"{12 * MIB}\n")
    write(root / "memory" / "memory.stat", "total_inactive_file 0\n")
    proc = tmp_path / "proc_self_cgroup"
    write(proc, "4:memory:/docker/0123456789abcdef\n")
    assert CgroupMemory(str(proc), str(root)).available_bytes() == 500 * MIB


def test_unreadable_or_odd_files_mean_no_limit_known_never_an_error(tmp_path):
    assert CgroupMemory(str(tmp_path / "no_proc"), str(tmp_path / "no_root")).groups == []
    proc, root, leaf = v2_tree(tmp_path, leaf_max=1024 * MIB)
    cg = CgroupMemory(proc, root)
    os.remove(leaf / "memory.current")          # a file that cannot be read at a check (cgroupfs: ENODEV)
    os.mkdir(leaf / "memory.current")
    unreadable = CgroupMemory(proc, root)
    assert unreadable.limit_bytes() == 1024 * MIB and unreadable.available_bytes() is None
    assert MemoryProbe(lambda: 4000.0, cgroup=unreadable).available_mib() == 4000
    os.rmdir(leaf / "memory.current")
    write(leaf / "memory.current", f"{24 * MIB}\n")   # a new file: the held descriptor reads the one it opened
    assert cg.available_bytes() == 924 * MIB
    cg = CgroupMemory(proc, root)
    write(leaf / "memory.current", "not a number\n")
    assert cg.available_bytes() is None
    write(leaf / "memory.current", f"{2000 * MIB}\n")   # above the limit (it was lowered): nothing left, not < 0
    write(leaf / "memory.stat", "garbage without the field\n")
    assert cg.available_bytes() == 0
    os.remove(leaf / "memory.stat")                  # a file that cannot be opened at start-up: no limit known
    assert CgroupMemory(proc, root).groups == []
    write(tmp_path / "odd_proc", "no colons here\n")
    assert CgroupMemory(str(tmp_path / "odd_proc"), root).groups == []
    assert field_of(b"inactive_file 5\n", b"inactive_file") == 5
    assert field_of(b"total_inactive_file 5\n", b"inactive_file") == 0   # another field's tail is not it
    assert field_of(b"a 1\ninactive_file x\n", b"inactive_file") == 0


def test_this_machine_is_read_without_error():
    cg = CgroupMemory()
    room, limit = cg.available_bytes(), cg.limit_bytes()
    assert (room is None) or (limit is not None and 0 <= room)


def test_each_check_reads_two_small_files_in_microseconds(tmp_path):
    """A park reads the figure once per displaced history, on the worker thread (session 21 made the
    meminfo read ~10 us): the cgroup read is comparable. Generous bound: a loaded 2-core CI machine."""
    proc, root, _ = v2_tree(tmp_path, leaf_max=1024 * MIB)
    cg = CgroupMemory(proc, root)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        cg.available_bytes()
    per_check = (time.perf_counter() - t0) / n
    assert per_check < 0.002, f"{per_check * 1e6:.0f} us per check"


def test_a_container_limit_sends_a_park_to_disk_and_is_shown(make_cache, tmp_path, folders):
    """The host has 100 GB available, the container 1,000 MiB: a capture that would stay in RAM needs the 2,560
    MiB parking floor, so it spills to disk under the transient floor; the INFO line and /metrics name the limit."""
    proc, root, leaf = v2_tree(tmp_path, leaf_max=1024 * MIB, leaf_usage=24 * MIB)
    memory = MemoryProbe(lambda: 100_000.0, cgroup=CgroupMemory(proc, root))
    cache = make_cache(memory=memory, conversation_cache_mib=100, conversation_cache_cold_mib=100)
    result = park_history(cache, history(1))
    cache.flush()
    assert result.destination == "disk", result.reason
    assert cache.snapshot_for_monitor()["admission"]["available_mib"] == 1000
    assert cache.snapshot_for_monitor()["admission"]["limit_mib"] == 1024      # the monitor names it
    line = cache.describe()
    assert f"memory limit 1024 MiB applies (cgroup v2 {leaf})" in line, line
    assert "memory limit" not in cache.describe(kept=True)
    assert "strata_cache_memory_limit_bytes 1073741824\n" in cache.metrics_text()
    assert "memory_limit" not in make_cache().metrics_text()
    assert make_cache().snapshot_for_monitor()["admission"]["limit_mib"] is None


def test_a_limit_that_leaves_less_than_a_floor_is_said_once_at_start_with_the_flag(make_cache, tmp_path, caplog):
    """A real 768 MiB cgroup with the default model loaded left 304 MiB: each of 24 parks was a 'park discarded'
    warning naming no flag. Now the start says why and what to lower."""
    proc, root, _ = v2_tree(tmp_path, leaf_max=768 * MIB, leaf_usage=464 * MIB)
    caplog.set_level(logging.WARNING, logger="strata.cache")
    make_cache(memory=MemoryProbe(lambda: 100_000.0, cgroup=CgroupMemory(proc, root)), conversation_cache_cold_mib=100)
    (said,) = [r.getMessage() for r in caplog.records if "memory limit" in r.getMessage()]
    assert "304 MiB are available, less than the transient floor (512 MiB)" in said
    assert "lower --conversation-cache-park-min-free-mib" in said
    caplog.clear()
    proc, root, _ = v2_tree(tmp_path / "b", leaf_max=2048 * MIB, leaf_usage=48 * MIB)
    make_cache(memory=MemoryProbe(lambda: 100_000.0, cgroup=CgroupMemory(proc, root)), conversation_cache_cold_mib=100)
    (said,) = [r.getMessage() for r in caplog.records if "memory limit" in r.getMessage()]
    assert "less than the parking floor (2560 MiB): histories go to disk" in said
    caplog.clear()
    proc, root, _ = v2_tree(tmp_path / "c", leaf_max=8192 * MIB, leaf_usage=48 * MIB)
    make_cache(memory=MemoryProbe(lambda: 100_000.0, cgroup=CgroupMemory(proc, root)))
    assert not [r for r in caplog.records if "memory limit" in r.getMessage()]


def test_memory_limit_advice_is_pure():
    from strata.server.cache.policy import memory_limit_advice

    assert memory_limit_advice(None, 10.0, 2560, 512, ram_on=True, disk_on=True) is None
    assert memory_limit_advice(768, 300.0, 2560, 512, ram_on=False, disk_on=False) is None
    assert "discarded" in memory_limit_advice(768, 300.0, 2560, 512, ram_on=True, disk_on=True)
    assert "are discarded, none stays" in memory_limit_advice(4096, 2000.0, 2560, 512, ram_on=True, disk_on=False)
    assert memory_limit_advice(4096, 2000.0, 2560, 512, ram_on=False, disk_on=True) is None
    # nothing left: no advice to lower a floor "below 0"; the figure is the lesser of host and limit, not blamed
    # on the limit alone
    nothing = memory_limit_advice(768, 0.0, 2560, 512, ram_on=True, disk_on=True)
    assert "below 0" not in nothing and "raise the limit, or give the model less (--ctx, --batch)" in nothing
    assert memory_limit_advice(768, 300.0, 2560, 512, ram_on=True, disk_on=True).startswith(
        "under the memory limit of 768 MiB, 300 MiB are available, less than the transient floor")
