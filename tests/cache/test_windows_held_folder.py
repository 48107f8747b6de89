"""A refusal that outlasts the holder waits (fileio.HOLDER_RETRY_DELAYS_S, 0.31 s) is likely to last: a folder this
user may not change (Windows says 5 for it, as for a held file), an image another server maps for the whole of its
restore. The same folder's next refusals are raised at once for a while (HOLDER_STILL_HELD_S), so a pass over many of
its files waits once, not 0.31 s a file: each removal waited in turn, under the folder's commit lock (other servers
wait on it) and, for an eviction plan, the cache's lock (the engine's thread waits on it).

Linux has no sharing violations: the refusals are real ones (a read-only folder: a bind mount for root); the test
subclass only says such a refusal is one that may end, as `held_by_another` says of WinError 5, 32 and 33."""

from __future__ import annotations

import contextlib
import errno
import os
import time

import pytest
from strata.server.cache.fileio import HOLDER_RETRY_DELAYS_S, FileIO

from tests.cache.conftest import history, park_history
from tests.cache.test_read_only_folder import read_only

WAITS_S = sum(HOLDER_RETRY_DELAYS_S)


class ReadOnlyAsHeld(FileIO):
    """Real file operations; a read-only folder's refusal stands for Windows' refusal of a held file."""

    def __init__(self) -> None:
        self.asked = 0

    def refused_for_now(self, exc: OSError) -> bool:
        self.asked += 1
        return exc.errno in (errno.EROFS, errno.EACCES)


@contextlib.contextmanager
def holder_lets_go_at_second_refusal(io: ReadOnlyAsHeld, folder):
    """`folder` read-only (held) until `io` is refused a second time, then writable (the holder let go)."""
    ctx = read_only(folder)
    ctx.__enter__()
    io.asked, done = 0, []

    def lets_go(exc: OSError) -> bool:
        io.asked += 1
        if io.asked == 2:
            ctx.__exit__(None, None, None)
            done.append(True)
        return exc.errno in (errno.EROFS, errno.EACCES)

    io.refused_for_now = lets_go
    try:
        yield
    finally:
        if not done:
            ctx.__exit__(None, None, None)


def test_the_start_waits_once_for_a_folder_whose_refusals_last(make_cache, clock, folders):
    """Eight images whose sidecars are gone, in a cold folder that refuses their removal: the start tries each (and
    counts each unremovable) but waits for the first only (before: 8 x 0.31 s, the holder asked 48 times)."""
    cache = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    for seed in range(9):
        clock.t += 1
        park_history(cache, history(seed))
    cache.flush()
    cold = cache.cascade.levels[-1]
    assert cold.name == "cold" and len(cold.entries) >= 8
    for entry in cold.entries.values():
        os.remove(entry.sidecar_path)           # each image now an orphan the start removes
    n = len(cold.entries)
    cache.close(persist=False)
    io = ReadOnlyAsHeld()
    with read_only(folders["cold"]):
        t0 = time.monotonic()
        again = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100, io=io)
        took = time.monotonic() - t0
        lvl = next(lv for lv in again.cascade.levels if lv.name == "cold")
        assert lvl.remove_failures == n and len(lvl.unremovable_files) == n
    assert io.asked == len(HOLDER_RETRY_DELAYS_S), io.asked     # the first image's waits, none after
    assert took < WAITS_S * 3, took                               # 8 x 0.31 s = 2.5 s before


def test_another_folder_is_still_waited_for_and_a_removal_done_ends_it(tmp_path):
    lasting, brief = tmp_path / "lasting", tmp_path / "brief"
    for folder in (lasting, brief):
        folder.mkdir()
        for i in range(3):
            (folder / f"strata-conv-{i}.img").write_bytes(b"x" * 10)
    io = ReadOnlyAsHeld()
    with read_only(lasting):
        for i in range(2):
            t0 = time.monotonic()
            with pytest.raises(OSError):              # read-only: EACCES, or EROFS on root's bind mount
                io.remove(str(lasting / f"strata-conv-{i}.img"))
            took = time.monotonic() - t0
            assert (took >= WAITS_S) if i == 0 else (took < WAITS_S / 2), (i, took)
        assert io.asked == len(HOLDER_RETRY_DELAYS_S)
        # the other folder's refusal is still a hold that may end: waited for, removed once the holder lets go
        with holder_lets_go_at_second_refusal(io, brief):
            io.remove(str(brief / "strata-conv-0.img"))
        assert io.asked == 2 and not (brief / "strata-conv-0.img").exists()
    # the lasting folder writable again: a removal done there ends its quiet, the next refusal is waited for
    io.remove(str(lasting / "strata-conv-1.img"))
    io.refused_for_now, io.asked = ReadOnlyAsHeld.refused_for_now.__get__(io), 0
    with read_only(lasting):
        t0 = time.monotonic()
        try:
            io.remove(str(lasting / "strata-conv-2.img"))
        except OSError:
            pass
        assert time.monotonic() - t0 >= WAITS_S and io.asked == len(HOLDER_RETRY_DELAYS_S)
