"""InfillEnd (server/infill_api.py), what the scheduler feeds an infill's text: llama.cpp's n_indent (a line
after the first that starts less indented ends the answer, that line left out; a blank line does not) and
t_max_predict_ms (once that long has passed since the first piece, the next new line ends it). A table over
pieces as the scheduler hands them, on a clock the test moves."""

from __future__ import annotations

import pytest
from strata.server.infill_api import InfillEnd


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("n_indent, pieces, ends_at, content", [
    (4, ["x = 1", "\n    y", " = 2\n", "z"], 3, "x = 1\n    y = 2\n"),
    (4, ["x", "\n", "  ", "  y\n", "\tz\n", "w"], 4, "x\n    y\n"),        # a tab counts one character
    (4, ["  short first line\n", "        deep\n"], None, None),            # the first line is never judged
    (2, ["a\n", "\n", "  b\n", "c"], 3, "a\n\n  b\n"),                        # a blank line does not end it
    (2, ["a\n  b\nc = 3"], 0, "a\n  b\n"),                                    # several lines in one piece
    (0, ["a\nb\nc"], None, None),                                             # 0: off
])
def test_n_indent(n_indent, pieces, ends_at, content):
    end = InfillEnd(n_indent, 0, clock=Clock())
    said = [end.feed(p) for p in pieces]
    assert said == [ends_at is not None and i >= ends_at for i in range(len(pieces))]
    if content is not None:
        assert end.content("".join(pieces)) == content and end.ended


def test_t_max_predict_ms_ends_at_the_next_new_line_after_the_time():
    clock = Clock()
    end = InfillEnd(0, 500, clock=clock)
    assert not end.feed("a = 1")
    clock.now += 0.3
    assert not end.feed("\nb")                  # a new line before the time: goes on
    clock.now += 0.3
    assert not end.feed(" = 2")                 # past the time, no new line yet
    assert end.feed("\nc")                      # the next one ends it
    assert end.ended and end.content("a = 1\nb = 2\nc") == "a = 1\nb = 2\nc"    # nothing cut
