"""Fixtures of the engine's text side: the default model's metadata and tokenizer, llama.cpp's parity data.

Not here: the default model's path (tests/conftest.py) or any Engine (chat tests build their own).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PARITY_FILE = Path(__file__).resolve().parents[1] / "data" / "llamacpp_tokens.json"


@pytest.fixture(scope="session")
def default_metadata(default_model_path) -> dict:
    from strata.engine import GGUFFile

    return GGUFFile(default_model_path).metadata


@pytest.fixture(scope="session")
def smollm_tokenizer(default_metadata):
    from strata.engine.tokenizer import Tokenizer

    return Tokenizer.from_metadata(default_metadata)


@pytest.fixture(scope="session")
def spm_tokenizer(tmp_path_factory):
    """A SentencePiece vocabulary's tokenizer (spm_vocab.py's file, the one llama.cpp's spm parity ids are of)."""
    from strata.engine import GGUFFile
    from strata.engine.tokenizer import Tokenizer

    from .spm_vocab import write_spm_gguf

    return Tokenizer.from_metadata(GGUFFile(write_spm_gguf(tmp_path_factory.mktemp("spm") / "spm.gguf")).metadata)


@pytest.fixture(scope="session")
def parity() -> dict:
    """tests/data/llamacpp_tokens.json (made by benchmarks/make_llamacpp_tokens.py with llama.cpp)."""
    return json.loads(PARITY_FILE.read_text(encoding="utf-8"))


def parity_cases() -> list[dict]:
    return json.loads(PARITY_FILE.read_text(encoding="utf-8"))["cases"]
