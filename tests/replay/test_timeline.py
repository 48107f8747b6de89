"""Timeline readers and writers: Mooncake blocks, Strata JSONL, thinning, bad files."""

from __future__ import annotations

import json

import pytest
from strata.server.replay.generate import generate
from strata.server.replay.policies import make_policy
from strata.server.replay.simulator import simulate
from strata.server.replay.timeline import (
    TimelineError,
    build_requests,
    common_prefix,
    load,
    overlay,
    read_mooncake,
    read_strata,
    thin,
    write_strata,
)

MOONCAKE = [
    {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]},
    {"timestamp": 1000, "input_length": 1600, "output_length": 10, "hash_ids": [0, 1, 3, 4]},
    {"timestamp": 500, "input_length": 700, "output_length": 5, "hash_ids": [0, 9]},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_common_prefix_of_segments():
    assert common_prefix((1, 2, 3), (512, 512, 100), (1, 2, 4), (512, 512, 512)) == 1024
    assert common_prefix((1, 2), (512, 300), (1, 2), (512, 200)) == 712
    assert common_prefix((5,), (10,), (6,), (10,)) == 0


def test_mooncake_blocks_parents_and_exact_reuse(tmp_path):
    reqs = read_mooncake(write_jsonl(tmp_path / "m.jsonl", MOONCAKE))
    assert [r.time for r in reqs] == [0.0, 0.5, 1.0]
    assert reqs[2].lens == (512, 512, 512, 64) and reqs[2].parent == 0
    assert reqs[1].parent is None  # only block 0 (the shared system prompt) in common
    assert reqs[2].conversation == reqs[0].conversation != reqs[1].conversation
    # one slot: 1100 + (700 - 512) + (1600 - 512). Two slots: the second takes the empty slot (the
    # first's history shares only block 0, less than half of it: another conversation) and reads all
    # 700; the third reuses its 1024 full blocks
    assert simulate(reqs, 1, make_policy("lru")).prompt_tokens_read == 1100 + 188 + 1088
    assert simulate(reqs, 2, make_policy("lru")).prompt_tokens_read == 1100 + 700 + 576


@pytest.mark.parametrize(("row", "message"), [
    ({"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [0, 1]}, "2 hash_ids"),
    ({"timestamp": 0, "input_length": -3, "output_length": 1, "hash_ids": []}, "input_length"),
    ({"timestamp": "x", "input_length": 10, "output_length": 1, "hash_ids": [0]}, "timestamp"),
    ({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": "0"}, "hash_ids"),
])
def test_bad_mooncake_lines_name_the_line(tmp_path, row, message):
    p = write_jsonl(tmp_path / "m.jsonl", [MOONCAKE[0], row])
    with pytest.raises(TimelineError, match=f"m.jsonl:2: .*{message}"):
        read_mooncake(p)


def test_strata_format_round_trip_and_shared_tokens(tmp_path):
    rows = [
        {"conversation": "a", "time": 0, "prompt_tokens": 1000, "shared_tokens": 0, "output_tokens": 100},
        {"conversation": "a", "time": 5, "prompt_tokens": 1500, "shared_tokens": 1100, "output_tokens": 50},
        {"conversation": "b", "time": 6, "prompt_tokens": 400, "output_tokens": 0},
        {"conversation": "a", "time": 9, "prompt_tokens": 1700, "shared_tokens": 1200, "output_tokens": 5},
    ]
    reqs = read_strata(write_jsonl(tmp_path / "s.jsonl", rows))
    assert reqs[1].parent == 0 and reqs[3].parent == 1 and reqs[2].parent is None
    full = reqs[1].ids + (reqs[1].out_id,), reqs[1].lens + (reqs[1].n_output,)
    assert common_prefix(reqs[3].ids, reqs[3].lens, *full) == 1200
    write_strata(reqs, tmp_path / "again.jsonl")
    again = [json.loads(x) for x in (tmp_path / "again.jsonl").read_text().splitlines()]
    assert [r["shared_tokens"] for r in again] == [0, 1100, 0, 1200]
    assert load(tmp_path / "again.jsonl") == reqs


@pytest.mark.parametrize(("row", "message"), [
    ({"conversation": "", "time": 0, "prompt_tokens": 10}, "conversation"),
    ({"conversation": "a", "time": -1, "prompt_tokens": 10}, "time"),
    ({"conversation": "a", "time": 0, "prompt_tokens": 10, "shared_tokens": 11}, "exceeds"),
    ({"conversation": "a", "time": 0, "prompt_tokens": 1.5}, "prompt_tokens"),
])
def test_bad_strata_lines_name_the_line(tmp_path, row, message):
    p = write_jsonl(tmp_path / "s.jsonl", [row])
    with pytest.raises(TimelineError, match=f"s.jsonl:1: .*{message}"):
        read_strata(p)


def test_not_json_and_missing_and_empty_files(tmp_path):
    (tmp_path / "x.jsonl").write_text("{nope\n")
    with pytest.raises(TimelineError, match="x.jsonl:1: not JSON"):
        load(tmp_path / "x.jsonl")
    with pytest.raises(TimelineError, match="cannot open"):
        load(tmp_path / "missing.jsonl")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TimelineError, match="empty"):
        load(tmp_path / "e.jsonl")


def test_thin_keeps_whole_conversations_and_reindexes_parents():
    reqs = build_requests([(0, "a", 100, 0, 1), (1, "b", 50, 0, 1), (2, "a", 200, 101, 1), (3, "c", 10, 0, 1)])
    for seed in range(10):
        t = thin(reqs, 0.5, seed)
        convs = {r.conversation for r in t}
        assert len(convs) == 2
        assert all(sum(r.conversation == c for r in t) == sum(r.conversation == c for r in reqs) for c in convs)
        for r in t:
            assert r.parent is None or t[r.parent].conversation == r.conversation
    with pytest.raises(ValueError, match="--thin"):
        thin(reqs, 0, 0)


def test_generator_is_seeded_and_agent_like():
    a, b = generate("agents", 1.0, 7), generate("agents", 1.0, 7)
    assert a == b and a != generate("agents", 1.0, 8)
    assert all(x.time <= y.time for x, y in zip(a, a[1:], strict=False))
    assert max(r.n_prompt for r in generate("agents", 4.0, 1)) > 60_000       # long conversations grow
    assert sum(r.n_prompt < 3_500 for r in a) > 0                            # side requests
    assert sum(r.parent is not None for r in a) > 0.4 * len(a)               # many continued turns
    with pytest.raises(ValueError, match="--kind"):
        generate("chat", 1.0, 1)
    with pytest.raises(ValueError, match="--hours"):
        generate("agents", 0, 1)


def test_overlay_copies_share_nothing_and_keep_their_parents():
    reqs = build_requests([(0, "a", 100, 0, 10), (5, "a", 200, 110, 10)])
    two = overlay(reqs, 2, shift_s=1.0)
    assert [r.time for r in two] == [0, 1, 5, 6]
    assert {r.conversation for r in two} == {"a#0", "a#1"}
    for r in two:
        assert r.parent is None or two[r.parent].conversation == r.conversation
    assert common_prefix(two[0].ids, two[0].lens, two[1].ids, two[1].lens) == 0
    # each copy replays like the original: 2 x (100 + 90) read on 2 slots
    assert simulate(two, 2, make_policy("lru")).prompt_tokens_read == 2 * (100 + 90)
    with pytest.raises(ValueError, match="--overlay"):
        overlay(reqs, 0)
