"""A disk level whose volume fills before its budget does (a budget larger than the free space, other programs
filling the disk): the level's oldest entries make room for the new history, as its budget would have them do,
instead of every new history being refused while the oldest stay for good."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from strata.server.cache.fileio import FileIO

from tests.cache.conftest import history, park_history

CONV = "strata-conv-"
N_TOKENS = 60          # 960 KiB an image at the simulated engine's 16 KiB a token


class SmallVolumeIO(FileIO):
    """A volume of `capacity` bytes under `folder`: real files, and a write that would take the folder's files
    past it fails as a full disk does (ENOSPC), after writing what fitted."""

    def __init__(self, folder, capacity: int) -> None:
        self.folder = str(folder)
        self.capacity = capacity

    def _used(self) -> int:
        total = 0
        for name in os.listdir(self.folder):
            try:
                total += os.path.getsize(os.path.join(self.folder, name))
            except OSError:
                pass
        return total

    def _on_volume(self, path: str) -> bool:
        return os.path.dirname(os.path.abspath(path)) == os.path.abspath(self.folder)

    def write(self, f, data) -> None:
        if not self._on_volume(f.name):
            return super().write(f, data)
        room = self.capacity - self._used()
        if len(data) > room:
            super().write(f, bytes(data[:max(0, room)]))
            f.flush()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        super().write(f, data)

    def same_volume(self, src: str, dst_folder: str) -> bool:
        on = self._on_volume(src) or os.path.abspath(src) == os.path.abspath(self.folder)
        if on != self._on_volume(os.path.join(dst_folder, "x")):
            return False   # one on this volume, one off it
        return super().same_volume(src, dst_folder)

    def free_bytes(self, folder: str) -> int | None:
        if os.path.abspath(folder) != os.path.abspath(self.folder):
            return super().free_bytes(folder)
        return max(0, self.capacity - self._used())


def keys_kept(cache, histories) -> list[bool]:
    out = []
    for h in histories:
        hit = cache.lookup(list(h) + [1, 4])
        out.append(hit is not None and hit.n_tokens == len(h))
    return out



def park_one_a_second(cache, clock, n: int) -> list[list[int]]:
    """Parks n histories of N_TOKENS, each written before the next, one second apart; returns them."""
    hs = [history(s, N_TOKENS) for s in range(n)]
    for h in hs:
        park_history(cache, h)
        cache.flush()
        clock.t += 1
    return hs

def test_a_full_volume_evicts_the_oldest_for_the_newest(make_cache, folders, clock):
    folders["cold"].mkdir(parents=True)
    io = SmallVolumeIO(folders["cold"], capacity=3 * (1 << 20))      # room for three, budget for a hundred
    cache = make_cache(io=io, conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_cold_mib=100)
    hs = park_one_a_second(cache, clock, 6)
    assert keys_kept(cache, hs) == [False, False, False, True, True, True]
    assert cache.parks["discard"] == 0 and cache.spill_failures == 0
    assert cache.cascade.evictions["cold"] == 3
    assert not [n for n in os.listdir(folders["cold"]) if n.endswith(".tmp")]   # no partial file left


def test_a_full_warm_volume_degrades_its_oldest_to_cold(make_cache, folders, clock):
    folders["warm"].mkdir(parents=True)
    io = SmallVolumeIO(folders["warm"], capacity=(2 << 20) + (256 << 10))   # room for two
    cache = make_cache(io=io, conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_warm_mib=100,
                       conversation_cache_cold_mib=100)
    hs = park_one_a_second(cache, clock, 4)
    assert keys_kept(cache, hs) == [True] * 4
    levels = {lvl.name: sorted(lvl.entries) for lvl in cache.cascade.levels}
    assert len(levels["warm"]) == 2 and len(levels["cold"]) == 2
    assert cache.cascade.degradations["warm"] == 2


def test_a_history_larger_than_the_whole_volume_is_refused_and_nothing_is_evicted(make_cache, folders, clock):
    folders["cold"].mkdir(parents=True)
    io = SmallVolumeIO(folders["cold"], capacity=2 * (1 << 20))
    cache = make_cache(io=io, conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_cold_mib=100)
    small = history(1, 40)
    park_history(cache, small)
    cache.flush()
    park_history(cache, history(2, 200))    # 3.1 MiB: no eviction can make room for it
    cache.flush()
    assert keys_kept(cache, [small]) == [True]
    assert cache.parks["discard"] == 1


REAL_TMPFS = r"""
import os, sys
sys.path.insert(0, os.getcwd())
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory
from tests.cache.sim_engine import SimEngine, SimFormat
from tests.cache.conftest import history, park_history
mnt, other = sys.argv[1], sys.argv[2]
vals = {"conversation_cache_cold_dir": mnt + "/cold", "conversation_cache_cold_mib": 100, "conversation_cache_mib": 0,
        "conversation_cache_park": "disk", "conversation_cache_segment_dir": other + "/seg",
        "conversation_cache_system_prompt_dir": other + "/sp", "conversation_cache_sessions_dir": other + "/s"}
