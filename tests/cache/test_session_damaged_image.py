"""A saved session whose image was damaged on disk (flipped bytes past its start): its restore restores the valid
prefix (the restore ladder, `"ladder": true` in the answer) and keeps the files, as a user's save is never removed.
The trial of 2026-12-06 found the warning saying "the rest of the prompt read again", which a session restore has
no prompt to do; it now says how much of the session was restored and that its files stay. Real files, the
simulated engine."""

from __future__ import annotations

import os

from tests.cache.conftest import history

SAVED = history(3, 60)     # 60 tokens, 16 KiB each in the simulated engine


def test_a_damaged_session_restores_its_valid_prefix_and_stays(make_cache, folders, caplog):
    cache = make_cache()
    cache.engine.prefill(1, SAVED)
    cache.save_session("work", 1)
    (image,) = [p for p in folders["sessions"].iterdir() if p.suffix == ".img"]
    with open(image, "r+b") as f:                    # the KV of token ~40
        f.seek(os.path.getsize(image) - 20 * 16384)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    again = make_cache()
    with caplog.at_level("WARNING", logger="strata.cache"):
        res = again.restore_session("work", 0)
    assert res.ladder and 0 < res.n_tokens < len(SAVED), res
    assert again.engine.context_tokens(0) == SAVED[:res.n_tokens]
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"its first {res.n_tokens} of {len(SAVED)} tokens restored" in msg, msg
    assert "prompt read again" not in msg, msg       # before: the conversations' wording
    assert image.exists() and [s["name"] for s in again.list_sessions()] == ["work"]
