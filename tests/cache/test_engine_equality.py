"""Output equality on the real engine: a conversation continued after its state came back from any
level (RAM, warm, cold, segment, system-prompt, ladder, session) gives the same greedy tokens and
bit-identical logits as a fresh read of the whole prompt; conversations evicting each other never
restore another's state. The tiny generated model (llama, and deepseek2 whose cache images hold K rows
only), and the default model when installed."""

from __future__ import annotations

import numpy as np
import pytest
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory

engine_mod = pytest.importorskip("strata.engine")
Engine = getattr(engine_mod, "Engine", None)
if Engine is None:
    pytest.skip("strata.engine.Engine not built", allow_module_level=True)


def greedy(eng, ctx, prompt, n_new):
    """Read what ctx lacks of `prompt`, then n_new greedy tokens. Returns (tokens, first logits)."""
    held = eng.context_tokens(ctx)
    assert prompt[: len(held)] == held, "context holds another conversation's history"
    eng.prefill(ctx, prompt[len(held):])
    logits = eng.logits(ctx).copy()
    out = [int(np.argmax(logits))]
    for _ in range(n_new - 1):
        out.append(int(np.argmax(eng.decode([ctx], [out[-1]])[0])))
    return out, logits


def fresh(eng, prompt, n_new=6, ctx=0):
    eng.truncate(ctx, 0)
    return greedy(eng, ctx, prompt, n_new)


def chat_tokens(eng, seed, n_turns=3, words=12, system="You are a terse assistant."):
    rng = np.random.default_rng(seed)
    vocab = ["cat", "dog", "tree", "river", "stone", "cloud", "seven", "blue", "run", "sing", "old", "new"]
    msgs = [{"role": "system", "content": system}]
    for t in range(n_turns):
        role = "user" if t % 2 == 0 else "assistant"
        msgs.append({"role": role, "content": " ".join(rng.choice(vocab, words))})
    return eng.tokenize(eng.apply_chat_template(msgs, add_generation_prompt=False))


class Clock:
    t = 1000.0

    def __call__(self):
        return self.t


# the tiny llama, and a tiny deepseek2 whose KV keeps no V (its latent row read as both: kv_read / snapshots
# carry K rows only) in the tiled layout (a row of 48 + 16)
TINY_MODELS = {"llama": {}, "deepseek2": {"arch": "deepseek2", "n_expert": 4, "n_rot": 16, "mla": {"kv_lora_rank": 48}}}


@pytest.fixture(scope="module", params=list(TINY_MODELS))
def tiny_engine(request, tiny_model_factory):
    return Engine(tiny_model_factory(**TINY_MODELS[request.param]), n_ctx=2048, n_slots=3, n_threads=1)


def make(eng, tmp_path, clock=None, environ=None, **opts):
    values = {"conversation_cache_warm_dir": str(tmp_path / "warm"),
              "conversation_cache_cold_dir": str(tmp_path / "cold"),
              "conversation_cache_segment_dir": str(tmp_path / "seg"),
              "conversation_cache_system_prompt_dir": str(tmp_path / "sys"),
              "conversation_cache_sessions_dir": str(tmp_path / "sessions"), **opts}
    return ConversationCache(CacheConfig.from_values(values, environ or {}), eng, memory=FixedMemory(100_000),
                             clock=clock or Clock(), piece_bytes=64 << 10)


def park(cache, eng, tokens, ctx=1):
    eng.truncate(ctx, 0)
    eng.prefill(ctx, tokens)
    return cache.park(ctx, "overwrite")


def check_continuation(cache, eng, prompt, level, ctx=2, min_tokens=1):
    eng.truncate(ctx, 0)
    hit = cache.lookup(prompt)
    assert hit is not None and hit.level == level, hit
    res = cache.restore(hit, ctx)
    assert res.n_tokens >= min_tokens, res
    assert eng.context_tokens(ctx) == prompt[: res.n_tokens]
    got = greedy(eng, ctx, prompt, 6)
    want = fresh(eng, prompt)
    assert got[0] == want[0]
    assert np.array_equal(got[1], want[1])  # bit for bit
    return res


