"""A re-run whose file holds what the plan gives says the plan's reason, not "kept from the configuration there (the
plan would give 4)" for batch = 4, nor "kept ... (recommended now: 19456 MiB ...)" for a budget of 19456 MiB: a
new-user trial's Set up again read both, as if the plan wanted other values. A file whose answers differ still says
they are kept (tests/installer/test_setup_rerun_keeps_answers.py). The real CLI, real files, a tiny real model."""

from __future__ import annotations

import subprocess
import sys

from strata.installer import config_file


def setup(*args: str, env: dict) -> str:
    done = subprocess.run([sys.executable, "-m", "strata", "setup", "--yes", "--skip-bench", *args], env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_rerun_of_the_plans_own_file_gives_the_plans_reasons(tmp_path, env, tiny_model_factory):
    path = tmp_path / "config.toml"
    model = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192)
    setup("--config", str(path), "--model", str(model), "--cold-dir", str(tmp_path / "cold"), env=env)
    first, _ = config_file.read(path)
    assert first["batch"] > 0 and first["conversation_cache_cold_mib"] > 0, first
    said = setup("--config", str(path), env=env)
    again, _ = config_file.read(path)
    assert {k: again[k] for k in ("batch", "conversation_cache_cold_mib")} == \
        {k: first[k] for k in ("batch", "conversation_cache_cold_mib")}
    assert "the plan would give" not in said and "recommended now" not in said, said
    text = path.read_text(encoding="utf-8")
    assert "kept from the configuration there" not in text, text
