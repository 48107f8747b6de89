"""A folder where one conversation's image should go (made by hand, by a sync tool) fails that conversation's
writes to the level and no other's. The level's warning names the path the write failed on: it named the level's
folder alone (`cannot write to /cache/cold (Is a directory)`) and sent the user to check its free space and
permissions, all fine, while the next write of that conversation failed the same way (session 39's cache trial:
a warm entry of that key could never move down, the warning and its `can write again` repeating)."""

from __future__ import annotations

import logging

import pytest
from strata.server.cache.cascade import failed_write_reason

from tests.cache.test_damaged_files_real import HISTORY, open_cache

engine_mod = pytest.importorskip("strata.engine")


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return engine_mod.Engine(tiny_model_factory(), n_ctx=2048, n_slots=1, n_threads=1)


def park_history(engine, folder):
    cache = open_cache(engine, folder)
    engine.truncate(1, 0)
    engine.prefill(1, HISTORY)
    parked = cache.park(1, "overwrite")
    cache.flush()
    return cache, parked


def test_the_warning_names_the_folder_in_the_image_s_place(engine, tmp_path, caplog):
    first = tmp_path / "first"
    cache, _ = park_history(engine, first)
    cache.close(persist=False)
    (image,) = first.glob("*.img")

    cold = tmp_path / "cold"
    cold.mkdir()
    blocker = cold / image.name
    blocker.mkdir()
    (blocker / "notes.txt").write_text("a user's file")
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        cache, _ = park_history(engine, cold)
    warnings = [r.getMessage() for r in caplog.records if "cannot write to" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"cannot write to {blocker}: a folder stands there" in warnings[0], warnings[0]
    assert cache.cascade.write_failures["cold"] == 1
    assert (blocker / "notes.txt").read_text() == "a user's file"   # never the cache's to remove
    cache.close(persist=False)


def test_an_error_naming_no_path_reads_as_before():
    assert failed_write_reason(OSError(28, "No space left on device")) == "No space left on device"
    assert failed_write_reason(OSError("a message")) == "a message"
    assert failed_write_reason(IsADirectoryError(21, "Is a directory", "/c/a.tmp", None, "/c/a.img")) == \
        "Is a directory: /c/a.img"
    assert failed_write_reason(OSError(28, "No space left on device", "/c/a.tmp")) == \
        "No space left on device: /c/a.tmp"


def test_a_folder_in_an_image_s_place_at_start_up_is_said_as_one(engine, tmp_path, caplog):
    """At start-up the same folder read as a truncated image, `its image is 4096 bytes, the sidecar says N
    (truncated or grown)`: the user looked for a cut file."""
    cache, _ = park_history(engine, tmp_path / "cold")
    cache.close(persist=False)
    (image,) = (tmp_path / "cold").glob("*.img")
    image.unlink()
    image.mkdir()
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        cache = open_cache(engine, tmp_path / "cold")
    (line,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert f"its image's name {image.name} is taken by a folder" in line and "truncated" not in line, line
    assert image.is_dir() and not cache.cascade.levels[0].entries
    cache.close(persist=False)
