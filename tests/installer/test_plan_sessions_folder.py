"""The plan says where named session saves go and how big they may get: it writes the sessions folder's budget as
the server's default (0, no limit: a named save is the user's, and a full budget refuses saves), with the reason;
a budget set by hand is kept by a re-run; a file an earlier setup wrote without the key is not told to run setup
again for it (it means the same)."""

from __future__ import annotations

from strata.installer import config_file
from strata.installer.plan import default_answers, make_plan
from strata.installer.plan_memory import gib, kv_mib_of

from tests.installer.matrix_data import situation


def test_the_plan_says_where_sessions_go_and_how_big_each_may_be():
    s = situation("workstation", "8B")
    plan = make_plan(s, default_answers(s))
    c = plan.config()
    assert c["conversation_cache_sessions_mib"] == 0
    why = plan.reason("conversation_cache_sessions_mib")
    each = gib(kv_mib_of(s.model, c["ctx"]))
    assert why.startswith("no limit: named session saves") and "'sessions'" in why, why
    assert f"each up to {each} (a whole context's KV)" in why, why


def test_a_budget_set_by_hand_is_kept_and_an_older_file_without_the_key_is_not_flagged():
    s = situation("workstation", "8B")
    plan = make_plan(s, default_answers(s))
    kept = config_file.with_hand_set(plan, {"conversation_cache_sessions_mib": 2048})
    assert kept.config()["conversation_cache_sessions_mib"] == 2048
    assert "set by hand" in kept.reason("conversation_cache_sessions_mib")
    both = config_file.with_hand_set(plan, {"conversation_cache_sessions_mib": 512,
                                            "conversation_cache_warm_dir": "/nvme", "conversation_cache_warm_mib": 8})
    assert (both.config()["conversation_cache_sessions_mib"], both.config()["conversation_cache_warm_mib"]) == (512, 8)
    assert config_file.with_hand_set(plan, {"conversation_cache_sessions_mib": 0}).config() == plan.config()
    written = {k: v for k, v in plan.config().items() if k != "conversation_cache_sessions_mib"}
    assert config_file.left_out_by_an_earlier_setup(config_file.HEADER + "\n", written) == []
    assert config_file.left_out_by_an_earlier_setup(
        config_file.HEADER + "\n", {k: v for k, v in written.items() if k != "backend"}) == ["backend"]


def test_a_sessions_folder_set_by_hand_is_the_one_the_reason_names():
    """Review of 40eb0ef: a re-run keeps a sessions folder set by hand (conversation_cache_sessions_dir, a key the
    plan does not decide), and the budget's reason, the comment above it in the file, still said the saves stay in
    the platform cache folder's 'sessions'."""
    s = situation("workstation", "8B")
    plan = make_plan(s, default_answers(s))
    previous = {"conversation_cache_sessions_dir": "/mnt/big/strata-sessions"}
    kept = config_file.with_hand_set(plan, previous)
    assert config_file.carried_over(kept, previous) == previous
    why = kept.reason("conversation_cache_sessions_mib")
    assert kept.config() == plan.config()
    assert "stay in /mnt/big/strata-sessions (set by hand) until deleted" in why, why
    assert "platform cache folder" not in why, why
    # with the budget set by hand too, that is what the reason says (as before)
    both = config_file.with_hand_set(plan, {**previous, "conversation_cache_sessions_mib": 512})
    assert both.config()["conversation_cache_sessions_mib"] == 512
    assert "set by hand" in both.reason("conversation_cache_sessions_mib")
