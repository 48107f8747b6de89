"""The fewest tokens a text can be (prompting.fewest_tokens with Tokenizer.longest_token_bytes) never exceeds the
tokens it is: the server refuses a prompt of megabytes by that bound before tokenizing it, and a bound above the
count would be a false refusal. The default model's byte-level BPE and a SentencePiece vocabulary (its spaces
written '▁', 3 bytes for 1; its byte tokens '<0xE2>', 6 characters for 1 byte)."""

from __future__ import annotations

from strata.engine.tokenizer import Tokenizer
from strata.server.prompting import fewest_tokens

from .conftest import parity_cases


def texts(tok: Tokenizer) -> list[str]:
    """Texts made of the longest tokens (where the bound is closest), special tokens written in text, spaces,
    non-ASCII and a lone surrogate (read as U+FFFD), and llama.cpp's parity texts."""
    pieces = sorted(range(tok.n_vocab), key=lambda i: -len(tok.token_bytes(i)))[:50]
    longest = [tok.token_bytes(i).decode("utf-8", "replace") for i in pieces]
    return ["".join(longest), longest[0] * 100, " " * 1000, "\n" * 500, "日本語のテキスト" * 50, "a\ud800b" * 10,
            "".join(tok.token_text(i) for i in sorted(tok.special_ids)) * 3] + [c["text"] for c in parity_cases()]


def _check(tok: Tokenizer) -> None:
    assert tok.longest_token_bytes == max(len(tok.token_bytes(i)) for i in range(tok.n_vocab))
    for text in texts(tok):
        n = len(tok.encode(text, special=True, add_bos=False))
        assert fewest_tokens(len(text.encode("utf-8", "surrogatepass")), tok.longest_token_bytes) <= n, text[:80]


def test_the_bound_never_exceeds_the_count_bpe(smollm_tokenizer):
    _check(smollm_tokenizer)


def test_the_bound_never_exceeds_the_count_spm(spm_tokenizer):
    _check(spm_tokenizer)


def test_fewest_tokens():
    assert fewest_tokens(0, 16) == 0
    assert fewest_tokens(1, 16) == 1 and fewest_tokens(16, 16) == 1 and fewest_tokens(17, 16) == 2
    assert fewest_tokens(10_000_000, 0) == 0       # no vocabulary known: no bound
