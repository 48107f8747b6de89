"""SentencePiece ("llama") vocabularies against llama.cpp's ids on the vocab of spm_vocab.py."""

from __future__ import annotations

import hashlib
import json

import pytest
from strata.engine.tokenizer import Tokenizer, TokenizerError

from .conftest import PARITY_FILE
from .spm_vocab import write_spm_gguf

SPM_CASES = json.loads(PARITY_FILE.read_text(encoding="utf-8"))["spm_cases"]


@pytest.fixture(scope="module")
def spm_metadata(tmp_path_factory, parity) -> dict:
    from strata.engine import GGUFFile

    path = write_spm_gguf(tmp_path_factory.mktemp("spm") / "spm.gguf")
    # the same file llama.cpp tokenized, byte for byte
    assert hashlib.sha256(path.read_bytes()).hexdigest() == parity["spm_gguf_sha256"]
    return GGUFFile(path).metadata


@pytest.fixture(scope="module")
def spm(spm_metadata) -> Tokenizer:
    return Tokenizer.from_metadata(spm_metadata)


@pytest.mark.parametrize("case", SPM_CASES, ids=[c["name"] for c in SPM_CASES])
def test_spm_ids_equal_llamacpp(spm, case):
    assert spm.encode(case["text"], special=True, add_bos=False) == case["tokens"]
    assert spm.encode(case["text"], special=False, add_bos=False) == case["tokens_no_special"]
    assert spm.encode(case["text"], special=True, add_bos=True) == case["tokens_bos"]


def test_spm_facts(spm):
    assert spm.kind == "spm" and spm.add_bos is True  # llama.cpp's default for SentencePiece
    assert spm.encode("hi")[0] == spm.bos_id
    assert spm.encode("<s>hi").count(spm.bos_id) == 1  # add_bos=None never doubles BOS
    assert spm.token_bytes(spm.token_id("<0x41>")) == b"A"
    assert spm.token_bytes(spm.token_id("▁the")) == b" the"
    assert spm.token_id("[INST]") in spm.special_ids
    assert spm.token_id("<|tool|>") not in spm.special_ids
    assert spm.pre_tokenize("a b") == ["a b"]


def test_spm_decode_gives_the_text_after_the_space_prefix(spm):
    for c in SPM_CASES:
        if c["text"] and not any(t in c["text"] for t in ("<s>", "</s>", "[INST]", "[/INST]", "<|tool|>")):
            assert spm.decode(c["tokens"]) == " " + c["text"]
    text = "naïve café 🦙 ok"
    assert spm.decode(spm.encode(text, add_bos=False)) == " " + text


def test_spm_without_space_prefix(spm_metadata):
    tok = Tokenizer.from_metadata({**spm_metadata, "tokenizer.ggml.add_space_prefix": False})
    with_prefix = Tokenizer.from_metadata(spm_metadata)
    assert tok.encode("Hello", add_bos=False) != with_prefix.encode("Hello", add_bos=False)
    assert tok.decode(tok.encode("Hello", add_bos=False)) == "Hello"


def test_spm_needs_scores(spm_metadata):
    md = dict(spm_metadata)
    del md["tokenizer.ggml.scores"]
    with pytest.raises(TokenizerError, match="tokenizer.ggml.scores is missing"):
        Tokenizer.from_metadata(md)
    md["tokenizer.ggml.scores"] = [0.0]
    with pytest.raises(TokenizerError, match="scores has 1 entries"):
        Tokenizer.from_metadata(md)
