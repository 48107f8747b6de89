"""What a `strata` child of the app (its server, the setup bench) writes to its pipes is UTF-8, as the app reads it
(installer/bench.py, app/supervisor.py `_pump`: UTF-8, a byte that is not replaced), whatever the code page. On
Windows a pipe's encoding is otherwise the ANSI code page (cp1252): a path under C:\\Users\\Дима é came to the app as
'\\u0414...' escapes and a replaced 'é'. strata.cli sets its streams to UTF-8 (strata/standard_streams.py) first
thing in main(), but a traceback of its own imports came before that: `python -m strata` and the packaged entry's
child now set them before those imports. The code page is a real one here: PYTHONIOENCODING=cp1252 sets the child's
streams as a Windows pipe's would be (the packaged app ignores PYTHON* variables, so the child must not rely on it).
Real child processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ENTRY = Path(__file__).resolve().parents[2] / "resources" / "packaging" / "strata_app_entry.py"
FOLDER = "Дима é"     # not in cp1252 (Cyrillic), and in it as another byte than UTF-8's (é)

# the import of strata.cli refused (a bundle or install missing a module it imports), then `strata` run as the app
# runs it: the packaged entry (sys.frozen) or `python -m strata`
RUN = """
import runpy, sys
sys.modules["strata.cli"] = None
how, *args = sys.argv[1:]
if how == "module":
    sys.argv = ["strata", *args]
    runpy.run_module("strata", run_name="__main__")
else:
    sys.frozen = True
    sys.argv = [how, *args]
    runpy.run_path(how, run_name="__main__")
"""


def code_page_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONIOENCODING": "cp1252"}
    env.pop("STRATA_API_KEY", None)
    return env


def stderr_of(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, env=code_page_env(), timeout=120,
                          stdin=subprocess.DEVNULL)
    return done.returncode, done.stderr.decode("utf-8", errors="replace")   # as the app reads it


def test_the_packaged_childs_traceback_of_its_imports_is_utf8(tmp_path):
    folder = tmp_path / FOLDER
    folder.mkdir()
    entry = shutil.copy(ENTRY, folder / ENTRY.name)      # its frames name a path the code page cannot write
    status, err = stderr_of(str(entry), "--strata-cli", "--version")
    assert status == 1 and "ModuleNotFoundError" in err, err
    assert f'File "{folder / ENTRY.name}"' in err, ascii(err)


def test_python_m_stratas_traceback_of_its_imports_is_utf8():
    """The frames name the installed package (an ASCII path here): the stream's encoding is what is asserted, by
    the hook Python calls for the uncaught error, which writes the folder's name to that stream."""
    hook = ('import sys; sys.excepthook = lambda *e: (sys.stderr.write(sys.stderr.encoding + " ' + FOLDER + '\\n"), '
            'sys.stderr.flush()); ')
    done = subprocess.run([sys.executable, "-c", hook + RUN, "module", "--version"], capture_output=True,
                          env=code_page_env(), timeout=120, stdin=subprocess.DEVNULL)
    err = done.stderr.decode("utf-8", errors="replace")
    assert done.returncode == 1 and err.strip() == f"utf-8 {FOLDER}", ascii(err)


@pytest.mark.parametrize("name, said", [("m.gguf", "bad magic"), ("none.gguf", "no such file")])
def test_the_benchs_refusal_names_a_non_ascii_path_whole(tmp_path, monkeypatch, name, said):
    from strata.installer.bench import engine_speed

    folder = tmp_path / FOLDER
    folder.mkdir()
    (folder / "m.gguf").write_bytes(b"not a model")
    monkeypatch.setenv("PYTHONIOENCODING", "cp1252")    # the bench's child inherits it
    with pytest.raises(RuntimeError) as refused:
        engine_speed(str(folder / name), 1)
    assert str(folder / name) in str(refused.value) and said in str(refused.value), ascii(str(refused.value))
