"""A save that replaces a session saved before sessions were per model (an upgrade's first save of the name,
cb59a75) and whose removal of the older files hangs (a network folder, a multi-GiB image a scanner holds) holds no
one: the older files are moved out of the way under the sessions folder's commit lock, as a DELETE's are (67954f6),
and removed after every lock. Before, the removal ran while the save still held `session_writes`: the save never
answered, every other save and DELETE in the server waited for it for ever, and the stop's wait for a session save
(ConversationCache._wait_for_save: no save under way to give up, the lock still held) never ended.

Real files, a real hang (fileio.HangingRemoveIO: the removal of a moved sidecar blocks until released)."""

from __future__ import annotations

import os
import threading
import time

from strata.server.cache.fileio import HangingRemoveIO

from tests.cache.conftest import history, saved_before_models


def moved(folder) -> list[str]:
    return [n for n in sorted(os.listdir(folder)) if n.endswith(".tmp")]


def test_a_save_replacing_an_older_session_whose_removal_hangs_holds_no_one(make_cache, folders):
    first = make_cache()
    first.engine.prefill(1, history(1, 40))
    first.save_session("work", 1)
    first.close(persist=False)
    saved_before_models(folders["sessions"], "work")      # strata-session-work.json: an older Strata's save
    io = HangingRemoveIO()
    cache = make_cache(io=io)
    cache.engine.prefill(1, history(2, 44))
    try:
        answered: list[dict] = []
        saving = threading.Thread(target=lambda: answered.append(cache.save_session("work", 1)), daemon=True)
        saving.start()
        assert io.hung.wait(10)                               # the older sidecar's removal hangs
        saving.join(5)
        assert [a["n_tokens"] for a in answered] == [44]      # before: the save still waiting for the removal
        began = time.monotonic()
        cache.engine.prefill(2, history(3, 40))
        others = threading.Thread(target=lambda: (cache.save_session("other", 2), cache.delete_session("other")),
                                  daemon=True)
        others.start()
        others.join(5)
        assert not others.is_alive() and time.monotonic() - began < 5   # before: behind the save, for ever
        assert cache.restore_session("work", 0).n_tokens == 44
        closing = threading.Thread(target=lambda: cache.close(persist=False), daemon=True)
        closing.start()
        closing.join(5)
        assert not closing.is_alive()                         # before: the stop waited for the save for ever
    finally:
        io.release()                                      # the removal returns (also when an assertion failed)
    for _ in range(100):
        if not moved(folders["sessions"]):
            break
        time.sleep(0.05)
    assert moved(folders["sessions"]) == []
    assert sorted(n.split("~")[0] for n in os.listdir(folders["sessions"])) == [
        "strata-session-work", "strata-session-work"]    # this model's own sidecar and image, the older ones gone
