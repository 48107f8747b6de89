"""`strata serve --host` given an address it can never listen on is refused before the model loads (exit status
2, naming the flag or key), as an empty `--api-key` is. A session-39 trial: `--host ""` (`--host "$HOST"` with HOST
unset) and `--host 999.1.1.1` loaded the model, then stopped with status 4 and 'cannot listen on :8080' or 'Name
or service not known': minutes for a big model, and no word that the value itself was wrong."""

from __future__ import annotations

import subprocess
import sys

import pytest


def serve(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", *argv],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("host, said", [
    ("", "strata serve: --host: empty (was it a variable that is not set, as in --host \"$HOST\"?)"),
    ("   ", "strata serve: --host: empty"),
    ("999.1.1.1", "strata serve: --host: '999.1.1.1' is not an IPv4 address (each of its four numbers is 0 to 255)"),
    ("10.0.0.256", "strata serve: --host: '10.0.0.256' is not an IPv4 address"),
])
def test_an_address_never_listened_on_is_refused_before_loading(host, said):
    done = serve("--host", host)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "such as 127.0.0.1 (this machine only)" in done.stderr
    assert "loading the model" not in done.stderr and "Traceback" not in done.stderr


def test_the_file_key_is_refused_the_same_way(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('host = ""\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--config", str(config)], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and f"{config}: host: empty" in done.stderr, done.stderr
