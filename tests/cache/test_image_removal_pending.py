"""An entry another server removed while this one ran, whose image cannot be opened rather than is missing: Windows'
removal left pending while another program (an antivirus, an indexer) still holds the image answers 'Access is
denied' to an open, not 'not found'. Its sidecar, removed first, is gone: a plain miss, unindexed, not damage (it was
counted damaged and warned of as 'read failed'). The image's name is made unopenable for real: a folder in its place
(IsADirectoryError, an OSError that is not FileNotFoundError)."""

from __future__ import annotations

import logging
import os

from tests.cache.conftest import history
from tests.cache.test_faults import one_cold_entry, reopen


def _unopenable(path: str) -> None:
    os.remove(path)
    os.mkdir(path)


def test_an_unopenable_image_whose_sidecar_is_gone_is_a_plain_miss(make_cache, caplog):
    h = history(21, 60)
    _, _, entry = one_cold_entry(make_cache, h)
    other = reopen(make_cache)                   # the second server indexes the same folder
    os.remove(entry.sidecar_path)                # the first removes the entry, sidecar first; its image stays pending
    _unopenable(entry.image_path)
    prompt = h + [1, 3]
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        res = other.restore(other.lookup(prompt), 2)
    assert res.untouched and res.n_tokens == 0 and "removed since start-up" in res.reason, res
    assert other.damaged == 0 and not other.cascade.levels[0].entries
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert other.lookup(prompt) is None


def test_an_unopenable_image_whose_sidecar_is_there_is_still_damage(make_cache, caplog):
    h = history(22, 60)
    cache, _, entry = one_cold_entry(make_cache, h)
    _unopenable(entry.image_path)
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        res = cache.restore(cache.lookup(h + [1, 3]), 2)
    assert res.n_tokens == 0 and not res.untouched and cache.damaged == 1, res
    assert any("damaged (read failed:" in r.getMessage() for r in caplog.records)
