"""Tokenizer.encode from many threads at once gives the ids one thread gives (review of 4307f19: encode_batch lets
go of the GIL, and the server tokenizes in several worker threads at a time, so nothing the tokenizers library
shares, its BPE cache included, may mix two texts). The default model's BPE and a SentencePiece vocabulary."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

from strata.engine.tokenizer import Tokenizer

from .conftest import parity_cases


def _texts() -> list[str]:
    rng = random.Random(40)
    words = [c["text"] for c in parity_cases()] + ["hello", " world", "日本語", "<|im_start|>", "\n\n", "ing"]
    return ["".join(rng.choice(words) for _ in range(rng.randint(20, 400))) for _ in range(64)]


def _check(tok: Tokenizer) -> None:
    texts = _texts()
    alone = [tok.encode(t) for t in texts]
    with ThreadPoolExecutor(16) as pool:
        for _ in range(5):
            assert list(pool.map(tok.encode, texts)) == alone
            assert list(pool.map(tok.encode_spans, texts[:8])) == [tok.encode_spans(t) for t in texts[:8]]


def test_threads_encode_as_one_bpe(smollm_tokenizer):
    _check(smollm_tokenizer)


def test_threads_encode_as_one_spm(spm_tokenizer):
    _check(spm_tokenizer)
