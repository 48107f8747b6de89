"""Two servers sharing a sessions folder: one saves a session again (a new image, the sidecar renamed over, the
earlier image removed) after the other indexed it. The other's restore then finds its indexed image gone; it took
that for the session's files removed and deleted what was there: the other server's new save, sidecar and image,
lost on both. A sidecar that now names another image is that newer save: indexed and restored, nothing deleted."""

from __future__ import annotations

import os

from tests.cache.conftest import history

FIRST, AGAIN = history(1, 40), history(1, 56)


def files(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("strata-session-work"))


def test_a_session_saved_again_by_another_server_is_restored_not_deleted(make_cache, folders):
    a = make_cache()
    a.engine.prefill(1, FIRST)
    a.save_session("work", 1)
    b = make_cache()                                   # a second server on the same folders
    assert b.has_session("work")                       # indexed: the first save's image
    a.engine.prefill(2, AGAIN)
    a.save_session("work", 2)                          # saved again: a new image, the first one removed
    saved = files(folders["sessions"])
    assert len(saved) == 2, saved                      # the sidecar and the new image
    res = b.restore_session("work", 0)
    assert res.n_tokens == len(AGAIN) and b.engine.context_tokens(0) == AGAIN, res
    assert files(folders["sessions"]) == saved         # nothing deleted
    assert a.restore_session("work", 0).n_tokens == len(AGAIN)
    assert b.damaged == 0


def test_a_session_whose_files_are_gone_is_still_a_plain_miss(make_cache, folders):
    a = make_cache()
    a.engine.prefill(1, FIRST)
    a.save_session("work", 1)
    b = make_cache()
    assert b.has_session("work")
    assert a.delete_session("work")
    res = b.restore_session("work", 0)
    assert res.n_tokens == 0 and res.untouched and files(folders["sessions"]) == []
    assert not b.has_session("work") and b.damaged == 0


def test_another_models_save_of_the_name_since_leaves_this_models_session_whole(make_cache, folders):
    """Another model's server on the folder saving a session of the same name since: sessions are per model, so it
    is a session of its own beside this one (before: its sidecar was renamed over this model's and this model's
    image removed, the restore a plain miss: the session lost)."""
    from tests.cache.sim_engine import SimEngine

    a = make_cache()
    a.engine.prefill(1, FIRST)
    a.save_session("work", 1)
    b = make_cache()                                   # a second server of the same model
    assert b.has_session("work")
    mine = files(folders["sessions"])
    other = make_cache(engine=SimEngine(model_id="sim-model-b"))    # a server of another model, one folder
    other.engine.prefill(2, AGAIN)
    other.save_session("work", 2)
    assert set(mine) < set(files(folders["sessions"])) and len(files(folders["sessions"])) == 4
    res = b.restore_session("work", 0)
    assert res.n_tokens == len(FIRST) and b.engine.context_tokens(0) == FIRST, res
    assert other.restore_session("work", 0).n_tokens == len(AGAIN)
    assert b.damaged == 0


def test_a_restore_of_a_session_saved_again_is_placed_once(make_cache, folders, caplog):
    """The restore that finds its session saved again reads that save: one restore, one placement in the admission
    counters and log, one INFO line (the retry placed the read a second time: counted twice, logged twice)."""
    import logging

    from strata.server.cache.memory import FixedMemory

    a = make_cache()
    a.engine.prefill(1, FIRST)
    a.save_session("work", 1)
    b = make_cache(memory=FixedMemory(2000))           # below the parking floor: a read under the transient one
    assert b.has_session("work")
    a.engine.prefill(2, AGAIN)
    a.save_session("work", 2)
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):
        res = b.restore_session("work", 0)
    assert res.n_tokens == len(AGAIN), res
    assert dict(b.admissions) == {("transient", "session_restore"): 1}
    assert [(e["action"], e["source"]) for e in b.admission_log] == [("restore", "session_restore")]
    placed = [r for r in caplog.records if r.getMessage().startswith("cache session_restore restore:")]
    assert [r.levelno for r in placed] == [logging.INFO], [r.getMessage() for r in placed]
