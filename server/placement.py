"""Applies `server/slot_policy.py` to the live slot table: builds the policy's plain views, asks it, and
writes every decision to the trace (logs, `/v1/slots`, the monitor feed's `decisions`).

Mechanism between the scheduler and the pure policy: it neither calls the engine nor chooses anything
itself. With STRATA_SLOT_LEARNED=1 it also owns the learned policy's statistics (slot_returns.py) and
the ledger of recent histories (history_ledger.py) they are counted from, main's solo requests
included. The scheduler performs what a decision says (copy, truncate, park).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable

from strata.server import editor_place, slot_returns
from strata.server import slot_policy as policy
from strata.server.history_ledger import HistoryLedger
from strata.server.slots import MAIN, SlotTable, common_prefix

log = logging.getLogger("strata.server.placement")


class WallOffset:
    """Wall-clock minus monotonic seconds, kept steady: read per call, a slot's `last_use` moved by microseconds
    between snapshots and the monitor took it for a new use. Read once, it stayed wrong after the wall clock
    stepped (NTP, a VM's clock set: 25 s in a CI run) or the machine slept (monotonic stops there on Linux: an
    idle slot then read as last used hours ago). So it is read again only where it moved more than `step_s`."""

    def __init__(self, step_s: float = 0.5, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        if not step_s > 0:
            raise ValueError(f"step_s must be > 0 seconds, got {step_s!r}")
        self.step_s, self._wall, self._mono = step_s, wall, mono
        self.value = wall() - mono()

    def now(self) -> float:
        current = self._wall() - self._mono()
        if abs(current - self.value) > self.step_s:
            self.value = current
        return self.value


_WALL_OFFSET = WallOffset()


def wall_of(mono: float | None) -> float | None:
    """A monotonic time as wall-clock seconds (for display), steady across snapshots (WallOffset)."""
    return None if mono is None else mono + _WALL_OFFSET.now()


class Placer:
    def __init__(self, table: SlotTable, cfg: policy.PolicyConfig, trace_len: int = 100) -> None:
        self.table = table
        self.cfg = cfg
        self.trace: deque[dict] = deque(maxlen=trace_len)
        self.prompt_rate_tps = 0.0  # measured prompt-reading speed (EMA), for near matches
        # The learned policy's statistics (STRATA_SLOT_LEARNED=1): owned here, updated on each placement;
        # the ledger tells which recent history a request continues, held in a slot or not.
        self.returns = slot_returns.ReturnStats()
        self.ledger = HistoryLedger()

    @property
    def parks_into_slots(self) -> bool:
        """Seed 000's rules are in use (pick_slot returns place()): the solo conversation is parked into a
        slot by plan_park. Seed 001's order (one group with STRATA_SLOT_EXPIRE_S, or affinity off) does
        not park into slots; the conversation cache below takes a displaced conversation instead."""
        return bool(self.table.slots) and self.cfg.cache_affinity and (
            self.cfg.expire_s <= 0 or self.table.n_groups > 1)

    def group_load(self) -> dict[int, int]:
        return dict(enumerate(self.table.group_load()))

    def slot_views(self, reference: list[int]) -> list[policy.SlotView]:
        """Every slot as the policy sees it, `common` measured against `reference` (a prompt, or main's
        history for a park)."""
        return [self._view(c, reference, self.ledger.turn_in(c.id)) for c in self.table.slots]

    def main_view(self, prompt: list[int]) -> policy.SlotView:
        """Main as the completion class sees it (editor_place.place_completion), `common` against `prompt`."""
        return self._view(self.table.main, prompt)

    @staticmethod
    def _view(c, reference: list[int], turn: int = 0) -> policy.SlotView:
        return policy.SlotView(
            slot=c.id, group=c.group, n_tokens=len(c.tokens),
            common=common_prefix(c.tokens, reference) if c.valid else 0,
            last_use=c.last_use if c.last_use is not None else 0.0,
            busy=c.busy_job is not None, blank=c.blank, turn=turn, completion=c.completion)

    def pick(self, prompt: list[int], now: float, job_id: int, completion: bool = False,
             editor_age_s: float = float("inf")) -> policy.Decision:
        """The context a request runs in (None: all busy): a slot, or main for a code completion
        (editor_place.py). `editor_age_s`: seconds since the editor's last completion arrived."""
        request = policy.RequestView(n_prompt=len(prompt), prompt_rate_tps=self.prompt_rate_tps,
                                     completion=completion, editor_age_s=editor_age_s)
        views = self.slot_views(prompt)
        main = self.main_view(prompt)
        if completion:       # the completion class's own choice (editor_main), else the slot policy's below
            d = editor_place.place_completion(views, main, self.cfg)
        else:                # the editor's slot the only idle one: main instead, where it loses nothing
            d = editor_place.agent_to_main(views, main, request, self.cfg)
        if d is None:
            views = editor_place.hold_for_editor(views, request, self.cfg, main)
            if self.cfg.learn.enabled:
                d = slot_returns.pick_slot_learned(views, request, now, self.cfg, self.returns, self.group_load())
            else:
                d = policy.pick_slot(views, request, now, self.cfg, self.group_load())
        if d.slot is not None:      # (all busy / editor_busy: asked again at each step while it waits; not logged)
            self.log_seen(job_id, "place", now, prompt, views, d.slot, d.reason)
            if self.cfg.learn.enabled:
                self.learn(d.slot, prompt, now)
            self.record(job_id, d.slot, d.group, d.reason, d.reused, d.source_slot, lost=d.lost_tokens)
        return d

    def learn_main(self, prompt: list[int], now: float) -> None:
        """A request runs on main (the solo path): its history counts for the learned statistics as a
        slot's does, so a conversation's turns are known wherever it ran and its history parked from
        main into a slot keeps its turn."""
        if self.cfg.learn.enabled:
            self.learn(MAIN, prompt, now)

    def learn(self, ctx: int, prompt: list[int], now: float) -> None:
        """Update the learned statistics with a placement in context `ctx` (a slot or main): the first
        continuation of the history the prompt continues (held in a context or overwritten) is noted
        with its idle gap; the context's old history is released; the new one is noted at the next turn
        (with the prompt's length: the answer is not known yet)."""
        def held(c: int) -> tuple[int, float]:   # (tokens, end of the last use) of what context c holds
            state = self.table[c]
            if state.busy_job is not None or state.last_use is None:   # its use has not ended: no gap
                return len(state.tokens), now
            return len(state.tokens), state.last_use

        parent = self.ledger.parent_of(prompt)
        turn = 1
        if parent is not None:
            turn = parent.turn + 1
            n_tokens, end = held(parent.slot) if parent.slot is not None else (parent.n_tokens, parent.end)
            if not parent.continued:
                parent.continued = True
                self.returns = slot_returns.note_return(self.returns, parent.turn, n_tokens, now - end)
        self.ledger.release(ctx, *held(ctx))
        self.ledger.add(prompt, turn, ctx)
        self.returns = slot_returns.note_history(self.returns, turn, len(prompt))

    def plan_park(self, now: float, job_id: int) -> policy.ParkDecision | None:
        """Where main's conversation goes before a request displaces it; None when parking into slots
        is off (seed 001's order: the conversation cache takes it instead)."""
        main = self.table.main
        if not self.parks_into_slots or not main.tokens or not main.valid:
            return None
        view = policy.MainView(n_tokens=len(main.tokens),
                               last_use=main.last_use if main.last_use is not None else now)
        if len(main.tokens) > self.table.slots[0].capacity:   # --slot-ctx below --ctx: no slot holds it
            d = policy.ParkDecision(None, "skip", "too_long_for_slot")
        else:
            views = self.slot_views(main.tokens)
            d = policy.plan_park(view, views, now, self.cfg, self.group_load())
            self.log_seen(job_id, "park", now, main.tokens, views, d.slot, d.park_skip or d.reason,
                          main_last_use=view.last_use)
        if d.slot is None:
            self.record(job_id, None, None, d.reason, 0, MAIN, park_skip=d.park_skip, n_main=len(main.tokens))
        else:
            c = self.table[d.slot]  # overwritten by main's history, which keeps its turn there
            self.ledger.release(d.slot, len(c.tokens), c.last_use if c.last_use is not None else now)
            self.ledger.move(MAIN, d.slot)
            self.record(job_id, d.slot, self.table[d.slot].group, d.reason, d.reused, MAIN, park=True,
                        lost=d.lost_tokens)
        return d

    def log_seen(self, job_id: int, kind: str, now: float, reference: list[int], views: list[policy.SlotView],
                 slot: int | None, reason: str, main_last_use: float | None = None) -> None:
        """At debug level, what a decision saw, one JSON object a line (`slot seen: {...}`): the slot table
        as the policy got it (per slot [id, group, tokens, common, last_use, busy, blank], monotonic seconds
        like `now`), the group load, the prompt's length (main's history's for a park), what main holds of
        the prompt, and what was decided: benchmarks/placement_audit.py checks each decision against seed
        000 from the log alone."""
        if not log.isEnabledFor(logging.DEBUG):
            return
        seen = {"request": job_id, "kind": kind, "now": round(now, 4), "n": len(reference),
                "rate": round(self.prompt_rate_tps, 1), "load": self.table.group_load(),
                "slots": [[v.slot, v.group, v.n_tokens, v.common, round(v.last_use, 4), v.busy, v.blank]
                          for v in views],
                "slot": slot, "reason": reason, "learned": self.cfg.learn.enabled}
        main = self.table.main
        if kind == "place" and main.valid and main.tokens:   # a source the decision may not name, for the audit
            seen["main"] = [len(main.tokens), common_prefix(main.tokens, reference)]
        if main_last_use is not None:
            seen["main_last_use"] = round(main_last_use, 4)
        log.debug("slot seen: %s", json.dumps(seen))

    def settle(self, job_id: int, reused: int, source: int | str | None) -> None:
        """The reuse a placement got once its request started (`source`: the context it was copied from,
        "cache" for a restore from the conversation cache, None for the context's own history): the
        request's placement entry in the trace then says what really happened, as its usage does. The
        decision saw the context's common prefix: a prompt the context holds whole reuses all but its last
        token (read again for the first logits), a copy or a restore more, a failed restore less."""
        for entry in reversed(self.trace):
            if entry["request"] == job_id and not entry["park"] and not entry["park_skip"]:
                got = "main" if source == MAIN else source
                if (entry["reused"], entry["source_slot"]) != (reused, got):
                    log.info("slot settle: request %s -> slot %s reused=%d source=%s (the decision saw %d)",
                             job_id, entry["slot"], reused, got, entry["reused"])
                    entry.update(reused=reused, source_slot=got)
                return

    def record(self, job_id: int | None, slot: int | str | None, group: int | None, reason: str, reused: int,
               source_slot: int | str | None, *, park: bool = False, park_skip: str | None = None,
               lost: int = 0, n_main: int = 0) -> None:
        entry = {
            "time": time.time(), "request": job_id, "slot": "main" if slot == MAIN else slot, "group": group,
            "reason": reason, "reused": reused,
            "source_slot": "main" if source_slot == MAIN else source_slot,
            "park": park, "park_skip": park_skip, "lost_tokens": lost,
        }
        self.trace.append(entry)
        if park_skip:     # no slot and no group to name: what stays where it was, and why
            log.info("slot park_skip: request %s -> main's history (%d tokens) not parked into a slot: %s",
                     job_id, n_main, park_skip)
            return
        what = "park" if park else "place"
        log.info("slot %s: request %s -> slot %s (group %s) reason=%s reused=%d source=%s", what, job_id,
                 entry["slot"], group, reason, reused, entry["source_slot"])
