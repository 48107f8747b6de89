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
