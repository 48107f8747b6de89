"""A stand-in for the system tray, which the offscreen platform has none of: records the notifications the app
raises (title, text, warning), as Tray.notify takes them."""

from __future__ import annotations


class TrayNotes:
    def __init__(self) -> None:
        self.notes: list[tuple[str, str, bool]] = []

    def notify(self, title: str, text: str, warning: bool = True) -> None:
        self.notes.append((title, text, warning))

    def titles(self) -> list[str]:
        return [title for title, _, _ in self.notes]

    def texts(self) -> list[str]:
        return [text for _, text, _ in self.notes]

    def show_status(self, status) -> None:
        pass

    def hide(self) -> None:
        pass
