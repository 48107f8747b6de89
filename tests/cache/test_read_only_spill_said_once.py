"""A disk level whose folder turns read-only while the server runs refuses every spill after it. The level says so
once (`cannot write to FOLDER (...)`, until `can write to FOLDER again`); each refused spill was one more WARNING,
`spill of KEY refused (...)`, on top (7 in one run of session 39's cache trial), saying the same thing again. A
spill refused by a level already said to be failing is counted (/metrics, as before) and a DEBUG line; the first in
each such state is still a WARNING, and one refused for another reason too (a full budget) is one as well. Real
files, a real read-only folder (tests/cache/test_read_only_folder.read_only, as root a read-only bind mount)."""

from __future__ import annotations

import logging

from tests.cache.conftest import history, park_history
from tests.cache.test_read_only_folder import read_only


def spill_lines(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == level and r.getMessage().startswith("spill of ")]


def test_a_read_only_cold_folder_s_refused_spills_are_one_warning(make_cache, folders, clock, caplog):
    cache = make_cache(conversation_cache_cold_mib=8, conversation_cache_mib=0)
    clock.t += 1
    park_history(cache, history(0))
    cache.flush()
    assert len(cache.cascade.levels[-1].entries) == 1
    with read_only(folders["cold"]):
        with caplog.at_level(logging.DEBUG, logger="strata.cache"):
            for seed in range(1, 6):
                clock.t += 1
                park_history(cache, history(seed))
                cache.flush()
        warned = spill_lines(caplog, logging.WARNING)
        assert len(warned) == 1, warned                       # before: one a park, 5
        assert len(spill_lines(caplog, logging.DEBUG)) == 4   # the later ones: said, quietly
        assert sum("cannot write to" in r.getMessage() for r in caplog.records) == 1
        assert cache.cascade.write_failures["cold"] == 5      # each counted, as before (/metrics)
        assert cache.spill_failures == 5
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):
        clock.t += 1
        park_history(cache, history(7))
        cache.flush()
    assert any("can write to" in r.getMessage() and "again" in r.getMessage() for r in caplog.records)
    assert not spill_lines(caplog, logging.WARNING)
    with read_only(folders["cold"]):                          # a new state of failures: said again, once
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="strata.cache"):
            for seed in range(8, 10):
                clock.t += 1
                park_history(cache, history(seed))
                cache.flush()
        assert len(spill_lines(caplog, logging.WARNING)) == 1
        assert len(spill_lines(caplog, logging.DEBUG)) == 1
    cache.close(persist=False)
