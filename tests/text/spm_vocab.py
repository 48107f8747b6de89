"""A small SentencePiece-style (tokenizer.ggml.model = "llama") vocabulary written as a vocab-only GGUF.

What it is: `write_spm_gguf(path)` learns byte-pair merges over a fixed corpus the way SentencePiece BPE
does ("▁" marks a space and starts each word), gives merged tokens decreasing scores, adds <unk>, <s>,
</s>, the 256 <0xXX> byte tokens, [INST]/[/INST] (CONTROL) and <|tool|> (USER_DEFINED), and writes
a GGUF with no tensors. Deterministic: the same bytes every run, so llama.cpp's ids recorded on it by
benchmarks/make_llamacpp_tokens.py (--spm-gguf) stay valid.
What it is not: a real model's vocabulary (no Llama 2 / Mistral file is available offline).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

CORPUS = """The quick brown fox jumps over the lazy dog. The dog sleeps in the sun.
Hello world! Hello there, how are you today? I am fine, thank you.
def hello(name):
    return "Hello, " + name
for i in range(10):
    print(i, i * i)
Il était une fois une princesse qui vivait dans un château près de la mer.
Naïve café owners serve crème brûlée to their customers every morning.
In 1969, 2001 and 2024 the numbers 123, 456 and 7890 were written down.
the the the and and of of to to in in is is it it that that with with
"""

N_MERGES = 300
SPECIALS = [("<unk>", 2), ("<s>", 3), ("</s>", 3)]
EXTRA = [("[INST]", 3), ("[/INST]", 3), ("<|tool|>", 4)]


def _words(corpus: str) -> Counter:
    words: Counter = Counter()
    for line in corpus.splitlines():
        text = "▁" + line.replace(" ", "▁")
        start = 0
        for i in range(1, len(text) + 1):
            if i == len(text) or text[i] == "▁":
                if i > start:
                    words[tuple(text[start:i])] += 1
                start = i
    return words


def learn_vocab() -> tuple[list[str], list[int], list[float]]:
    """(tokens, token types, scores) of the vocabulary."""
    words = _words(CORPUS)
    chars = Counter(c for w, n in words.items() for c in w for _ in range(n))
    char_list = sorted(chars, key=lambda c: (-chars[c], c))
    merged: list[str] = []
    for _ in range(N_MERGES):
        pairs: Counter = Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:], strict=False):
                pairs[a, b] += n
        if not pairs:
            break
        (a, b), _count = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merged.append(a + b)
        new_words: Counter = Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += n
        words = new_words
    tokens = [t for t, _ in SPECIALS] + [f"<0x{b:02X}>" for b in range(256)]
    types = [ty for _, ty in SPECIALS] + [6] * 256
    scores = [0.0] * len(tokens)
    seen = set(tokens)
    for rank, piece in enumerate(merged):
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(1)
            scores.append(-float(rank))
    for i, c in enumerate(char_list):
        if c not in seen:
            seen.add(c)
            tokens.append(c)
            types.append(1)
            scores.append(-1e6 - i)
    for t, ty in EXTRA:
        tokens.append(t)
        types.append(ty)
        scores.append(0.0)
    return tokens, types, scores


def write_spm_gguf(path: str | Path) -> Path:
    import gguf

    tokens, types, scores = learn_vocab()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
