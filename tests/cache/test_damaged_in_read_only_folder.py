"""A damaged image in a folder that turned read-only: its files cannot be deleted, but it is never tried
again (it was: every later prompt sharing its prefix read the whole image again, failed its checksum again and
counted one more damaged image)."""

from __future__ import annotations

import logging

from tests.cache.conftest import history

from .test_faults import one_cold_entry, reopen
from .test_park_restore import continue_from_cache, fresh_continuation
from .test_read_only_folder import read_only


def test_a_damaged_image_that_cannot_be_deleted_is_not_tried_again(make_cache, caplog):
    h = history(3, 60)
    _, cold, entry = one_cold_entry(make_cache, h)
    with open(entry.image_path, "r+b") as f:   # a flipped byte in the KV of token ~40
        f.seek(entry.image_bytes - 20 * 16384)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    again = reopen(make_cache)
    caplog.set_level(logging.WARNING, logger="strata.cache")
    with read_only(cold.folder):
        for turn in range(3):
            prompt = h + [1, 3 + turn]
            hit, res, out, _ = continue_from_cache(again, prompt)
            assert out == fresh_continuation(prompt)
            if turn == 0:
                assert hit.level == "cold" and res.ladder and res.n_tokens < len(h)   # the valid prefix, once
            else:
                assert hit is None or hit.n_tokens < len(h), hit   # never the damaged entry again
        assert again.damaged == 1
        lvl = again.cascade.levels[0]
        assert entry.key not in lvl.entries and lvl.remove_failures >= 1
        (said,) = [r.getMessage() for r in caplog.records if " damaged (" in r.getMessage()]
        assert said.endswith("its files cannot be deleted (left on disk), the entry is not used again"), said
