"""The area below the monitor's header: the panels' splitter, scrolled when the window is shorter or narrower
than the panels need, instead of squeezed.

The panels' least height depends on their width (wrapped lines: at 312 px the cache panel needs 657 px, its
minimumSizeHint says 573), which a window's least size does not count: at 800x660 the window gave it 531 px,
cutting its labels in half and hiding a plot's legend, and at 150 % or 200 % on a laptop (960x540 logical) the
window's least height, 660, was taller than the screen. Presentation only.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent
from PySide6.QtWidgets import QFrame, QScrollArea, QSplitter, QWidget

LEAST_VISIBLE = (320, 160)   # the area itself may be this small: the rest of the panels is a scroll away


def least_height(widget: QWidget) -> int:
    """The height `widget` needs at its present width: more than its minimumSizeHint when lines wrap."""
    need = widget.minimumSizeHint().height()
    layout = widget.layout()
    if layout is not None and layout.hasHeightForWidth():
        need = max(need, layout.totalMinimumHeightForWidth(widget.width()))
    return need


class PanelsArea(QScrollArea):
    """Shows the panels (side by side in a splitter) at the viewport's size, or at the least size they need at
    that width when that is larger: then a scroll bar appears."""

    def __init__(self, panels: QSplitter) -> None:
        super().__init__()
        self.panels = panels
        self.setWidget(panels)
        self.setWidgetResizable(False)     # it would size them to their preferred height for the width (1,337 px)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setMinimumSize(*LEAST_VISIBLE)

    def least_height(self) -> int:
        return max([self.panels.minimumSizeHint().height()]
                   + [least_height(self.panels.widget(i)) for i in range(self.panels.count())])

    def fit(self) -> None:
        """Sizes the panels to the viewport, no smaller than they need (call it when their text changed)."""
        panels, view = self.panels, self.viewport().size()
        width = max(view.width(), panels.minimumSizeHint().width())
        if panels.width() != width:        # first the width: the wrapped lines, so the height, follow from it
            panels.resize(width, max(panels.height(), view.height()))
        height = max(view.height(), self.least_height())
        if panels.height() != height:
            panels.resize(width, height)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        # the window's size, a scroll bar that came or went, or the panels' least size (a plot's axis widened)
        if event.type() in (QEvent.Type.Resize, QEvent.Type.LayoutRequest):
            self.fit()
        return super().viewportEvent(event)
