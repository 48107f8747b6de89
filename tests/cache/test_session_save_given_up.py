"""The cache's close while a session save's write hangs: it waited for the save's lock for ever (a bare `strata
serve` never ended). Now it waits while the save writes and gives up one that has written nothing for `stall_s`,
with a warning naming the session; RAM is still handed to disk; the save, if its write ever returns, writes
nothing more (its temporary file removed, no entry), and the session saved before stays whole. Real files, the
simulated engine, one write held for real (fileio.HangingDiskIO, the STRATA_TEST_SESSION_WRITE_HANG_AFTER hook)."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time

import pytest
from strata.server.cache.fileio import FileIO, HangingDiskIO

from tests.cache.conftest import history, park_history


class HangingSyncIO(HangingDiskIO):
    """The fsync closing a session image hangs (gigabytes flushed to a disk that stopped), once armed."""

    def sync_close(self, f) -> None:
        if os.path.basename(f.name).startswith(self.SESSION_IMAGE) and ".img" in f.name and self.made > self.hang_after:
            self.hung.set()
            self._released.wait()
        FileIO.sync_close(self, f)

    def write(self, f, data) -> None:
        name = os.path.basename(f.name)
        if name.startswith(self.SESSION_IMAGE) and ".img" in name:
            self.made += 1
        FileIO.write(self, f, data)


@pytest.mark.parametrize("hangs", ["a piece", "its fsync"])
def test_close_gives_a_hung_save_up_and_the_save_then_writes_nothing(make_cache, folders, caplog, hangs):
    io = HangingDiskIO(10**6) if hangs == "a piece" else HangingSyncIO(10**6)
    cache = make_cache(io=io, conversation_cache_cold_mib=64)
    eng = cache.engine
    eng.prefill(1, history(1, 40))
    cache.save_session("work", 1)                     # the session saved before
    before = sorted(os.listdir(folders["sessions"]))
    park_history(cache, history(7, 50), ctx=2)        # a conversation in RAM, for the close to keep
    eng.prefill(1, history(2, 60))
    io.hang_after = io.made + 1                       # the save's second image write hangs, or its fsync
    failed: list[BaseException] = []

    def save() -> None:
        try:
            cache.save_session("work", 1)
        except BaseException as exc:   # noqa: BLE001 - what the save ended with is the point
            failed.append(exc)
    saving = threading.Thread(target=save, daemon=True)
    saving.start()
    assert io.hung.wait(10)
    with pytest.raises(ValueError, match="stall_s"):
        cache.close(stall_s=0)
    waits: list[float] = []
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        cache.close(waiting=lambda save, s: waits.append(s), stall_s=0.5)
    took = time.monotonic() - began
    assert 0.3 < took < 5, took
    said = [r.getMessage() for r in caplog.records if "the save of session 'work'" in r.getMessage()]
    assert len(said) == 1 and "is not saved" in said[0] and "MiB written" in said[0], said
    assert len(cache.cascade.levels[-1].entries) == 1 and not cache.ram.entries   # RAM handed to disk all the same
    assert len(waits) == 1                            # told once: nothing more was written
    io.release()                                      # the write returns: the abandoned save stops there
    saving.join(10)
    assert len(failed) == 1 and isinstance(failed[0], OSError) and failed[0].errno == errno.ECANCELED, failed
    assert sorted(os.listdir(folders["sessions"])) == before
    assert cache.sessions.entry("work").n_tokens == 40
