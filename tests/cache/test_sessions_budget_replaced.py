"""The sessions folder's budget (review of e44cae5) counts the files a save replaces as gone by what the folder holds
of them, not by the index: a session an older Strata saved is no entry (it is rebuilt from its tokens, then saved
again under its name, replacing its files), so a budget that counted only indexed saves as replaced refused that
save (reject) or deleted another save it did not need to (evict). Real files, the simulated engine (64 tokens a
MiB: a 50-token save is ~0.8 MiB)."""

from __future__ import annotations

import json

from strata.server.cache.memory import MIB

from tests.cache.conftest import folder_bytes, save_history


def _as_an_older_strata_saved(cache, folders, name: str) -> None:
    """Make this model's save of `name` one an older Strata wrote (no KV revision in its sidecar): listed as needing
    a rebuild, no entry of the index."""
    sidecar = folders["sessions"] / f"strata-session-{cache.sessions.key_of(name)}.json"
    d = json.loads(sidecar.read_text())
    d.pop("kv_revision")
    sidecar.write_text(json.dumps(d, separators=(",", ":")))


def _folder_with_an_older_save(make_cache, folders, **options):
    first = make_cache()
    save_history(first, "work", 1)
    save_history(first, "other", 2)
    first.close(persist=False)
    _as_an_older_strata_saved(first, folders, "work")
    cache = make_cache(conversation_cache_sessions_mib=2, **options)
    rows = {s["name"]: s["needs_rebuild"] for s in cache.list_sessions()}
    assert rows == {"work": True, "other": False}
    assert cache.session_to_rebuild("work") is not None
    return cache


def test_a_rebuilds_save_replacing_an_older_stratas_files_fits_where_they_were(make_cache, folders):
    cache = _folder_with_an_older_save(make_cache, folders)
    # 1.6 MiB in the folder, the save replaces 0.8 of it: 1.6 MiB after, under the 2 MiB budget
    assert save_history(cache, "work", 3)["n_tokens"] == 50        # before: refused, the older files counted as staying
    assert cache.sessions.refusals == 0
    assert {s["name"]: s["needs_rebuild"] for s in cache.list_sessions()} == {"work": False, "other": False}
    assert folder_bytes(folders["sessions"]) == cache.sessions.used_bytes <= 2 * MIB


def test_with_evict_it_deletes_no_other_save(make_cache, folders):
    cache = _folder_with_an_older_save(make_cache, folders, conversation_cache_sessions_when_full="evict")
    assert save_history(cache, "work", 3)["n_tokens"] == 50
    assert cache.sessions.evictions == 0                    # before: 1, 'other' deleted to make room it did not need
    assert sorted(s["name"] for s in cache.list_sessions()) == ["other", "work"]
    assert cache.restore_session("other", 0).n_tokens == 50
    assert folder_bytes(folders["sessions"]) <= 2 * MIB
