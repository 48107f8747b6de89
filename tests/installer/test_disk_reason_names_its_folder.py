"""The disk page's "Why this default" speaks of the folder it was measured at: after a new-user trial typed another
folder, it still quoted the default folder's free space ("19.0 GiB of 78.1 GiB free") above that folder, as if
it were the typed one's. With another folder shown it names the default folder; back on the default it reads as
before; the typed folder's own free space stays in the line under it."""

from __future__ import annotations

from tests.installer.conftest import wizard_at_disk_page


def test_why_this_default_names_the_default_folder_once_another_is_typed(qtbot, tmp_path):
    wizard = wizard_at_disk_page(qtbot, tmp_path)
    page = wizard.currentPage()
    page.keep.setChecked(True)
    default = page.folder.text()
    before = page.reason.text()
    assert before.startswith("Why this default: ") and "free" in before, before
    other = tmp_path / "elsewhere"
    page.folder.setText(str(other))
    measured = wizard.situation.cold_disk.folder
    assert page.reason.text() == (f"Why this default, measured at the default folder {measured}: "
                                  f"{before.removeprefix('Why this default: ')}"), page.reason.text()
    assert page.folder_reason.text().endswith(" free there"), page.folder_reason.text()
    page.folder.setText(default + "/")          # the same folder, written otherwise
    assert page.reason.text() == before
    page.folder.setText("")
    assert page.reason.text() == before
