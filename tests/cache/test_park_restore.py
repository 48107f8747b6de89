"""Parking (ram | disk | auto, two floors, counted discards), lookup ranking, restore from every level
giving the same continuation as a fresh read, supersede, and concurrent conversations never getting
another's state. On the simulated engine (real image bytes, real files)."""

from __future__ import annotations

import logging
import threading

from strata.server.cache.memory import FixedMemory

from tests.cache.conftest import history, park_history
from tests.cache.sim_engine import SimEngine


def fresh_continuation(tokens, n_new=5):
    e = SimEngine()
    return e.continue_greedy(0, tokens, n_new)


def continue_from_cache(cache, prompt, ctx=2):
    eng = cache.engine
    eng.truncate(ctx, 0)
    hit = cache.lookup(prompt)
    res = cache.restore(hit, ctx) if hit else None
    before = eng.prefilled
    out = eng.continue_greedy(ctx, prompt, 5)
    read = eng.prefilled - before - 5
    return hit, res, out, read


def test_park_ram_and_restore_equals_fresh_read(make_cache):
    cache = make_cache(conversation_cache_mib=100)
    h = history(1, 60)
    r = park_history(cache, h)
    assert (r.destination, r.floor) == ("ram", "parking")
    prompt = h + [1, 300, 301, 302]
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert hit.level == "ram" and res.n_tokens == 60 and read == 4
    assert out == fresh_continuation(prompt)
    assert cache.hits["ram"] == 1 and cache.parks["ram"] == 1


def test_park_disk_frees_ram_and_restores_from_disk(make_cache):
    cache = make_cache(conversation_cache_mib=100, conversation_cache_cold_mib=100, conversation_cache_park="disk")
    h = history(2, 50)
    r = park_history(cache, h)
    assert r.destination == "disk"
    cache.flush()
    assert not cache.ram.entries and not cache._pending  # RAM keeps nothing for a disk park
    prompt = h + [1, 7, 7]
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert hit.level == "cold" and res.n_tokens == 50 and res.floor == "parking"
    assert out == fresh_continuation(prompt)
    assert cache.admissions[("parking", "disk_hit")] == 1


def test_big_floor_refuses_so_capture_spills_under_transient_floor(make_cache):
    mem = FixedMemory(100_000)
    cache = make_cache(memory=mem, conversation_cache_mib=100, conversation_cache_cold_mib=100)
    mem.value = 2000  # below the 2560 floor, above snapshot + 512
    r = park_history(cache, history(3))
    assert (r.destination, r.floor) == ("disk", "transient")
    mem.value = 100  # neither floor holds
    r2 = park_history(cache, history(4))
    assert r2.destination == "discard"
    cache.flush()
    assert dict(cache.parks) == {"disk": 1, "discard": 1}
    assert cache.admissions[("transient", "park")] == 1 and cache.admissions[("none", "park")] == 1
    # a disk hit under the transient floor is admitted too, never ignored for RAM it would not keep
    mem.value = 2000
    prompt = history(3) + [1, 9]
    hit, res, out, _ = continue_from_cache(cache, prompt)
    assert hit.level == "cold" and res.floor == "transient" and out == fresh_continuation(prompt)
    snap = cache.snapshot_for_monitor()
    assert snap["parks"] == {"ram": 0, "disk": 1, "discard": 1}
    assert snap["admission"]["last"][-1]["source"] == "disk_hit"


def test_disk_hit_refused_when_neither_floor_holds(make_cache):
    mem = FixedMemory(100_000)
    cache = make_cache(memory=mem, conversation_cache_mib=0, conversation_cache_cold_mib=100)
    park_history(cache, history(5))
    cache.flush()
    mem.value = 10
    hit = cache.lookup(history(5) + [1])
    res = cache.restore(hit, 2)
    assert res.n_tokens == 0 and "refused" in res.reason
    assert cache.admissions[("none", "disk_hit")] == 1


def test_auto_resolves_both_ways(make_cache):
    # 2 slots, capacity 4096 x 16 KiB = 64 MiB a snapshot: need 2 x 64 + 2560 = 2688 MiB
    low = make_cache(memory=FixedMemory(2687), conversation_cache_cold_mib=10, conversation_cache_park="auto")
    assert low.park_target == "disk" and "auto -> disk" in low.park_target_reason
    high = make_cache(memory=FixedMemory(2688), conversation_cache_cold_mib=10, conversation_cache_park="auto")
    assert high.park_target == "ram"
    assert high.describe().startswith("conversation cache: park target auto -> ram (free 2688 MiB >= 2688)")
    assert "park target auto -> disk" in low.describe()


def test_disk_target_without_disk_level_stays_in_ram(make_cache):
    cache = make_cache(conversation_cache_park="disk")
    assert cache.park_target == "ram"
    assert park_history(cache, history(1)).destination == "ram"


