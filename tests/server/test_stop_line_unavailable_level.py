"""The stop's last line when the disk level the user turned on was unavailable. Found in session 43's
new-user trial: `strata serve --conversation-cache-cold-mib 100 --conversation-cache-cold-dir /etc/passwd` (a file,
not a folder) warned at start-up that the level is off, and its stop then said `no disk level is on` and advised
`--conversation-cache-cold-mib MIB` to keep conversations: the flag the user had given. It now names the level
that was given and could not be used, and what to give instead. A real `strata serve` on a tiny model."""

from __future__ import annotations

from tests.server.body_fuzz import start_serve, stop_serve


def test_the_stop_names_the_unavailable_level_not_a_level_to_turn_on(tiny_model_factory, tmp_path):
    (tmp_path / "cold").write_text("a file where the cold level's folder should be")
    served = start_serve(str(tiny_model_factory()), tmp_path)
    stop_serve(served)
    stopped = [ln for ln in served.log.read_text().splitlines() if "strata.server: stopped" in ln]
    assert len(stopped) == 1, served.log.read_text()
    line = stopped[0]
    assert "no disk level is on" not in line and "--conversation-cache-cold-mib MIB" not in line, line
    assert f"the cold level {tmp_path / 'cold'} was unavailable" in line, line
    assert "a file is there, not a folder" in line and "--conversation-cache-cold-dir" in line, line
    # its start-up says what is wrong once, at WARNING; the lock's own INFO line (`no lock taken (File exists)`)
    # only repeated it, less clearly
    assert "no lock taken" not in served.log.read_text(), served.log.read_text()
