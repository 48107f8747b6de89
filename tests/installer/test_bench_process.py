"""The installer's engine bench as the process of its own it runs in (`strata bench --json`, installer/bench.py):
it ends with the process that started it, and a bench process that dies says how in the wizard's note."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil
import pytest
from strata.installer.bench import engine_speed

# a model whose full bench takes seconds for real (8.4 s with one thread where this was written)
SLOW = {"n_layer": 4, "n_embd": 1024, "n_head": 8, "n_head_kv": 8, "n_ff": 4096, "dtype": "F16", "ctx_len": 4096}


def running_benches(parent: psutil.Process) -> list[psutil.Process]:
    """`parent`'s `strata bench` descendants still running (not one ended and not yet reaped)."""
    found = []
    for p in parent.children(recursive=True):
        try:
            if "bench" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:   # ended since the listing
            continue
    return found


def _wait_for_one_bench(parent: psutil.Process, within_s: float = 30.0) -> psutil.Process:
    deadline = time.monotonic() + within_s
    while not (found := running_benches(parent)):
        assert time.monotonic() < deadline, "no bench process started"
        time.sleep(0.05)
    return found[0]


def _ended(p: psutil.Process, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's (Windows: a kill-on-close job)")
def test_the_bench_process_does_not_outlive_a_killed_app(tiny_model_factory):
    """The app (or `strata setup`) killed mid-bench, by the OOM killer or a crash: its bench process ends too, as
    its server does, instead of running the whole bench (minutes on a big model) with nobody to read it."""
    slow = tiny_model_factory(**SLOW)
    app = subprocess.Popen([sys.executable, "-c",      # the whole bench: 8 s or more with one thread
                            "from strata.installer.bench import engine_speed\n"
                            f"engine_speed({str(slow)!r}, 1, quick=False)\n"])
    try:
        bench = _wait_for_one_bench(psutil.Process(app.pid))
        app.kill()
        app.wait(10)
        assert _ended(bench, 5.0), "the bench process outlived the app that started it"
    finally:
        if app.poll() is None:
            app.kill()
        for p in running_benches(psutil.Process()):
            p.kill()


def test_a_bench_process_killed_by_a_signal_is_said_so(tiny_model_factory):
    """A bench ended by a signal (the OOM killer's SIGKILL on a model too big for this machine, a crash) said
    only 'exited with status -9'; it says the signal, and for SIGKILL that memory may have run out."""
    slow = tiny_model_factory(**SLOW)
    failed: list[BaseException] = []

    def bench() -> None:
        try:
            engine_speed(str(slow), 1, quick=False)
        except BaseException as e:
            failed.append(e)

    worker = threading.Thread(target=bench)
    worker.start()
    _wait_for_one_bench(psutil.Process()).kill()
    worker.join(30)
    assert len(failed) == 1 and isinstance(failed[0], RuntimeError), failed
    said = str(failed[0])
    if sys.platform == "win32":
        return   # TerminateProcess is an exit status there, not a signal
    assert said == "the bench process was killed (SIGKILL): the system may have run out of memory", said


def test_the_bench_stages_are_told_as_they_begin(tiny_model_factory):
    """The bench's process is piped, where `strata bench` says nothing of its stages, so the wizard's page and
    `strata setup` showed 'loading MODEL and measuring ...' alone until its end (minutes on a big model). It
    runs with --stages and each stage comes to `progress` as it begins, before the end."""
    path = tiny_model_factory(dtype="Q8_0", seed=9, ctx_len=256)
    told: list[tuple[str, float, str]] = []
    facts = engine_speed(str(path), 1, lambda *said: told.append(said))
    assert told == [("engine", 0.0, f"loading {path.name} and measuring prefill and decode"),
                    ("engine", 0.0, f"loading {path.name}"),
                    ("engine", 0.25, "reading a prompt of 128 tokens"),
                    ("engine", 0.5, "generating 16 tokens"),
                    ("engine", 0.75, "generating 16 tokens in each of 4 requests at once"),
                    ("engine", 1.0, "engine bench done")]
    assert facts.decode_tps and facts.decode_tps > 0


@pytest.mark.skipif(sys.platform == "win32", reason="pty is POSIX-only")
def test_strata_setup_on_a_terminal_shows_the_bench_stages(tmp_path, default_model_path):
    from tests.installer.test_cli_pty import Terminal

    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               XDG_DATA_HOME=str(tmp_path / "data"), COLUMNS="200")
    t = Terminal([sys.executable, "-m", "strata", "setup", "--config", str(tmp_path / "s.toml"), "--yes",
                  "--disk-bench-mib", "8", "--model", str(default_model_path)], env)
    t.expect(r"\[engine\]   0%  loading ")
    t.expect(r"\[engine\]  25%  reading a prompt of 128 tokens\n")
    t.expect(r"\[engine\]  50%  generating 16 tokens\n")
    t.expect(r"\[engine\]  75%  generating 16 tokens in each of 4 requests at once\n")
    t.expect(r"  model: prefill ")
    t.expect("Wrote ")
    assert t.close() == 0


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in executables are shell scripts")
@pytest.mark.parametrize("which", ["CLI_NAME", "APP_NAME"])
def test_the_packaged_executables_each_run_the_bench(which, tmp_path, tiny_model_factory, monkeypatch):
    """In the packaged app (frozen) the bench runs the executable running. The console `strata` (`strata setup`
    typed in a terminal) was given `--strata-cli`, which only the windowed `strata-app` takes: 'unrecognized
    arguments', and setup went on without speeds. Each is stood in for by its real entry script."""
    from tests.app.test_packaging_spec import SPEC, spec_constant

    entry = {"CLI_NAME": "strata_cli_entry.py", "APP_NAME": "strata_app_entry.py"}[which]
    exe = tmp_path / "Strata" / spec_constant(which)
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {SPEC.parent / entry} "$@"\n', encoding="utf-8")
    exe.chmod(0o755)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(exe))
    path = tiny_model_factory(dtype="Q8_0", seed=9, ctx_len=256)
    told: list[str] = []
    facts = engine_speed(str(path), 1, lambda stage, fraction, what: told.append(what))
    assert facts.decode_tps and facts.decode_tps > 0
    assert "generating 16 tokens in each of 4 requests at once" in told


