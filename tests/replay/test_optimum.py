"""server/replay/optimum.py: the exact offline optimum (`oracle-opt`) against hand-computed counts,
an exhaustive search over every placement on random small timelines, and every replay policy."""

from __future__ import annotations

import argparse
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strata.server.replay import cli, optimum
from strata.server.replay.policies import make_policy
from strata.server.replay.simulator import SimOptions, simulate
from strata.server.replay.timeline import Request, build_requests, common_prefix

# A (10,000 tokens) comes back at 100 s, B (1,000) at 10 s; C (500) is never continued.
GREEDY_TRAP = build_requests([
    (0, "A", 10_000, 0, 0),
    (1, "B", 1_000, 0, 0),
    (2, "C", 500, 0, 0),
    (10, "B", 1_500, 1_000, 0),
    (100, "A", 10_500, 10_000, 0),
])


# By hand, 2 slots. When C arrives one of A and B must go. The yardstick's cost rule gives A up
# (10,000 / 98 s = 102 tokens/s against B's 1,000 / 8 s = 125), Belady too (A's next use is the
# farthest), as LRU: 10,000 + 1,000 + 500 + 500 + 10,500. Giving B up reads B's 1,000 again and
# keeps A's 10,000: 10,000 + 1,000 + 500 + 1,500 + 500.
@pytest.mark.parametrize(("policy", "read"), [("lru", 22_500), ("oracle", 22_500), ("oracle-belady", 22_500),
                                              ("oracle-opt", 13_500)])
def test_the_yardstick_is_a_heuristic_the_optimum_beats(policy, read):
    assert simulate(GREEDY_TRAP, 2, make_policy(policy)).prompt_tokens_read == read


def test_the_optimum_of_the_greedy_trap():
    opt = optimum.solve(GREEDY_TRAP, 2)
    assert opt.reuse == 10_000 and opt.keep_until == {0: 4}
    # with 3 slots both are kept; with 1 nothing can be
    assert optimum.solve(GREEDY_TRAP, 3).reuse == 11_000
    assert optimum.solve(GREEDY_TRAP, 1).reuse == 0


def test_a_history_kept_for_two_children_is_copied_for_the_first():
    # H is continued twice (a Mooncake branch); X in between. With 2 slots, H stays through both:
    # K1 runs in X's slot copying H's 1,000 tokens, K2 then reuses them too.
    h = Request(0.0, 1_000, 0, (1,), (1_000,), "h", None, 100)
    x = Request(1.0, 400, 0, (2,), (400,), "x", None, 101)
    k1 = Request(2.0, 1_200, 0, (1, 3), (1_000, 200), "h", 0, 102)
    k2 = Request(3.0, 1_300, 0, (1, 4), (1_000, 300), "h", 0, 103)
    opt = optimum.solve([h, x, k1, k2], 2)
    assert opt.reuse == 2_000 and opt.keep_until == {0: 3}
    r = simulate([h, x, k1, k2], 2, make_policy("oracle-opt"))
    assert r.prompt_tokens_read == 1_000 + 400 + 200 + 300


def test_instant_service_only():
    with pytest.raises(ValueError, match="oracle-opt: the optimum is exact for instant service only"):
        simulate(GREEDY_TRAP, 2, make_policy("oracle-opt"), SimOptions(prefill_tps=1000.0))


def random_timeline(seed: int) -> list[Request]:
    """3-8 requests; each new (one fresh segment) or a child of an earlier one (a cut of its history
    plus a fresh segment): chains, branches and partial reuse."""
    rng = random.Random(seed)
    out: list[Request] = []
    seg = 0
    t = 0.0
    for i in range(rng.randint(3, 8)):
        t += rng.random() * 20
        seg += 1
        n_out = rng.randint(0, 200)
        if out and rng.random() < 0.7:
            p = rng.randrange(len(out))
            ids = out[p].ids + (out[p].out_id,)
            lens = out[p].lens + (out[p].n_output,)
            k = rng.randint(1, len(ids))
            ids, lens = ids[:k] + (seg,), lens[:k] + (rng.randint(1, 2_000),)
            out.append(Request(t, sum(lens), n_out, ids, lens, out[p].conversation, p, -(i + 1)))
        else:
            n = rng.randint(1, 3_000)
            out.append(Request(t, n, n_out, (seg,), (n,), f"c{i}", None, -(i + 1)))
    return out


def exhaustive_parent_reuse(reqs: list[Request], n_slots: int) -> int:
    """The most parent reuse of any placement: every slot for every request, a request reusing its
    parent's history wherever a slot holds it (in its own slot or copied from another)."""
    states = {(None,) * n_slots: 0}
    for i, r in enumerate(reqs):
        gain = 0
        if r.parent is not None:
            h = reqs[r.parent]
            gain = min(common_prefix(r.ids, r.lens, h.ids + (h.out_id,), h.lens + (h.n_output,)), r.n_prompt)
        nxt: dict = {}
        for held, value in states.items():
            v = value + (gain if r.parent in held else 0)
            for k in range(n_slots):
                key = tuple(sorted(held[:k] + (i,) + held[k + 1:], key=lambda x: -1 if x is None else x))
                nxt[key] = max(nxt.get(key, -1), v)
        states = nxt
    return max(states.values())


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 10**9))
def test_the_optimum_equals_an_exhaustive_search(seed):
    reqs = random_timeline(seed)
    for n in (1, 2, 3):
        assert optimum.solve(reqs, n).reuse == exhaustive_parent_reuse(reqs, n)


ONLINE = ("lru", "lcp-lru", "expire:600", "shortest", "gds", "affinity", "default", "oracle", "oracle-belady")


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9))
def test_the_replayed_optimum_earns_its_bound_and_no_policy_earns_more(seed):
    rng = random.Random(seed)
    rows, last, t = [], {}, 0.0
    for _ in range(rng.randint(5, 40)):
        c = rng.randrange(5)
        t += rng.random() * 30
        n_in = rng.randint(100, 20_000)
        shared = min(n_in, rng.randint(1, last[c])) if c in last and rng.random() < 0.8 else 0
        out = rng.randint(0, 500)
        last[c] = n_in + out
        rows.append((t, str(c), n_in, shared, out))
    reqs = build_requests(rows)
    for n in (1, 2, 3, 4):
        bound = optimum.solve(reqs, n).reuse
        w = optimum.SplitReuse(make_policy("oracle-opt"))
        simulate(reqs, n, w)
        assert w.split.parent == bound
        for name in ONLINE:
            w = optimum.SplitReuse(make_policy(name))
            simulate(reqs, n, w)
            assert w.split.parent <= bound, name


def test_strata_replay_names_it_and_refuses_rates(capsys):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    assert cli.run(p.parse_args(["agents:1:1", "--slots", "2", "--policies", "lru,oracle,oracle-opt", "--json"])) == 0
    res = {r["policy"]: r["prompt_tokens_read"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert res["oracle-opt"] <= res["oracle"] < res["lru"]
    assert cli.run(p.parse_args(["agents:1:1", "--slots", "2", "--policies", "oracle-opt", "--prefill-tps", "1000"])) == 2
    assert "oracle-opt: the optimum is exact for instant service only" in capsys.readouterr().err
