"""A session saved again is made durable in the order a power cut cannot undo: the new image's rename, the new
sidecar's rename, then the earlier image's removal, each on disk before the next (a folder sync between). A file
system need not write two changes of one folder in the order they were made (1031243 synced before the removal):
without a sync between the two renames, a power cut could keep the new sidecar's rename and lose the image's, the
sidecar naming an image that is not there (its bytes under a temporary name the next start sweeps) and the earlier
image no sidecar names (swept too): the session saved before lost, where the docs say a crash leaves it whole.
Real file operations, recorded in order; the simulated engine."""

from __future__ import annotations

import errno
import logging
import os

from strata.server.cache.fileio import FileIO

from tests.cache.conftest import history
from tests.cache.test_session_resave_failures import Recording as SyncsAndRemovalsRecorded

OLD, NEW = history(1, 40), history(2, 60)


class Recording(SyncsAndRemovalsRecorded):
    """Real file operations; each rename into place, folder sync and image removal recorded in order."""

    def rename(self, src: str, dst: str) -> None:
        super().rename(src, dst)
        self.done.append("rename image" if dst.endswith(".img") else "rename sidecar")


def test_each_step_of_a_re_save_is_on_disk_before_the_next(make_cache):
    io = Recording()
    cache = make_cache(io=io)
    cache.engine.prefill(1, OLD)
    cache.save_session("work", 1)
    cache.engine.prefill(2, NEW)
    io.done.clear()
    cache.save_session("work", 2)
    assert io.done == ["rename image", "sync folder", "rename sidecar", "sync folder", "remove image"], io.done
    res = cache.restore_session("work", 0)
    assert res.n_tokens == len(NEW) and cache.engine.context_tokens(0) == NEW, res


class CannotSyncFolders(FileIO):
    """Real file operations on a file system that cannot sync a folder (many FUSE ones answer ENOSYS)."""

    def sync_folder(self, folder: str) -> None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))


def test_a_folder_that_cannot_be_synced_is_warned_of_once(make_cache, caplog):
    """Every save syncs the folder twice: where that always fails, each save warned twice (the log filled with it).
    Said once; the saves are made and restore."""
    cache = make_cache(io=CannotSyncFolders())
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):
        for tokens in (OLD, NEW, OLD):
            cache.engine.truncate(1, 0)
            cache.engine.prefill(1, tokens)
            cache.save_session("work", 1)
    said = [r for r in caplog.records if "cannot be synced" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING] + [logging.DEBUG] * 5, [r.levelname for r in said]
    res = cache.restore_session("work", 0)
    assert res.n_tokens == len(OLD) and cache.engine.context_tokens(0) == OLD, res