def test_ram_warm_cold_each_equal_a_fresh_read(tiny_engine, tmp_path):
    eng, clock = tiny_engine, Clock()
    cache = make(eng, tmp_path, clock, conversation_cache_mib=10, conversation_cache_warm_mib=10,
                 conversation_cache_cold_mib=10, conversation_cache_ram_max_age_s=5,
                 conversation_cache_warm_max_age_s=5)
    h = chat_tokens(eng, 1)
    assert park(cache, eng, h).destination == "ram"
    follow = h + eng.tokenize("<|im_start|>user\nand then?<|im_end|>\n<|im_start|>assistant\n")
    check_continuation(cache, eng, follow, "ram", min_tokens=len(h))
    for level in ("warm", "cold"):
        clock.t += 6
        cache.enforce()
        check_continuation(cache, eng, follow, level, min_tokens=len(h))
    assert cache.hits["ram"] == cache.hits["warm"] == cache.hits["cold"] == 1
    cache.close(persist=False)
    # and after a restart
    again = make(eng, tmp_path, clock, conversation_cache_mib=10, conversation_cache_warm_mib=10,
                 conversation_cache_cold_mib=10)
    check_continuation(again, eng, follow, "cold", min_tokens=len(h))
    again.close(persist=False)


def test_park_disk_then_segment(tiny_engine, tmp_path):
    eng = tiny_engine
    cache = make(eng, tmp_path, conversation_cache_mib=0, conversation_cache_cold_mib=10,
                 conversation_cache_park="disk", conversation_cache_segment_mib=10)
    h = chat_tokens(eng, 2, n_turns=4)
    opener = eng.message_opener_ids[0]
    anchors = [a for a in range(1, len(h)) if h[a] == opener]
    for n in anchors[1:] + [len(h)]:  # parked turn after turn as it grows: every anchor gets its segment
        assert park(cache, eng, h[:n]).destination == "disk"
    cache.flush()
    assert len(cache.segments.level.entries) == len(anchors)
    check_continuation(cache, eng, h + [1], "cold", min_tokens=len(h))
    # drop the conversation entry: its deepest anchor comes back from the segment tier
    for lvl in cache.cascade.levels:
        for k in list(lvl.entries):
            cache.cascade.discard(k, "test")
    last_anchor = anchors[-1]
    check_continuation(cache, eng, h[:last_anchor] + [opener, 5, 6], "segment", min_tokens=last_anchor)
    cache.close(persist=False)


def test_system_prompt_cache(tiny_engine, tmp_path):
    eng = tiny_engine
    cache = make(eng, tmp_path, conversation_cache_mib=0, conversation_cache_system_prompt_mib=10)
    park(cache, eng, chat_tokens(eng, 2, n_turns=4))  # discarded (no level), its system prompt kept
    cache.flush()  # the prefix is written by the writer thread
    other = chat_tokens(eng, 3, n_turns=2)  # a new conversation, the same system prompt
    res = check_continuation(cache, eng, other, "system_prompt")
    assert other[res.n_tokens] == eng.message_opener_ids[0]
    cache.close(persist=False)


def test_ladder_restores_the_valid_prefix(tiny_engine, tmp_path):
    eng = tiny_engine
    cache = make(eng, tmp_path, conversation_cache_mib=0, conversation_cache_cold_mib=10)
    h = chat_tokens(eng, 4, n_turns=8, words=24)
    assert len(h) > 520 and len(h) % 256, len(h)  # more than two chunks of 256 tokens, the last partial
    park(cache, eng, h)
    cache.flush()
    (entry,) = cache.cascade.levels[0].entries.values()
    cache.close(persist=False)   # what a later server finds: the entry as this one left it
    with open(entry.image_path, "r+b") as f:  # a byte in the last chunk
        f.seek(entry.image_bytes - 10)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x5A]))
    again = make(eng, tmp_path, conversation_cache_mib=0, conversation_cache_cold_mib=10)
    res = check_continuation(again, eng, h + [1], "cold")
    assert res.ladder and res.n_tokens == len(h) // 256 * 256 and again.damaged == 1
    again.close(persist=False)


def test_session_restore(tiny_engine, tmp_path):
    eng = tiny_engine
    cache = make(eng, tmp_path)
    h = chat_tokens(eng, 5)
    eng.truncate(1, 0)
    eng.prefill(1, h)
    cache.save_session("s1", 1)
    eng.truncate(1, 0)
    assert cache.restore_session("s1", 2).n_tokens == len(h)
    got = greedy(eng, 2, h + [1], 6)
    want = fresh(eng, h + [1])
    assert got[0] == want[0] and np.array_equal(got[1], want[1])
    cache.close(persist=False)


def test_conversations_evicting_each_other(tiny_engine, tmp_path):
    eng, clock = tiny_engine, Clock()
    # RAM holds about two conversations; the rest go to cold and back
    cache = make(eng, tmp_path, clock, conversation_cache_mib=1, conversation_cache_cold_mib=20)
    convs = {i: chat_tokens(eng, 100 + i, n_turns=3, words=80) for i in range(6)}
    for turn in range(3):
        for i, slot in zip(range(6), [1, 2, 3, 1, 2, 3], strict=True):
            prompt = convs[i] + eng.tokenize(f"<|im_start|>user\nturn {turn}<|im_end|>\n")
            eng.truncate(slot, 0)
            hit = cache.lookup(prompt)
            if hit:
                res = cache.restore(hit, slot)
                assert eng.context_tokens(slot) == prompt[: res.n_tokens]
            out, logits = greedy(eng, slot, prompt, 3)
            want_out, want_logits = fresh(eng, prompt, 3)
            assert out == want_out and np.array_equal(logits, want_logits)
            convs[i] = prompt + out
            clock.t += 1
            cache.park(slot, "overwrite")
    cache.flush()
    assert cache.cascade.degradations["ram"] > 0 and cache.hits["cold"] > 0 and cache.hits["ram"] > 0
    cache.close(persist=False)


