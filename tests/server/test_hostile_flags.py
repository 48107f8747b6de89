"""Hostile values for every numeric option of `strata serve`, from a flag and from the TOML file: NaN and
infinity, 2**70, 1e308, a number in words; each is refused with a message naming the option, or taken as
a number the server can run with. Never an exception other than ConfigError, never a traceback at start
(--max-body-mib nan was one). Not here: the table of ordinary mistakes (test_config.py,
test_start_up_mistakes.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from strata.server.config import ConfigError, all_options, load_config, validate
from strata.server.options import MAX_CONTEXT_TOKENS

JUNK = ["nan", "NaN", "inf", "-inf", "1e308", "-1e308", str(2**70), str(-(2**70)), "-1", "0", "1e-320", "", "ten",
        "0x10", "\x00"]
NUMERIC = [o for o in all_options() if o.kind in (int, float)]


def outcome(raw, *, from_file: bool, tmp_path=None):
    """The value taken, or the ConfigError's message."""
    try:
        if from_file:
            path = tmp_path / "config.toml"
            path.write_text(raw)
            config = load_config({}, config_path=path, environ={})
        else:
            config = load_config(raw, environ={})
        validate(config)
        return config
    except ConfigError as e:
        return str(e)


@pytest.mark.parametrize("opt", NUMERIC, ids=[o.name for o in NUMERIC])
def test_every_numeric_flag_refuses_or_takes_a_finite_value(opt):
    for raw in JUNK:
        got = outcome({opt.key: raw}, from_file=False)
        if isinstance(got, str):
            assert f"--{opt.name}" in got, (raw, got)
            continue
        value = got.values[opt.key]
        assert isinstance(value, opt.kind) and math.isfinite(value), (raw, value)
        if opt.name in ("ctx", "slot-ctx"):
            assert value <= MAX_CONTEXT_TOKENS


@pytest.mark.parametrize("text,says", [
    ("max_body_mib = nan\n", "max_body_mib: expected a finite number, got nan"),
    ("prefill_slice_ms = inf\n", "prefill_slice_ms: expected a finite number, got inf"),
    ("conversation_cache_cold_max_age_s = -inf\n", "expected a finite number, got -inf"),
    ("ctx = 1180591620717411303424\n", "ctx: 1180591620717411303424 is above the maximum 16777216"),
    ("slot_ctx = 1e300\n", "slot_ctx: 1e+300 is above the maximum 16777216"),
    ("threads = 99999\n", "threads: 99999 is above the maximum 4096"),
])
def test_the_file_refuses_values_no_server_runs_with(tmp_path, text, says):
    got = outcome(text, from_file=True, tmp_path=tmp_path)
    assert isinstance(got, str) and says in got, got


@pytest.mark.parametrize("flags,says", [
    (("--max-body-mib", "nan"), "--max-body-mib: expected a finite number, got 'nan'"),
    (("--ctx", str(2**70), "--no-memory-check"), f"--ctx: {2**70} is above the maximum 16777216"),
])
def test_serve_stops_with_status_2_and_one_line(tiny_model_factory, flags, says):
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads", "1",
                           "--model", str(tiny_model_factory()), *flags],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("content,says", [
    (b"ctx = \xff\xfe\n", "not valid TOML: not UTF-8 text (byte 6: b'\\xff')"),
    (b"ctx = " + b"[" * 5000 + b"]" * 5000 + b"\n", "cannot read it: arrays or tables nested about a thousand deep"),
    (b"x = " + b"{a = " * 3000 + b"1" + b"}" * 3000 + b"\n", "cannot read it: arrays or tables nested about a thousand"),
])
def test_a_config_file_no_toml_reader_takes_is_named(tmp_path, content, says):
    """A file of another encoding, or nested past Python's recursion limit: a ConfigError naming the file
    (both were tracebacks with status 1 from tomllib)."""
    path = tmp_path / "config.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_config({}, config_path=path, environ={})
    assert f"configuration file {path}: " in str(e.value) and says in str(e.value), str(e.value)
    from strata.server.config import file_problems

    assert any(says in p for p in file_problems(path, environ={}))


@pytest.mark.parametrize("content", [b"ctx = \xff\xfe\n", b"ctx = " + b"[" * 5000 + b"]" * 5000 + b"\n"])
def test_setup_show_names_a_config_file_it_cannot_read(tmp_path, content):
    path = tmp_path / "config.toml"
    path.write_bytes(content)
    done = subprocess.run([sys.executable, "-m", "strata", "setup", "--show", "--config", str(path)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr and str(path) in done.stdout + done.stderr, done.stderr[-500:]


def test_a_bad_test_disk_delay_stops_serve_before_the_model_loads(tmp_path):
    # the model named does not exist: refused as a setting (status 2) means it was checked before the load (3)
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                           "--model", str(tmp_path / "absent.gguf")], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**os.environ, "STRATA_TEST_DISK_WRITE_DELAY_S": "soon"})
    assert done.returncode == 2, done.stderr
    assert "STRATA_TEST_DISK_WRITE_DELAY_S must be a number of seconds, got 'soon'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_hung_write_hook_stops_serve_before_the_model_loads(tmp_path):
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                           "--model", str(tmp_path / "absent.gguf")], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**os.environ, "STRATA_TEST_SESSION_WRITE_HANG_AFTER": "-2"})
    assert done.returncode == 2, done.stderr
    assert "STRATA_TEST_SESSION_WRITE_HANG_AFTER must be a count of writes 0..1000000, got '-2'" in done.stderr
    assert "Traceback" not in done.stderr
