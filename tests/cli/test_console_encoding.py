"""What the `strata` command writes to a standard output whose encoding lacks a character: on Windows a pipe or a
file gets the ANSI code page (cp1252 and the like), simulated here with PYTHONIOENCODING=cp1252. The character
comes out escaped (`\\u041c`); the command does not end in UnicodeEncodeError. Piped input is read as UTF-8. Not here: the app's reading of
its server's output (tests/app/test_server_output_encoding.py)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

from strata.cli import console_never_raises, piped_input_as_utf8

ROOT = Path(__file__).resolve().parents[2]


def test_strata_models_lists_a_model_in_a_cyrillic_folder_on_a_cp1252_pipe(tiny_model_factory, tmp_path):
    folder = tmp_path / "Модели ☃"
    folder.mkdir()
    shutil.copy(tiny_model_factory(), folder / "малая.gguf")
    env = dict(os.environ, PYTHONIOENCODING="cp1252", PYTHONUTF8="0")
    done = subprocess.run([sys.executable, "-m", "strata", "models", "--dir", str(folder)], cwd=ROOT, env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode("cp1252", errors="replace")
    out = done.stdout.decode("cp1252")
    assert "UnicodeEncodeError" not in done.stderr.decode("cp1252", errors="replace")
    assert "\\u043c\\u0430\\u043b\\u0430\\u044f" in out           # the id, малая
    assert "\\u041c\\u043e\\u0434\\u0435\\u043b\\u0438 \\u2603" in out   # its folder


def test_a_strict_stream_escapes_what_its_encoding_lacks_and_a_lenient_one_is_left_alone():
    raw = io.BytesIO()
    strict = io.TextIOWrapper(raw, encoding="cp1252", errors="strict", write_through=True)
    lenient = io.TextIOWrapper(io.BytesIO(), encoding="cp1252", errors="replace")
    console_never_raises([strict, lenient, None])
    strict.write("a → b é\n")
    assert raw.getvalue() == "a \\u2192 b é\n".encode("cp1252")
    assert (strict.errors, lenient.errors) == ("backslashreplace", "replace")


def test_strata_chat_reads_piped_utf8_under_a_cp1252_code_page(tiny_model_factory, tmp_path):
    # PowerShell 7 pipes UTF-8; cp1252 has no 0x81 (the second byte of Ё): UnicodeDecodeError before
    env = dict(os.environ, PYTHONIOENCODING="cp1252", PYTHONUTF8="0")
    done = subprocess.run([sys.executable, "-m", "strata", "chat", "--model", str(tiny_model_factory()),
                           "--max-tokens", "3", "--threads", "1"], cwd=ROOT, env=env, input="Ёлка\n".encode(),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode("cp1252", errors="replace")
    assert "\\u0401\\u043b\\u043a\\u0430" in done.stdout.decode("cp1252")   # the transcript echoes it


def test_piped_input_is_read_as_utf8_with_a_bad_byte_replaced():
    stdin = io.TextIOWrapper(io.BytesIO("Ёлка é\n".encode() + b"\xff\n"), encoding="cp1252")
    piped_input_as_utf8(stdin)
    assert stdin.read() == "Ёлка é\n\ufffd\n"
