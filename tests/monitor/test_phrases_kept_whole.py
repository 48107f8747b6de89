"""A count and what it counts stay on one line where the header's and the cache panel's lines wrap. A new-user trial's
monitor at 640x440 read "prompt 38,675 tok, reused 74" with "%" on the next line, and the cache panel "parked to RAM
9, disk" with "0, discarded 0" below. The labels' texts are laid out here by Qt's own text layout at every width
from narrow to wide, in the labels' fonts: each line ends only between two items (after ',' or before or after a
bullet), never inside one."""

from __future__ import annotations

from PySide6.QtGui import Qt, QTextDocument
from strata.monitor import units

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model

# the labels' widths in windows of 640 px (the cache panel's summary: ~260 px) and up; narrower than its longest item a
# line must break inside one
WIDTHS = range(240, 900, 3)


def shown(label) -> str:
    return label.text().replace(units.NBSP, " ")


def lines_at(label, width: int) -> list[str]:
    """The lines Qt lays `label`'s text out in at `width` px, in its font (tags gone; no-break spaces, which it does
    not break at, shown as spaces)."""
    doc = QTextDocument()
    doc.setDefaultFont(label.font())
    doc.setDocumentMargin(0)
    if Qt.mightBeRichText(label.text()):
        doc.setHtml(label.text())
    else:
        doc.setPlainText(label.text())
    doc.setTextWidth(width)
    doc.size()                          # lays it out (lazy until asked)
    out = []
    block = doc.begin()
    while block.isValid():
        layout = block.layout()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            text = block.text()[line.textStart():line.textStart() + line.textLength()]
            out.append(text.replace(units.NBSP, " ").strip())
        block = block.next()
    return out


def broken_items(label, between: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """(width, line, next line) wherever a line ends inside an item: not after one of `between`, and the next
    line not beginning with a bullet."""
    found = []
    for width in WIDTHS:
        lines = lines_at(label, width)
        for line, after in zip(lines, lines[1:], strict=False):
            if not (line.endswith(between) or after.startswith("\u2022")):
                found.append((width, line, after))
    return found


def busy(last: dict) -> None:
    """Figures of a few digits each, as a server that has run a while shows them."""
    last["totals"].update(requests=17, prompt_tokens=38880, prompt_tokens_reused=28771, generated_tokens=534,
                          queue_depth=0)
    last["cache"]["parks"].update(ram=10, disk=0, discard=0)


def test_the_totals_line_wraps_only_between_its_items(qtbot):
    w = shown_window(qtbot, recorded_model(busy), (640, 440))
    assert "reused 74 %" in shown(w.header.totals) and "generated 534 tok" in shown(w.header.totals)
    assert broken_items(w.header.totals, (",", "\u2022")) == []


def test_the_model_line_keeps_each_fact_whole(qtbot):
    """The model's name and description wrap as words do (a long name must fit somewhere); each fact after them
    ("trained context 8,192 tok", "cpu-avx2, 2 threads", "KV f16 (22.5 KiB/token)") is kept whole."""
    w = shown_window(qtbot, recorded_model(busy), (640, 440))
    assert "trained context 4,096 tok" in shown(w.header.model)
    found = []
    for width in WIDTHS:
        lines = lines_at(w.header.model, width)
        first = next(i for i, line in enumerate(lines) if "\u2022" in line)   # the facts begin on this line
        for line, after in zip(lines[first:], lines[first + 1:], strict=False):
            # Qt breaks a word too long for the line after a hyphen or a slash ("cpu-avx512-" "vnni"): not a space
            if not (line.endswith((",", "\u2022", "-", "/")) or after.startswith("\u2022")):
                found.append((width, line, after))
    assert found == []


def test_the_cache_summary_wraps_only_between_its_items(qtbot):
    w = shown_window(qtbot, recorded_model(busy), (640, 440))
    # the destinations' names are in their curves' colours (the parks plot's key where its legend is hidden)
    assert "discarded</span> <b>0</b>" in shown(w.cache.summary)
    assert broken_items(w.cache.summary, (",", "\u2022", "parked to", "hits")) == []


def test_the_saved_sessions_line_keeps_each_count_whole(qtbot):
    """Review of e44cae5: its line broke inside its items ('... 3 evicted, 2' with 'refused' below, '(evict when'
    with 'full)' below, at the window's default size and at 640x440). Each figure stays with what it says."""
    def full(last: dict) -> None:
        busy(last)
        last["cache"]["sessions_folder"] = {
            "folder": "/home/me/.cache/strata/sessions", "budget_mib": 2048, "used_mib": 1900.5,
            "when_full": "evict", "evictions": 3, "refusals": 2, "entries": 7, "skipped": {"damaged": 1},
            "removed": {}}

    w = shown_window(qtbot, recorded_model(full), (640, 440))
    items = ("1.9 GiB of 2.0 GiB used", "(evict when full)", "7 sessions", "3 evicted", "2 refused")
    assert all(i in shown(w.cache.system_prompt) for i in items), shown(w.cache.system_prompt)
    found = [(width, i) for width in WIDTHS for i in items
             if not any(i in line for line in lines_at(w.cache.system_prompt, width))]
    assert found == []
