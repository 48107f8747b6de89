"""A conversation's next turn that sends the last answer back as the same text in other tokens than the model
wrote (its first characters joined the prompt's last token: `assistant\\n` + `\\n<read_file>` reads `\\n\\n`;
or the model split a word otherwise than the tokenizer does) goes on in its context without parking the
history. Before, every such turn copied the whole history into a slot (or handed it to the conversation
cache) to keep an answer's tokens that no request sends again: a Cline trial (SmolLM2, --batch 4) copied
14-25K tokens into a slot on 9 of 14 turns and filled all four slots with stale copies of one conversation.
Since session 35 the turn's prompt, sent as text, takes the history's own tokens for the answer's bytes
(byte_align.py) and reads only what is new (a prompt sent as token ids is read as sent: Job.exact_tokens).
A turn whose history holds another answer than the one sent back still parks it.

Live tiny server on loopback; the scripted model answers a word in two tokens that the tokenizer writes as
one."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.fixtures.bpe_vocab import build_vocab
from tests.server.live import LiveServer

N_VOCAB = 512
ASK = 30
BASE = [(i * 7) % 400 + 50 for i in range(1500)] + [ASK]


def text_stable(engine, tokens: list[int]) -> list[int]:
    """`tokens` as the tokenizer writes their text (a prompt sent as that text reads these tokens)."""
    for _ in range(5):
        again = list(engine.tokenize(engine.tokenizer.decode(tokens), special=True))
        if again == tokens:
            return tokens
        tokens = again
    raise AssertionError("the tokenizer does not settle on the text's tokens")


def split_answer(tokenizer) -> tuple[list[int], list[int]]:
    """(answer, canonical): three tokens a b c the model writes, and the tokenizer's m c for their text, where
    m is the merge of a and b (of the vocabulary's merges, the first that reads so)."""
    vocab = build_vocab(N_VOCAB)
    index = {t: i for i, t in enumerate(vocab.tokens)}
    for merge in vocab.merges:
        left, right = merge.split(" ")
        a, b, m = index[left], index[right], index[left + right]
        for c in range(40, 200):
            if len({a, b, c, m, ASK}) == 5 and tokenizer.encode(tokenizer.decode([a, b, c]), special=False) == [m, c]:
                return [a, b, c], [m, c]
    raise AssertionError("no merge of two tokens that the tokenizer reads back as one")


@pytest.fixture(scope="module")
def setup(tiny_model_factory):
    from strata.engine import Engine

    plain = tiny_model_factory(ctx_len=4096, n_vocab=N_VOCAB, seed=3)
    engine = Engine(str(plain), n_ctx=64, n_threads=1)
    answer, canonical = split_answer(engine.tokenizer)
    base = text_stable(engine, BASE)
    assert base[-1] == ASK
    model = tiny_model_factory(ctx_len=4096, n_vocab=N_VOCAB, seed=3, script=(ASK, *answer))
    s = LiveServer(model=str(model), ctx=4096, batch=4, slot_ctx=4096, threads=1, conversation_cache_mib=64)
    s.start()
    yield s, (answer, canonical), base
    s.stop()


def complete(url: str, prompt: list[int] | str) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 3, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def parks(url: str) -> dict[str, float]:
    """strata_parks_total by kind: into a slot, skipped, handed to the conversation cache."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
            if line.startswith("strata_parks_total{")}


def test_the_answer_sent_back_in_other_tokens_is_not_parked(setup):
    server, (answer, canonical), base = setup
    url = server.url
    complete(url, base)
    held = list(server.state.scheduler.table.main.tokens)
    assert held == base + answer[:2], held[len(base):]     # a b fed; c, the last, sampled only
    before = parks(url)
    # the next turn, as text: the answer comes back as the tokenizer writes it (m c), then the new message
    tok = server.state.engine.tokenizer
    text = tok.decode(base + answer + [(i * 11) % 400 + 50 for i in range(200)] + [ASK])
    turn = list(server.state.engine.tokenize(text, special=True))
    assert turn[:len(base) + 2] == base + canonical and turn[-1] == ASK
    out = complete(url, text)
    # the prompt took the history's own tokens for the answer's bytes (byte_align.py): all of it is reused, and
    # only c (sampled, never fed), the new message and ASK are read; before, the answer's a b were read again as m
    assert out["timings"]["cache_n"] == len(base) + 2, out["timings"]
    assert out["timings"]["prompt_n"] == len(turn) - len(base) - 1, out["timings"]
    assert server.state.scheduler.table.main.tokens[:len(base) + 3] == base + answer
    slots = httpx.get(url + "/v1/slots", timeout=30).json()
    assert [d for d in slots["decisions"] if d["park"] or d["park_skip"]] == [], slots["decisions"]
    assert [s["tokens"] for s in slots["slots"] if s["id"] != "main"] == [0, 0, 0, 0], slots["slots"]
    assert parks(url) == before, (before, parks(url))       # nothing copied into a slot nor to the cache


def test_a_history_holding_another_answer_is_still_parked(setup):
    server, (answer, canonical), _ = setup
    url = server.url
    base = [(i * 13) % 400 + 50 for i in range(1500)] + [ASK]
    complete(url, base)
    other = next(t for t in range(40, 400) if t not in (*answer, *canonical, ASK))
    complete(url, base + [other] + [(i * 11) % 400 + 50 for i in range(200)] + [ASK])   # the client changed it
    slots = httpx.get(url + "/v1/slots", timeout=30).json()
    last = max(d["request"] for d in slots["decisions"])
    parked = [d for d in slots["decisions"] if d["park"] and d["request"] == last]
    assert len(parked) == 1 and parked[0]["reason"] in ("blank", "own_copy"), slots["decisions"]
    into = next(s for s in slots["slots"] if s["id"] == parked[0]["slot"])
    assert into["tokens"] > len(base), into       # the history with its answer, in a slot
