"""What the `strata` command reads and writes on its standard streams whatever the machine's code page: on Windows a
pipe or a file gets the ANSI code page (cp1252 and the like), simulated here with PYTHONIOENCODING=cp1252. Pipes
and files are UTF-8 both ways; a terminal keeps its encoding, what it lacks written escaped (`\\u041c`). Not here:
the app's reading of its server's output (tests/app/test_server_output_encoding.py)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

from strata.standard_streams import input_as_utf8, output_as_utf8

ROOT = Path(__file__).resolve().parents[2]
CP1252 = dict(os.environ, PYTHONIOENCODING="cp1252", PYTHONUTF8="0")


def test_strata_models_lists_a_model_in_a_cyrillic_folder_on_a_cp1252_pipe(tiny_model_factory, tmp_path):
    folder = tmp_path / "Модели ☃"
    folder.mkdir()
    shutil.copy(tiny_model_factory(), folder / "малая.gguf")
    done = subprocess.run([sys.executable, "-m", "strata", "models", "--dir", str(folder)], cwd=ROOT, env=CP1252,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode("utf-8", errors="replace")   # UnicodeEncodeError before
    out = done.stdout.decode("utf-8")
    assert "малая  " in out and str(folder / "малая.gguf") in out, out


def test_strata_chat_reads_and_writes_utf8_pipes_under_a_cp1252_code_page(tiny_model_factory):
    # PowerShell 7 pipes UTF-8; cp1252 has no 0x81 (the second byte of Ё): UnicodeDecodeError before
    done = subprocess.run([sys.executable, "-m", "strata", "chat", "--model", str(tiny_model_factory()),
                           "--max-tokens", "3", "--threads", "1"], cwd=ROOT, env=CP1252, input="Ёлка ☃\n".encode(),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode("utf-8", errors="replace")
    assert ">>> Ёлка ☃" in done.stdout.decode("utf-8")   # the transcript echoes piped input


def test_a_pipe_is_written_as_utf8_and_a_terminal_escapes_what_its_encoding_lacks():
    raw = io.BytesIO()
    pipe = io.TextIOWrapper(raw, encoding="cp1252", write_through=True)
    controller, terminal_end = os.openpty()
    terminal = open(terminal_end, "w", encoding="cp1252", closefd=True)
    try:
        output_as_utf8([pipe, terminal, None])
        pipe.write("a → b é\n")
        terminal.write("a → b é\n")
        terminal.flush()
        assert raw.getvalue() == "a → b é\n".encode()
        assert (terminal.encoding, terminal.errors) == ("cp1252", "backslashreplace")
        assert os.read(controller, 100).replace(b"\r\n", b"\n") == "a \\u2192 b é\n".encode("cp1252")
    finally:
        terminal.close()
        os.close(controller)


def test_piped_input_is_read_as_utf8_with_a_bad_byte_replaced():
    stdin = io.TextIOWrapper(io.BytesIO("Ёлка é\n".encode() + b"\xff\n"), encoding="cp1252")
    input_as_utf8(stdin)
    assert stdin.read() == "Ёлка é\n\ufffd\n"


def test_piped_input_saved_with_a_byte_order_mark_reads_without_it():
    # Notepad's "UTF-8 with BOM" or PowerShell 5.1's `Out-File -Encoding utf8`, redirected as it is (`strata chat <
    # prompt.txt` in cmd): the first line began with U+FEFF, which the model got as part of the message
    stdin = io.TextIOWrapper(io.BytesIO(b"\xef\xbb\xbf" + "Ёлка\nsecond \ufeff kept\n".encode()), encoding="cp1252")
    input_as_utf8(stdin)
    assert stdin.readline() == "Ёлка\n"
    assert stdin.readline() == "second \ufeff kept\n"      # only the stream's start is a byte-order mark
