"""Where an editor's code completion runs, and the editor's context kept from agents while it types: the placement
rules of the completion class beside seed 000's for agent conversations (slot_policy.place, unchanged for them
but for the one slot held here).

Why: beside several agents an editor's completions mostly came back after the editor had moved on (the agent
soak: 6 of 118 with content, five agents on --batch 4's four slots). Measured with fim_beside_agent.py --agents 4
(benchmarks/RESULTS.md, "Code completions beside several agents"): every keystroke queued behind the agents'
turns with main idle, and an agent arriving between two keystrokes took the editor's slot (least_loss: the
editor's ~3,500 tokens are worth less than an agent's 6-10K by seed 000's value), so the next keystroke read the
file again in 40-240-token slices. An agent's history given up goes to the conversation cache; a completion's
never does (ContextState.completion), so the editor loses all of it.

Rules (cfg: slot_policy.PolicyConfig's editor_hold_s and editor_main):
- A completion runs in the idle context holding the most of its prompt among those holding a completion's
  history, main included with editor_main (`editor_file`): the previous keystroke's history differs after the
  cursor by the suffix (~500 tokens), more than place()'s near-match tolerance, so place() took it for another
  conversation and gave an agent's slot up for it. Where that context is busy (the keystroke before, its client
  gone, ends at the next step) the completion waits for it (`editor_busy`): taking an idle slot instead gave an
  agent's history between two turns up to the cache for a keystroke that read nothing (fim_beside_agent.py
  --agents 4: 7 of 7 such placements, each agent's next turn restoring its history from RAM). Else a blank slot
  (the slot policy takes it first); else main where it is idle and holds nothing worth keeping (blank, or a
  completion's history: `editor_main`); else, with a slot
  idle, the slot policy's choice (seed 000's place(), or the learned one); else main when idle (`editor_main`,
  its conversation parked as for any request displacing it); else it waits (`all_busy`).
- An agent's request, within editor_hold_s of the editor's last completion, does not take the context holding
  the editor's latest completion while another slot is idle: that slot is shown to place() as busy. Where it is
  the only idle slot the agent runs in main when main is idle and blank or holds its own conversation
  (`editor_held_main`), else takes it as before (seed 000: no wait).

- A completion running in a context a session save or restore waits for ends there (`yield_to_session_calls`):
  a completion is the editor's to send again, a user's restore is not; the restore waited 30 s behind a pause's
  completion reading ~3,470 tokens beside four agents in main and was answered 503 (the session-33 agent soak).

Pure: frozen views in, a Decision with a reason out; no clock (`editor_age_s` comes in the request).
Not here: the views (placement.py), main's parking before a completion takes it (context_choice.py, parking.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

from strata.server.slot_policy import (
    Decision,
    PolicyConfig,
    RequestView,
    SlotView,
    holds_own_prefix,
    near_match_tolerance,
)

# A context holds a completion's file when it shares at least this many tokens of its prompt: any two FIM prompts
# share their opening special tokens (and often a license header), so with two editors (or two files) one's keystroke
# waited for the other's running completion, or overwrote its file, while a blank slot was free. A keystroke near a
# file's top with fewer in common re-reads at most this many tokens elsewhere.
EDITOR_FILE_MIN_COMMON = 32


def editor_active(request: RequestView, cfg: PolicyConfig) -> bool:
    """The editor sent a completion within editor_hold_s (0: never active, the hold is off)."""
    return request.editor_age_s < cfg.editor_hold_s


def editor_slot(slots: Sequence[SlotView], main: SlotView | None = None) -> SlotView | None:
    """The slot holding the editor's latest completion: a busy one first (a completion runs there), else the
    latest used. Older completions' slots are not the editor's context (a keystroke goes on from the latest).
    None also where that latest completion is main's (`main`, editor_main): a slot's is then an older copy, and
    holding it from agents gave an agent's history up to the cache instead for nothing."""
    held = [s for s in [*slots, *([main] if main is not None else [])]
            if s.completion and not s.blank and s.n_tokens > 0]
    t = max(held, key=lambda s: (s.busy, s.last_use, s is not main, -s.slot), default=None)
    return None if t is None or t is main else t


