"""A lookup's hit that a restore is about to read is never deleted before the restore reads it. Held entries left a
level last, but the last level still deleted one when a newcomer needed its room and nothing else could leave: an agent
soak under tiny budgets (benchmarks/RESULTS.md, session 30) saw `entry gone since lookup`, a held cold hit evicted
while main's history was parked into a slot and that slot's went to the cache; the request read its whole prompt
again. Now the level keeps both for the restore's length (over its budget by the held entry) and lets the hit go as
the hold ends, and the lookup takes its hold in the same lock hold (`held_lookup`), so the spill thread cannot evict
the hit between the two.

Simulated engine (16 KiB of KV a token: a 40-token history is 640 KiB) and real files: RAM 1 MiB and cold 1 MiB hold
one history each."""

from __future__ import annotations

from tests.cache.conftest import history, park_history


def level_keys(cache, name):
    lvl = cache.cascade.levels[cache.cascade.index_of(name)]
    return sorted(lvl.entries, key=lambda k: (lvl.entries[k].sealed_at, k))


def a_in_cold_b_in_ram(cache, clock) -> tuple[list[int], list[int], str, str]:
    """Histories A and B parked in turn (RAM and cold hold one each): A, C, and the keys of A and B."""
    a, b, c = history(1), history(2), history(3)
    clock.t += 1
    ka = park_history(cache, a).key
    clock.t += 1
    kb = park_history(cache, b).key              # A goes down to cold
    assert level_keys(cache, "cold") == [ka] and level_keys(cache, "ram") == [kb]
    return a, c, ka, kb


def test_a_held_hit_the_last_level_must_give_up_is_restored_first(make_cache, clock):
    cache = make_cache(conversation_cache_mib=1, conversation_cache_cold_mib=1)
    a, c, ka, kb = a_in_cold_b_in_ram(cache, clock)
    hit = cache.lookup(a + [9, 9])
    assert hit is not None and hit.level == "cold" and hit.n_tokens == len(a)
    with cache.holding(hit):
        clock.t += 1
        park_history(cache, c, ctx=1)            # B goes down to cold, which holds only A: A must make room
        # before: A deleted here (the newcomer wins), and the restore below found `entry gone since lookup`
        assert cache.cascade.find(ka) is not None
        restored = cache.restore(hit, 2)
    assert restored.n_tokens == len(a), restored
    assert cache.engine.context_tokens(2) == a
    # the hold over, the level is within its budget again: A (the oldest, in context 2 now) made room for B
    assert level_keys(cache, "cold") == [kb] and level_keys(cache, "ram") == [cache.lookup(c + [9]).key]
    cold = cache.cascade.levels[cache.cascade.index_of("cold")]
    assert cold.used_bytes <= cold.budget_bytes
    assert cache.cascade.evictions["cold"] == 1 and cache.parks["discard"] == 0


def test_held_lookup_holds_its_hit_until_the_block_ends(make_cache, clock):
    """Between `lookup` and `holding` the spill thread could evict the hit (it waits only while a hold exists):
    `held_lookup` finds and holds under one hold of the cache's lock, so nothing runs between them."""
    cache = make_cache(conversation_cache_mib=1, conversation_cache_cold_mib=1)
    a = history(1)
    ka = park_history(cache, a).key
    with cache.held_lookup(a + [9]) as hit:
        assert hit is not None and hit.key == ka and cache.cascade.held[ka] == 1
        assert cache.restore(hit, 2).n_tokens == len(a)
    assert ka not in cache.cascade.held
    with cache.held_lookup([77, 78, 79]) as miss:
        assert miss is None and not cache.cascade.held
