"""The Placer with STRATA_SLOT_LEARNED=1 on a real SlotTable: it owns the learned statistics, notes a
history per placement and a continuation when a request runs in its own history, and passes the
statistics to the policy (server/slot_returns.py). The scheduler's part (tokens written, last use
refreshed on completion) is done here by hand with the table's own methods."""

from __future__ import annotations

import pytest
from strata.server import slot_policy as policy
from strata.server import slot_returns as sr
from strata.server.config import ConfigError, load_config, validate
from strata.server.placement import Placer
from strata.server.slot_policy import LearnConfig, PolicyConfig
from strata.server.slots import SlotTable


def serve(placer: Placer, prompt: list[int], now: float, job: int, answer: int = 10) -> int:
    """Place a request and do what the scheduler does: run it, write its history, end its use."""
    d = placer.pick(prompt, now, job)
    assert d.slot is not None
    placer.table.set_tokens(d.slot, prompt + [7] * answer)
    placer.table[d.slot].last_use = now + 1.0
    return d.slot


def turns(placer: Placer) -> dict[int, int]:
    return {slot: e.turn for slot, e in placer.ledger.in_slot.items()}


def conv(seed: int, n: int) -> list[int]:
    return [(seed * 1000 + i) % 50_000 + 1 for i in range(n)]


def test_the_placer_learns_turns_and_continuations():
    table = SlotTable(n_ctx=8192, n_slots=2, slot_ctx=8192, n_groups=1)
    placer = Placer(table, PolicyConfig(learn=LearnConfig(enabled=True, min_histories=0, prior_weight=1)))
    a = conv(1, 3000)
    assert serve(placer, a, 0.0, 1) == 1
    assert turns(placer) == {1: 1} and placer.returns.histories == 1
    a2 = a + [7] * 10 + conv(2, 200)
    assert serve(placer, a2, 5.0, 2) == 1                 # A's second turn, 4 s after the first ended
    assert turns(placer) == {1: 2}
    fine, _, _ = sr.rows_of(1, 3010)
    assert placer.returns.returned[fine][sr.gap_bin(4.0)] == 1
    assert placer.returns.made[sr.ROW_ALL] == 2
    s = conv(3, 5000)
    assert serve(placer, s, 7.0, 3) == 2                  # a side request takes the empty slot (turn 1)
    assert turns(placer) == {1: 2, 2: 1}
    # A new conversation at 8.5 s, both histories protected: seed 000 overwrites A's (the lower value).
    # Learned: A's 3,220 tokens (turn 2) come back in 4-8 s with 2/9 (its length bucket: 1 of 2 back
    # plus one pseudo-history at the overall 1/3 = 4/9; its own bucket: 0 of 1 plus 4/9 = 2/9):
    # 2/9 x 3220 / 3.5 s = 204 tok/s; S's 5,010 (turn 1, that length never seen back): 1/12 x 5010 /
    # 5.5 s = 76 tok/s. S goes.
    new = conv(4, 100)
    seed = policy.pick_slot(placer.slot_views(new), policy.RequestView(len(new)), 8.5, PolicyConfig(), {0: 0})
    assert (seed.slot, seed.reason) == (1, "least_loss")
    d = placer.pick(new, 8.5, 4)
    assert (d.slot, d.reason) == (2, "learned")
    assert placer.trace[-1]["reason"] == "learned" and placer.trace[-1]["slot"] == 2


def test_a_continuation_of_an_overwritten_history_is_noted_with_its_own_end():
    table = SlotTable(n_ctx=8192, n_slots=1, slot_ctx=8192, n_groups=1)
    placer = Placer(table, PolicyConfig(learn=LearnConfig(enabled=True)))
    a = conv(1, 3000)
    serve(placer, a, 0.0, 1)                              # A ends at 1.0, 3,010 tokens held
    serve(placer, conv(2, 500), 10.0, 2)                  # B overwrites it
    assert placer.ledger.in_slot[1].turn == 1 and placer.returns.made[sr.ROW_ALL] == 2
    serve(placer, a + [7] * 10 + conv(3, 100), 61.0, 3)   # A comes back 60 s after its end: read again
    fine, _, _ = sr.rows_of(1, 3010)
    assert placer.returns.returned[fine][sr.gap_bin(60.0)] == 1
    assert placer.ledger.in_slot[1].turn == 2
    serve(placer, a + [7] * 10 + conv(3, 100) + [7] * 10, 70.0, 4)
    assert sum(placer.returns.returned[sr.ROW_ALL]) == 2  # and its second turn continued in the slot


