"""editor_place: where an editor's code completion runs, and the editor's context kept from an agent while it types.
Table tests over plain views (no I/O); the live behaviour is tests/server/test_editor_context_kept.py."""

from __future__ import annotations

import dataclasses

import pytest
from strata.server.editor_place import (
    EDITOR_FILE_MIN_COMMON,
    agent_to_main,
    editor_slot,
    hold_for_editor,
    place_completion,
    yield_to_session_calls,
)
from strata.server.slot_policy import PolicyConfig, RequestView, pick_slot

from .factories import slot

NOW = 1000.0
CFG = PolicyConfig()
OFF = PolicyConfig(editor_hold_s=0, editor_main=False)


def ed(i, n, **kw):
    """Slot i holding a code completion's history."""
    return dataclasses.replace(slot(i, n, **kw), completion=True)


def main_ctx(n=0, **kw):
    """Main (context 0) as editor_place sees it."""
    return slot(0, n, group=-1, **kw)


def agent(n=2_000, age_s=1.0):
    return RequestView(n_prompt=n, prompt_rate_tps=200.0, completion=False, editor_age_s=age_s)


def completion(n=3_500):
    return RequestView(n_prompt=n, prompt_rate_tps=200.0, completion=True, editor_age_s=0.0)


# --- a completion ---------------------------------------------------------------------------------------------

def test_a_completion_goes_back_to_the_slot_holding_its_file_though_its_tail_differs():
    # the last keystroke's history: 3,500 tokens, the next one shares 3,000 (the suffix after the cursor differs):
    # more than the near-match tolerance, so seed 000 took it for another conversation: a new one takes an
    # unprotected slot before a protected one, and gave the agent's expired history in slot 1 up for it
    slots = [slot(1, 6_000, age=100.0), ed(2, 3_500, common=3_000, age=0.5)]
    d = place_completion(slots, main_ctx(), CFG)
    assert (d.slot, d.reason, d.reused, d.lost_tokens) == (2, "editor_file", 3_000, 500)
    # as before (off): the slot policy's choice
    assert place_completion(slots, main_ctx(), OFF) is None
    assert (pick_slot(slots, completion(), NOW, OFF).slot, pick_slot(slots, completion(), NOW, OFF).reason) \
        == (1, "expired_keep")


def test_a_completion_goes_back_to_main_holding_its_file_with_slots_idle():
    slots = [slot(1, 6_000, age=10.0), slot(2)]
    d = place_completion(slots, dataclasses.replace(main_ctx(3_500, common=3_000), completion=True), CFG)
    assert (d.slot, d.reason, d.reused) == (0, "editor_file", 3_000)


def test_the_context_holding_the_most_of_its_file_wins():
    slots = [ed(1, 3_400, common=1_200, age=9.0), ed(2, 3_500, common=3_000, age=0.5), slot(3)]
    assert place_completion(slots, main_ctx(), CFG).slot == 2


def test_an_agents_history_sharing_its_start_is_not_its_file():
    slots = [slot(1, 6_000, common=40, age=100.0), slot(2)]
    solo = main_ctx(9_000, common=40, age=5.0)                   # a solo agent's conversation in main
    assert place_completion(slots, solo, CFG) is None            # the slot policy's choice (slot 2 is blank)


def test_with_nothing_of_its_file_held_a_completion_takes_main_losing_nothing_before_an_agents_slot():
    agents = [slot(1, 6_000, age=1.0), slot(2, 7_000, busy=True)]         # agent 1 between two turns
    d = place_completion(agents, main_ctx(), CFG)                          # main blank
    assert (d.slot, d.reason, d.lost_tokens) == (0, "editor_main", 0)
    old = dataclasses.replace(main_ctx(3_400, common=30, age=5.0), completion=True)   # another file's, or cut short
    assert place_completion(agents, old, CFG).slot == 0
    assert pick_slot(agents, completion(), NOW, OFF).slot == 1             # before: the agent's slot
    # a solo agent's conversation in main is not displaced while a slot is idle: the slot policy's choice
    assert place_completion(agents, main_ctx(9_000, age=5.0), CFG) is None
    # a blank slot loses nothing either, and goes first (a completion alone on a fresh server: a slot, as before)
    assert place_completion([*agents, slot(3)], main_ctx(), CFG) is None
    assert pick_slot([*agents, slot(3)], completion(), NOW, CFG).slot == 3


