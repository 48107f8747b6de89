"""Segment tier and system-prompt cache: anchors at message openers, hash-chain keys shared across
conversations, files shared on disk, and restores from them equal to a fresh read."""

from __future__ import annotations

import os

from strata.server.cache.segments import anchor_positions, chain_keys, plan_segment_saves

from tests.cache.conftest import history, park_history

from .test_park_restore import continue_from_cache, fresh_continuation


def test_anchors_at_the_opener_not_the_role_token():
    im_start, role = 1, 77
    toks = [im_start, role, 5, 6, im_start, role, 9, im_start, role]
    assert anchor_positions(toks, [im_start]) == [4, 7]  # position 0 is not a boundary
    assert anchor_positions(toks, []) == []


def test_any_of_several_openers_anchors():
    """A vocabulary with several openers (GLM's <|system|> / <|user|> / <|assistant|> / <|observation|>,
    Mistral's [INST] and [TOOL_RESULTS]) anchors at each; they were once read as one token sequence,
    which never occurs, so such a model had no anchors at all."""
    user, assistant, observation = 11, 12, 13
    toks = [900, 901, user, 5, 6, assistant, 7, observation, 8, user, 9, assistant]
    assert anchor_positions(toks, [user, assistant, observation]) == [5, 7, 9, 11]
    assert anchor_positions(toks, [assistant]) == [5, 11]


def test_no_anchor_before_the_first_message_is_read():
    """A BOS and the first message's opener make no anchor (the first anchor is the system-prompt cache's
    prefix): Llama 3's <|begin_of_text|><|start_header_id|>, Mistral's <s>[INST]."""
    bos, header = 128000, 128006
    llama3 = [bos, header, 9125, 128007, 271, 5, 6, 128009, header, 882, 128007, 7]
    assert anchor_positions(llama3, [header]) == [8]
    assert anchor_positions([1, 3, 9, 9, 4, 3, 9], [3]) == [5]


def test_chain_keys_are_shared_until_the_histories_differ():
    a = [1, 5, 6, 4, 1, 10, 11, 1, 20]
    b = [1, 5, 6, 4, 1, 10, 11, 1, 21, 1, 3]
    c = [1, 5, 7, 4, 1, 10, 11]
    ka = chain_keys("m", a, anchor_positions(a, [1]))
    kb = chain_keys("m", b, anchor_positions(b, [1]))
    kc = chain_keys("m", c, anchor_positions(c, [1]))
    assert ka[:2] == kb[:2] and kc[0] != ka[0]
    assert chain_keys("other-model", a, [3])[0] != ka[0]


def test_plan_writes_missing_anchors_shallowest_first():
    p = plan_segment_saves([5, 10, 15, 20], ["a", "b", "c", "d"], {"a"}, max_new=2)
    assert p.saves == ((10, "b"), (15, "c"))
    assert plan_segment_saves([5, 10], ["a", "b"], {"a", "b"}).saves == ()


def test_system_prompt_shared_by_conversations(make_cache, folders):
    cache = make_cache(conversation_cache_mib=0, conversation_cache_system_prompt_mib=10)
    park_history(cache, history(1))
    park_history(cache, history(2))
    cache.flush()  # prefixes are written by the writer thread
    sp = cache.system_prompts.level
    assert len(sp.entries) == 1  # one file for the shared system prompt
    assert len(os.listdir(folders["system"])) == 2  # image + sidecar
    prompt = history(3) + [1, 4]  # a new conversation, same system prompt
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert hit.level == "system_prompt" and res.n_tokens == 5 and read == len(prompt) - 5
    assert out == fresh_continuation(prompt)
    assert cache.hits["system_prompt"] == 1 and cache.admissions[("parking", "system_prompt_hit")] == 1
    assert "system-prompt cache" in cache.describe() and str(folders["system"]) in cache.describe()
    assert cache.snapshot_for_monitor()["system_prompt_cache"]["entries"] == 1


def test_segment_restores_after_the_conversation_is_gone(make_cache, clock, folders):
    cache = make_cache(conversation_cache_mib=1, conversation_cache_segment_mib=20)
    h = history(4, 50)  # anchors at 5, 14, 23, 32, 41
    for n in (14, 23, 32, 41, 50):  # the conversation parked turn after turn as it grows
        clock.t += 1
        park_history(cache, h[:n])
    cache.flush()
    seg = cache.segments.level
    assert sorted(e.n_tokens for e in seg.entries.values()) == [5, 14, 23, 32, 41]
    # the monitor feed shows the tier (it was in the INFO line only: a new-user trial)
    tier = cache.snapshot_for_monitor()["segment_tier"]
    assert tier["entries"] == 5 and tier["budget_mib"] == 20 and tier["folder"] == str(folders["segments"])
    assert tier["used_mib"] == round(seg.used_bytes / (1 << 20), 1)
    assert cache.superseded + cache.cascade.evictions["ram"] == 4 and len(cache.ram.entries) == 1
    cache.cascade.discard(next(iter(cache.ram.entries)), "test: compaction")
    prompt = h[:41] + [1, 999, 998]  # the last message edited: the anchor before it still matches
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert hit.level == "segment" and res.n_tokens == 41 and read == 3
    assert out == fresh_continuation(prompt)
    # a second conversation sharing everything up to anchor 32 reuses that file, writes no duplicate
    clock.t += 1
    park_history(cache, h[:32] + [1, 70, 71, 72, 73, 74, 75, 76, 77, 1, 80])
    cache.flush()
    keys_32 = [e for e in seg.entries.values() if e.n_tokens == 32]
    assert len(keys_32) == 1


def test_segment_budget_deletes_oldest(make_cache, clock):
    cache = make_cache(conversation_cache_mib=0, conversation_cache_segment_mib=1)
    for s in range(3):
        clock.t += 1
        park_history(cache, history(10 + s, 30))  # anchors 5, 14, 23: saves 23 and 14 (~600 KiB)
    cache.flush()
    seg = cache.segments.level
    assert seg.used_bytes <= 1 << 20
    assert cache.segments.cascade.evictions["segment"] >= 1