def hold_for_editor(slots: Sequence[SlotView], request: RequestView, cfg: PolicyConfig,
                    main: SlotView | None = None) -> list[SlotView]:
    """The slots as an agent's request sees them: while the editor is active, the editor's idle slot shown busy
    when another slot is idle. A completion's request, or no editor: as they are."""
    out = list(slots)
    if request.completion or not editor_active(request, cfg):
        return out
    held = editor_slot(out, main)
    if held is None or held.busy or not any(not s.busy and s.slot != held.slot for s in out):
        return out
    return [dataclasses.replace(s, busy=True) if s.slot == held.slot else s for s in out]


def agent_to_main(slots: Sequence[SlotView], main: SlotView | None, request: RequestView,
                  cfg: PolicyConfig) -> Decision | None:
    """An agent's request while the editor is active whose only idle slot is the editor's: main instead, where main
    is idle and blank or holds the agent's own conversation (it loses nothing there; seed 000's no wait kept). None:
    the slot policy decides as usual. Four agents arriving together beside an editor (fim_beside_agent.py --agents
    4) took the blank slots and the fourth the editor's, with main blank beside it: the file the editor had read
    (~3,400 tokens) was lost; with main given to the fourth, its next turn took the editor's slot the same way."""
    if request.completion or not editor_active(request, cfg) or main is None or main.busy:
        return None
    tol = near_match_tolerance(main.common, request.prompt_rate_tps, cfg)
    if not (main.blank or main.n_tokens <= 0 or holds_own_prefix(main, tol, cfg)):
        return None
    held = editor_slot(slots)
    idle = [s for s in slots if not s.busy]
    if held is None or held.busy or [s.slot for s in idle] != [held.slot]:
        return None
    return Decision(main.slot, "editor_held_main", 0, None, main.group, 0, 0.0)


def place_completion(slots: Sequence[SlotView], main: SlotView | None, cfg: PolicyConfig) -> Decision | None:
    """Where a code completion runs (`main`: main as a view, None where it is not to be considered); None: the
    slot policy's choice (a slot is idle and no context holds a completion sharing EDITOR_FILE_MIN_COMMON tokens of
    its start), as for any
    request. With editor_main off: always None."""
    if not cfg.editor_main:
        return None
    contexts = [*slots] + ([main] if main is not None else [])
    mine = [c for c in contexts if c.completion and not c.blank and c.common >= EDITOR_FILE_MIN_COMMON]
    if mine:
        t = max(mine, key=lambda c: (c.common, not c.busy, -c.slot))
        if t.busy:
            return Decision(None, "editor_busy")
        return Decision(t.slot, "editor_file", t.common, None, t.group, max(t.n_tokens - t.common, 0), 0.0)
    # no context holds its file (its first read; or it was given up): main where that loses nothing, before an
    # idle slot, which is an agent's between its turns more often than not (fim_beside_agent.py --agents 4: a
    # keystroke with nothing of its file read yet took one, read nothing in its 500 ms and sent the agent's
    # history to the cache); a solo agent's conversation in main is not displaced while a slot is idle
    if any(not s.busy and (s.blank or s.n_tokens <= 0) for s in slots):
        return None       # a blank slot loses nothing either: the slot policy takes it first
    free_main = main is not None and not main.busy and (main.blank or main.n_tokens <= 0 or main.completion)
    if free_main:
        return Decision(main.slot, "editor_main", main.common, None, main.group, 0, 0.0)
    if any(not s.busy for s in slots):
        return None
    if main is not None and not main.busy:
        lost = 0 if main.blank else max(main.n_tokens - main.common, 0)
        return Decision(main.slot, "editor_main", main.common, None, main.group, lost, 0.0)
    return Decision(None, "all_busy")


def yield_to_session_calls(running: Mapping[int, bool], waited: Collection[int]) -> list[int]:
    """The contexts whose running request ends now for a session save or restore waiting for them: `running` maps each
    busy context to whether its request is a code completion, `waited` the contexts calls wait for. A completion ends
    (after a save what it read stays for the next keystroke, as at its t_max_prompt_ms; a restore overwrites it, as
    it would have after the wait: a completion's history is never parked); an agent's turn is waited for, as
    before (its answer is the user's: SESSION_IDLE_WAIT_S, then a 503)."""
    return sorted(ctx for ctx in set(waited) if running.get(ctx, False))
