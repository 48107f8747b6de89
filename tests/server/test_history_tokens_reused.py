"""A request that sends a context's history back as the same text in other tokens than the history holds (a word
split otherwise than the tokenizer does; the model's own answer sent back and tokenized canonically) reuses the
history's own tokens for that text and reads only what is new (byte_align.py). Before, everything from the
first differing token on was read again. The default model, live servers on loopback."""

from __future__ import annotations

import anthropic
import httpx2 as httpx
import pytest

from tests.server.live import LiveServer
from tests.server.test_call_history_reuse import TOOLS, after_the_calls, held_after

TEXT = "The quick brown fox jumps over the lazy dog near the riverbank, then rests."
MORE = " Afterwards it walks home slowly."


@pytest.fixture(scope="module")
def server(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=2048, batch=2, threads=2, conversation_cache_mib=64) as s:
        yield s


@pytest.fixture(scope="module")
def fresh(default_model_path):
    """A second server that holds nothing: what a fresh read of a token list answers."""
    with LiveServer(model=str(default_model_path), ctx=2048, batch=1, threads=2) as s:
        yield s


def complete(url: str, prompt, max_tokens: int) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                   timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def split_otherwise(tok) -> tuple[list[int], list[int]]:
    """(canonical, other): TEXT as the tokenizer writes it, and the same bytes with every word of 5+ letters split
    in two tokens at its third letter."""
    canonical = tok.encode(TEXT, add_bos=False)
    other: list[int] = []
    for t in canonical:
        piece = tok.token_bytes(t).decode()
        word = piece.strip()
        if len(word) >= 5 and word.isalpha():
            cut = piece.index(word) + 3
            other += tok.encode(piece[:cut], add_bos=False) + tok.encode(piece[cut:], add_bos=False)
        else:
            other.append(t)
    assert tok.decode(other) == TEXT and other != canonical
    return canonical, other


def test_a_history_split_otherwise_is_reused_whole_and_answers_as_a_fresh_read(server, fresh):
    tok = server.state.engine.tokenizer
    canonical, other = split_otherwise(tok)
    more = tok.encode(MORE, add_bos=False)
    assert tok.encode(TEXT + MORE, add_bos=False) == canonical + more     # the two parts meet at a token boundary
    first = complete(server.url, other, 1)          # the context holds `other` (the one token sampled is not fed)
    assert first["timings"]["cache_n"] == 0
    out = complete(server.url, TEXT + MORE, 8)      # the same bytes as text, tokenized canonically, and more
    # every token of the history reused, only MORE read; before, the read began at the first word split otherwise
    assert out["timings"]["cache_n"] == len(other), out["timings"]
    assert out["timings"]["prompt_n"] == len(more), out["timings"]
    assert out["usage"]["prompt_tokens"] == len(other) + len(more)
    # the model read `other` + MORE: its answer is a fresh read's of those tokens (it may differ from the
    # canonical tokens' answer: the model sees other tokens)
    again = complete(fresh.url, other + more, 8)
    assert again["timings"]["cache_n"] == 0
    assert out["choices"][0]["text"] == again["choices"][0]["text"]


def test_the_models_own_calls_sent_back_are_reused_whole(server):
    """An agent's turns (the anthropic SDK, tool calls the model writes at temperature 1 with a seed): the next
    turn, which sends the call back rendered as text, reuses every token the context holds of it whatever split
    the model chose (a path's letters, ' ' + '">'); some of the calls are not in the tokenizer's split, else this
    shows nothing. Before, such a turn reused only up to the first token the model split otherwise (the test
    test_call_history_reuse counts the calls that were whole)."""
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    tok = server.state.engine.tokenizer
    otherwise = 0
    for seed in range(6):
        ask = [{"role": "user", "content": f"List the files in the repository {seed}, then read README.md."}]
        with client.messages.stream(model="m", system="You are a coding agent.", messages=ask, tools=TOOLS,
                                    max_tokens=200, tool_choice={"type": "any"}, extra_body={"seed": 10 * seed}) as s:
            first = s.get_final_message()
        assert first.stop_reason == "tool_use", seed
        held, prompt = held_after(server, first)
        answer = held[prompt:]
        otherwise += tok.encode(tok.decode(answer), add_bos=False)[:len(answer)] != answer
        second = after_the_calls(client, ask, first, TOOLS, "a.py", seed)
        assert second.usage.cache_read_input_tokens == len(held), (seed, second.usage, len(held), tok.decode(answer))
    assert otherwise >= 1
