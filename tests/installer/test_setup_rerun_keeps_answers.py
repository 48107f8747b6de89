"""A re-run of `strata setup` proposes the file's own answers (context, slots, disk level and budget), not the
new plan's: Enter / --yes then changes nothing; --fresh proposes the recommendation. The real CLI, real files,
a tiny real model."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from strata.installer import config_file

ASKED = ("model", "ctx", "batch", "slot_ctx", "conversation_cache_cold_dir", "conversation_cache_cold_mib")


def _setup(*args: str, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "strata", "setup", "--yes", "--skip-bench", *args], env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_rerun_with_the_defaults_keeps_every_answer_the_file_gave(own_answers, env):
    before, _ = config_file.read(own_answers)
    run = _setup("--config", str(own_answers), env=env)
    after, _ = config_file.read(own_answers)
    assert {k: after[k] for k in ASKED} == {k: before[k] for k in ASKED}, run.stdout
    assert after["port"] == 8123
    # the question says whose answer it is, and what the plan would recommend instead
    assert "the configuration there: ctx = 2048; recommended: " in run.stdout, run.stdout
    assert "the configuration there: batch = 2" in run.stdout, run.stdout
    assert "kept from the configuration there (the plan would give" in run.stdout, run.stdout


def test_fresh_proposes_the_recommendation(own_answers, env):
    _setup("--config", str(own_answers), "--fresh", env=env)
    after, _ = config_file.read(own_answers)
    assert after["ctx"] != 2048 and after["batch"] != 2, after
    assert after["model"] == config_file.read(own_answers.with_suffix(".toml.bak"))[0]["model"]


def test_a_file_that_keeps_nothing_on_disk_stays_so(tmp_path, env, tiny_model_factory):
    model = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192)
    path = tmp_path / "config.toml"
    path.write_text(f'{config_file.HEADER}\nmodel = "{model}"\nctx = 1024\nbatch = 0\n'
                    'conversation_cache_cold_dir = ""\nconversation_cache_cold_mib = 0\n')
    run = _setup("--config", str(path), env=env)
    after, _ = config_file.read(path)
    assert (after["ctx"], after["batch"], after["conversation_cache_cold_mib"]) == (1024, 0, 0), run.stdout
    assert "conversations not kept on disk" in run.stdout


def test_setup_twice_writes_the_same_file(tmp_path, env, tiny_model_factory):
    """A first setup's own file, run again with Enter: the same values (only the date line changes)."""
    path = tmp_path / "config.toml"
    model = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192)
    _setup("--config", str(path), "--model", str(model), env=env)
    first, _ = config_file.read(path)
    _setup("--config", str(path), env=env)
    assert config_file.read(path)[0] == first


@pytest.mark.skipif(sys.platform == "win32", reason="pty is POSIX-only")
def test_enter_at_every_question_in_a_terminal_changes_nothing(own_answers, env):
    from tests.installer.test_cli_pty import Terminal

    before, _ = config_file.read(own_answers)
    term = Terminal([sys.executable, "-m", "strata", "setup", "--config", str(own_answers), "--skip-bench"],
                    dict(env, COLUMNS="200"))
    for question, said in (("Which model?", "the model the configuration there names"),
                           (r"One request at a time, or several\?", "the configuration there: batch = 2"),
                           (r"Keep conversations on disk\?", "the configuration there: conversations kept in"),
                           (r"Folder for the conversations", "free there (the folder of the configuration there)"),
                           (r"Context size \(tokens\)\?", "the configuration there: ctx = 2048; recommended:")):
        block = term.expect(question + r"[\s\S]*?\] ")
        assert said in block, term.seen
        # the default alone on its line, the reason below it (in brackets beside it, it nested three deep)
        assert re.search(r"\n  default: [^\n(]*\n  why: [^\n]*" + re.escape(said), block), block
        term.send("")
    term.expect("Wrote ")
    assert term.close() == 0
    after, _ = config_file.read(own_answers)
    assert {k: after[k] for k in ASKED} == {k: before[k] for k in ASKED}


def test_a_context_the_model_no_longer_holds_is_not_proposed_and_is_said_so(tmp_path, env, tiny_model_factory):
    model = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192)
    path = tmp_path / "config.toml"
    path.write_text(f'{config_file.HEADER}\nmodel = "{model}"\nctx = 16384\n')   # set by hand past the model
    run = _setup("--config", str(path), env=env)
    assert config_file.read(path)[0]["ctx"] == 8192
    assert "not the configuration there's ctx = 16384: 16384 tokens is beyond the 8192" in run.stdout, run.stdout
