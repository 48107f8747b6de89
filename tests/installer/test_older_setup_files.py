"""Configuration files earlier versions of `strata setup` wrote, read by today's `strata serve` and
`strata setup --show` (the real CLI). The first setup (e5903bb) wrote the file below: every key of it is
still read, so the server starts on it, and the app (which starts on any file there) without its wizard;
it had no `backend` (a CUDA machine ran on the CPU). Both now say which keys an earlier setup left to the
defaults, and that running setup again decides them. The files of 7 setups between e5903bb and 4222205,
each run from a worktree, were all read by today's serve (checked by hand, not kept: each needs its own
code); today's setup's own file and a hand-written one say nothing."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from strata.installer import config_file

# written by e5903bb's `strata setup --yes --skip-bench` (a 2-core machine), its folders made this test's
FIRST_SETUP = """\
# Strata configuration, written by `strata setup`. Flags given to `strata serve` override it.
# Written 2026-12-04T23:20:10+00:00; `strata setup --show` prints it.

# SmolLM2-135M-Instruct.Q4_1: 0.1 GiB, trained on 8192 tokens
model = "{model}"
# one per physical core (2 of 2 logical): hyperthreads slow the matrix kernels
threads = 2
# 8192 tokens = 0.2 GiB of KV, the largest step within the model's trained context
ctx = 8192
# 4 slot(s) of 8192 tokens (0.7 GiB of KV), the most the plan gives (4)
batch = 4
# one group: pipelined groups pay off only across devices
batch_groups = 1
# as large as the main context, so a conversation can move between them
slot_ctx = 8192
# F16 KV, 23040 bytes per token: restored state is bit-identical to a fresh prefill
kv_type = "f16"
# RAM level: 25% of the RAM left after the model, at most 8192 MiB
conversation_cache_mib = 512
# conversations kept on disk (17.0 GiB of 68.9 GiB free: ...)
conversation_cache_cold_dir = "{cold}"
# 25% of the free disk, at most 20480 MiB; only this last level deletes
conversation_cache_cold_mib = 64
# warm level off: it needs a second, faster disk (set by hand)
conversation_cache_warm_dir = ""
# warm level off
conversation_cache_warm_mib = 0
# ram: 19.6 GiB spare holds one snapshot per slot; mirrored to disk
conversation_cache_park = "ram"
# the parking floor: a capture that stays in RAM leaves this much free (seed 002)
conversation_cache_min_free_mib = 2560
# the transient floor a disk-bound capture may take (seed 002)
conversation_cache_park_min_free_mib = 512
"""


def _strata(*args: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *args], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, **kw)


@pytest.fixture
def first_setup_file(tmp_path, default_model_path):
    path = tmp_path / "config.toml"
    path.write_text(FIRST_SETUP.format(model=default_model_path, cold=tmp_path / "cold"))
    return path


def test_show_on_the_first_setups_file_says_valid_and_what_it_left_out(first_setup_file, env):
    shown = _strata("setup", "--show", "--config", str(first_setup_file), env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "valid: `strata serve` accepts this file" in shown.stdout
    notes = [line for line in shown.stdout.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "earlier `strata setup`, before it decided backend:" in notes[0], shown.stdout
    assert "run `strata setup` again" in notes[0]


def test_serve_starts_on_the_first_setups_file_and_says_once_what_it_left_out(first_setup_file, env, tmp_path):
    log = open(tmp_path / "serve.log", "w+")
    serve = subprocess.Popen([sys.executable, "-m", "strata", "serve", "--config", str(first_setup_file),
                              "--port", "0", "--stop-on-stdin-eof"], env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and serve.poll() is None:
            log.seek(0)
            if "strata: model " in log.read():        # loaded, with its INFO line
                break
            time.sleep(0.2)
        serve.stdin.close()
        assert serve.wait(60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
    log.seek(0)
    output = log.read()
    assert "strata: model SmolLM2-135M-Instruct.Q4_1" in output, output
    said = [line for line in output.splitlines() if "earlier `strata setup`" in line]
    assert len(said) == 1 and "before it decided backend:" in said[0], output


def test_todays_setup_and_a_hand_written_file_say_nothing(tmp_path, env, default_model_path):
    path = tmp_path / "today.toml"
    setup = _strata("setup", "--yes", "--skip-bench", "--config", str(path), env=env)
    assert setup.returncode == 0, setup.stderr
    values, _ = config_file.read(path)
    assert set(values) == set(config_file.SETUP_KEYS)      # the keys setup decides, as its plan writes them
    assert config_file.earlier_setup_note(path) is None
    hand = tmp_path / "hand.toml"
    hand.write_text(f'model = "{default_model_path}"\nbatch = 2\n')
    assert config_file.earlier_setup_note(hand) is None
    shown = _strata("setup", "--show", "--config", str(hand), env=env)
    assert shown.returncode == 0 and "note:" not in shown.stdout, shown.stdout


def test_an_env_variable_the_first_versions_took_and_ignored_is_refused_saying_what_to_do(tmp_path, env,
                                                                                         default_model_path):
    """Until f96a524 the [env] table took any STRATA_* variable, and read only the policies' (STRATA_CUDA_GRAPHS
    there did nothing: the engine reads the process environment). Serve now refuses the file: the message must
    say what to change, not only what belongs there."""
    path = tmp_path / "config.toml"
    path.write_text(f'model = "{default_model_path}"\n\n[env]\nSTRATA_CUDA_GRAPHS = 0\n')
    serve = _strata("serve", "--config", str(path), "--port", "0", env=env)
    assert serve.returncode == 2, serve.stdout + serve.stderr
    said = serve.stdout + serve.stderr
    assert "[env] STRATA_CUDA_GRAPHS" in said and "remove it from [env]" in said, said
    assert "set it in the environment" in said, said


def test_setup_run_again_keeps_the_model_and_folder_the_file_chose_and_decides_what_it_left_out(
        tmp_path, env, tiny_model_factory):
    """What the note above advises: `strata setup` again. It proposed the bundled model and the platform folder,
    so Enter (or --yes) wrote them over the user's own model and disk; now it proposes the file's."""
    model = tiny_model_factory(n_embd=128, n_ff=256)
    path = tmp_path / "config.toml"
    cold = tmp_path / "big disk" / "strata"
    cold.mkdir(parents=True)                   # the server made it when it first kept a conversation there
    path.write_text(f'{config_file.HEADER}\nmodel = "{model}"\nctx = 512\nconversation_cache_cold_dir = "{cold}"\n'
                    f'conversation_cache_cold_mib = 1024\nport = 8123\n')
    setup = _strata("setup", "--yes", "--skip-bench", "--config", str(path), env=env)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "the model the configuration there names" in setup.stdout, setup.stdout
    values, _ = config_file.read(path)
    assert values["model"] == str(model), values
    assert values["conversation_cache_cold_dir"] == str(cold) and values["conversation_cache_cold_mib"] > 0, values
    assert values["port"] == 8123 and values["backend"] == "cpu"
    assert config_file.earlier_setup_note(path) is None
    # a folder no longer there (its drive not mounted) is not proposed: made anew, it would fill the disk below
    cold.rmdir()
    setup = _strata("setup", "--yes", "--skip-bench", "--config", str(path), env=env)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert config_file.read(path)[0]["conversation_cache_cold_dir"] != str(cold) and not cold.exists()
