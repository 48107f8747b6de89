"""The theme's palette greys what is disabled. It set each colour for every group, the disabled one too, so in the
app (whose monitor window sets the application's palette) a disabled button looked live: a new-user trial's "Set
up again..." showed the bench page's "Skip the bench" as a button to press while no bench ran."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QColor  # noqa: E402
from PySide6.QtWidgets import QPushButton  # noqa: E402
from strata.installer import flow  # noqa: E402
from strata.installer.wizard.setup_wizard import SetupWizard  # noqa: E402
from strata.monitor.model import MonitorModel  # noqa: E402
from strata.monitor.window import MonitorWindow  # noqa: E402


def _contrast(widget) -> int:
    """The largest difference, over the widget's pixels, from the colour at its middle's left edge (the button's
    face): the text's contrast against it."""
    image = widget.grab().toImage()
    face = QColor(image.pixel(4, image.height() // 2))
    most = 0
    for y in range(image.height()):
        for x in range(image.width() // 4, 3 * image.width() // 4):       # the middle, where the text is
            c = QColor(image.pixel(x, y))
            most = max(most, abs(c.red() - face.red()) + abs(c.green() - face.green()) + abs(c.blue() - face.blue()))
    return most


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_disabled_button_looks_disabled_in_the_apps_palette(qtbot, tmp_path, default_model_path, theme):
    window = MonitorWindow(MonitorModel(), theme=theme)          # as the app builds it: the palette is the theme's
    qtbot.addWidget(window)
    wizard = SetupWizard(window, tmp_path / "config.toml", situation=flow.starting_situation(cold_dir=tmp_path / "c"),
                         run_bench=False, no_bench_reason="bench not run: the server is running")
    qtbot.addWidget(wizard)
    wizard.show()
    wizard.next()
    bench = wizard.currentPage()
    assert bench is wizard.page(wizard.page_ids["bench"]) and not bench.skip_button.isEnabled()
    live = QPushButton(bench.skip_button.text(), bench)             # the same button, enabled, beside it
    live.setGeometry(bench.skip_button.geometry().translated(0, bench.skip_button.height() + 8))
    live.show()
    qtbot.wait(50)
    disabled, enabled = _contrast(bench.skip_button), _contrast(live)
    assert enabled > 200, enabled
    assert disabled < enabled * 0.6, (disabled, enabled)