def test_with_no_slot_idle_a_completion_runs_in_main_instead_of_waiting():
    slots = [slot(i, 6_000, busy=True) for i in (1, 2, 3, 4)]
    d = place_completion(slots, main_ctx(5_000, age=40.0), CFG)
    assert (d.slot, d.reason, d.lost_tokens) == (0, "editor_main", 5_000)
    assert place_completion(slots, main_ctx(5_000, busy=True), CFG).slot is None
    assert place_completion(slots, main_ctx(5_000), OFF) is None       # off: it waits (pick_slot: all busy)
    assert pick_slot(slots, completion(), NOW, OFF).slot is None


def test_a_completion_waits_for_its_files_context_while_the_keystroke_before_ends_there():
    # the keystroke before (its client gone) still holds the context until the next step; an idle agent's slot
    # given up for it instead went to the cache, and the keystroke read nothing
    slots = [ed(1, 3_500, common=3_000, busy=True), slot(2, 6_000, age=1.0)]
    d = place_completion(slots, main_ctx(), CFG)
    assert (d.slot, d.reason) == (None, "editor_busy")
    assert pick_slot(slots, completion(), NOW, OFF).slot == 2          # before: the agent's slot
    # an idle context holding more of it goes first
    more = [ed(1, 3_500, common=1_000, busy=True), ed(2, 3_500, common=3_000, age=1.0)]
    assert place_completion(more, main_ctx(), CFG).slot == 2


def test_another_editors_file_sharing_only_the_fim_opening_is_not_its_file():
    # two editors: their FIM prompts share the opening special tokens, nothing of a file; a keystroke neither waits
    # for the other's running completion nor overwrites its file while a blank slot is free
    running = [ed(1, 3_500, common=3, busy=True), slot(2)]
    assert place_completion(running, main_ctx(), CFG) is None            # the slot policy's choice: blank slot 2
    assert pick_slot(running, completion(), NOW, CFG).slot == 2
    idle = [ed(1, 3_500, common=3, age=0.5), slot(2)]
    assert place_completion(idle, main_ctx(), CFG) is None
    assert pick_slot(idle, completion(), NOW, CFG).slot == 2
    # its own file, a line near the top: as many tokens in common as the threshold goes back to it
    near_top = [ed(1, 3_500, common=EDITOR_FILE_MIN_COMMON, age=0.5), slot(2)]
    assert place_completion(near_top, main_ctx(), CFG).reason == "editor_file"


# --- an agent beside an active editor --------------------------------------------------------------------------

def test_an_agent_does_not_take_the_active_editors_slot_when_another_is_idle():
    # every history protected: seed 000 takes the least loss, the editor's 3,500 tokens before an agent's 8,000
    slots = [ed(1, 3_500, age=0.5), slot(2, 8_000, age=1.0), slot(3, 7_000, busy=True)]
    assert pick_slot(slots, agent(), NOW, OFF).slot == 1
    d = pick_slot(hold_for_editor(slots, agent(), CFG), agent(), NOW, CFG)
    assert (d.slot, d.reason) == (2, "least_loss")


def test_the_editors_slot_is_taken_when_it_is_the_only_idle_one():
    slots = [ed(1, 3_500, age=0.5), slot(2, 8_000, busy=True)]
    assert hold_for_editor(slots, agent(), CFG) == slots
    assert pick_slot(hold_for_editor(slots, agent(), CFG), agent(), NOW, CFG).slot == 1


def test_an_agent_whose_only_idle_slot_is_the_editors_runs_in_a_blank_main():
    # four agents arriving together beside the editor: three took the blank slots, the fourth the editor's
    slots = [ed(1, 3_400, age=0.3), slot(2, 1_700, busy=True), slot(3, 1_700, busy=True), slot(4, 1_700, busy=True)]
    d = agent_to_main(slots, main_ctx(), agent(), CFG)
    assert (d.slot, d.reason, d.lost_tokens) == (0, "editor_held_main", 0)
    assert pick_slot(slots, agent(), NOW, OFF).slot == 1                       # before: the editor's slot
    assert agent_to_main(slots, main_ctx(), agent(), OFF) is None              # the hold off
    assert agent_to_main(slots, main_ctx(), agent(age_s=5.0), CFG) is None     # the editor gone
    assert agent_to_main(slots, main_ctx(9_000, age=5.0), agent(), CFG) is None   # main holds a conversation
    own = main_ctx(1_700, common=1_700, age=1.0)                               # ... its own: it goes on there
    assert agent_to_main(slots, own, agent(2_100), CFG).reason == "editor_held_main"
    assert pick_slot(slots, agent(2_100), NOW, OFF).slot == 1                  # before: the editor's slot
    assert agent_to_main(slots, main_ctx(busy=True), agent(), CFG) is None
    assert agent_to_main(slots, main_ctx(), completion(), CFG) is None
    two = [*slots[:3], slot(4, 1_700, age=1.0)]                                # another slot idle: the hold's
    assert agent_to_main(two, main_ctx(), agent(), CFG) is None


