"""A conversation whose history a context held in other tokens than the tokenizer's (the model's own answer split
otherwise, byte-aligned on the next turn: byte_align.py) and that was then parked in the conversation cache: its
next turn, sent as text and tokenized canonically, is aligned with the cache's entry too and restores the whole
history. Before (session 35's soak), the restore matched only up to the conversation's first split, so every token
after it was read again (codex: 244 of 827). The default model, a live server on loopback."""

from __future__ import annotations

import pytest

from tests.server.live import LiveServer
from tests.server.test_history_tokens_reused import MORE, TEXT, complete, split_otherwise

OTHER_TEXT = "Seven green parrots argued loudly about the best mango tree in the valley."


@pytest.fixture(scope="module")
def server(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=2048, batch=1, threads=2, conversation_cache_mib=64) as s:
        yield s


def test_a_history_split_otherwise_is_restored_whole_from_the_cache(server):
    tok = server.state.engine.tokenizer
    canonical, other = split_otherwise(tok)
    more = tok.encode(MORE, add_bos=False)
    first = complete(server.url, other, 1)           # a context holds `other`
    assert first["timings"]["cache_n"] == 0
    # other conversations take every context: `other` is parked in the conversation cache
    for i in range(len(server.state.scheduler.table.contexts)):
        complete(server.url, f"{i} {OTHER_TEXT}", 1)
    assert not any(list(c.tokens[:len(other)]) == other for c in server.state.scheduler.table.contexts)
    out = complete(server.url, TEXT + MORE, 1)       # the same bytes as text, tokenized canonically, and more
    common = next(i for i, (a, b) in enumerate(zip(canonical, other, strict=False)) if a != b)
    # restored whole from the cache: only MORE read; before, the restore stopped at the first split (`common`)
    assert out["timings"]["cache_n"] == len(other), (out["timings"], common)
    assert out["timings"]["prompt_n"] == len(more), out["timings"]
    assert out["usage"]["prompt_tokens"] == len(other) + len(more)
