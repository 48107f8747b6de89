"""A cache level's eviction whose image cannot be removed after its sidecar was (Windows: another server sharing the
folder maps that image while it restores it; Windows refuses to remove a mapped file whatever its sharing mode).
Before: the OSError escaped `forget`, so the eviction was not counted, the warning said the level keeps the files
and takes nothing new, while the entry was already unindexed and its sidecar gone. Now the eviction is counted, the
image is warned of and counted as a remove failure, and the next start removes it (an image without its sidecar).

The refusal is real: the folder is a read-only bind mount (0555 for a user that is not root) during the image's
removal alone."""

from __future__ import annotations

import logging
import os

from strata.server.cache.fileio import FileIO

from tests.cache.conftest import history, park_history
from tests.cache.test_read_only_folder import fill_cold, read_only


class ImageHeld(FileIO):
    """Real file operations; the next removal of an image in `folder` is refused (the folder read-only for it)."""

    def __init__(self) -> None:
        self.folder: str | None = None
        self.refused: list[str] = []

    def remove(self, path: str) -> None:
        if self.folder is not None and path.endswith(".img") and os.path.dirname(path) == self.folder:
            self.folder = None
            self.refused.append(os.path.basename(path))
            with read_only(os.path.dirname(path)):
                super().remove(path)
        super().remove(path)


def test_an_eviction_whose_image_is_held_is_counted_and_its_image_goes_at_the_next_start(make_cache, folders, clock,
                                                                                           caplog):
    io = ImageHeld()
    cache, cold_keys = fill_cold(make_cache, clock, io=io, conversation_cache_mib=100, conversation_cache_park="disk")
    cold = cache.cascade.levels[-1]
    oldest = min(cold_keys, key=lambda k: cold.entries[k].sealed_at)
    evicted = cache.cascade.evictions["cold"]
    io.folder = cold.folder
    clock.t += 1
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        assert park_history(cache, history(11)).destination == "disk"
        cache.flush()
    assert io.refused == [f"strata-conv-{oldest}.img"]
    assert cache.cascade.evictions["cold"] == evicted + 1 and oldest not in cold.entries
    assert len(cold.entries) == 3 and cache.spill_failures == 0      # the new history was written there
    assert cold.remove_failures == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"conversation cache cold level: {oldest} removed, but its image cannot be removed (Read-only "
                        "file system); it is no entry (its sidecar is gone) and the next start removes it"], warnings
    on_disk = sorted(os.listdir(folders["cold"]))
    assert f"strata-conv-{oldest}.img" in on_disk and f"strata-conv-{oldest}.json" not in on_disk
    cache.close(persist=False)

    again = make_cache(conversation_cache_cold_mib=2)
    level = again.cascade.levels[-1]
    assert level.removed["orphan_image"] == 1 and sorted(level.entries) == sorted(cold.entries)
    assert f"strata-conv-{oldest}.img" not in os.listdir(folders["cold"])
