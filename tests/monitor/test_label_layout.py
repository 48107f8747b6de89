"""label_layout.place_labels: the RAM plot's floor labels beside their lines, never across a line, the
other label or the plot's edge (pure geometry, table-driven, and every spot of a seeded sweep checked)."""

from __future__ import annotations

import random

import pytest
from strata.monitor.label_layout import EDGE_PX, Box, line_band, place_labels

AREA = Box(40.0, 20.0, 230.0, 150.0)   # the data area of a 190 x 130 px plot (1280x800 window)
PARKING, TRANSIENT = (44.0, 15.0), (52.0, 15.0)
OVER = (PARKING[0] + 12, TRANSIENT[0] + 12)


def spots(ys, area=AREA):
    return place_labels(ys, [PARKING, TRANSIENT], OVER, area)


@pytest.mark.parametrize("ys, want", [
    # far apart: each above its own line, parking at the left end, transient at the right
    ((60.0, 120.0), [("above", "left"), ("above", "right")]),
    # 8 px apart, room under the lower line: transient goes below it
    ((100.0, 108.0), [("above", "left"), ("below", "right")]),
    # 9 px apart, too little room under the lower line: transient points down at it from above both
    ((126.0, 135.0), [("above", "left"), ("over", "right")]),
    # 8 px apart on the floor (2.5 and 0.5 GiB of 25 at 1280x800): the same
    ((139.0, 147.0), [("above", "left"), ("over", "right")]),
    # the upper line at the top edge: parking goes below its line
    ((25.0, 120.0), [("below", "left"), ("above", "right")]),
])
def test_the_preferred_clear_spot(ys, want):
    assert [(s.side, s.end) for s in spots(ys)] == want


def test_no_room_hides_the_label_rather_than_overlap():
    narrow = Box(40.0, 20.0, 40.0 + 2 * EDGE_PX + PARKING[0] + 30, 150.0)   # no room for two labels side by side
    got = spots((139.0, 147.0), narrow)
    assert got[0] is not None and got[0].side == "above" and got[1] is None


def check(ys, got, area):
    boxes = [s.box for s in got if s is not None]
    for b in boxes:
        assert b.inside(area), (ys, b)
        assert not any(b.intersects(line_band(y, area)) for y in ys), (ys, b)
    for i, a in enumerate(boxes):
        assert not any(a.intersects(b) for b in boxes[i + 1:]), (ys, boxes)
    for i, s in enumerate(got):
        if s is None:
            continue
        y, h = ys[i], s.box.bottom - s.box.top
        if s.side == "above":
            assert y - h - 4 <= s.box.top and s.box.bottom <= y       # right over its own line
        elif s.side == "below":
            assert y <= s.box.top <= y + 4
        else:                                                         # over every line, its own just below
            assert s.box.bottom <= min(ys) and y != min(ys)


def test_a_seeded_sweep_never_overlaps():
    rnd = random.Random(20261202)
    placed = 0
    for _ in range(2000):
        top, height = 20.0, rnd.uniform(40, 500)
        width = rnd.uniform(80, 400)
        area = Box(40.0, top, 40.0 + width, top + height)
        hi = rnd.uniform(top, top + height)
        lo = min(top + height, hi + rnd.choice([0.0, 2.0, 8.0, 20.0, rnd.uniform(0, height)]))
        got = spots((hi, lo), area)
        check((hi, lo), got, area)
        placed += sum(s is not None for s in got)
    assert placed > 3000   # and it does place labels: most configurations have room for both
