"""Two servers sharing a sessions folder (the crash, disk and restart trial of 2026-12-06): a session saved on one
after the other had first used the folder was, on the other, missing from GET /v1/sessions and a 404 to restore
("no session named 'fromB2'") until it restarted, its files right there; one the first server deleted stayed
listed. The folder is indexed once, at first use; a name not in the index is now looked for on disk (this model's
sidecar, checked as at start-up), and the list follows the folder's files. A sessions folder that was not there at
first use (a file in its place, a disk not mounted yet) is found the same way once it is back, not only after a
restart. Real files, the simulated engine."""

from __future__ import annotations

import os
import shutil

from tests.cache.conftest import history

FIRST = history(1, 40)


def names(cache) -> list[str]:
    return [s["name"] for s in cache.list_sessions()]


def test_a_session_another_server_saved_since_is_listed_and_restored(make_cache):
    a, b = make_cache(), make_cache()
    assert names(b) == []                         # b has used the folder: indexed, empty
    a.engine.prefill(1, FIRST)
    a.save_session("fromA", 1)
    assert names(b) == ["fromA"]
    assert b.has_session("fromA")
    res = b.restore_session("fromA", 0)
    assert res.n_tokens == len(FIRST) and b.engine.context_tokens(0) == FIRST, res
    assert b.damaged == 0


def test_a_session_another_server_deleted_is_no_longer_listed(make_cache):
    a, b = make_cache(), make_cache()
    a.engine.prefill(1, FIRST)
    a.save_session("work", 1)
    assert names(b) == ["work"]
    assert a.delete_session("work")
    assert names(b) == []
    assert not b.has_session("work")


def test_a_damaged_session_saved_since_is_not_trusted(make_cache, folders):
    a, b = make_cache(), make_cache()
    assert names(b) == []
    a.engine.prefill(1, FIRST)
    a.save_session("work", 1)
    sidecar = next(p for p in folders["sessions"].iterdir() if p.suffix == ".json")
    sidecar.write_bytes(sidecar.read_bytes()[:100])            # cut short
    assert names(b) == [] and not b.has_session("work")


def test_a_sessions_folder_that_was_a_file_at_first_use_is_read_once_it_is_back(make_cache, folders):
    a = make_cache()
    a.engine.prefill(1, FIRST)
    a.save_session("work", 1)
    folder = str(folders["sessions"])
    shutil.move(folder, folder + ".away")
    with open(folder, "w") as f:
        f.write("not a folder")
    b = make_cache()
    assert names(b) == []                         # its first use: a file there
    os.remove(folder)
    shutil.move(folder + ".away", folder)
    assert names(b) == ["work"]
    assert b.restore_session("work", 0).n_tokens == len(FIRST)
