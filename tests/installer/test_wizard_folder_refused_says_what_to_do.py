"""The disk page's refusal of a folder it cannot write to says what to do on the page. A new-user trial typed a folder
on a read-only mount and read only "cannot write to /tmp/rofs/cache: Read-only file system" (`strata setup` in a
terminal adds "pass another --cold-dir PATH"). Here the folder is under a file, which no user can write either."""

from __future__ import annotations

import pytest

from tests.installer.conftest import wizard_at_disk_page


def test_a_folder_that_cannot_be_written_names_the_ways_on(qtbot, tmp_path, default_model_path):
    pytest.importorskip("pytestqt")
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    wizard = wizard_at_disk_page(qtbot, tmp_path)
    page = wizard.currentPage()
    page.keep.setChecked(True)
    page.folder.setText(str(blocker / "conversations"))
    wizard.next()
    qtbot.waitUntil(lambda: page.error.text() != "", timeout=5000)
    assert wizard.currentPage() is page
    assert page.error.text() == (f"cannot write to {blocker / 'conversations'}: {blocker} is a file, not a folder: "
                                 "choose another folder, or untick \u201cKeep conversations on disk\u201d")


def test_a_reason_that_names_its_way_on_is_left_as_it_is(qtbot, tmp_path, default_model_path):
    from strata.installer.wizard.question_pages import DiskPage

    page = DiskPage()
    qtbot.addWidget(page)
    said = "free space unknown: /proc/x is on a file system that reports no size (...); choose a folder on a disk"
    assert page.refused("cold_dir", said) == said
    assert page.refused("keep_on_disk", "no") == "no"
