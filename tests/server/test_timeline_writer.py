"""The replay timeline `strata serve --timeline-out` writes (server/timeline_writer.py): each request's
shared_tokens measured at its arrival against its conversation's previous arrival (that turn's prompt and,
once finished, its output), whatever order the requests finish in; the file read back by `strata replay`'s
reader. The live path (a server writing it) is tests/server/test_auth_and_lifecycle.py's."""

from __future__ import annotations

import json
from types import SimpleNamespace

from strata.server.replay.timeline import read_strata
from strata.server.timeline_writer import TimelineWriter


def job(i: int, conversation: str, prompt: list[int], t: float) -> SimpleNamespace:
    # the fields of a scheduler Job the writer reads
    return SimpleNamespace(id=i, conversation=conversation, prompt=prompt, submitted=t)


def lines(path) -> dict[int, dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return {r["prompt_tokens"]: r for r in rows}


def test_a_continued_turn_shares_the_previous_prompt_and_output(tmp_path):
    w = TimelineWriter(str(tmp_path / "t.jsonl"))
    first = job(1, "c", [1, 2, 3, 4], w._t0 + 1.0)
    w.arrived(first)
    w.record(first, 0, 2, [5, 6])
    second = job(2, "c", [1, 2, 3, 4, 5, 6, 7, 8, 9], w._t0 + 2.0)
    w.arrived(second)
    w.record(second, 6, 1, [10])
    w.close()
    got = lines(tmp_path / "t.jsonl")
    assert got[4]["shared_tokens"] == 0 and got[9]["shared_tokens"] == 6   # 4 prompt + 2 output tokens


def test_a_side_request_finishing_first_takes_no_share_of_a_later_turn(tmp_path):
    """B2 arrives while B1 still runs (an agent's side request on the same history) and finishes first:
    B2 shares B1's prompt (its output did not exist yet); B1, the earlier arrival, shares nothing. Measured
    at the finish, B1 took a share of B2's history and B2 none."""
    path = tmp_path / "t.jsonl"
    w = TimelineWriter(str(path))
    b1 = job(1, "b", list(range(100, 140)), w._t0 + 1.0)
    b2 = job(2, "b", list(range(100, 140)) + [7, 7, 7], w._t0 + 1.5)
    w.arrived(b1)
    w.arrived(b2)
    w.record(b2, 0, 3, [1, 2, 3])   # the side request ends first
    w.record(b1, 0, 5, [4, 4, 4, 4, 4])
    b3 = job(3, "b", list(range(100, 140)) + [7, 7, 7, 1, 2, 3, 9], w._t0 + 3.0)   # continues B2
    w.arrived(b3)
    w.record(b3, 0, 1, [5])
    w.close()
    got = lines(path)
    assert got[40]["shared_tokens"] == 0
    assert got[43]["shared_tokens"] == 40
    assert got[47]["shared_tokens"] == 46   # B2's prompt and output
    timeline = read_strata(path)            # written in finish order, read in time order
    assert [r.n_prompt for r in timeline] == [40, 43, 47]


def test_a_job_recorded_without_arrival_is_measured_at_its_finish(tmp_path):
    w = TimelineWriter(str(tmp_path / "t.jsonl"))
    w.record(job(1, "", [1, 2], w._t0), 0, 1, [3])   # no conversation key: its own
    w.close()
    row = json.loads((tmp_path / "t.jsonl").read_text())
    assert row["conversation"] == "r1" and row["shared_tokens"] == 0
