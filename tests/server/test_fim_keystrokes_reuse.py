"""Consecutive keystrokes' code completions reuse what the one before read (a real `strata serve` app, engine and
scheduler on a tiny model with Qwen2.5-Coder's FIM tokens): with --spm-infill a keystroke reads only its newly typed
tokens and [FIM_MID], and after a line is ended the next keystroke reads on from that line. Before, the suffix (first
in that order) lost a token per typed token and the prefix's start moved at every line ended, so each keystroke read
the whole prefix again (fim_beside_agent beside an agent: no completion in 500 ms, 0 of 39 with content).
Asserted on the answers' token counts (timings.cache_n, prompt_n), not on times."""

from __future__ import annotations

import pytest
import requests
from strata.server.fim_prompt import FimRequest, fim_prompt, kept_prefix

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model
from tests.server.live import LiveServer

LINES = [f"    value_{i} = compute(value_{i - 1}, {i})\n" for i in range(1, 260)]   # > 1,536 tokens
SUFFIX = "".join(f"    check(value_{i})\n" for i in range(80))                    # > 510 tokens
TARGET = "    result = place(job, now=clock(), reason=typed)"


@pytest.fixture(scope="module", params=[False, True], ids=["psm", "spm"])
def server(request, tiny_model_factory, tmp_path_factory):
    plain = tiny_model_factory(ctx_len=8192, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    model = str(fim_model(plain, tmp_path_factory.mktemp("fim_keys") / "coder.gguf"))
    with LiveServer(model=model, ctx=8192, batch=4, slot_ctx=8192, threads=1, conversation_cache_mib=0,
                    spm_infill=request.param) as s:
        yield s


def infill(server: LiveServer, prefix: str, typed: str) -> dict:
    body = {"input_prefix": prefix, "input_suffix": SUFFIX, "prompt": typed, "n_predict": 1, "temperature": 0,
            "cache_prompt": True}
    r = requests.post(server.url + "/infill", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def laid(server: LiveServer, prefix: str, typed: str) -> list[int]:
    return fim_prompt(server.state.engine.tokenizer, FimRequest(prefix=prefix, suffix=SUFFIX, prompt=typed,
                                                                n_ctx=8192, n_predict=1,
                                                                spm=server.state.config.spm_infill)).tokens


def typed_tokens(server: LiveServer, text: str) -> int:
    return len(server.state.engine.tokenizer.encode(text, special=True, add_bos=False))


def test_keystrokes_on_a_line_read_what_follows_the_cursor_at_most(server):
    """Each keystroke after the first reads its typed tokens and what follows them in the layout: with --spm-infill
    only [FIM_MID] (before: the whole prefix, ~1,540 tokens); in the default order the suffix as well (llama.cpp's
    order: the suffix follows the typed part)."""
    prefix = "".join(LINES)
    first = infill(server, prefix, TARGET[:6])
    assert first["timings"]["prompt_n"] == first["tokens_evaluated"] > 1500     # read whole once
    spm = server.state.config.spm_infill
    for k in range(10, len(TARGET), 8):
        a = infill(server, prefix, TARGET[:k])
        tokens = laid(server, prefix, TARGET[:k])
        assert a["tokens_evaluated"] == len(tokens)
        read = a["timings"]["prompt_n"]
        after_cursor = len(tokens) - tokens.index(server.state.engine.tokenizer.fim.suf) if not spm else 1
        # the last typed tokens (the tokenizer may merge the new characters with the ones before) and what follows
        assert read <= typed_tokens(server, TARGET[k - 8:k]) + 2 + after_cursor, (k, read)


def test_a_line_ended_keeps_the_prefix_so_the_next_keystroke_reads_on_from_it(server):
    """The line typed moves to the prefix's end (Enter): the prefix, over its 1,536 tokens, keeps its first token, so
    the next keystroke reuses everything before that line (before: cut one token at a time, its start moved and
    nothing after [FIM_PRE] was reused: ~1,540 tokens read again)."""
    tok = server.state.engine.tokenizer
    lines = [line.replace("value", "other") for line in LINES]     # no context holds the first test's prompts

    def first_kept(text: str) -> int:
        n = len(tok.encode(text, special=False, add_bos=False))
        return n - kept_prefix(n)

    # the prefix, over 1,536 tokens, grows within one PREFIX_CUT_STEP as the user ends a line (a line ended across a
    # step's end moves the start once: read all again, as every line ended did before)
    while first_kept("".join(lines[:-1])) != first_kept("".join(lines)):
        lines.pop(0)
    prefix = "".join(lines[:-1])
    infill(server, prefix, lines[-1][:-1])
    a = infill(server, prefix + lines[-1], "    ")
    tokens = laid(server, prefix + lines[-1], "    ")
    n_line = len(tok.encode(lines[-1] + "    ", special=False, add_bos=False))
    assert len(tok.encode(prefix, special=False, add_bos=False)) > 1536
    after = len(tokens) - tokens.index(tok.fim.suf) if not server.state.config.spm_infill else 1
    # read: the ended line, the typed part and what follows the cursor (in the default order, the suffix)
    assert a["timings"]["prompt_n"] <= n_line + 2 + after, a["timings"]