def test_a_continuation_of_a_history_still_running_is_noted_with_no_gap():
    """A request that continues a history whose own request is still running (a client's retry after its
    timeout, an agent's side request on the whole conversation) was noted with a gap from that slot's
    last_use: None on a slot's first request, read as 0.0 of the monotonic clock, so the gap was the
    machine's uptime (here 86,400 s: the open last bin, 'continued after 2 hours or more'), or the end of
    the slot's previous, unrelated request. Its use has not ended: the gap is 0."""
    table = SlotTable(n_ctx=8192, n_slots=2, slot_ctx=8192, n_groups=1)
    placer = Placer(table, PolicyConfig(learn=LearnConfig(enabled=True)))
    now = 86_400.0                                        # monotonic seconds: a machine up a day
    a = conv(1, 3000)
    d = placer.pick(a, now, 1)                            # A runs in slot 1, its first use
    table[d.slot].busy_job = 1
    table.set_tokens(d.slot, a[:1024])                    # still reading its prompt
    assert table[d.slot].last_use is None
    again = placer.pick(a + [7], now + 2.0, 2)            # its continuation arrives while it runs
    assert again.slot != d.slot
    assert sum(placer.returns.returned[sr.ROW_ALL]) == 1
    assert placer.returns.returned[sr.ROW_ALL][0] == 1, placer.returns.returned[sr.ROW_ALL]


def test_the_placer_leaves_the_statistics_alone_when_learning_is_off():
    table = SlotTable(n_ctx=8192, n_slots=2, slot_ctx=8192, n_groups=1)
    placer = Placer(table, PolicyConfig(learn=LearnConfig(enabled=False)))
    a = conv(1, 3000)
    serve(placer, a, 0.0, 1)
    serve(placer, a + [7] * 10 + conv(2, 200), 5.0, 2)
    assert placer.returns == sr.ReturnStats() and turns(placer) == {}


def test_a_park_forgets_the_turn_of_the_slot_it_overwrites():
    table = SlotTable(n_ctx=8192, n_slots=2, slot_ctx=8192, n_groups=2)
    placer = Placer(table, PolicyConfig(learn=LearnConfig(enabled=True)))
    serve(placer, conv(1, 100), 0.0, 1)
    table.set_tokens(0, conv(5, 6000))                    # the solo conversation on main
    table.main.last_use = 99.0
    d = placer.plan_park(100.0, 2)
    assert d is not None and d.slot is not None
    assert placer.ledger.turn_in(d.slot) == 0


def test_solo_turns_on_main_count_and_a_park_carries_their_turn_into_the_slot():
    table = SlotTable(n_ctx=8192, n_slots=2, slot_ctx=8192, n_groups=2)
    placer = Placer(table, PolicyConfig(learn=LearnConfig(enabled=True)))
    a = conv(1, 3000)
    for k, t in enumerate((0.0, 10.0, 20.0)):           # three solo turns of A on main, 9 s apart
        placer.learn_main(a, t)
        table.set_tokens(0, a + [7] * 10)
        table.main.last_use = t + 1.0
        a = a + [7] * 10 + conv(2 + k, 50)
    assert placer.ledger.turn_in(0) == 3 and placer.returns.histories == 3
    fine, _, _ = sr.rows_of(2, 3070)
    assert placer.returns.returned[fine][sr.gap_bin(9.0)] == 1     # turn 2's continuation, 9 s later
    assert sum(placer.returns.returned[sr.ROW_ALL]) == 2
    d = placer.plan_park(100.0, 4)                      # a new request displaces A: parked with its turn
    assert d is not None and d.slot is not None
    assert placer.ledger.turn_in(d.slot) == 3 and placer.ledger.turn_in(0) == 0


