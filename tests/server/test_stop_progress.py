"""The stop's progress lines: what they say, and at most one per interval (the first and the last always)."""

from __future__ import annotations

import logging

from strata.server.stop_progress import StopProgress, progress_line


def test_progress_line_words_and_units():
    assert progress_line(3, 1288490188, 5046586572) == \
        "stopping: keeping 3 conversations for the next start (1.2 of 4.7 GiB written)"
    assert progress_line(4, -1, -1, 3) == "stopping: keeping 4 conversations for the next start (3 of 4 written)"
    assert progress_line(1, 0, 3 << 20) == "stopping: keeping 1 conversation for the next start (0.0 of 3.0 MiB written)"


def test_at_most_one_line_per_interval_the_last_always(caplog):
    now = [0.0]
    progress = StopProgress(logging.getLogger("strata.test"), every_s=2.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="strata.test"):
        for i, t in enumerate([0.0, 0.5, 1.9, 2.0, 2.1, 4.5]):
            now[0] = t
            progress(i, 6, i << 20, 6 << 20)
        progress(6, 6, 6 << 20, 6 << 20)       # at 4.5 s again: the last is said anyway
    said = [r.getMessage() for r in caplog.records]
    assert [s.split("(")[1] for s in said] == ["0.0 of 6.0 MiB written)", "3.0 of 6.0 MiB written)",
                                               "5.0 of 6.0 MiB written)", "6.0 of 6.0 MiB written)"]


def test_the_last_line_is_not_repeated_within_the_interval(caplog):
    """Session 32's soak: the queue all written (2 of 2, one evicted by a disk budget), each later write told
    the same counts and each was said as a last line: six identical lines in 44 ms. Said again after the interval
    (the app's sign that the stop is alive)."""
    now = [0.0]
    progress = StopProgress(logging.getLogger("strata.test"), every_s=2.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="strata.test"):
        progress(0, 2, -1, -1)
        for t in (0.9, 0.91, 0.93, 0.95, 0.96, 0.97):
            now[0] = t
            progress(2, 1, -1, -1, 0, 1)
        now[0] = 3.0
        progress(2, 1, -1, -1, 0, 1)
        progress(3, 2, 100 << 20, 100 << 20, 0, 1)   # the hand-down's last: new words, said at once
    said = [r.getMessage().split("start ")[1] for r in caplog.records]
    assert said == ["(0 of 2 written)", "(2 of 2 written; 1 of them evicted by the disk budget)",
                    "(2 of 2 written; 1 of them evicted by the disk budget)",
                    "(100.0 of 100.0 MiB written; 1 of them evicted by the disk budget)"]


def test_the_slow_disk_hook_is_read_with_a_clear_error():
    import pytest
    from strata.server.cache.fileio import FileIO, SlowDiskIO, file_io_from_env

    assert type(file_io_from_env({})) is FileIO
    assert file_io_from_env({"STRATA_TEST_DISK_WRITE_DELAY_S": "0.5"}).delay_s == 0.5
    assert isinstance(file_io_from_env({"STRATA_TEST_DISK_WRITE_DELAY_S": "0"}), SlowDiskIO)
    for bad in ("slow", "-1"):
        with pytest.raises(ValueError, match="STRATA_TEST_DISK_WRITE_DELAY_S"):
            file_io_from_env({"STRATA_TEST_DISK_WRITE_DELAY_S": bad})


def test_the_hung_write_hook_is_read_with_a_clear_error():
    import pytest
    from strata.server.cache.fileio import HangingDiskIO, file_io_from_env

    io = file_io_from_env({"STRATA_TEST_SESSION_WRITE_HANG_AFTER": "3", "STRATA_TEST_DISK_WRITE_DELAY_S": "0.25"})
    assert isinstance(io, HangingDiskIO) and io.hang_after == 3 and io.delay_s == 0.25
    for bad in ("soon", "-1", "1.5", "\u00b2", "2000000"):
        with pytest.raises(ValueError, match="STRATA_TEST_SESSION_WRITE_HANG_AFTER"):
            file_io_from_env({"STRATA_TEST_SESSION_WRITE_HANG_AFTER": bad})
