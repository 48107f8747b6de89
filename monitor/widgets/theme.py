"""Colours of the monitor: light or dark, following the system (the application palette and Qt's colour
scheme hint), or forced with `--theme`. Series colours are the Okabe-Ito set, readable on both and by
colour-blind readers. Not here: layout or data.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette

THEMES = ("system", "light", "dark")


@dataclass(frozen=True)
class Theme:
    dark: bool
    background: str      # plot background
    foreground: str      # axes and text
    grid_alpha: float
    muted: str           # secondary text
    good: str
    warn: str
    bad: str
    series: tuple[str, ...]

    def color(self, i: int) -> str:
        return self.series[i % len(self.series)]

    def line_style(self, i: int) -> Qt.PenStyle:
        """The i-th curve's line: solid for the first len(series), then dashed, dotted, dash-dot, dash-dot-dot
        (40 looks; --batch goes to 256, past 40 contexts they repeat). The colours alone repeat after 8: with
        --batch 8 and more, main and slot 8 (and 16) drew the same line and had the same name colour in the table,
        two curves of 17 no one could tell apart."""
        return LINE_STYLES[i // len(self.series) % len(LINE_STYLES)]


LINE_STYLES = (Qt.PenStyle.SolidLine, Qt.PenStyle.DashLine, Qt.PenStyle.DotLine, Qt.PenStyle.DashDotLine,
               Qt.PenStyle.DashDotDotLine)


# Okabe-Ito's colour-blind-safe hues, each at least 3:1 against the rows and the plots it is drawn on (WCAG 2.1
# 1.4.11: the names are the plots' key; tests/monitor/test_series_colours_readable.py) and still told apart by
# deuteranopes and protanopes (test_series_colours_told_apart.py). In the light theme its reddish purple is
# darkened (2.9:1 on the alternate rows); its yellow (1.3:1 on white), orange and sky blue (2.3:1) give way to
# brown, indigo and wine: darkened enough to read, they fell together (orange and yellow became one olive), so
# they are not darkened but replaced. In the dark theme its blue (#0072B2, 2.9:1) is lightened.
LIGHT = Theme(False, "#ffffff", "#303030", 0.15, "#6b6b6b", "#1b7f3b", "#b26b00", "#b00020",
              ("#0072B2", "#D55E00", "#009E73", "#C4709F", "#8B4513", "#332288", "#000000", "#882255"))
DARK = Theme(True, "#1e1f22", "#dcdcdc", 0.2, "#9a9a9a", "#5cc97b", "#f0b000", "#ff6b6b",
             ("#56B4E9", "#E69F00", "#009E73", "#CC79A7", "#F0E442", "#0A7CC2", "#ffffff", "#D55E00"))

# what each park destination and state looks like everywhere in the window
PARK_COLORS = {"ram": 0, "disk": 1, "discard": 2}


def system_is_dark() -> bool:
    app = QGuiApplication.instance()
    if app is None:
        return False
    try:
        scheme = app.styleHints().colorScheme()
        if scheme == Qt.ColorScheme.Dark:
            return True
        if scheme == Qt.ColorScheme.Light:
            return False
    except AttributeError:   # Qt < 6.5
        pass
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def choose(name: str = "system") -> Theme:
    if name not in THEMES:
        raise ValueError(f"theme must be one of {', '.join(THEMES)}, got {name!r}")
    if name == "system":
        return DARK if system_is_dark() else LIGHT
    return DARK if name == "dark" else LIGHT


def apply_palette(theme: Theme) -> None:
    """Gives the whole application the theme's palette (Fusion style, so that it is the same everywhere)."""
    app = QGuiApplication.instance()
    if app is None:
        return
    if hasattr(app, "setStyle"):
        app.setStyle("Fusion")
    p = QPalette()
    if theme.dark:
        base, window, text = QColor("#1e1f22"), QColor("#2b2d30"), QColor("#dcdcdc")
        p.setColor(QPalette.ColorRole.Window, window)
        p.setColor(QPalette.ColorRole.WindowText, text)
        p.setColor(QPalette.ColorRole.Base, base)
        p.setColor(QPalette.ColorRole.AlternateBase, QColor("#26282b"))
        p.setColor(QPalette.ColorRole.Text, text)
        p.setColor(QPalette.ColorRole.Button, window)
        p.setColor(QPalette.ColorRole.ButtonText, text)
        p.setColor(QPalette.ColorRole.Highlight, QColor("#2f65ca"))
        p.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
        p.setColor(QPalette.ColorRole.ToolTipBase, window)
        p.setColor(QPalette.ColorRole.ToolTipText, text)
        p.setColor(QPalette.ColorRole.PlaceholderText, QColor("#8a8a8a"))
        p.setColor(QPalette.ColorRole.Mid, QColor("#3c3f44"))
        p.setColor(QPalette.ColorRole.Link, QColor("#6aa7ff"))
    else:
        p.setColor(QPalette.ColorRole.Window, QColor("#f4f5f7"))
        p.setColor(QPalette.ColorRole.WindowText, QColor("#202124"))
        p.setColor(QPalette.ColorRole.Base, QColor("#ffffff"))
        p.setColor(QPalette.ColorRole.AlternateBase, QColor("#f6f7f9"))
        p.setColor(QPalette.ColorRole.Text, QColor("#202124"))
        p.setColor(QPalette.ColorRole.Button, QColor("#eceef1"))
        p.setColor(QPalette.ColorRole.ButtonText, QColor("#202124"))
        p.setColor(QPalette.ColorRole.Highlight, QColor("#2f65ca"))
        p.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    # setColor(role, colour) sets every group, the disabled one too: a disabled button, field or check box then
    # looked as live as the rest (the setup wizard's "Skip the bench" when the bench is not run, its folder field
    # when nothing is kept on disk); disabled text is greyed as Fusion's own palette greys it
    disabled = QColor("#6e7074") if theme.dark else QColor("#a0a3a8")
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    app.setPalette(p)
