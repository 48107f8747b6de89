"""An independent, staged rewrite of place() (seed 000) used to check the shared reclaim order:
stage by stage as the seed words it, without reclaim_slot / reclaim_order_key / least_loss_slot.
Also a random slot-table generator shared by the property tests and benchmarks/policy_properties.py.
"""

from __future__ import annotations

import random

from strata.server.slot_policy import PolicyConfig, RequestView, SlotView, protection_s, value


def place_reference(slots: list[SlotView], request: RequestView, now: float, cfg: PolicyConfig,
                    load: dict[int, int]) -> int | None:
    idle = [s for s in slots if not s.busy]
    if not idle:
        return None
    best = max((s.common for s in slots), default=0)
    tol = int(min(max(cfg.near_match_share * best, cfg.near_match_s * request.prompt_rate_tps),
                  cfg.near_match_tokens))

    def is_blank(s):
        return s.blank or s.n_tokens <= 0

    def val(s):
        return 0.0 if is_blank(s) else value(s.n_tokens, now - s.last_use, cfg)

    own = [s for s in idle if not s.blank and s.common > 0 and s.n_tokens - s.common <= tol
           and s.common >= cfg.own_min_share * s.n_tokens]
    if own:
        own.sort(key=lambda s: (-s.common, load.get(s.group, 0), -s.last_use, s.slot))
        mine = own[0]
        lighter = [s for s in idle if is_blank(s) and load.get(s.group, 0) < load.get(mine.group, 0)]
        if lighter:
            lighter.sort(key=lambda s: (load.get(s.group, 0), s.slot))
            return lighter[0].slot
        return mine.slot
    protected = [s for s in idle if not is_blank(s) and now - s.last_use < protection_s(s.n_tokens, cfg)]
    free = [s for s in idle if s not in protected]
    worthless = [s for s in free if is_blank(s) or val(s) < cfg.expired_keep_score]
    if worthless:
        worthless.sort(key=lambda s: (load.get(s.group, 0), val(s), not is_blank(s), s.last_use, s.slot))
        return worthless[0].slot
    if free:
        free.sort(key=lambda s: (load.get(s.group, 0), val(s), s.last_use, s.slot))
        return free[0].slot
    least = min(val(s) for s in idle)
    close = [s for s in idle if val(s) <= least * (1 + cfg.loss_tie_share)]
    close.sort(key=lambda s: (load.get(s.group, 0), val(s), s.last_use, s.slot))
    return close[0].slot


NOW = 10_000.0


def random_table(rng: random.Random) -> tuple[list[SlotView], RequestView, dict[int, int]]:
    """A random slot table: lengths from empty to 200K, ages from fresh to past the idle limit, some
    busy, some blank, commons from none to all of a history; random group loads."""
    n_groups = rng.randint(1, 3)
    slots = []
    for i in range(1, rng.randint(1, 8) + 1):
        kind = rng.random()
        n = 0 if kind < 0.1 else rng.choice([rng.randint(1, 3_000), rng.randint(3_000, 200_000)])
        c = rng.random()
        common = 0 if c < 0.5 or n == 0 else (n if c < 0.7 else rng.randint(0, n))
        age = rng.choice([rng.uniform(0, 5), rng.uniform(0, 150), rng.uniform(0, 2500)])
        slots.append(SlotView(slot=i, group=(i - 1) % n_groups, n_tokens=n, common=common, last_use=NOW - age,
                              busy=rng.random() < 0.2, blank=n == 0 or rng.random() < 0.05))
    best = max(s.common for s in slots)
    request = RequestView(n_prompt=best + rng.randint(1, 5_000), prompt_rate_tps=rng.choice([0.0, 1000.0, 3000.0]))
    load = {g: rng.randint(0, 3) for g in range(n_groups)}
    return slots, request, load
