"""Where a plot's horizontal-line labels go (the RAM plot's floor labels): beside their own line,
never across a line, another label or the plot's edge, at any plot size.

Qt-free and pure: boxes in scene pixels (y grows downwards); the widget measures the texts and the
lines, and moves the labels to the boxes this returns.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

LINE_HALF_PX = 1.5   # half a 1.5 px pen, rounded up: the band a label keeps clear of
GAP_PX = 1.0         # between a label and the line it names
EDGE_PX = 3.0        # between a label and the plot's left or right edge
POINTER = " \u2193"  # marks a label set above every line, its own line being the one just below


@dataclass(frozen=True)
class Box:
    left: float
    top: float
    right: float
    bottom: float

    def intersects(self, other: Box) -> bool:
        return self.left < other.right and other.left < self.right and self.top < other.bottom and other.top < self.bottom

    def inside(self, other: Box) -> bool:
        return (self.left >= other.left and self.right <= other.right and self.top >= other.top
                and self.bottom <= other.bottom)


@dataclass(frozen=True)
class Spot:
    side: str   # "above" or "below" its line, or "over": above every line, its text ending in POINTER
    end: str    # "left" or "right" end of the plot
    box: Box


def line_band(y: float, area: Box) -> Box:
    return Box(area.left, y - LINE_HALF_PX, area.right, y + LINE_HALF_PX)


def _candidates(i: int, line_ys: Sequence[float], size: tuple[float, float], over_width: float,
                area: Box) -> list[Spot]:
    """Label i's places in order of preference: above then below its line at its own end (the first
    label left, the next right, and so on), the same at the other end, then above every line."""
    w, h = size
    y = line_ys[i]
    own, other = ("left", "right") if i % 2 == 0 else ("right", "left")
    above = y - LINE_HALF_PX - GAP_PX
    below = y + LINE_HALF_PX + GAP_PX
    over = min(line_ys) - LINE_HALF_PX - GAP_PX

    def at(side: str, end: str, top: float, width: float) -> Spot:
        left = area.left + EDGE_PX if end == "left" else area.right - EDGE_PX - width
        return Spot(side, end, Box(left, top, left + width, top + h))

    spots = [at(side, end, top, w) for end in (own, other)
             for side, top in (("above", above - h), ("below", below))]
    if y != min(line_ys):  # a line lower than another: its label may point down at it from over them
        spots += [at("over", end, over - h, over_width) for end in (own, other)]
    return spots


def place_labels(line_ys: Sequence[float], sizes: Sequence[tuple[float, float]], over_widths: Sequence[float],
                 area: Box) -> list[Spot | None]:
    """A spot for each line's label (None: no place clear of every line and label; the caller hides it).

    `line_ys`: the lines' scene y; `sizes`: each label's (width, height); `over_widths`: its width with
    POINTER added; `area`: the plot's data area. Of the placements where no label crosses a line, another
    label or the area's edge, the one with the most preferred spots (see `_candidates`) wins."""
    bands = [line_band(y, area) for y in line_ys]
    options: list[list[tuple[int, Spot | None]]] = []
    for i in range(len(line_ys)):
        spots = [s for s in _candidates(i, line_ys, sizes[i], over_widths[i], area)
                 if s.box.inside(area) and not any(s.box.intersects(b) for b in bands)]
        options.append([*enumerate(spots), (100, None)])
    best, best_cost = [None] * len(line_ys), None
    for combo in itertools.product(*options):
        boxes = [s.box for _, s in combo if s is not None]
        if any(a.intersects(b) for a, b in itertools.combinations(boxes, 2)):
            continue
        cost = sum(rank for rank, _ in combo)
        if best_cost is None or cost < best_cost:
            best, best_cost = [s for _, s in combo], cost
    return best
