"""An empty `--model` (`--model "$MODEL"` with MODEL unset) or `model = ""` is refused, exit status 2, as an empty
`--api-key` is: `strata serve`, `chat` and `bench` ran another model (the default, or the configured one) without
a word (a session-39 trial). Run as the user runs them (a subprocess)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SAID = "--model: empty (was it a variable that is not set, as in --model \"$MODEL\"?); give a GGUF file"


def strata(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("command", [("serve", "--no-config", "--port", "99999"), ("chat",), ("bench", "--quick")])
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_model_is_refused(command, empty):
    # serve's --port 99999 stops start-up at once where --model is taken: the refusal is --model's
    done = strata(*command, "--model", empty)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"strata {command[0]}: {SAID}"), done.stderr
    assert "Traceback" not in done.stderr


def test_the_file_key_is_refused_too(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('model = ""\n', encoding="utf-8")
    done = strata("serve", "--config", str(config), "--port", "99999")
    assert done.returncode == 2 and f"{config}: model: empty (was it a variable" in done.stderr, done.stderr


@pytest.mark.parametrize("flag", ["--model", "--cold-dir"])
def test_setup_refuses_an_empty_value_before_writing(tmp_path, flag):
    """`strata setup --yes --model ""` wrote a configuration of the default model without a word."""
    config = tmp_path / "config.toml"
    done = strata("setup", "--yes", "--skip-bench", "--config", str(config), flag, "")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"strata setup: {flag}: empty (was it a variable that is not set?)"), done.stderr
    assert not config.exists()