def test_lookup_longest_prefix_ties_to_fastest(make_cache, clock):
    cache = make_cache(conversation_cache_mib=100, conversation_cache_cold_mib=100)
    h = history(6, 40)
    park_history(cache, h)
    cold = cache.cascade.levels[1]
    # put the same history on cold as well (as after a restart): the tie goes to RAM
    entry = cache.ram.entries[next(iter(cache.ram.entries))]
    cold.add(cold.write(entry.key, "conversation", entry.tokens, iter(entry.pieces), clock.t))
    assert cache.lookup(h + [1]).level == "ram"
    clock.t += 1
    longer = h + [1, 50, 51, 52, 53]
    park_history(cache, longer)  # supersedes h (a strict prefix) in RAM; cold keeps it until longer is on disk
    assert cache.superseded == 1
    assert [e[:2] for e in cache.cascade.events if e[0] == "discard"] == [("discard", "ram")]
    assert len(cache.ram.entries) == 1 and len(cold.entries) == 1
    hit = cache.lookup(longer + [1])
    assert hit.n_tokens == len(longer)
    # a prompt that branches inside the history still reuses the common part
    branch = h[:30] + [999, 998]
    assert cache.lookup(branch).n_tokens == 30


def test_whole_prompt_cached_leaves_one_token_to_read(make_cache):
    cache = make_cache()
    h = history(7, 40)
    park_history(cache, h)
    hit = cache.lookup(h)
    assert hit.n_tokens == 39
    res = cache.restore(hit, 2)
    assert res.n_tokens == 39 and cache.engine.context_len(2) == 39


def test_restart_reopens_disk_levels(make_cache, clock):
    cache = make_cache(conversation_cache_mib=100, conversation_cache_warm_mib=100, conversation_cache_cold_mib=100)
    h1, h2 = history(10), history(11)
    park_history(cache, h1)
    clock.t += 1
    park_history(cache, h2)
    cache.close(persist=True)  # RAM entries go down to warm on a clean shutdown
    again = make_cache(conversation_cache_mib=100, conversation_cache_warm_mib=100, conversation_cache_cold_mib=100)
    for h in (h1, h2):
        prompt = h + [1, 4]
        hit, res, out, _ = continue_from_cache(again, prompt)
        assert hit.level == "warm" and res.n_tokens == len(h)
        assert out == fresh_continuation(prompt)


def test_concurrent_conversations_never_restore_anothers_state(make_cache, clock):
    eng = SimEngine(n_slots=4)
    cache = make_cache(engine=eng, conversation_cache_mib=2, conversation_cache_warm_mib=3,
                       conversation_cache_cold_mib=3)
    convs = {i: history(100 + i, 30) for i in range(8)}
    lock = threading.Lock()  # the engine itself is one per process; slots are the unit of concurrency
    errors = []

    def worker(slot, ids):
        for turn in range(4):
            for i in ids:
                with lock:
                    prompt = convs[i] + [1, 200 + turn, 300 + i]
                    eng.truncate(slot, 0)
                    hit = cache.lookup(prompt)
                    if hit:
                        res = cache.restore(hit, slot)
                        if eng.context_tokens(slot) != prompt[:res.n_tokens]:
                            errors.append((i, "state of another conversation"))
                    out = eng.continue_greedy(slot, prompt, 3)
                    if out != fresh_continuation(prompt, 3):
                        errors.append((i, "output differs"))
                    convs[i] = prompt + out
                    clock.t += 1
                    cache.park(slot, "overwrite")

    threads = [threading.Thread(target=worker, args=(s + 1, [s, s + 4])) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cache.flush()
    assert errors == []
    assert sum(cache.hits.values()) >= 24  # most turns came back from some level
    assert cache.cascade.degradations["ram"] > 0


def test_entry_longer_than_the_context_restores_the_whole_chunk_prefix_that_fits(make_cache):
    cache = make_cache(engine=SimEngine(capacity=100))
    h = history(8, 90)
    park_history(cache, h)
    small = SimEngine(capacity=50)
    cache.engine = small  # a context shorter than the image: 12 whole chunks of 4 tokens fit
    res = cache.restore(cache.lookup(h + [1]), 2)
    assert res.n_tokens == 48 and small.context_tokens(2) == h[:48], res
    res = cache.restore(cache.lookup(h[:30] + [1]), 2)  # a shorter match is restored whole
    assert res.n_tokens == 30 and small.context_tokens(2) == h[:30], res


def test_context_smaller_than_one_chunk_is_a_plain_miss(make_cache):
    cache = make_cache(engine=SimEngine(capacity=100))
    h = history(8, 90)
    park_history(cache, h)
    keys = set(cache._pending) | {k for lvl in cache.cascade.levels for k in lvl.entries}
    cache.engine = SimEngine(capacity=3)  # less than one chunk of 4 tokens
    res = cache.restore(cache.lookup(h + [1]), 2)
    assert res.n_tokens == 0 and "less than one snapshot chunk" in res.reason, res
    assert cache.damaged == 0
    assert keys == set(cache._pending) | {k for lvl in cache.cascade.levels for k in lvl.entries}


def test_a_discard_warns_only_when_a_level_could_have_kept_it(make_cache, caplog):
    """With every level off (the user's choice) each park is a discard: logged at DEBUG, not as a
    warning per park (a server whose stderr nobody reads must not fill it); with levels on but no room
    it is a warning."""
    off = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=0, conversation_cache_warm_mib=0)
    caplog.set_level(logging.DEBUG, logger="strata")
    assert park_history(off, history(5)).destination == "discard"
    discards = [r for r in caplog.records if "park discarded" in r.getMessage()]
    assert [r.levelno for r in discards] == [logging.DEBUG]
    caplog.clear()
    mem = FixedMemory(100)   # neither floor holds
    on = make_cache(memory=mem, conversation_cache_mib=100, conversation_cache_cold_mib=100)
    assert park_history(on, history(6)).destination == "discard"
    discards = [r for r in caplog.records if "park discarded" in r.getMessage()]
    assert [r.levelno for r in discards] == [logging.WARNING]


