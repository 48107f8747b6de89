"""Damaged and orphaned files skipped at start-up are removed when they are Strata's own (a sidecar that
begins as Strata writes them, an image with the snapshot magic), each counted
(strata_cache_removed_files_total) and named in one warning; they were left on disk for good before,
outside every budget. Files Strata cannot tell are its own, and another model's, stay."""

from __future__ import annotations

import json
import logging
import os

from strata.server.cache.damaged_files import Removal, removal_for

from tests.cache.conftest import history, park_history
from tests.cache.sim_engine import MAGIC, SimEngine

from .test_faults import COLD, reopen


def parked(make_cache, *seeds):
    cache = make_cache(**COLD)
    for s in seeds:
        park_history(cache, history(s, 60))
    cache.flush()
    entries = sorted(cache.cascade.levels[0].entries.values(), key=lambda e: e.key)
    cache.close(persist=False)
    return entries


def names(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_strata_s_own_damaged_and_orphaned_files_are_removed_and_counted(make_cache, folders, caplog):
    truncated, no_sidecar, no_image, whole = parked(make_cache, 1, 2, 3, 4)
    with open(truncated.image_path, "r+b") as f:
        f.truncate(1000)
    os.remove(no_sidecar.sidecar_path)
    os.remove(no_image.image_path)
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache = reopen(make_cache)
    cold = cache.cascade.levels[0]
    assert list(cold.entries) == [whole.key]
    assert dict(cold.skipped) == {"damaged": 1, "orphan_image": 1, "orphan_sidecar": 1}
    assert dict(cold.removed) == {"damaged": 1, "orphan_image": 1, "orphan_sidecar": 1}
    assert names(folders["cold"]) == sorted(os.path.basename(p) for p in (whole.image_path, whole.sidecar_path))
    metrics = cache.metrics_text()
    for reason in ("damaged", "orphan_image", "orphan_sidecar"):
        assert f'strata_cache_removed_files_total{{level="cold",reason="{reason}"}} 1' in metrics, metrics
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3, warnings
    assert all("removed" in w and "left on disk" not in w for w in warnings), warnings
    assert any("sidecar and image" in w for w in warnings), warnings
    cache.close(persist=False)
    again = reopen(make_cache)   # nothing left to skip: the next start is clean
    assert not again.cascade.levels[0].skipped and list(again.cascade.levels[0].entries) == [whole.key]


def test_files_strata_cannot_tell_are_its_own_are_left(make_cache, folders, caplog):
    (entry,) = parked(make_cache, 5)
    folder = folders["cold"]
    other = make_cache(engine=SimEngine(model_id="sim-model-b"), **COLD)   # another model's pair: valid
    park_history(other, history(6, 30))
    other.flush()
    other.close(persist=False)
    key = "0" * 32
    stranger = {f"strata-conv-{key}.json": b'{"note": "a user file under our name"}',     # not our format
                f"strata-conv-{key}.img": b"not an image",
                f"strata-conv-{'1' * 32}.img": b"",                                      # zero bytes: no magic
                f"strata-conv-{'2' * 32}.json": b""}
    for name, data in stranger.items():
        (folder / name).write_bytes(data)
    with open(entry.sidecar_path, "wb") as f:   # its own sidecar cut before the format field: cannot tell,
        f.write(b'{"form')                        # but its image has the snapshot magic: that one goes
    before = names(folder)
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache = reopen(make_cache)
    cold = cache.cascade.levels[0]
    assert not cold.entries
    # foreign: the other model's pair and the JSON under our name in another format; damaged: the zero-byte
    # sidecar and the cut one; orphan_image: the zero-byte image
    assert dict(cold.skipped) == {"foreign": 2, "damaged": 2, "orphan_image": 1}, dict(cold.skipped)
    assert dict(cold.removed) == {"damaged": 1} and list(cold.removed_files.values()) == ["image"]
    assert names(folder) == sorted(set(before) - {os.path.basename(entry.image_path)})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    left = [w for w in warnings if "left on disk (not recognisably a file Strata wrote)" in w]
    assert len(warnings) == 3 and len(left) == 2, warnings


def test_a_pair_committed_since_the_index_is_not_removed(make_cache, folders):
    """Another server sharing the folder may commit a whole pair between the index and the removal: the
    removal checks the files again under the commit lock and leaves an entry alone."""
    (entry,) = parked(make_cache, 7)
    good = open(entry.image_path, "rb").read()
    with open(entry.image_path, "r+b") as f:
        f.truncate(1000)
    from strata.server.cache import damaged_files
    from strata.server.cache.disk import DiskLevel

    lvl = DiskLevel("cold", str(folders["cold"]), 100 << 20, 0.0, entry.identity, image_magic=MAGIC,
                    piece_bytes=entry.piece_bytes)
    lvl.open()
    assert lvl.skipped["damaged"] == 1
    with open(entry.image_path, "wb") as f:   # the other server's commit: a whole image again
        f.write(good)
    damaged_files.remove_skipped(lvl)
    assert not lvl.removed and os.path.exists(entry.image_path) and os.path.exists(entry.sidecar_path)
    assert json.loads(open(entry.sidecar_path, "rb").read())["image_bytes"] == len(good)


def test_removal_policy():
    assert removal_for("damaged", True, False) == Removal(True, True)    # our sidecar vouches for its image
    assert removal_for("damaged", False, True) == Removal(False, True)
    assert removal_for("damaged", False, False) == Removal(False, False)
    assert removal_for("orphan_image", True, False) == Removal(False, False)
    assert removal_for("orphan_sidecar", True, True) == Removal(True, True)
    for reason in ("foreign", "partial"):
        assert removal_for(reason, True, True) == Removal(False, False)


def test_a_removal_the_folder_refuses_is_not_counted_as_removed(make_cache, folders, caplog):
    """A folder that refuses deletes (read-only, another user's files): the damaged pair stays on disk,
    skipped; it is counted as a remove failure, not in strata_cache_removed_files_total, and its warning says
    it was left. It was counted as removed and said 'removed (not all: Permission denied: ...)'."""
    from strata.server.cache.fileio import FileIO

    class RefusesDeletes(FileIO):
        def remove(self, path: str) -> None:
            raise PermissionError(13, "Permission denied", path)

    (entry,) = parked(make_cache, 8)
    with open(entry.image_path, "r+b") as f:
        f.truncate(1000)
    before = names(folders["cold"])
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache = reopen(make_cache, io=RefusesDeletes())
    cold = cache.cascade.levels[0]
    assert dict(cold.skipped) == {"damaged": 1} and not cold.removed and not cold.removed_files
    assert cold.remove_failures == 1 and names(folders["cold"]) == before
    assert "strata_cache_removed_files_total" not in cache.metrics_text()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "not trusted, left on disk" in warning and "could not be removed (Permission denied)" in warning, warning


def test_a_file_changed_since_the_index_is_not_called_a_stranger(make_cache, folders, caplog):
    """Two servers sharing a folder start together: the first removes a damaged pair of Strata's, the second
    then finds it gone under the commit lock (or another server committed the key whole since). The second's
    warning said 'left on disk (not recognisably a file Strata wrote)', of files Strata wrote that are gone."""
    from strata.server.cache import damaged_files
    from strata.server.cache.disk import DiskLevel
    from strata.server.cache.folder_checks import log_skipped_files

    (entry,) = parked(make_cache, 9)
    with open(entry.image_path, "r+b") as f:
        f.truncate(1000)
    levels = [DiskLevel("cold", str(folders["cold"]), 100 << 20, 0.0, entry.identity, image_magic=MAGIC,
                        piece_bytes=entry.piece_bytes) for _ in range(2)]
    for lvl in levels:
        lvl.open()
        assert lvl.skipped["damaged"] == 1
    first, second = levels
    damaged_files.remove_skipped(first)
    damaged_files.remove_skipped(second)
    assert dict(first.removed) == {"damaged": 1} and not second.removed and names(folders["cold"]) == []
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        log_skipped_files(second)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "not recognisably" not in warning, warning
    assert "changed since it was read (another server on this folder)" in warning, warning


def test_removals_in_the_segment_and_system_prompt_stores_are_counted(make_cache, folders):
    """Those stores' damaged files are removed at start-up as the levels' are, but /metrics counted only the
    levels': a removal (and a skip) there was in no counter."""
    import shutil

    (entry,) = parked(make_cache, 10)
    for store in ("segments", "system"):
        folders[store].mkdir(parents=True, exist_ok=True)
        for path in (entry.image_path, entry.sidecar_path):
            shutil.copy(path, folders[store] / os.path.basename(path))
        with open(folders[store] / os.path.basename(entry.image_path), "r+b") as f:
            f.truncate(1000)
    cache = reopen(make_cache, conversation_cache_segment_mib=64, conversation_cache_system_prompt_mib=64)
    assert names(folders["segments"]) == [] and names(folders["system"]) == []
    metrics = cache.metrics_text()
    for level in ("segment", "system_prompt"):
        assert f'strata_cache_skipped_files_total{{level="{level}",reason="damaged"}} 1' in metrics, metrics
        assert f'strata_cache_removed_files_total{{level="{level}",reason="damaged"}} 1' in metrics, metrics
