"""The wizard's bench results, offscreen, for a folder whose name holds characters HTML gives a meaning to: the
page shows the folder as it is (the results are rich text: `<new>` in a path was dropped as a tag), and the status
line a model's name as it is."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QTextDocument  # noqa: E402
from strata.installer import flow  # noqa: E402
from strata.installer.wizard.setup_wizard import SetupWizard  # noqa: E402


@pytest.mark.skipif(sys.platform == "win32", reason="Windows file names cannot hold < or >")
def test_a_folder_named_with_markup_is_shown_as_it_is(qtbot, tmp_path, tiny_model_factory):
    folder = tmp_path / "R&D <new>" / "cold"
    model = tmp_path / "<new> model.gguf"
    model.write_bytes(tiny_model_factory(dtype="Q8_0", seed=9, ctx_len=256).read_bytes())
    s = flow.starting_situation(cold_dir=folder, extra_model=str(model), model_reason="the test's")
    wizard = SetupWizard(config_path=tmp_path / "qt.toml", situation=s, disk_bench_mib=8)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    wizard.next()
    bench = wizard.page(wizard.page_ids["bench"])
    assert wizard.currentPage() is bench, wizard.currentPage().title()
    qtbot.waitUntil(lambda: bench.status.text().startswith("engine: loading "), timeout=10_000)
    assert bench.status.textFormat() == Qt.TextFormat.PlainText, "the model's name would be read as markup"
    qtbot.waitUntil(bench.isComplete, timeout=60_000)
    shown = QTextDocument()
    shown.setHtml(bench.results.text())
    text = shown.toPlainText()
    assert "Model: prefill " in text and f"Disk {folder}: write " in text, text
    # it ended on a bare "done" (a new-user trial: done what?)
    assert bench.status.text() == ("bench done: measured the model's prompt and generation speeds and the disk's "
                                   "write and read speeds (above); the plan's choices use them"), bench.status.text()


def test_a_bench_that_measured_nothing_says_so():
    from strata.installer.bench import BenchReport
    from strata.installer.plan_types import DiskFacts
    from strata.installer.wizard.bench_page import finished_line

    nothing = BenchReport(bench=None, disk=DiskFacts("/c", 1024), ram_total_mib=8192, ram_available_mib=4096)
    assert finished_line(nothing) == "bench ended: nothing measured; the plan goes by its defaults"