def test_ram_park_keeps_the_disk_prefix_until_it_is_on_disk(make_cache, clock):
    """A continued conversation parked in RAM must not delete its shorter history from disk: a crash
    before the longer one reaches disk lost both (a new-user trial: the next turn after kill -9 read
    6,203 tokens again). The disk copy goes once the longer history is on disk (here: a clean stop)."""
    cache = make_cache(conversation_cache_mib=100, conversation_cache_cold_mib=100, conversation_cache_park="disk")
    h = history(8, 40)
    park_history(cache, h)
    cache.flush()
    cold = cache.cascade.levels[1]
    assert len(cold.entries) == 1
    cache.park_target = "ram"  # the next turn parks in RAM, as with --conversation-cache-park ram
    clock.t += 1
    longer = h + [1, 60, 61, 62, 63]
    assert park_history(cache, longer).destination == "ram"
    assert len(cold.entries) == 1 and cache.superseded == 0
    crashed = make_cache(conversation_cache_cold_mib=100)  # a restart after a crash: only the disk is left
    assert crashed.lookup(longer + [1]).n_tokens == len(h)
    clock.t += 1
    cache.close()  # the clean stop hands RAM to disk: the shorter copy is superseded there
    assert cache.superseded == 1
    assert [e.n_tokens for e in cold.entries.values()] == [len(longer)]


def test_clean_stop_with_a_ram_history_and_its_strict_prefix_later_in_ram(make_cache, clock):
    """A greedy retry of an earlier turn leaves a strict prefix of a history already parked in RAM, and it
    is parked too (a park supersedes only the shorter histories before its own). The clean stop hands RAM
    to disk oldest first: writing the longer one superseded the prefix out of RAM, and the stop then read
    that prefix's entry: KeyError out of close(), so the histories after it were never written (and the
    server logged 'closing the conversation cache failed')."""
    cache = make_cache(conversation_cache_mib=100, conversation_cache_cold_mib=100)
    longer = history(9, 60)
    park_history(cache, longer)
    clock.t += 1
    assert park_history(cache, longer[:40], ctx=2).destination == "ram"   # a strict prefix, parked later
    clock.t += 1
    other = history(10, 50)
    park_history(cache, other, ctx=0)                                    # a history sealed after both
    cache.close()
    assert not cache.ram.entries
    cold = cache.cascade.levels[1]
    assert sorted(e.n_tokens for e in cold.entries.values()) == [50, 60]
    restarted = make_cache(conversation_cache_cold_mib=100)
    assert restarted.lookup(other + [1]).n_tokens == 50


def test_with_every_level_off_a_park_reads_no_memory_figure(make_cache):
    """Every park is then a discard whatever the memory (decide_admission without a level): the figure, a read
    of /proc/meminfo on the worker thread for each displaced history, is not asked for."""
    class Counted(FixedMemory):
        def available_mib(self) -> float:
            self.reads += 1
            return super().available_mib()

    mem = Counted(100_000)
    mem.reads = 0
    off = make_cache(memory=mem, conversation_cache_mib=0, conversation_cache_cold_mib=0, conversation_cache_warm_mib=0)
    result = park_history(off, history(7))
    assert (result.destination, result.reason, mem.reads) == ("discard", "discard: no disk level and RAM level off", 0)
    assert dict(off.parks) == {"discard": 1}
    on = make_cache(memory=mem, conversation_cache_mib=100)
    assert park_history(on, history(8)).destination == "ram" and mem.reads == 1
