"""A GGUF file whose name does not end in .gguf (an Ollama blob, `model.bin`) is taken by setup as `strata serve`
takes it; a file that is not GGUF is refused by its content, whatever its name. A new-user trial's `strata setup
--model /tmp/model.bin` (the default model copied) was refused as "not a .gguf file, nor the id of one listed (a
number from the list, or a path)", and `--model .../README.md` the same, while `strata serve` loaded the first and
said "not a GGUF file" of the second. Real `strata setup` processes on the default model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def _setup(tmp_path, model, *extra):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    return subprocess.run([sys.executable, "-m", "strata", "setup", "--yes", "--skip-bench", "--model", str(model),
                           "--config", str(tmp_path / "config.toml"), *extra], capture_output=True, text=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)


def test_a_gguf_file_named_otherwise_is_set_up_and_served(tmp_path, default_model_path):
    blob = tmp_path / "blobs" / "sha256-4b1c0e"
    blob.parent.mkdir()
    shutil.copyfile(default_model_path, blob)
    r = _setup(tmp_path, blob)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    written = (tmp_path / "config.toml").read_text(encoding="utf-8")
    assert f'model = "{blob}"' in written, written
    show = subprocess.run([sys.executable, "-m", "strata", "setup", "--show", "--config", str(tmp_path / "config.toml")],
                          capture_output=True, text=True, timeout=300)
    assert show.returncode == 0 and "valid" in show.stdout, (show.stdout[-2000:], show.stderr[-2000:])


def test_a_text_file_is_refused_by_its_content(tmp_path):
    notes = tmp_path / "README.md"
    notes.write_text("# notes\n", encoding="utf-8")
    r = _setup(tmp_path, notes)
    assert r.returncode != 0 and not (tmp_path / "config.toml").exists()
    assert f"{notes}: not a GGUF file" in r.stderr + r.stdout, (r.stdout[-2000:], r.stderr[-2000:])
    assert "is not a .gguf file" not in r.stderr + r.stdout
