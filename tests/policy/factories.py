"""Small factories for policy tests: slots and requests with readable defaults. No I/O."""

from __future__ import annotations

from strata.server.slot_policy import MainView, PolicyConfig, RequestView, SlotView

DEFAULT = PolicyConfig()
PLAIN_LRU = PolicyConfig(cache_affinity=False)
EXPIRE_600 = PolicyConfig(cache_affinity=False, expire_s=600)
AFFINITY = PolicyConfig(cache_affinity=True)


def slot(i: int, n: int = 0, *, common: int = 0, age: float = 0.0, now: float = 1000.0, group: int | None = None,
         busy: bool = False, blank: bool | None = None, n_groups: int = 1) -> SlotView:
    """Slot i holding n tokens, last used `age` seconds before `now`; blank when n == 0 unless told."""
    return SlotView(slot=i, group=(i - 1) % n_groups if group is None else group, n_tokens=n, common=common,
                    last_use=now - age, busy=busy, blank=(n == 0) if blank is None else blank)


def req(n_prompt: int, rate: float = 0.0) -> RequestView:
    return RequestView(n_prompt=n_prompt, prompt_rate_tps=rate)


def main(n: int, age: float, now: float = 1000.0) -> MainView:
    return MainView(n_tokens=n, last_use=now - age)
