"""The longest paths the cache makes in its default Windows folders stay under MAX_PATH (260 with its closing NUL),
which applies where the registry's LongPathsEnabled is off (Windows' default): past it, a write fails like any
OSError (counted, a 507 for a session save). Measured for a 20-character user folder and a computer name of 15
characters (the longest Windows' setup proposes: the NetBIOS limit) and a 7-digit pid; the longest is a session of a
100-character name's temporary image, 252 characters (with the model's mark, `~` and 8 hex digits). A DNS host name
longer than 22 characters (the temporary name carries up to 40 of it) takes a 100-character session name past the
limit: not fixed (see docs/internals.md)."""

from __future__ import annotations

import ntpath

import platformdirs.windows
import pytest
from strata.server.cache.disk import CONV_PREFIX, GENERATION_MARK
from strata.server.cache.session_store import MODEL_MARK, TAG_DIGITS
from strata.server.cache.sessions import SESSION_PREFIX, validate_session_name
from strata.server.cache.temp_files import TEMP_SUFFIX, writer_of

from strata import folders

MAX_PATH_CHARS = 259   # MAX_PATH is 260 with the closing NUL
USER = "u" * 20
HOST, PID = "H" * 15, 9_999_999


def _temp(path: str) -> str:
    """temp_files.temp_name's form for HOST and PID (checked below to be the form it writes)."""
    return f"{path}.{HOST}-{PID}-{'0' * 12}{TEMP_SUFFIX}"


def test_the_temporary_name_form_is_the_one_written():
    assert writer_of(ntpath.basename(_temp(r"C:\x\strata-conv-a.img"))) == (HOST, PID)


@pytest.fixture
def cache_root(monkeypatch) -> str:
    monkeypatch.setattr(platformdirs.windows, "get_win_folder", lambda _: rf"C:\Users\{USER}\AppData\Local")
    root = str(folders.cache_dir(folders.platform_dirs(platformdirs.windows.Windows)))
    return root.replace("/", "\\")


def test_the_longest_paths_in_the_default_folders_fit_max_path(cache_root):
    assert cache_root == rf"C:\Users\{USER}\AppData\Local\strata\Cache"
    key = "f" * 32   # a conversation, segment or system-prompt key: 32 hex digits
    longest_session = validate_session_name("S" * 100)
    made = [ntpath.join(cache_root, sub, f"{CONV_PREFIX}{key}{ext}")
            for sub in ("conversations", "segments", "system-prompts") for ext in (".img", ".json")]
    key = f"{longest_session}{MODEL_MARK}{'0' * TAG_DIGITS}"   # sessions are per model: the model's mark in the names
    made += [ntpath.join(cache_root, "sessions", f"{SESSION_PREFIX}{key}.json"),
             ntpath.join(cache_root, "sessions", f"{SESSION_PREFIX}{key}{GENERATION_MARK}{'0' * 16}.img")]
    lengths = {path: len(_temp(path)) for path in made}
    longest = max(lengths, key=lengths.get)
    assert lengths[longest] == 252 and longest.endswith(".img")
    assert all(n <= MAX_PATH_CHARS for n in lengths.values()), lengths
