"""Property tests: byte-level BPE is lossless, and streaming decode equals one-shot decode for any ids."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strata.engine.text import StreamDecoder

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _representable(tok, text: str) -> bool:
    """SmolLM2's vocabulary has no token for 21 bytes (e.g. 0x04, 0xF1): llama.cpp drops those too."""
    return all(tok.token_id(tok_char) is not None for tok_char in _byte_chars(text.encode("utf-8")))


def _byte_chars(data: bytes) -> list[str]:
    from strata.engine.tokenizer import _byte_decoder

    to_char = {b: ch for ch, b in _byte_decoder().items()}
    return [to_char[b] for b in data]


@SETTINGS
@given(text=st.text(max_size=200))
def test_encode_decode_round_trip(smollm_tokenizer, text):
    assume(_representable(smollm_tokenizer, text))
    assert smollm_tokenizer.decode(smollm_tokenizer.encode(text, special=False)) == text
    assert smollm_tokenizer.decode(smollm_tokenizer.encode(text, special=True)) == text


@SETTINGS
@given(ids=st.lists(st.integers(min_value=0, max_value=49151), max_size=60))
def test_stream_decoder_equals_decode_for_any_ids(smollm_tokenizer, ids):
    dec = StreamDecoder(smollm_tokenizer)
    pieces = [dec.push(i) for i in ids]
    assert "".join(pieces) + dec.flush() == smollm_tokenizer.decode(ids)
