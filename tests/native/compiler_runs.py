"""Compiler processes run for the tests that build engine sources themselves, so that none outlives its test: g++
with what it started (cc1plus, as, collect2, ld; killing g++ alone leaves them running, a core of CI's two taken)
killed past its time limit, on an interrupt, or when a compile beside it failed. They stay in the test run's
process group, so that a signal to the group (Ctrl-C, `timeout`, a CI job's end) still reaches them."""

from __future__ import annotations

import contextlib
import math
import subprocess
import threading

import psutil


def valid_timeout(timeout_s: float) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0 \
            or math.isinf(timeout_s):
        raise ValueError(f"timeout_s {timeout_s!r}: give a number of seconds above 0")
    return timeout_s


def _kill_tree(pid: int) -> None:
    """`pid` and all it started (psutil, already a dependency): each stopped first, so that it starts
    nothing more while its children are found (once dead, they would belong to init)."""
    try:
        proc = psutil.Process(pid)
        proc.suspend()
        tree = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.suspend()
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


class CompilerRuns:
    """Compiler commands run together (from several threads); stop() kills the ones under way and refuses more."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopped = False

    def run(self, cmd: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess:
        """`cmd`'s exit code and output; past `timeout_s` it is killed with what it started, and an AssertionError
        names `what`."""
        valid_timeout(timeout_s)
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"{what}: not compiled, the compiles were stopped")
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self._running.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(proc.pid)
            proc.communicate()
            raise AssertionError(f"{what}: the compiler ran past its {timeout_s:g} s, stopped") from None
        except BaseException:   # an interrupt (one to this process alone): the compiler goes too
            _kill_tree(proc.pid)
            proc.communicate()
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for proc in self._running:
                if proc.returncode is None:   # not yet reaped: its pid is still its own
                    _kill_tree(proc.pid)
