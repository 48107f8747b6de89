"""What the `strata` command reads and writes its standard streams as, whatever the machine's code page.

A pipe or a file (not a terminal) is UTF-8 both ways; a character an output terminal cannot show is written
escaped (`\\u2603`), never raised. On Windows a pipe's or a file's encoding is otherwise the ANSI code page
(cp1252 and the like), which has no Cyrillic, CJK or emoji, nor many symbols: `strata models` listing a model
under C:\\Users\\Дима ended in UnicodeEncodeError, `strata chat` fed UTF-8 through a pipe in UnicodeDecodeError,
and the app, which reads its server's output as UTF-8 (app/supervisor.py `_pump`), showed a line naming such a
path as '\\u0414...' escapes. A console is left as it is: Python reads and writes a Windows console as UTF-16.
The packaged app's server ignores PYTHONIOENCODING (PyInstaller ignores PYTHON* variables), so this is done here.
Not here: files, which every `open()` of Strata's names the encoding of.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable


def standard_streams_as_utf8() -> None:
    output_as_utf8((sys.stdout, sys.stderr))
    input_as_utf8(sys.stdin)


def output_as_utf8(streams: Iterable[object]) -> None:
    """Each of `streams` that is not a terminal: UTF-8, a lone surrogate (a Linux file name that is not UTF-8)
    escaped; a terminal: its own encoding, what it lacks escaped (Python's default for standard error)."""
    for stream in streams:
        if stream is None or not hasattr(stream, "reconfigure"):
            continue      # a windowed process has none; a replacement that is not Python's text stream
        try:
            if not stream.isatty():
                stream.reconfigure(encoding="utf-8", errors="backslashreplace")
            elif stream.errors == "strict":
                stream.reconfigure(errors="backslashreplace")
        except (OSError, ValueError):   # closed
            pass


def input_as_utf8(stream: object) -> None:
    """`stream`, when it is not a terminal, read as UTF-8 with a byte that is not UTF-8 replaced: `Get-Content
    prompt.txt | strata chat` (PowerShell 7 pipes UTF-8, as Notepad saves) read 'Ёлка' as cp1252 and ended at
    its 0x81, a byte cp1252 lacks. A byte-order mark at its start is dropped (utf-8-sig): a file redirected as it
    is (`strata chat < prompt.txt` in cmd) that Notepad saved as "UTF-8 with BOM", or PowerShell 5.1's `Out-File
    -Encoding utf8` wrote, began its first line with U+FEFF, which went to the model. Left as it is once read
    from (Python refuses then)."""
    if stream is None or not hasattr(stream, "reconfigure"):
        return
    try:
        if not stream.isatty():
            stream.reconfigure(encoding="utf-8-sig", errors="replace")
    except (OSError, ValueError):
        pass
