"""toolchain.compiled_objects when a compile goes wrong: the test fails with the compiler's message, without
waiting for the compiles beside it; a compile past its time limit fails naming the source; an interrupt ends the
compiles at once, whether it goes to the process or its group, as does a SIGTERM to the group; and none of these
leaves a compiler (cc1plus) running behind it on CI's two cores. Real g++ on real files; a constexpr loop makes a
source slow to compile (~10 s per million turns at load 0). Skipped without g++."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .toolchain import compiled_objects, gxx_and_cpu_or_skip

ROOT = Path(__file__).resolve().parents[2]
SLOW = """constexpr unsigned long long spin(unsigned long long n) {{
    unsigned long long s = 0;
    for (unsigned long long i = 0; i < n; i++) s = s * 6364136223846793005ULL + i;
    return s;
}}
static_assert(spin({turns}) != 1, "spin");
int slow{index}() {{ return {index}; }}
"""
SLOW_FLAGS = ["-std=gnu++17", "-fconstexpr-loop-limit=2000000000", "-fconstexpr-ops-limit=4000000000"]
MINUTES = 50_000_000   # turns: minutes of compiling


def slow_source(folder: Path, index: int, turns: int = MINUTES) -> Path:
    src = folder / f"slow{index}.cpp"
    src.write_text(SLOW.format(turns=turns, index=index))
    return src


def compilers_of(src: Path) -> list[int]:
    """The pids of processes whose command line names `src` (g++ and its cc1plus; a folder: any file in it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(src).encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            pass
    return found


def none_left(sources: list[Path], wait_s: float = 5) -> list[int]:
    """[] once no compiler of `sources` runs (within `wait_s`); else the pids still running."""
    deadline = time.monotonic() + wait_s
    while (left := [pid for src in sources for pid in compilers_of(src)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path):
    """Kills what a failing test left compiling of its sources, so that the failure costs no core afterwards."""
    yield
    for pid in compilers_of(tmp_path):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_compile_error_fails_at_once_with_the_compiler_s_message(tmp_path):
    compiler = gxx_and_cpu_or_skip([])
    bad = tmp_path / "bad.cpp"
    bad.write_text("int broken() { return undeclared_strata_name; }\n")
    slow = [slow_source(tmp_path, i) for i in range(4)]   # one begins beside bad.cpp, the rest wait their turn
    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        compiled_objects(compiler, [bad, *slow], SLOW_FLAGS)
    assert "bad.cpp" in str(failed.value) and "undeclared_strata_name" in str(failed.value), failed.value
    assert time.monotonic() - started < 60, "the error waited for the compile beside it"
    assert none_left(slow) == [], "a compiler still runs after the test failed"


def test_a_compile_past_its_time_limit_fails_and_leaves_no_compiler_running(tmp_path):
    compiler = gxx_and_cpu_or_skip([])
    src = slow_source(tmp_path, 0)
    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        compiled_objects(compiler, [src], SLOW_FLAGS, timeout_s=1)
    assert "slow0.cpp: the compiler ran past its 1 s" in str(failed.value), failed.value
    assert time.monotonic() - started < 30
    assert none_left([src]) == [], "a compiler still runs after the time limit"


def compiling(tmp_path: Path, count: int = 3) -> tuple[subprocess.Popen, list[Path]]:
    """A Python process (a session of its own, as `timeout` makes) compiling `count` slow sources, once the
    first compile has begun."""
    gxx_and_cpu_or_skip([])
    slow = [slow_source(tmp_path, i) for i in range(count)]
    code = ("import sys\nfrom pathlib import Path\nfrom tests.native.toolchain import compiled_objects\n"
            f"compiled_objects('g++', [Path(p) for p in sys.argv[1:]], {SLOW_FLAGS!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", code, *map(str, slow)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while not compilers_of(slow[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    return proc, slow


@pytest.mark.parametrize("to_the_group", [False, True], ids=["to-the-process", "to-its-group"])
def test_an_interrupt_ends_the_compiles_under_way(tmp_path, to_the_group):
    """SIGINT to the Python process alone (kill -INT) or to its process group (Ctrl-C, `timeout -s INT`)."""
    proc, slow = compiling(tmp_path)
    try:
        assert compilers_of(slow[0]), "the compile never began"
        if to_the_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert "KeyboardInterrupt" in err, err[-2000:]
        assert none_left(slow) == [], "a compiler still runs after the interrupt"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_kill_of_the_run_s_group_reaches_its_compilers(tmp_path):
    """`timeout` (SIGTERM) or a CI job's end signals the run's whole process group: Python dies at once, with no
    clean-up of its own, and its compilers must go with it."""
    proc, slow = compiling(tmp_path)
    try:
        assert compilers_of(slow[0]), "the compile never began"
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)
        assert none_left(slow) == [], "a compiler still runs after its run's group was ended"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf"), "900", True])
def test_a_bad_time_limit_is_named(timeout_s, tmp_path):
    with pytest.raises(ValueError, match=f"timeout_s {timeout_s!r}"):
        compiled_objects("g++", [tmp_path / "a.cpp"], [], timeout_s=timeout_s)
