"""With `--conversation-cache-when-full reject` a last level whose only way to make room is its held hit refuses the
newcomer, as it refuses one whenever making room would delete an entry; it never goes over its budget.

0d160b0 lets a last level keep a held hit over its budget until its restore has read it ("after_hold"), and the
hit leaves as its hold ends (Cascade.release). Under when-full reject the budget plan deletes nothing, so the hit
never left: the level stayed over its budget for good, refusing every later history (it is "full") though its
budget had room for them once the hit was gone.

Simulated engine (16 KiB of KV a token: a 40-token history is 640 KiB) and real files: RAM 1 MiB and cold 1 MiB hold
one history each."""

from __future__ import annotations

from tests.cache.conftest import park_history
from tests.cache.test_held_hit_outlives_its_restore import a_in_cold_b_in_ram, level_keys


def test_a_reject_level_refuses_the_newcomer_rather_than_keep_its_held_hit_over_budget(make_cache, clock):
    cache = make_cache(conversation_cache_mib=1, conversation_cache_cold_mib=1,
                       conversation_cache_when_full="reject")
    a, c, ka, _ = a_in_cold_b_in_ram(cache, clock)
    cold = cache.cascade.levels[cache.cascade.index_of("cold")]
    hit = cache.lookup(a + [9, 9])
    assert hit is not None and hit.level == "cold"
    with cache.holding(hit):
        clock.t += 1
        park_history(cache, c, ctx=1)            # B cannot go down: cold is full and rejects (A held or not)
        assert cold.used_bytes <= cold.budget_bytes           # before: A and B, 1.25 MiB of 1 MiB
        assert cache.restore(hit, 2).n_tokens == len(a)
    assert level_keys(cache, "cold") == [ka]
    assert cold.used_bytes <= cold.budget_bytes and not cache.cascade.held
    # the level makes room as before the hold: nothing was kept over its budget to block it
    assert cache.cascade.evictions["cold"] == 0
