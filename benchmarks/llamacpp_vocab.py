"""What the make_llamacpp_*_tokens.py recorders share: their command line and vocabulary-only load, llama.cpp's
ids for a list of texts with special-token parsing on and off, its end-of-generation ids, and the JSON layout the
tests read (the head, then one case a line). Imported by those scripts under llama-cpp-python's interpreter; not a
test."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def open_vocab(doc: str) -> tuple[Any, Any, argparse.Namespace]:
    """The recorder's command line (--gguf, --out; `doc`'s first line its description) and llama.cpp's
    vocabulary-only load of the GGUF: (the llama_cpp module, the Llama, the arguments)."""
    import llama_cpp

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    return llama_cpp, llama_cpp.Llama(args.gguf, vocab_only=True, verbose=False), args


def token_cases(llm: Any, texts: list[str]) -> list[dict]:
    """Per text: llama.cpp's ids with add_bos=True, special tokens parsed and not."""
    return [{"text": text,
             "tokens": llm.tokenize(text.encode("utf-8"), add_bos=True, special=True),
             "tokens_no_special": llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)}
            for text in texts]


def eog_ids(llama_cpp: Any, llm: Any) -> list[int]:
    """The ids llama.cpp treats as end of generation."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    return [i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)]


def write_cases(out: str, head: dict, cases: list[dict]) -> None:
    """`head`'s keys, then "cases": one case a line (diffs of re-recorded data stay readable)."""
    lines = ",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases)
    Path(out).write_text(json.dumps(head)[:-1] + ', "cases": [\n' + lines + "\n]}\n", encoding="utf-8")
