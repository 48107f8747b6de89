"""app.log's rotation when the system refuses it: Windows will not rename a file another process has open (a
second launch waiting for a quitting app writes app.log too). The refusal is simulated through the handler's
own `rotator` hook (Linux renames an open file); the lines stay in app.log, none lost. Not here: what the app
logs (tests/app/test_single_instance_and_main.py)."""

from __future__ import annotations

import logging

from strata.app.main import AppLogHandler


def refused(source: str, dest: str) -> None:
    raise PermissionError(13, "The process cannot access the file because it is being used by another process",
                          source)


def test_a_refused_rotation_keeps_every_line_in_the_log_and_a_later_one_rotates(tmp_path):
    path = tmp_path / "app.log"
    handler = AppLogHandler(path, maxBytes=200, backupCount=2, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("strata.app.test_rotation")
    log.propagate = False
    log.addHandler(handler)
    errors: list[str] = []
    handler.handleError = lambda record: errors.append(record.getMessage())   # what logging would print, lost
    try:
        handler.rotator = refused
        lines = [f"line {i} of the stop: 1.{i} of 4.7 GiB written →" for i in range(12)]
        for line in lines:
            log.warning(line)
        assert errors == []
        assert path.read_text(encoding="utf-8").splitlines() == lines
        assert not (tmp_path / "app.log.1").exists()
        del handler.rotator       # let go: the next line past the size rotates as usual
        log.warning("after")
        assert (tmp_path / "app.log.1").read_text(encoding="utf-8").splitlines() == lines
        assert path.read_text(encoding="utf-8") == "after\n"
    finally:
        log.removeHandler(handler)
        handler.close()


def test_refused_rotations_keep_the_older_backups_and_a_later_one_shifts_them(tmp_path):
    """The base class shifted app.log.1 -> .2 -> .3 before the rename Windows refuses: each line past the size
    deleted one more old backup (five lines left only .3, holding what .1 held)."""
    path = tmp_path / "app.log"
    for i in (1, 2, 3):
        (tmp_path / f"app.log.{i}").write_text(f"backup {i}\n", encoding="utf-8")
    handler = AppLogHandler(path, maxBytes=100, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("strata.app.test_rotation_backups")
    log.propagate = False
    log.addHandler(handler)
    try:
        handler.rotator = refused
        lines = [f"line {i}: a line long enough to pass the size in a few" for i in range(5)]
        for line in lines:
            log.warning(line)
        assert path.read_text(encoding="utf-8").splitlines() == lines
        for i in (1, 2, 3):
            assert (tmp_path / f"app.log.{i}").read_text(encoding="utf-8") == f"backup {i}\n"
        del handler.rotator
        log.warning("after")
        assert (tmp_path / "app.log.1").read_text(encoding="utf-8").splitlines() == lines
        assert (tmp_path / "app.log.2").read_text(encoding="utf-8") == "backup 1\n"
        assert (tmp_path / "app.log.3").read_text(encoding="utf-8") == "backup 2\n"
        assert path.read_text(encoding="utf-8") == "after\n"
        assert not (tmp_path / "app.log.rotating").exists()
    finally:
        log.removeHandler(handler)
        handler.close()
