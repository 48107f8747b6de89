"""A conversations folder on a file system that reports no size (/proc, /sys: statvfs says 0 blocks) is not said to
have "0.0 MiB free": its free space is unknown, and setup refuses it with that reason. Before, the disk page read
"0.0 MiB free there" for /proc/strata, and Next said "cannot write to /proc/strata: No such file or directory" (its
mkdir's error; under /sys/fs/cgroup, as root, that mkdir made a cgroup)."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace

import pytest
from strata.installer import flow
from strata.installer.plan import AnswerError, Answers, cold_folder_problem, question_for
from strata.installer.plan_types import DiskFacts
from strata.installer.profile import disk_facts

from tests.installer.conftest import wizard_at_disk_page

PSEUDO = "/proc/strata-conversations"
linux_proc = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.disk_usage("/proc").total != 0,
                                reason="needs Linux's /proc, a file system of size 0")


@linux_proc
def test_a_folder_under_proc_reports_no_size():
    disk = disk_facts(PSEUDO)
    assert (disk.folder, disk.free_mib, disk.reports_size) == (PSEUDO, 0, False)


def test_the_folder_question_says_its_free_space_is_unknown(tmp_path):
    s = flow.starting_situation(cold_dir=tmp_path / "c")
    assert question_for("cold_dir", s, Answers()).reason.endswith(" free there")
    s = replace(s, cold_disk=DiskFacts(PSEUDO, 0, reports_size=False))
    reason = question_for("cold_dir", s, Answers()).reason
    assert reason == (f"free space unknown: {PSEUDO} is on a file system that reports no size (as /proc and /sys do: "
                      "they hold no files of their own); choose a folder on a disk")   # before: "0.0 MiB free there"
    assert cold_folder_problem(s.cold_disk) == reason


@linux_proc
def test_setup_refuses_a_folder_under_proc_with_that_reason(tmp_path):
    s = flow.starting_situation(cold_dir=tmp_path / "c")
    q = question_for("cold_dir", s, Answers())
    with pytest.raises(AnswerError, match=r"^free space unknown: /proc/strata-conversations is on a file system that "
                                          r"reports no size"):
        flow.accept(s, Answers(), q, PSEUDO)   # before: "cannot write to ...: No such file or directory"


@linux_proc
def test_the_wizards_disk_page_says_so_and_stays(qtbot, tmp_path, default_model_path):
    pytest.importorskip("pytestqt")
    wizard = wizard_at_disk_page(qtbot, tmp_path)
    page = wizard.currentPage()
    page.keep.setChecked(True)
    page.folder.setText(PSEUDO)
    shown = page.folder_reason.text()
    assert shown.startswith(f"free space unknown: {PSEUDO}") and "MiB" not in shown, shown   # before: 0.0 MiB free
    wizard.next()
    qtbot.waitUntil(lambda: page.error.text() != "", timeout=5000)
    assert wizard.currentPage() is page and page.error.text() == shown
