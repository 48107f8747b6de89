"""A model file truncated in place under a running engine (cp over it, a download into the same name).

The weights read in place lose their mapped pages and the next forward pass dies with SIGBUS; nothing can
carry on, but the process must say why on stderr rather than die with a bare "Bus error".
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.tiny_gguf import make_tiny_gguf

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Windows refuses to truncate a mapped file")

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, sys
from strata.engine import Engine
path = sys.argv[1]
engine = Engine(path, n_ctx=256, n_threads=1)
engine.prefill(0, [1, 2, 3])
print("read", flush=True)
os.truncate(path, int(sys.argv[2]))
engine.prefill(0, [4, 5, 6])
print("read after the truncation", flush=True)
"""


def run_truncated(path: Path, keep_bytes: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(path), str(keep_bytes)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_a_truncated_model_file_says_so_before_the_process_dies(tmp_path):
    model = make_tiny_gguf(tmp_path / "model.gguf", ctx_len=512, n_vocab=512)
    done = run_truncated(model, 4096)
    assert done.stdout.splitlines() == ["read"]
    assert done.returncode == -signal.SIGBUS, done.stderr
    assert f"the GGUF file {model} was truncated or overwritten in place while it was in use" in done.stderr
    assert "rename it over the old one" in done.stderr


def test_the_file_left_whole_is_read_on(tmp_path):
    """The control: truncating to the file's own size changes nothing, and nothing is said."""
    model = make_tiny_gguf(tmp_path / "model.gguf", ctx_len=512, n_vocab=512)
    done = run_truncated(model, os.path.getsize(model))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["read", "read after the truncation"]
    assert "truncated or overwritten" not in done.stderr