def test_the_hold_ends_with_the_editor_and_spares_older_completions():
    slots = [ed(1, 3_500, age=0.5), slot(2, 8_000, age=1.0)]
    assert hold_for_editor(slots, agent(age_s=3.0), CFG) == slots         # editor_hold_s (3 s) has passed
    assert hold_for_editor(slots, agent(age_s=1.0), OFF) == slots         # 0: off
    assert hold_for_editor(slots, completion(), CFG) == slots             # a completion is not held off
    older = [ed(1, 3_500, age=30.0), ed(2, 3_500, age=0.5), slot(3, 8_000, age=1.0)]
    assert editor_slot(older).slot == 2
    held = hold_for_editor(older, agent(), CFG)
    assert [s.busy for s in held] == [False, True, False]


def test_no_slot_is_held_while_the_editors_latest_completion_is_in_main():
    # the editor went on in main (editor_main: no slot was idle); slot 1 holds an older keystroke's copy, which its
    # next keystroke does not go back to: holding it gave the agent's 8,000 tokens in slot 2 up instead
    slots = [ed(1, 3_500, age=2.0), slot(2, 8_000, age=1.0)]
    in_main = dataclasses.replace(main_ctx(3_600, age=0.3), completion=True)
    assert editor_slot(slots, in_main) is None
    assert hold_for_editor(slots, agent(), CFG, in_main) == slots
    assert pick_slot(hold_for_editor(slots, agent(), CFG, in_main), agent(), NOW, CFG).slot == 1
    # main's completion older than the slot's, or main an agent's: the slot is the editor's as before
    older = dataclasses.replace(main_ctx(3_600, age=5.0), completion=True)
    assert editor_slot(slots, older).slot == 1
    assert editor_slot(slots, main_ctx(9_000, age=0.1)).slot == 1
    assert [s.busy for s in hold_for_editor(slots, agent(), CFG, older)] == [True, False]


def test_a_running_completion_is_the_editors_context_and_nothing_more_is_held():
    slots = [ed(1, 3_500, busy=True), ed(2, 3_400, age=2.0), slot(3, 8_000, age=1.0)]
    assert editor_slot(slots).slot == 1
    assert hold_for_editor(slots, agent(), CFG) == slots


# --- the parameters ------------------------------------------------------------------------------------------

def test_the_variables_are_read_and_bad_values_named():
    c = PolicyConfig.from_env({"STRATA_SLOT_EDITOR_HOLD_S": "5", "STRATA_SLOT_EDITOR_MAIN": "off"})
    assert (c.editor_hold_s, c.editor_main) == (5.0, False)
    assert (CFG.editor_hold_s, CFG.editor_main) == (3.0, True)
    for var, raw in (("STRATA_SLOT_EDITOR_HOLD_S", "-1"), ("STRATA_SLOT_EDITOR_HOLD_S", "soon"),
                     ("STRATA_SLOT_EDITOR_MAIN", "2")):
        with pytest.raises(ValueError, match=f"{var}={raw!r}"):
            PolicyConfig.from_env({var: raw})
    with pytest.raises(ValueError, match="STRATA_SLOT_EDITOR_MAIN"):
        PolicyConfig(editor_main=1)


@pytest.mark.parametrize(("running", "waited", "ended"), [
    ({0: True}, [0], [0]),                   # a completion in main, a restore waits for main: it ends
    ({0: False}, [0], []),                   # an agent's turn there: waited for (SESSION_IDLE_WAIT_S, then a 503)
    ({0: True, 2: True}, [2], [2]),          # only the context a call waits for
    ({1: True, 2: False}, [1, 2, 2], [1]),   # two calls for one context: once
    ({1: True}, [3], []),                    # the waited context idle (not running): nothing to end
    ({}, [], []),
])
def test_a_completion_gives_its_context_up_to_a_session_call(running, waited, ended):
    assert yield_to_session_calls(running, waited) == ended