def test_default_model_cold_restore(default_model_path, tmp_path):
    eng = Engine(default_model_path, n_ctx=1024, n_slots=2)
    cache = make(eng, tmp_path, conversation_cache_mib=0, conversation_cache_cold_mib=100)
    h = chat_tokens(eng, 7, n_turns=2, words=20)
    park(cache, eng, h)
    cache.flush()
    follow = h + eng.tokenize("<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n")
    check_continuation(cache, eng, follow, "cold", min_tokens=len(h))
    cache.close(persist=False)


def test_a_shorter_prefix_reads_only_the_chunks_it_needs(tiny_engine, tmp_path):
    eng = tiny_engine
    cache = make(eng, tmp_path, conversation_cache_mib=0, conversation_cache_cold_mib=10)
    h = chat_tokens(eng, 5, n_turns=16, words=24)
    assert len(h) > 1100, len(h)  # 5+ checksum pieces of 64 KiB; the prefix needs the first 3
    park(cache, eng, h)
    cache.flush()
    (entry,) = cache.cascade.levels[0].entries.values()
    with open(entry.image_path, "r+b") as f:  # damage the last chunk: a 300-token prefix never reads it
        f.seek(entry.image_bytes - 10)
        f.write(b"\xff\xfe\xfd")
    branch = h[:300] + eng.tokenize("<|im_start|>user\nsomething else<|im_end|>\n")
    res = check_continuation(cache, eng, branch, "cold", min_tokens=300)
    assert res.n_tokens == 300 and not res.ladder and cache.damaged == 0
    cache.close(persist=False)


@pytest.mark.parametrize("level", ["ram", "cold"])
def test_history_longer_than_the_slot_restores_the_whole_chunk_prefix_that_fits(tiny_model_factory, tmp_path,
                                                                                   level):
    eng = Engine(tiny_model_factory(), n_ctx=2048, n_slots=1, slot_ctx=300, n_threads=1)
    chunk = engine_mod.snapshot.chunk_tokens_for(eng.bytes_per_token)
    assert eng.context_capacity(0) == 2048 and eng.context_capacity(1) == 300 and chunk == 256
    opts = {"conversation_cache_mib": 10} if level == "ram" else {"conversation_cache_mib": 0,
                                                                   "conversation_cache_cold_mib": 10}
    cache = make(eng, tmp_path, **opts)
    h = chat_tokens(eng, 9, n_turns=8, words=24)
    assert len(h) > 520, len(h)
    assert park(cache, eng, h, ctx=0).destination == ("ram" if level == "ram" else "disk")  # parked from main
    cache.flush()
    # a prompt that fits the slot and shares its first 280 tokens with the parked history
    prompt = h[:280] + eng.tokenize("<|im_start|>user\nshort<|im_end|>\n")
    assert len(prompt) + 6 <= 300, len(prompt)
    res = check_continuation(cache, eng, prompt, level, ctx=1)
    assert res.n_tokens == chunk and not res.ladder and cache.damaged == 0, res
    cache.close(persist=False)


def test_slot_smaller_than_one_chunk_is_a_plain_miss(tiny_model_factory, tmp_path):
    eng = Engine(tiny_model_factory(), n_ctx=2048, n_slots=1, slot_ctx=200, n_threads=1)
    cache = make(eng, tmp_path, conversation_cache_mib=0, conversation_cache_cold_mib=10)
    h = chat_tokens(eng, 9, n_turns=8, words=24)
    park(cache, eng, h, ctx=0)
    cache.flush()
    (key,) = cache.cascade.levels[0].entries
    prompt = h[:150] + [1]
    eng.truncate(1, 0)
    res = cache.restore(cache.lookup(prompt), 1)
    assert res.n_tokens == 0 and "less than one snapshot chunk" in res.reason, res
    assert eng.context_tokens(1) == []
    assert cache.damaged == 0 and list(cache.cascade.levels[0].entries) == [key]
    # the entry still serves a context it fits
    eng.truncate(0, 0)
    assert cache.restore(cache.lookup(prompt), 0).n_tokens == 150
    cache.close(persist=False)
