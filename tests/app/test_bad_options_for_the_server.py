"""Options given to the app for its server (`./run --port x` on a desktop) that `strata serve` refuses: the app
names the bad option and says to fix the options, not only the configuration file. A new-user trial's
`strata-app --bogus 3` read "refused its configuration: exited with status 2 (`strata serve --help` lists every
option); fix the configuration file", the unknown option nowhere (argparse's last line is its pointer to --help),
and `--port notaport` was sent to fix a file that held nothing wrong. A real `strata serve` on the tiny model."""

from __future__ import annotations

import pytest
from strata.app.controller import AppController


@pytest.mark.parametrize(("options", "said"), [
    (["--bogus", "3"], "strata serve: error: unrecognized arguments: --bogus 3"),
    (["--prot", "9000"], "unrecognized arguments: --prot 9000; --prot: did you mean --port?"),
    (["--port", "notaport"], "--port: expected int, got 'notaport'"),
])
def test_a_refused_option_is_named_and_the_options_are_to_fix(qtbot, app_config, tmp_path, options, said):
    controller = AppController(app_config, tmp_path / "logs", theme="light", serve_args=options)
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "failed", timeout=60_000)
        detail = controller.supervisor.status().detail
        assert said in detail, detail
        assert f"fix the options given to the app ({' '.join(options)}) or the configuration file" in detail, detail
        assert "lists every option" not in detail, detail
        qtbot.waitUntil(lambda: said in controller.window.header.state.text(), timeout=10_000)
    finally:
        controller.shutdown()
