"""`strata setup` driven through a real pseudo-terminal (stdlib pty), and with stdin closed.

Each question shown in order, Enter takes the default, a typed answer changes the plan, a bad
answer is asked again with the reason. The config and cache folders point into tmp_path.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from strata.installer import config_file

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pty is POSIX-only")


class Terminal:
    """A child process on a pseudo-terminal: `expect` text, `send` lines."""

    def __init__(self, argv, env):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.seen = ""
        self.pos = 0  # expect() looks after the previous match

    def expect(self, pattern: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        start = self.pos
        while not (match := re.compile(pattern).search(self.seen, start)):
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and not self._ready(0):
                raise AssertionError(f"did not see {pattern!r}; output so far:\n{self.seen}")
            if self._ready(min(left, 0.5)):
                try:
                    self.seen += os.read(self.master, 65536).decode(errors="replace").replace("\r\n", "\n")
                except OSError:  # the child closed the terminal
                    pass
        self.pos = match.end()
        return self.seen[start:self.pos]

    def _ready(self, timeout: float) -> bool:
        return bool(select.select([self.master], [], [], timeout)[0])

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=60)
        finally:
            os.close(self.master)


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ)
    e.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"),
             XDG_DATA_HOME=str(tmp_path / "data"), COLUMNS="200")
    return e


def _setup(tmp_path, env, name):
    argv = [sys.executable, "-m", "strata", "setup", "--config", str(tmp_path / name), "--disk-bench-mib", "8"]
    return Terminal(argv, env)


QUESTIONS = ["Which model?", "Measuring this machine", r"One request at a time, or several\?",
             r"Keep conversations on disk\?", r"Folder for the conversations", r"Context size \(tokens\)\?"]


def test_enter_everywhere_asks_in_order_and_writes_the_defaults(tmp_path, env, default_model_path):
    t = _setup(tmp_path, env, "enter.toml")
    asked = []
    for question in QUESTIONS:
        if "Folder" in question and "[no]" in asked[-1]:
            continue  # the bench found the disk slower than a prefill here: no folder to ask for
        t.expect(question)
        if "Measuring" not in question:
            asked.append(t.expect(r"\] $"))  # the prompt ends with the default in brackets and waits
            t.send("")
    t.expect("Wrote ")
    assert t.close() == 0
    shown = [q for q in QUESTIONS if re.search(q, t.seen)]
    order = [re.search(q, t.seen).start() for q in shown]
    assert order == sorted(order) and len(shown) >= len(QUESTIONS) - 1
    values, _ = config_file.read(tmp_path / "enter.toml")
    assert values["model"] == default_model_path.stem      # the default model by its id
    kept = "[yes]" in asked[2]
    assert values["conversation_cache_cold_dir"] == (str(tmp_path / "cache" / "strata" / "conversations") if kept else "")
    assert values["batch"] >= 1


def test_typed_answers_change_the_plan_and_bad_ones_are_asked_again(tmp_path, env, default_model_path):
    t = _setup(tmp_path, env, "typed.toml")
    t.expect("Which model?")
    t.expect(r"\] $")
    t.send("/nowhere/model.gguf")
    t.expect("! /nowhere/model.gguf: no such file")
    t.expect(r"\] $")
    t.send("1")
    t.expect(r"One request at a time, or several\?")
    t.expect(r"\] $")
    t.send("maybe")
    t.expect("! 'maybe': answer 'one' .or 0: no slots, one request at a time. or 'several'")
    t.expect(r"One request at a time, or several\?")
    t.send("one")
    t.expect(r"Keep conversations on disk\?")
    t.expect(r"\] $")
    t.send("no")
    t.expect(r"Context size \(tokens\)\?")
    t.expect(r"\] $")
    t.send("64k")
    t.expect("! 65536 tokens is beyond the 8192 the model was trained on")
    t.expect(r"\] $")
    t.send("4096")
    t.expect("Wrote ")
    assert t.close() == 0
    assert "Folder for the conversations" not in t.seen  # not asked when they stay off disk
    values, reasons = config_file.read(tmp_path / "typed.toml")
    assert (values["batch"], values["ctx"], values["slot_ctx"]) == (0, 4096, 4096)
    assert (values["conversation_cache_cold_dir"], values["conversation_cache_cold_mib"]) == ("", 0)
    assert reasons["ctx"].startswith("your answer")


def test_a_folder_answer_that_is_a_file_says_so_and_is_asked_again(tmp_path, env, default_model_path):
    # a new-user trial answered /etc/passwd: "cannot write to /etc/passwd: File exists" (a file, as it did not say)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    t = _setup(tmp_path, env, "folder.toml")
    for question, answer in [("Which model?", "1"), (r"One request at a time, or several\?", ""),
                             (r"Keep conversations on disk\?", "yes"), ("Folder for the conversations", str(blocker))]:
        t.expect(question)
        t.expect(r"\] $")
        t.send(answer)
    t.expect(f"! cannot write to {re.escape(str(blocker))}: {re.escape(str(blocker))} is a file, not a folder\n")
    t.expect(r"\] $")
    t.send(str(blocker / "below"))                     # mkdir said "Not a directory"
    t.expect(f"! cannot write to {re.escape(str(blocker / 'below'))}: {re.escape(str(blocker))} is a file, not a "
             "folder\n")
    t.expect(r"\] $")
    t.send(str(tmp_path / "convs"))
    t.expect(r"Context size \(tokens\)\?")
    t.expect(r"\] $")
    t.send("")
    t.expect("Wrote ")
    assert t.close() == 0
    values, _ = config_file.read(tmp_path / "folder.toml")
    assert values["conversation_cache_cold_dir"] == str(tmp_path / "convs")


def test_stdin_closed_behaves_as_yes(tmp_path, env, default_model_path):
    path = tmp_path / "closed.toml"
    cmd = f'"{sys.executable}" -m strata setup --config "{path}" --skip-bench <&-'
    done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Taking every default" in done.stdout
    yes = tmp_path / "yes.toml"
    done = subprocess.run([sys.executable, "-m", "strata", "setup", "--yes", "--config", str(yes),
                           "--skip-bench"], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    a, b = config_file.read(path)[0], config_file.read(yes)[0]
    assert a.pop("conversation_cache_cold_mib") // 4096 == b.pop("conversation_cache_cold_mib") // 4096  # free disk moves
    assert a == b


def test_the_closing_hint_names_a_strata_this_user_can_run(tmp_path, env, default_model_path):
    """From a checkout `strata` is `.venv/bin/strata`, not on PATH: the hint said `strata serve`, which
    a new user typed and got 'command not found'. With it on PATH the bare name stays."""
    script = Path(sys.executable).parent / "strata"
    if not script.is_file():
        pytest.skip("no strata script beside this Python")
    path = tmp_path / "my configs" / "hint.toml"     # a space: the hint quotes it, or the shell splits it
    argv = [str(script), "setup", "--yes", "--skip-bench", "--config", str(path)]
    bare = {**env, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(argv, env=bare, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert hint_words(done.stdout) == [str(script.resolve()), "serve", "--config", str(path)]
    on_path = {**env, "PATH": f"{script.parent}:/usr/bin:/bin"}
    done = subprocess.run(argv, env=on_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert hint_words(done.stdout) == ["strata", "serve", "--config", str(path)]


def hint_words(stdout: str) -> list[str]:
    """The closing hint as a POSIX shell reads it when pasted."""
    line = next(x for x in stdout.splitlines() if x.startswith("Start the server with: "))
    return shlex.split(line.removeprefix("Start the server with: "))


def test_the_closing_hint_in_the_packaged_app_names_its_own_executable():
    """The PyInstaller app (`Strata --strata-cli setup`) said `Start the server with: .../Strata -m strata serve`:
    its sys.executable is the app, which takes `--strata-cli`, not `-m` (a new-user trial of dist/Strata). Its
    own executable first, even with another `strata` on PATH."""
    from strata.installer.cli import command_line, strata_command

    app = "/opt/Strata/Strata"
    assert strata_command(on_path="", argv0=app, frozen=True, executable=app) == f"{app} --strata-cli"
    assert strata_command(on_path="/usr/bin/strata", argv0=app, frozen=True, executable=app) == f"{app} --strata-cli"
    assert strata_command(on_path="", argv0="-c", frozen=False, executable="/v/bin/python") == "/v/bin/python -m strata"
    # an app folder with a space (Windows: C:\Program Files\Strata): quoted, so the pasted line runs
    assert shlex.split(strata_command(frozen=True, executable="/opt/My Apps/Strata")) == ["/opt/My Apps/Strata",
                                                                                       "--strata-cli"]
    assert command_line([r"C:\Program Files\Strata\Strata.exe", "--strata-cli"], windows=True) == \
        r'"C:\Program Files\Strata\Strata.exe" --strata-cli'


def test_the_packaged_app_names_its_console_strata_beside_it(tmp_path):
    """The bundle has a console `strata` beside the windowed `strata-app` (resources/packaging/strata.spec):
    the hints named `strata-app --strata-cli`, which on Windows prints nothing in a terminal and is not
    waited for. Both executables name the console one; a folder without it keeps `--strata-cli`."""
    from strata.installer.cli import strata_command

    folder = tmp_path / "My Apps" / "Strata"
    folder.mkdir(parents=True)
    app, console = folder / "strata-app", folder / "strata"
    app.write_bytes(b"")
    assert shlex.split(strata_command(on_path="", frozen=True, executable=str(app))) == [str(app), "--strata-cli"]
    console.write_bytes(b"")
    for running in (app, console):
        assert shlex.split(strata_command(on_path="/usr/bin/strata", frozen=True, executable=str(running))) == \
            [str(console)]


def test_the_app_pip_installed_names_the_strata_beside_it(tmp_path):
    """`.venv/bin/strata-app` with no display said 'run the server alone with `.venv/bin/python -m strata serve`'
    (a new-user trial): pip put `strata` beside it, the command README shows. Without one there, `-m` as before."""
    from strata.installer.cli import strata_command

    folder = tmp_path / "venv" / "bin"
    folder.mkdir(parents=True)
    app = folder / "strata-app"
    app.write_bytes(b"")
    python = str(folder / "python")
    assert strata_command(on_path="", argv0=str(app), frozen=False, executable=python) == f"{python} -m strata"
    (folder / "strata").write_bytes(b"")
    assert shlex.split(strata_command(on_path="", argv0=str(app), frozen=False, executable=python)) == \
        [str(folder / "strata")]
    assert strata_command(on_path="/usr/bin/strata", argv0=str(app), frozen=False, executable=python) == "strata"


def test_on_windows_a_quoted_program_is_also_given_in_powershell_form():
    """On Windows the hint was cmd.exe's line only: `"C:\\Program Files\\Strata\\Strata.exe" --strata-cli serve`.
    PowerShell (Windows Terminal's default shell) reads a line that starts with a quoted string as that string
    and refuses the next word ('Unexpected token'); its call operator `&` runs it. An unquoted program runs in
    both shells as it is, and a POSIX shell needs neither."""
    from strata.installer.cli import start_hint

    app = r'"C:\Program Files\Strata\Strata.exe" --strata-cli'
    cmd = app + r' serve --config "C:\Users\Ann Lee\strata.toml"'
    assert start_hint(app, ["serve", "--config", r"C:\Users\Ann Lee\strata.toml"], windows=True) == \
        f"{cmd}   (in PowerShell: & {cmd})"
    assert start_hint(r"C:\Strata\Strata.exe --strata-cli", ["serve"], windows=True) == \
        r"C:\Strata\Strata.exe --strata-cli serve"
    assert start_hint("'/opt/My Apps/Strata' --strata-cli", ["serve"], windows=False) == \
        "'/opt/My Apps/Strata' --strata-cli serve"
