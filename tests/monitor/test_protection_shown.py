"""An idle slot whose protection has ended reads `expired`, not `0 ms`: a new-user trial's monitor said every idle
slot was "protected for 0 ms", a protection that was over. One still protected reads the time left; an empty slot,
which the feed gives no protection, an en dash."""

from __future__ import annotations

from strata.monitor.widgets.slots import HEADERS

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model

NA = "\u2013"


def test_an_ended_protection_reads_expired(qtbot):
    def idle_slots(last: dict) -> None:
        slot1, slot2 = last["slots"][1], last["slots"][2]
        slot1["protection_left_s"] = 0.0           # the server's max(0, protection - age): ended
        slot2["protection_left_s"] = 2.06
        last["slots"].append({"id": 3, "group": 0, "state": "empty", "tokens": 0, "capacity": 4096,
                              "conversation": None, "last_use": None, "reused_tokens": 0})
    window = shown_window(qtbot, recorded_model(idle_slots))
    table = window.slots.table
    column = HEADERS.index("protected\nfor")
    cells = {table.item(r, 0).text(): table.item(r, column).text() for r in range(table.rowCount())}
    assert cells == {"main": NA, "slot 1": "expired", "slot 2": "2.1 s", "slot 3": NA}, cells
    assert "expired" in table.horizontalHeaderItem(column).toolTip()
