"""An empty API key: `strata serve --api-key ''` (or the file's `api_key = ""`) is refused before listening,
exit status 2, naming the option; an empty STRATA_API_KEY counts as unset and says so in a WARNING line.
Before, all three served every endpoint open without a word (`--api-key "$KEY"` with KEY unset)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx2 as httpx
import pytest
from strata.server.cli import empty_key_variable_warning
from strata.server.config import load_config

from strata.exit_status import CONFIGURATION_REFUSED
from tests.server.test_auth_and_lifecycle import listening_port, wait_healthy


def serve(args: list[str], cwd, **env: str) -> subprocess.CompletedProcess:
    """`strata serve` run to its end: a refused configuration ends it before the model loads, one it accepts
    at once (--stop-on-stdin-eof with standard input closed: it served open, the old way, and stopped)."""
    environ = {k: v for k, v in os.environ.items() if k != "STRATA_API_KEY"} | env
    return subprocess.run([sys.executable, "-m", "strata", "serve", "--port", "0", "--stop-on-stdin-eof", *args],
                          input="", capture_output=True, text=True, env=environ, cwd=cwd, timeout=120)


@pytest.mark.parametrize("key", ["", "  "])
def test_an_empty_api_key_flag_is_refused_before_listening(tmp_path, key):
    done = serve(["--no-config", "--api-key", key], tmp_path)
    assert done.returncode == CONFIGURATION_REFUSED, done.stderr
    assert "--api-key: an empty key would leave every endpoint open" in done.stderr
    assert "leave --api-key (and the file's api_key) out to serve without one" in done.stderr
    assert "listening on" not in done.stderr + done.stdout


def test_the_files_empty_api_key_is_refused_naming_the_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('api_key = ""\n')
    done = serve(["--config", str(config)], tmp_path)
    assert done.returncode == CONFIGURATION_REFUSED, done.stderr
    assert f"{config}: api_key: an empty key would leave every endpoint open" in done.stderr


def test_a_blank_variable_is_refused_naming_it(tmp_path):
    done = serve(["--no-config"], tmp_path, STRATA_API_KEY=" ")
    assert done.returncode == CONFIGURATION_REFUSED, done.stderr
    assert "STRATA_API_KEY: an empty key would leave every endpoint open" in done.stderr


def test_an_empty_variable_is_unset_and_the_start_says_so(tiny_model, tmp_path):
    log = tmp_path / "serve.log"
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", "STRATA_API_KEY": ""}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads",
                                 "1", "--model", str(tiny_model), "--ctx", "1024", "--batch", "1",
                                 "--conversation-cache-mib", "0"], stdout=out, stderr=subprocess.STDOUT, env=environ,
                                cwd=tmp_path)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 200   # no key asked
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log.read_text()
    warned = [line for line in out.splitlines() if "STRATA_API_KEY is set but empty" in line]
    assert len(warned) == 1 and "WARNING" in warned[0], out
    assert "the server asks for no API key (every endpoint is open)" in warned[0]
    assert out.index("STRATA_API_KEY is set but empty") < out.index("listening on")
    assert proc.returncode == 0, out


def test_the_warning_names_the_key_that_counts_instead(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('api_key = "from-file"\n')
    from_file = load_config({}, config_path=config, environ={"STRATA_API_KEY": ""})
    assert from_file.api_key == "from-file"
    assert empty_key_variable_warning(from_file) == (f"STRATA_API_KEY is set but empty: taken as unset, so the key "
                                                     f"is the api_key of {config}")
    flagged = load_config({"api_key": "from-flag"}, config_path=config, environ={"STRATA_API_KEY": ""})
    assert empty_key_variable_warning(flagged) is None
    assert empty_key_variable_warning(load_config({}, environ={})) is None
    assert empty_key_variable_warning(load_config({}, environ={"STRATA_API_KEY": "k"})) is None
