"""A SentencePiece vocabulary in Gemma 3's shape, written as a vocab-only GGUF, for tokenizer parity with
llama.cpp.

What it is: spm_vocab.py's learned pieces (merges over its corpus, decreasing scores, the 256 <0xXX> byte
tokens for byte fallback) laid out as Gemma 3's GGUF files lay out their 262K tokens: <pad> 0, <eos> 1,
<bos> 2, <unk> 3, then `<start_of_turn>` / `<end_of_turn>` (CONTROL, as llama.cpp's converter marks the
added tokens that look special), a run of spaces and a newline as pieces, and the keys Gemma 3's converter
writes (conversion/gemma.py: tokenizer.ggml.model "llama", add_space_prefix false; add_bos_token true,
add_eos_token false; no eot key: llama.cpp ends generation at "<end_of_turn>" by its text).

- `write_gemma_gguf(path)`: the GGUF (deterministic bytes); `gemma_metadata()`: its metadata dict.
- `TEXTS`: texts compared, among them a Gemma 3 chat prompt as its template writes one.

Imports only the standard library and gguf (it runs in llama-cpp-python's environment too)."""

from __future__ import annotations

from pathlib import Path

from tests.text.spm_vocab import learn_vocab

SPECIALS = [("<pad>", 3), ("<eos>", 3), ("<bos>", 3), ("<unk>", 2), ("<start_of_turn>", 3), ("<end_of_turn>", 3)]
WHITESPACE = ["▁▁", "▁▁▁▁", "\n", "\n\n"]   # Gemma's vocabulary has whitespace runs as pieces
PROMPT = ("<bos><start_of_turn>user\nYou are brief.\n\nWhat is in the dir?<end_of_turn>\n<start_of_turn>model\n"
          "Let me look.<end_of_turn>\n<start_of_turn>user\nthanks<end_of_turn>\n<start_of_turn>model\n")
TEXTS = (
    "Hello world! The dog sleeps.", "   three leading spaces and two trailing  ", "Hello",
    "def hello(name):\n    return \"Hello, \" + name\n", "naïve café 🦙 日本 – ok", "a\n\nb\n\n\nc",
    "<start_of_turn>user\nhi<end_of_turn>", "x<end_of_turn>y", "", PROMPT,
)


def gemma_vocab() -> tuple[list[str], list[int], list[float]]:
    tokens, types, scores = learn_vocab()
    keep = [i for i, t in enumerate(tokens) if t not in ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "<|tool|>")]
    head = SPECIALS + [(w, 1) for w in WHITESPACE]
    return ([t for t, _ in head] + [tokens[i] for i in keep], [ty for _, ty in head] + [types[i] for i in keep],
            [0.0] * len(SPECIALS) + [-10.0 - k for k in range(len(WHITESPACE))] + [scores[i] for i in keep])


def gemma_metadata() -> dict:
    tokens, types, scores = gemma_vocab()
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.scores": scores, "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1,
            "tokenizer.ggml.unknown_token_id": 3, "tokenizer.ggml.padding_token_id": 0,
            "tokenizer.ggml.add_space_prefix": False, "tokenizer.ggml.add_bos_token": True,
            "tokenizer.ggml.add_eos_token": False}


def write_gemma_gguf(path: str | Path) -> Path:
    import gguf

    md = gemma_metadata()
    w = gguf.GGUFWriter(str(path), "llama")
    for add, value in ((w.add_context_length, 256), (w.add_embedding_length, 64), (w.add_block_count, 1),
                       (w.add_feed_forward_length, 128), (w.add_head_count, 2), (w.add_head_count_kv, 2)):
        add(value)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("llama")
    w.add_token_list(md["tokenizer.ggml.tokens"])
    w.add_token_types(md["tokenizer.ggml.token_type"])
    w.add_token_scores(md["tokenizer.ggml.scores"])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
