"""server/unread_answer.py: when a streamed answer's client counts as gone for reading none of it. Table-driven,
no I/O: a sequence of looks (seconds, unsent bytes, bytes taken) and whether the last one ends it."""

from __future__ import annotations

import math

import pytest
from strata.server.config import ConfigError, load_config, validate
from strata.server.unread_answer import LEAST_S, first_look, gone_unread, look

LIMIT = 60.0

CASES = [
    # (name, looks [(now, unsent, taken)], gone at the last look)
    ("nothing waits: never gone", [(0, 0, 0), (100, 0, 0)], False),
    ("waits, nothing acknowledged for the limit", [(0, 500, 10), (30, 900, 10), (60, 1400, 10)], True),
    ("just short of the limit", [(0, 500, 10), (59.75, 1400, 10)], False),
    ("a byte acknowledged restarts the count", [(0, 500, 10), (50, 900, 11), (100, 1400, 11)], False),
    ("a slow reader behind yet taking: never gone", [(t, 1000 * (t + 1), 10 * t) for t in range(0, 200, 10)], False),
    ("taken all at a look restarts the count", [(0, 500, 10), (40, 0, 10), (90, 300, 10)], False),
    # more waiting at each look is no sign either way: taken is what counts (written less waiting)
    ("more waiting, yet taking: never gone", [(0, 500, 0), (30, 900, 100), (60, 1400, 200)], False),
    ("less waiting, nothing taken: gone", [(0, 500, 10), (30, 400, 10), (60, 300, 10)], True),
]


@pytest.mark.parametrize("looks, gone", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gone_unread(looks, gone):
    r = first_look(*looks[0])
    for now, unsent, taken in looks[1:]:
        r = look(r, now, unsent, taken)
    assert gone_unread(r, looks[-1][0], LIMIT) is gone


def test_zero_is_never():
    r = look(first_look(0, 500, 1), 10_000, 9000, 1)
    assert gone_unread(r, 10_000, LIMIT)
    assert not gone_unread(r, 10_000, 0.0)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_a_bad_limit_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"limit_s must be a number of seconds >= 0"):
        gone_unread(first_look(0, 1, 1), 1, bad)


def test_a_bound_below_the_look_period_would_end_a_reading_client():
    """Why --answer-unread-s refuses 0 < s < 1: nothing waited at one look, and at the next (0.25 s on) a
    chunk just written is on its way to a client that reads (a network's round trip): nothing taken since."""
    r = look(first_look(0.0, 0, 5000), 0.25, 300, 5000)
    assert gone_unread(r, 0.25, 0.2)
    assert not gone_unread(r, 0.25, LEAST_S)


@pytest.mark.parametrize("raw", [0.1, 0.999])
def test_the_flag_refuses_a_bound_that_would_end_reading_clients(raw):
    with pytest.raises(ConfigError) as e:
        validate(load_config({"answer_unread_s": raw}, environ={}))
    assert str(e.value) == (f"--answer-unread-s: {raw:g} s would end clients that are reading (their bytes on "
                            "the way at a look read as none taken): give 0 (never) or at least 1 s")


def test_the_file_refuses_it_by_its_key(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("answer_unread_s = 0.5\n")
    with pytest.raises(ConfigError, match=r"answer_unread_s: 0.5 s would end clients that are reading"):
        validate(load_config({}, config_path=path, environ={}))


@pytest.mark.parametrize("raw", [0, 1, 60, 86400])
def test_never_and_one_second_up_are_taken(raw):
    config = load_config({"answer_unread_s": raw}, environ={})
    validate(config)
    assert config.answer_unread_s == raw
