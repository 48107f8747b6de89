"""A superseded copy (main's too) says so in the slots table's value column.

The feed sends `superseded: true` for an idle context holding a copy whose conversation went on in another context,
and no protection or value for it (the slot policy counts it as worth nothing). The monitor did not read the field:
such a slot showed its tokens with an en dash for value, as an empty slot or one in use does, and since 44c431d
every copy a conversation leaves behind (the slot main took it over from, main's history that went on in a slot)
is one. Real Qt offscreen, the recorded feed with its last snapshot marked so."""

from __future__ import annotations

from strata.monitor.widgets.slots import HEADERS

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model


def superseded(last: dict) -> None:
    main, slot1 = last["slots"][0], last["slots"][1]
    for s in (main, slot1):
        s["superseded"] = True
    del slot1["protection_left_s"], slot1["value"]     # as the server's /v1/slots leaves them out


def test_a_superseded_copy_reads_superseded(qtbot):
    window = shown_window(qtbot, recorded_model(superseded))
    table, c = window.slots.table, HEADERS.index("value")
    values = [table.item(r, c).text() for r in range(table.rowCount())]
    assert values[:2] == ["superseded", "superseded"], values
    assert values[2] not in ("superseded", "\u2013"), values         # slot 2 keeps its value
    assert table.columnWidth(c) >= table.fontMetrics().horizontalAdvance("superseded"), "clipped"