def test_an_invalid_learn_variable_stops_start_up_naming_it():
    with pytest.raises(ConfigError, match="STRATA_SLOT_LEARN_PRIOR_WEIGHT"):
        validate(load_config({}, environ={"STRATA_SLOT_LEARN_PRIOR_WEIGHT": "lots"}))
    validate(load_config({}, environ={"STRATA_SLOT_LEARNED": "1"}))


def test_a_live_server_with_the_learned_policy_places_and_learns(tiny_model):
    """STRATA_SLOT_LEARNED=1 through the real scheduler: requests in flight together go to slots by
    pick_slot_learned, and the Placer counts their histories and the continuation of one of them."""
    from tests.server.live import LiveServer, run_together
    from tests.server.test_cache_and_policy import complete, decisions, ids

    env = {"STRATA_SLOT_LEARNED": "1", "STRATA_SLOT_LEARN_MIN_HISTORIES": "0"}
    with LiveServer(model=str(tiny_model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0, env=env) as s:
        sched = s.state.scheduler

        def together(prompts):
            run_together(s, [lambda p=p: complete(s.url, p, 4) for p in prompts])

        a, b = ids(300, 41), ids(200, 42)
        together([a, b])                                     # both into the empty slots
        placer = sched.placer
        assert placer.returns.histories == 2 and sorted(placer.ledger.in_slot) == [1, 2]
        assert sum(placer.returns.returned[sr.ROW_ALL]) == 0
        together([a + [7] * 20, ids(150, 44)])               # A continues its history; a new one gives B's up
        placed = [d for d in decisions(s.url) if isinstance(d["slot"], int) and not d["park"]]
        assert len(placed) == 4 and "own_prefix" in {d["reason"] for d in placed[2:]}
        assert all(d["reason"] in ("own_prefix", "empty", "blank", "expired", "expired_keep", "least_loss",
                                   "learned") for d in placed)
        assert placer.returns.histories == 4
        assert sum(placer.returns.returned[sr.ROW_ALL]) == 1  # A's first turn, continued once


def test_wall_of_reads_one_instant_the_same_every_time():
    """/v1/slots' last_use and the decisions' times: the same monotonic instant gives the same wall time
    on every snapshot (it jittered by microseconds; the monitor plotted idle slots as working)."""
    import time

    from strata.server.placement import wall_of
    mono = time.monotonic() - 5.0
    first = wall_of(mono)
    assert all(wall_of(mono) == first for _ in range(1000))
    assert abs(first - (time.time() - 5.0)) < 1.0 and wall_of(None) is None


def test_the_wall_offset_follows_a_clock_step_and_ignores_jitter():
    """Read once, the offset stayed 25 s off after the wall clock stepped during a CI run (this file's test above
    failed), and would stay hours off after a laptop's sleep (monotonic stops there): it follows a move past
    step_s, and keeps its value through the microseconds two readings differ by."""
    import pytest
    from strata.server.placement import WallOffset

    clocks = {"wall": 1000.0, "mono": 10.0}
    offset = WallOffset(step_s=0.5, wall=lambda: clocks["wall"], mono=lambda: clocks["mono"])
    assert offset.now() == 990.0
    clocks["wall"] += 2.000003                                   # time goes on, a few microseconds of jitter
    clocks["mono"] += 2.0
    assert offset.now() == 990.0
    clocks["wall"] += 25.0                                       # the wall clock steps (NTP, a VM's clock set)
    assert offset.now() == pytest.approx(1015.000003, abs=1e-9)
    clocks["wall"] += 3600.0                                     # the machine slept an hour: monotonic stood still
    assert offset.now() == pytest.approx(4615.000003, abs=1e-9)
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="step_s"):
            WallOffset(step_s=bad)
