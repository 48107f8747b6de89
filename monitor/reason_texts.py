"""Plain-words explanations of the slot policy's decision reasons, the Slot decisions tab's tooltips.

What it is not: the policy (server/slot_policy.py, slot_returns.py, placement.py, context_choice.py and
editor_place.py decide and name the reasons; docs/slot-policy.md says the order). tests/monitor/test_reason_texts.py
reads those modules for every reason they can give, so a new reason cannot go unexplained here. No Qt import.
"""

from __future__ import annotations

# the `reason` of a placement (where a request runs) or of a park (where main's conversation went)
REASONS: dict[str, str] = {
    "own_prefix": "this slot held the start of the request's conversation: it went on there",
    "blank_less_loaded": "the conversation's slot was in a busier group: an empty slot of a less loaded group "
                         "took it, copying its history",
    "empty": "an empty slot was free",
    "blank": "a slot holding nothing worth keeping (empty, or a copy the conversation went on from) was free",
    "expired": "the history given up had outlived its protection and was worth too little to keep",
    "expired_keep": "every free slot held a history worth keeping: this one's protection had ended and it was "
                    "worth the least",
    "expired_lru": "the least recently used of the slots idle longer than STRATA_SLOT_EXPIRE_S",
    "shortest": "no slot was idle longer than STRATA_SLOT_EXPIRE_S: the shortest history was given up",
    "lru": "the least recently used history was given up",
    "least_loss": "every idle history was still protected: the one worth least was given up rather than wait",
    "learned": "the learned policy gave up the history least likely to be read again soon "
               "(STRATA_SLOT_LEARNED)",
    "all_busy": "every slot was in use: the request waited",
    "all_protected": "every free slot was protected",
    "solo": "nothing else ran: the request took the main context (its previous conversation parked first)",
    "beside_completions": "only code completions ran beside it: the request took the main context",
    "too_long_for_slot": "longer than a slot holds (--slot-ctx below --ctx): the main context took it",
    "own_copy": "a park: this slot held an older copy of main's conversation, which the park brought up to date",
    "skip": "main's conversation was not parked into a slot: the park skipped column says why",
    "editor_file": "a code completion went on in the context holding the most of its file (the keystroke before)",
    "editor_busy": "a code completion waited for the context holding its file, still busy with the keystroke before",
    "editor_main": "a code completion took the main context: blank or holding a completion, or no slot was idle "
                   "(main's conversation parked first)",
    "editor_held_main": "the editor's slot was the only idle one: the agent's request ran in the main context, "
                        "blank or holding its own conversation, and the editor kept its file",
}

# a skipped park's `park_skip`: why main's conversation was not parked into a slot
PARK_SKIPS: dict[str, str] = {
    "main_empty": "the main context held nothing",
    "main_low_value": "main's history was worth too little to keep (STRATA_SLOT_PARK_MIN_VALUE)",
    "kept_share": "a slot already holds nearly all of it (STRATA_SLOT_PARK_KEPT_SHARE)",
    "no_target": "no slot could take it: each was in use, protected, or worth keeping more",
    "too_long_for_slot": "it is longer than a slot holds (--slot-ctx below --ctx)",
}


def reason_tip(reason: str | None) -> str | None:
    """The reason's explanation, prefixed by its name; None for an empty cell. An unknown name (a newer server)
    says so instead of nothing."""
    if not reason:
        return None
    return f"{reason}: {REASONS.get(reason, 'a reason this monitor does not know (a newer server?)')}"


def park_skip_tip(skip: str | None) -> str | None:
    if not skip:
        return None
    return f"{skip}: {PARK_SKIPS.get(skip, 'a reason this monitor does not know (a newer server?)')}"
