"""A stop that gave an engine step up as stuck, then exited while that call was still running: the call ended as
the interpreter finalized and aborted the process ('terminate called without an active exception', SIGABRT): the
engine's thread, sent out by Python's pthread_exit when it asked for the GIL back, unwinds through the binding's
GIL guard. `strata serve` now ends the process past its clean stop without tearing the interpreter down under a
call still running (server/cli.py end_past_a_stuck_step). The real serve entry runs in a child process
(stuck_step_exit_child.py), its step held, then let go on into a real engine call as the interpreter exits;
without the fix the child died of SIGABRT in 3 runs of 3."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_a_step_given_up_at_the_stop_does_not_crash_the_exit(tiny_model_factory, tmp_path):
    model = tiny_model_factory(ctx_len=8192, n_vocab=512, seed=3)
    run = subprocess.run([sys.executable, str(HERE / "stuck_step_exit_child.py"), str(model), str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=300)
    assert "terminate called" not in run.stderr, run.stderr[-2000:]
    assert run.returncode == 0, run.stderr[-2000:]
    assert "has not ended after" in run.stderr, run.stderr[-2000:]           # the stop did give the step up
    assert "the engine call given up as stuck is still running; the process ends" in run.stderr
    assert "stopped; " in run.stderr                                       # after the cache closed, not before
