"""A request that sends a context's history back as the same text in other tokens than the history holds (a word
split otherwise than the tokenizer does; the model's own answer sent back and tokenized canonically) reuses the
history's own tokens for that text and reads only what is new (byte_align.py). Before, everything from the
first differing token on was read again. The default model, live servers on loopback."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer
from tests.server.test_metrics import scrape

TEXT = "The quick brown fox jumps over the lazy dog near the riverbank, then rests."
MORE = " Afterwards it walks home slowly."
OTHER_TEXT = "A small green frog watched quietly from beneath the leaves, then hopped away."


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


def split_otherwise(tok, text: str = TEXT) -> tuple[list[int], list[int]]:
    """(canonical, other): `text` as the tokenizer writes it, and the same bytes with every word of 5+ letters split
    in two tokens at its third letter."""
    canonical = tok.encode(text, add_bos=False)
    other: list[int] = []
    for t in canonical:
        piece = tok.token_bytes(t).decode()
        word = piece.strip()
        if len(word) >= 5 and word.isalpha():
            cut = piece.index(word) + 3
            other += tok.encode(piece[:cut], add_bos=False) + tok.encode(piece[cut:], add_bos=False)
        else:
            other.append(t)
    assert tok.decode(other) == text and other != canonical
    return canonical, other


def test_a_history_split_otherwise_is_reused_whole_and_answers_as_a_fresh_read(server, fresh):
    tok = server.state.engine.tokenizer
    canonical, other = split_otherwise(tok)
    more = tok.encode(MORE, add_bos=False)
    assert tok.encode(TEXT + MORE, add_bos=False) == canonical + more     # the two parts meet at a token boundary
    first = complete(server.url, other, 1)          # the context holds `other` (the one token sampled is not fed)
    assert first["timings"]["cache_n"] == 0
    before = scrape(server.url)
    out = complete(server.url, TEXT + MORE, 8)      # the same bytes as text, tokenized canonically, and more
    after = scrape(server.url)
    common = next(i for i, (a, b) in enumerate(zip(canonical, other, strict=False)) if a != b)
    # /metrics: one prompt aligned, holding the history's tokens past the first split
    assert after["strata_prompts_aligned_total"] - before["strata_prompts_aligned_total"] == 1
    assert (after["strata_prompt_tokens_aligned_total"] - before["strata_prompt_tokens_aligned_total"]
            == len(other) - common)
    # every token of the history reused, only MORE read; before, the read began at the first word split otherwise
    assert out["timings"]["cache_n"] == len(other), out["timings"]
    assert out["timings"]["prompt_n"] == len(more), out["timings"]
    assert out["usage"]["prompt_tokens"] == len(other) + len(more)
    # the model read `other` + MORE: its answer is a fresh read's of those tokens (it may differ from the
    # canonical tokens' answer: the model sees other tokens)
    again = complete(fresh.url, other + more, 8)
    assert again["timings"]["cache_n"] == 0
    assert out["choices"][0]["text"] == again["choices"][0]["text"]


def test_a_prompt_sent_as_token_ids_is_read_as_sent(server):
    """A client that sends token ids asked for exactly those tokens (a given tokenization scored): a context holding
    the same bytes in other tokens gives only the tokens the two share (Job.exact_tokens), on /v1/completions and
    on llama.cpp's /completion; before, the prompt became the history's tokens (cache_n = len(other))."""
    tok = server.state.engine.tokenizer
    more = tok.encode(MORE, add_bos=False)
    canonical, other = split_otherwise(tok)
    shared = next(i for i, (a, b) in enumerate(zip(canonical, other, strict=False)) if a != b)
    complete(server.url, other, 1)                  # a context holds `other`
    out = complete(server.url, canonical + more, 1)
    assert out["timings"]["cache_n"] == shared, out["timings"]
    assert out["usage"]["prompt_tokens"] == len(canonical) + len(more)
    canonical, other = split_otherwise(tok, OTHER_TEXT)     # a text no context holds yet, for /completion
    shared = next(i for i, (a, b) in enumerate(zip(canonical, other, strict=False)) if a != b)
    complete(server.url, other, 1)
    r = httpx.post(server.url + "/completion", json={"prompt": canonical + more, "n_predict": 1, "temperature": 0},
                   timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["timings"]["cache_n"] == shared, r.json()["timings"]
    assert r.json()["tokens_evaluated"] == len(canonical) + len(more)


def test_a_chat_answer_in_other_tokens_sent_back_is_reused_whole(server):
    """A chat turn whose last answer the context holds in other tokens than the tokenizer's (the model's own
    split, made here by a /v1/completions request on the rendered prompt) and that the next turn sends back as
    text: the template renders it, <|im_end|> (a special) after it, the tokenizer splits it canonically; the turn
    reuses the whole history and reads only what comes after the answer."""
    tok = server.state.engine.tokenizer
    messages = [{"role": "system", "content": "You are a storyteller."}, {"role": "user", "content": "Tell me a line."}]
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1,
                                                              "temperature": 0}, timeout=300)
    assert r.status_code == 200, r.text
    n_prompt = r.json()["usage"]["prompt_tokens"]
    rendered = next(list(c.tokens) for c in server.state.scheduler.table.contexts if len(c.tokens) == n_prompt)
    _, other = split_otherwise(tok)
    complete(server.url, rendered + other, 1)       # the context holds the prompt and the answer split otherwise
    messages += [{"role": "assistant", "content": TEXT}, {"role": "user", "content": "Thanks. Another one."}]
    r = httpx.post(server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1,
                                                              "temperature": 0}, timeout=300)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == len(rendered) + len(other), usage
    end = tok.encode("<|im_end|>\n<|im_start|>user\nThanks. Another one.<|im_end|>\n<|im_start|>assistant\n",
                     add_bos=False)
    assert usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"] == len(end), usage