c = ConversationCache(CacheConfig.from_values(vals, {}), SimEngine(), image_format=SimFormat,
                      memory=FixedMemory(100000), piece_bytes=64 << 10)
hs = [history(s, 60) for s in range(6)]
for h in hs:
    park_history(c, h)
    c.flush()
kept = [bool(c.lookup(h + [1, 4])) and c.lookup(h + [1, 4]).n_tokens == 60 for h in hs]
print(kept, c.parks["discard"], c.cascade.write_failures["cold"])
c.close()
"""


def test_a_real_full_tmpfs(tmp_path):
    """A 3 MiB tmpfs (where this user may mount one: root on Linux): the kernel's own ENOSPC."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if sys.platform != "linux" or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)],
                                                 capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        out = subprocess.run([sys.executable, "-c", REAL_TMPFS, str(mnt), str(tmp_path)], capture_output=True,
                             text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("]")[0] + "]" == "[False, False, False, True, True, True]", out.stdout + out.stderr
        assert out.stdout.split()[-2] == "0", out.stdout        # nothing discarded
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_volume_budget_is_the_level_s_files_plus_free_space_only_when_the_volume_is_short():
    from strata.server.cache.policy import volume_budget

    mib = 1 << 20
    assert volume_budget(used_bytes=10 * mib, free_bytes=None, incoming_bytes=mib) is None      # not known
    assert volume_budget(10 * mib, 5 * mib, mib, slack_bytes=mib) is None                      # room
    assert volume_budget(10 * mib, mib, mib, slack_bytes=mib // 2) == 10 * mib + mib // 2      # short
    assert volume_budget(0, 0, mib, slack_bytes=mib) == 0
    with pytest.raises(ValueError):
        volume_budget(-1, 0, 0)


class SharedVolumeIO(SmallVolumeIO):
    """Two folders on one volume of `capacity` bytes (a warm and a cold level on one disk): both folders' files
    count, and an entry degraded from one to the other is a rename that frees nothing."""

    def __init__(self, folders, capacity: int) -> None:
        self.folders = [os.path.abspath(str(f)) for f in folders]
        self.capacity = capacity

    def _used(self) -> int:
        return sum(os.path.getsize(os.path.join(d, n)) for d in self.folders for n in os.listdir(d))

    def _on_volume(self, path: str) -> bool:
        return os.path.dirname(os.path.abspath(path)) in self.folders

    def same_volume(self, src: str, dst_folder: str) -> bool:
        return FileIO.same_volume(self, src, dst_folder)

    def free_bytes(self, folder: str) -> int | None:
        if os.path.abspath(folder) not in self.folders:
            return FileIO.free_bytes(self, folder)
        return max(0, self.capacity - self._used())


def test_a_full_volume_shared_by_warm_and_cold_deletes_cold_s_oldest(make_cache, folders, clock):
    """Degrading warm's oldest into cold on the same volume frees nothing: the room must come from the last
    level there (cold deletes its oldest), or every new history fails once the volume is full."""
    folders["warm"].mkdir(parents=True)
    folders["cold"].mkdir(parents=True)
    io = SharedVolumeIO([folders["warm"], folders["cold"]], capacity=3 * (1 << 20))   # room for three in all
    cache = make_cache(io=io, conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_warm_mib=100,
                       conversation_cache_cold_mib=100)
    hs = park_one_a_second(cache, clock, 6)
    assert keys_kept(cache, hs) == [False, False, False, True, True, True]
    assert cache.parks["discard"] == 0 and cache.spill_failures == 0
    assert sum(cache.cascade.write_failures.values()) == 0
    assert len(cache.cascade.levels[cache.cascade.index_of("warm")].entries) == 3   # the newest stay on the fast level
    assert not [n for f in ("warm", "cold") for n in os.listdir(folders[f]) if n.endswith(".tmp")]