@pytest.mark.skipif(sys.platform == "win32", reason="pty is POSIX-only")
def test_ctrl_c_in_strata_setup_skips_the_bench_and_ends_its_process(tmp_path, tiny_model_factory):
    """Ctrl-C on a terminal goes to the foreground process group, the bench's process with setup: setup says the
    bench is skipped at once and asks on, no bench process left (f3e4ea6 said so; nothing tested it)."""
    import pty
    import signal

    from tests.installer.test_cli_pty import Terminal

    class Session(Terminal):   # a terminal's own process group, as a shell gives a foreground job
        def __init__(self, argv, env):
            self.master, slave = pty.openpty()
            self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                                         start_new_session=True)
            os.close(slave)
            self.seen, self.pos = "", 0

    slow = tiny_model_factory(**SLOW)
    env = dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               XDG_DATA_HOME=str(tmp_path / "data"), COLUMNS="200")
    t = Session([sys.executable, "-m", "strata", "setup", "--config", str(tmp_path / "s.toml"), "--yes",
                 "--disk-bench-mib", "8", "--model", str(slow), "--fresh"], env)
    t.expect(r"\[engine\]  25%  reading a prompt")
    bench = _wait_for_one_bench(psutil.Process(t.proc.pid))
    os.killpg(t.proc.pid, signal.SIGINT)
    t.expect("  bench skipped\n", timeout=3.0)
    assert _ended(bench, 3.0)
    t.expect("Wrote ")
    assert t.close() == 0
