"""A failed stop's advice and kill steps are the platform's. Windows has no SIGKILL: Popen.kill is TerminateProcess,
as Popen.terminate is, so the second step waited END_WAIT_S again for nothing, and the status bar advised
`kill -9 PID`, a command Windows does not have, before naming the Task Manager. Pure functions, both platforms."""

from __future__ import annotations

from pathlib import Path

from strata.app.supervisor import end_steps, start_refused, stop_failed


def test_windows_is_told_its_own_way_to_end_the_server():
    for said in (stop_failed(4242, windows=True), start_refused(4242, windows=True)):
        assert "kill -9" not in said, said
        assert "Task Manager" in said and "taskkill /F /PID 4242" in said, said


def test_elsewhere_kill_9_and_no_task_manager():
    for said in (stop_failed(4242, windows=False), start_refused(4242, windows=False)):
        assert "kill -9 4242" in said and "Task Manager" not in said and "taskkill" not in said, said


def test_windows_ends_the_server_in_one_step():
    assert end_steps(windows=True) == ("terminate",)
    assert end_steps(windows=False) == ("terminate", "kill")


def test_the_docs_give_both_ways():
    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "app.md").read_text(encoding="utf-8").split())
    assert "`kill -9 4242`" in page and "`taskkill /F /PID 4242`" in page
    assert "TerminateProcess" in page
