"""A sibling branch in a slot that another branch of its conversation went on from is superseded, and its tail is
parked when a new conversation takes that slot: the branch's next turn restores all of it.

Since 44c431d every idle context of a conversation whose prompt holds at least STRATA_SLOT_OWN_MIN_SHARE of it is
superseded (worth nothing to the slot policy), not only a copy parked from main. Two branches under one
conversation key (its first 256 tokens here; a session forked, an agent's rewind beside the old line) share half
of a slot's history: the one that goes on marks the other's slot blank though the other's tail is held nowhere else.
What keeps that tail is the park to the conversation cache when the slot is overwritten (not `covered`: the prompt
that superseded it holds only its start); this pins it for a branch in a slot, where the older test
(test_superseded_copy_tail_parked.py) has a copy parked from main.

Live tiny server on loopback: three slots in one group, a RAM conversation cache, token-id prompts."""

from __future__ import annotations

from tests.server.live import LiveServer, run_together
from tests.server.test_copy_main_took_over_superseded import ANSWER, ASK, complete, seq


def test_a_superseded_sibling_branchs_tail_is_parked_and_restored(tiny_model_factory):
    model = tiny_model_factory(ctx_len=8192, n_vocab=512, seed=3, script=(ASK, *ANSWER))
    with LiveServer(model=str(model), ctx=8192, batch=3, batch_groups=1, slot_ctx=8192, threads=1,
                    conversation_cache_mib=256) as server:
        url, table = server.url, server.state.scheduler.table
        start = seq(13, 2000)                          # the branches' shared start: one conversation key
        a = start + seq(41, 800) + [ASK]
        b = start + seq(43, 800) + [ASK]
        x = seq(19, 600) + [ASK]
        run_together(server, [lambda: complete(url, a), lambda: complete(url, b), lambda: complete(url, x)])
        slot_b = next(c for c in table.slots if c.tokens[:len(b)] == b)
        b_history = list(slot_b.tokens)

        complete(url, a + list(ANSWER) + [80, 81, ASK])    # alone: main, copied from a's slot
        assert slot_b.superseded and not slot_b.covered     # 2,000 of its 2,803 held by a's prompt: its tail is not

        # two new conversations take the blank slots (a's copy, held whole by main, and b's)
        run_together(server, [lambda: complete(url, seq(29, 300) + [ASK]),
                              lambda: complete(url, seq(31, 300) + [ASK])])
        assert not any(c.tokens[:len(b_history)] == b_history for c in table.contexts), "b's slot was not taken"

        out = complete(url, b_history + [82, ASK])          # b's next turn: its tail came back from the cache
        assert out["timings"]["cache_n"] >= len(b_history) - 1, out["timings"]
