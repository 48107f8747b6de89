"""The tokenizer of a GGUF model, built from the file's own vocabulary, merges and pre-tokenizer name.

What it is: `Tokenizer.from_metadata(metadata)` turns the `tokenizer.ggml.*` metadata of a GGUF file
(a plain dict, as `strata.engine.GGUFFile(path).metadata` or the `gguf` package gives it) into a
byte-level BPE tokenizer (the `tokenizers` library) that gives llama.cpp's token ids for the same
text: the same pre-tokenizer regexes per `tokenizer.ggml.pre` (`pre_tokenizers.py`, from llama.cpp's
`llama-vocab.cpp`), the same merge ranks, the same treatment of special tokens (CONTROL tokens are
parsed in text only when `special=True`; USER_DEFINED tokens always, as llama.cpp does), the same
BOS rule, the same end-of-generation tokens (EOT_TEXTS; for gpt-oss's o200k_harmony vocabulary
"<|return|>" and "<|call|>" end generation and "<|end|>" does not, and its message markup is always
parsed and rendered: END_OF_MESSAGE_ONLY, ALWAYS_RENDERED_TEXTS).

Also SentencePiece BPE vocabularies (`tokenizer.ggml.model == "llama"`: Llama 2, Mistral 7B) with
llama.cpp's rule (the adjacent pair whose merged token has the best score merges first; a space
prefix; byte fallback), expressed as BPE merges derived from the scores.

What it is not: no WordPiece / Unigram / RWKV vocabularies (a clear error names the model type), no
chat template (see `chat_template.py`), no streaming
detokenization (see `text.py`). Decoding does not "clean up" spaces before punctuation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from tokenizers import AddedToken, Regex, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as _HFTokenizer

from .fim import FimTokens, find_fim_tokens
from .pre_tokenizers import PRE_TOKENIZERS  # re-exported: name -> (regexes, ignore_merges, default BOS)

# GGUF token types (gguf.TokenType)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

# end-of-turn token texts llama.cpp treats as end of generation, when the vocabulary has them
EOT_TEXTS = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<|end_of_text|>", "<EOT>", "<end_of_utterance>",
    "<|return|>", "<|call|>",   # o200k_harmony (gpt-oss): the answer's end, a tool call's end
    "<|flush|>", "<|calls|>",   # solar-open's pair of the same
)
# llama.cpp's workaround for o200k_harmony (and solar-open): when the end-of-generation tokens hold
# "<|return|>" and "<|call|>" (or "<|calls|>" and "<|flush|>"; llama.cpp counts "<|call|>" and
# "<|calls|>" alike, hence the mixed pairs), "<|end|>" only ends one message of the answer (gpt-oss
# writes its analysis, then "<|end|>", then its final message): it does not end generation, and it is
# always parsed and rendered (USER_DEFINED)
END_OF_MESSAGE_ONLY = ("<|end|>", (("<|return|>", "<|call|>"), ("<|return|>", "<|calls|>"),
                                   ("<|call|>", "<|flush|>"), ("<|calls|>", "<|flush|>")))
# gpt-oss's message markup, which llama.cpp always parses and renders (USER_DEFINED, whatever the file says)
ALWAYS_RENDERED_TEXTS = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
# tokens that open a chat message (anchors of the conversation cache's segment tier; any of them): ChatML,
# Llama 3, Gemma, Mistral's user turns and tool results, Harmony, GLM's four roles, Seed-OSS's (its template
# starts every message with "<seed:bos>ROLE\n")
MESSAGE_OPENER_TEXTS = ("<|im_start|>", "<|start_header_id|>", "<start_of_turn>", "[INST]", "[TOOL_RESULTS]",
                        "<|start|>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<seed:bos>")


class TokenizerError(ValueError):
    """The GGUF metadata does not describe a tokenizer Strata can build."""


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character -> byte map (the inverse of bytes_to_unicode)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars, strict=True)}


@lru_cache(maxsize=1)
def _byte_translation() -> dict[int, str]:
    """str.translate table: byte-level character -> the latin-1 character of its byte."""
    return {ord(ch): chr(b) for ch, b in _byte_decoder().items()}


def _token_text_to_bytes(text: str) -> bytes:
    try:  # fast path: every character is a byte-level one
        return text.translate(_byte_translation()).encode("latin-1")
    except UnicodeEncodeError:
        pass
    table = _byte_decoder()
    out = bytearray()
    for ch in text:
        b = table.get(ch)
        if b is None:  # not a byte-level character (an added token written as plain text)
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


def _spm_piece_bytes(text: str, token_type: int) -> bytes:
    """A SentencePiece token's bytes: <0xXX> byte tokens are that byte, "▁" is a space."""
    if token_type == TOKEN_BYTE and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        return bytes([int(text[3:5], 16)])
    return text.replace("\u2581", " ").encode("utf-8")


def _spm_merges(vocab: _Vocab, ids: Mapping[str, int]) -> list[tuple[str, str]]:
    """BPE merges equivalent to llama.cpp's SPM bigram rule: every split of a token into two tokens,
    best score of the merged token first (ties: lower ids first, as Hugging Face's converter)."""
    ranked = []
    for text, merged in ids.items():
        if len(text) < 2 or vocab.types[merged] == TOKEN_BYTE:
            continue
        for k in range(1, len(text)):
            left, right = text[:k], text[k:]
            li, ri = ids.get(left), ids.get(right)
            if li is not None and ri is not None:
                ranked.append((-vocab.scores[merged], li, ri, left, right))
    ranked.sort(key=lambda r: r[:3])
    return [(r[3], r[4]) for r in ranked]


def _split_merge(merge: str) -> tuple[str, str] | None:
    pos = merge.find(" ", 1)  # as llama.cpp: the first space after the first character
    if pos < 0:
        return None
    return merge[:pos], merge[pos + 1 :]


@dataclass(frozen=True)
class _Vocab:
    kind: str  # "bpe" (gpt2 byte-level) | "spm" (SentencePiece BPE: scores, byte fallback, "▁" for space)
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    merges: tuple[str, ...]  # bpe only
    scores: tuple[float, ...]  # spm only
    add_space_prefix: bool  # spm: a space before the text and after each special token (llama.cpp)
    pre: str
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    eom_id: int | None  # end of message (GLM's "<|observation|>": the model waits for a tool's result)
    add_bos: bool
    fim: FimTokens = FimTokens()  # fill-in-the-middle tokens (fim.py)


def check_vocabulary(metadata: Mapping[str, object]) -> None:
    """Raise the TokenizerError Tokenizer.from_metadata would (an unknown pre-tokenizer, a missing vocabulary, a
    bad token id), without building the tokenizer (ms, where building GLM's 154K tokens takes a second)."""
    _read_vocab(metadata)


_TEXT = (str, bytes)


def _type_name(value: object) -> str:
    name = type(value).__name__
    return ("an " if name[0] in "aeiou" else "a ") + name


def _array(metadata: Mapping[str, object], key: str, kinds: tuple[type, ...], what: str) -> tuple | None:
    """The array under `key` (None when absent), every element one of `kinds` (a bool is no integer);
    TokenizerError naming the key otherwise: a crafted or damaged file, never a TypeError further on."""
    value = metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise TokenizerError(f"{key} is not an array of {what} (it is {_type_name(value)})")
    for element in value:
        if not isinstance(element, kinds) or isinstance(element, bool):
            raise TokenizerError(f"{key} is not an array of {what} (an element is {_type_name(element)})")
    return tuple(value)


def _read_vocab(metadata: Mapping[str, object]) -> _Vocab:
    model = metadata.get("tokenizer.ggml.model")
    if model is None:
        raise TokenizerError("GGUF metadata has no tokenizer (tokenizer.ggml.model is missing)")
    if model not in ("gpt2", "llama"):
        raise TokenizerError(
            f"unsupported tokenizer model {model!r}: Strata supports byte-level BPE ('gpt2') and "
            "SentencePiece BPE ('llama') vocabularies"
        )
    kind = "bpe" if model == "gpt2" else "spm"
    tokens = _array(metadata, "tokenizer.ggml.tokens", _TEXT, "strings")
    if not tokens:
        raise TokenizerError("tokenizer.ggml.tokens is missing or empty")
    tokens = tuple(t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in tokens)
    types = _array(metadata, "tokenizer.ggml.token_type", (int,), "integers")
    if types is None:
        types = (TOKEN_NORMAL,) * len(tokens)
    if len(types) != len(tokens):
        raise TokenizerError(
            f"tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens"
        )
    merges: tuple[str, ...] = ()
    scores: tuple[float, ...] = ()
    if kind == "bpe":
        raw_merges = _array(metadata, "tokenizer.ggml.merges", _TEXT, "strings")
        if raw_merges is None:
            raise TokenizerError("tokenizer.ggml.merges is missing (a BPE vocabulary needs its merges)")
        merges = tuple(m.decode("utf-8", "replace") if isinstance(m, bytes) else m for m in raw_merges)
    else:
        raw_scores = _array(metadata, "tokenizer.ggml.scores", (int, float), "numbers")
        if raw_scores is None:
            raise TokenizerError("tokenizer.ggml.scores is missing (a SentencePiece vocabulary needs its scores)")
        scores = tuple(float(x) for x in raw_scores)
        if len(scores) != len(tokens):
            raise TokenizerError(f"tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens")
    pre = str(metadata.get("tokenizer.ggml.pre") or "default") if kind == "bpe" else "default"
    if pre not in PRE_TOKENIZERS:
        raise TokenizerError(
            f"unknown pre-tokenizer tokenizer.ggml.pre={pre!r}; known: {', '.join(sorted(PRE_TOKENIZERS))}"
        )

    def token_id(key: str) -> int | None:
        value = metadata.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):   # GGUF writes ids as integers
            raise TokenizerError(f"{key}={value!r} is not a token id (an integer)")
        if not 0 <= value < len(tokens):
            raise TokenizerError(f"{key}={value} is outside the vocabulary of {len(tokens)} tokens")
        return value

    add_bos = metadata.get("tokenizer.ggml.add_bos_token")
    ids: dict[str, int] = {}
    for i, text in enumerate(tokens):
        ids[text] = i   # a duplicated text maps to its last id, as in Tokenizer
    add_space_prefix = metadata.get("tokenizer.ggml.add_space_prefix")
    default_bos = PRE_TOKENIZERS[pre][2] if kind == "bpe" else True  # llama.cpp: SPM adds BOS by default
    return _Vocab(
        kind=kind,
        tokens=tokens,
        types=types,
        merges=merges,
        scores=scores,
        add_space_prefix=kind == "spm" if add_space_prefix is None else bool(add_space_prefix),
        pre=pre,
        bos_id=token_id("tokenizer.ggml.bos_token_id"),
        eos_id=token_id("tokenizer.ggml.eos_token_id"),
        eot_id=token_id("tokenizer.ggml.eot_token_id"),
        eom_id=token_id("tokenizer.ggml.eom_token_id"),
        add_bos=default_bos if add_bos is None else bool(add_bos),
        fim=find_fim_tokens(metadata, ids, token_id),
    )


def _end_of_generation(vocab: _Vocab, ids: Mapping[str, int]) -> tuple[frozenset[int], _Vocab]:
    """(the ids that end generation, the vocabulary with llama.cpp's type overrides): EOS, EOT, EOM and the
    EOT_TEXTS the vocabulary has, less "<|end|>" for a Harmony-style vocabulary (END_OF_MESSAGE_ONLY),
    whose "<|end|>" and ALWAYS_RENDERED_TEXTS become USER_DEFINED."""
    eot = {i for i in (vocab.eos_id, vocab.eot_id, vocab.eom_id) if i is not None}
    eot |= {ids[t] for t in EOT_TEXTS if t in ids}
    texts = {vocab.tokens[i] for i in eot}
    end_text, pairs = END_OF_MESSAGE_ONLY
    always = [ids[t] for t in ALWAYS_RENDERED_TEXTS if t in ids]
    if end_text in texts and any(a in texts and b in texts for a, b in pairs):
        always += [i for i in eot if vocab.tokens[i] == end_text]
        eot = {i for i in eot if vocab.tokens[i] != end_text}
    if not always:
        return frozenset(eot), vocab
    types = list(vocab.types)
    for i in always:
        types[i] = TOKEN_USER_DEFINED
    return frozenset(eot), replace(vocab, types=tuple(types))


class Tokenizer:
    """Text <-> token ids for one GGUF vocabulary. Thread-safe (no state changes after construction)."""

    def __init__(self, vocab: _Vocab):
        ids = {}
        for i, text in enumerate(vocab.tokens):
            ids[text] = i  # as llama.cpp: a duplicated text maps to its last id
        self._ids = ids
        eot, vocab = _end_of_generation(vocab, ids)
        self.eot_ids: frozenset[int] = eot
        self._vocab = vocab
        self.n_vocab: int = len(vocab.tokens)
        self.bos_id: int | None = vocab.bos_id
        self.eos_id: int | None = vocab.eos_id
        self.add_bos: bool = vocab.add_bos
        self.pre: str = vocab.pre
        self.fim: FimTokens = vocab.fim
        parsed = [i for i, t in enumerate(vocab.types) if t in (TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_USER_DEFINED)]
        # CONTROL and UNKNOWN tokens are the "special" ones: parsed in text only when asked
        self.special_ids: frozenset[int] = frozenset(
            i for i in parsed if vocab.types[i] != TOKEN_USER_DEFINED
        ) | frozenset(i for i in (vocab.bos_id, vocab.eos_id) if i is not None)
        self.parsed_ids: frozenset[int] = frozenset(parsed)   # parsed whole in text, never split or merged
        self.message_opener_ids: list[int] = [ids[t] for t in MESSAGE_OPENER_TEXTS if t in ids]
        # (n_vocab,) the bytes each token stands for; special tokens as their text
        self.kind: str = vocab.kind
        self._bytes: list[bytes] = [
            t.encode("utf-8") if vocab.types[i] in (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN)
            else _token_text_to_bytes(t) if vocab.kind == "bpe"
            else _spm_piece_bytes(t, vocab.types[i])
            for i, t in enumerate(vocab.tokens)
        ]
        # no token stands for more bytes of a text than this (the normalizers only add): a text of N bytes is
        # at least ceil(N / it) tokens, which refuses a prompt of megabytes without tokenizing it
        self.longest_token_bytes: int = max(map(len, self._bytes), default=0)
        merges = []
        for m in vocab.merges:
            pair = _split_merge(m)
            # a merge whose parts or result are not tokens can never produce a token: llama.cpp falls
            # back to the parts for it, which is what skipping it does here
            if pair and pair[0] in ids and pair[1] in ids and pair[0] + pair[1] in ids:
                merges.append(pair)
        if vocab.kind == "spm":
            merges = _spm_merges(vocab, ids)
        self._with_special = self._build(parsed, merges)
        # the proper starts of the tokens parsed whole in text (unfinished_markup)
        parsed_texts = [vocab.tokens[i] for i in parsed]
        self._parsed_starts = frozenset(t[:k] for t in parsed_texts for k in range(1, len(t)))
        self._longest_parsed = max(map(len, parsed_texts), default=0)
        self._plain = self._build(parsed, merges)
        self._plain.encode_special_tokens = True  # CONTROL tokens become text; USER_DEFINED still parsed

    def _build(self, parsed: Iterable[int], merges: list[tuple[str, str]]) -> _HFTokenizer:
        vocab = self._vocab
        regexes, ignore_merges, _ = PRE_TOKENIZERS[vocab.pre]
        if vocab.kind == "spm":
            # llama.cpp's SPM: merge the adjacent pair whose result scores best, over the whole text
            # ("▁" for spaces, one prepended per text fragment), unknown characters as <0xXX> bytes
            unk = next((vocab.tokens[i] for i, t in enumerate(vocab.types) if t == TOKEN_UNKNOWN), None)
            tok = _HFTokenizer(models.BPE(vocab=self._ids, merges=merges, byte_fallback=True,
                                          unk_token=unk, fuse_unk=False))
            steps = [normalizers.Prepend("▁")] if vocab.add_space_prefix else []
            tok.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", "▁")])
        else:
            tok = _HFTokenizer(models.BPE(vocab=self._ids, merges=merges, ignore_merges=ignore_merges))
            tok.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
                + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
            )
        added = [
            AddedToken(vocab.tokens[i], special=vocab.types[i] != TOKEN_USER_DEFINED, normalized=False)
            for i in parsed
        ]
        if added:
            tok.add_tokens(added)
        return tok

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, object]) -> Tokenizer:
        """Build from GGUF metadata; raises TokenizerError naming what is missing or unsupported."""
        return cls(_read_vocab(metadata))

    # -- text -> ids -------------------------------------------------------------------------------

    def encode(self, text: str, special: bool = True, add_bos: bool | None = None) -> list[int]:
        """Token ids of `text`.

        special: parse CONTROL tokens written in the text (`<|im_start|>`) as those tokens; when
        False they are tokenized as plain text (USER_DEFINED tokens are parsed either way, as in
        llama.cpp). add_bos: prepend BOS; None follows the model (`tokenizer.ggml.add_bos_token`)
        and does not add a second BOS when the text already starts with it.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode() needs a str, got {type(text).__name__}")
        tok = self._with_special if special else self._plain
        ids = _encoded(tok, text).ids
        want_bos = self.add_bos if add_bos is None else add_bos
        if want_bos and self.bos_id is not None and not (add_bos is None and ids[:1] == [self.bos_id]):
            ids.insert(0, self.bos_id)
        return ids

    def encode_spans(self, text: str) -> list[tuple[int, int, int, int]]:
        """`encode(text, special=True, add_bos=False)` with where each token stands: (id, first character,
        end character, piece), piece the index of the pre-tokenizer piece it is part of (a special token is
        a piece of its own). A SentencePiece vocabulary's text is one piece."""
        if not isinstance(text, str):
            raise TypeError(f"encode_spans() needs a str, got {type(text).__name__}")
        enc = _encoded(self._with_special, text)
        pieces = [0 if self.kind == "spm" else w for w in enc.word_ids]
        return [(i, a, b, -1 if w is None else w) for i, (a, b), w in zip(enc.ids, enc.offsets, pieces, strict=True)]

    def unfinished_markup(self, text: str) -> int:
        """Where a token parsed whole in text (`<|im_end|>`, a template's markup) could begin that `text` ends
        inside of: what follows could make it, and the tokens from there differ. len(text) when none could."""
        for p in range(max(0, len(text) - self._longest_parsed + 1), len(text)):
            if text[p:] in self._parsed_starts:
                return p
        return len(text)

    def pre_tokenize(self, text: str) -> list[str]:
        """The pieces the pre-tokenizer regexes cut `text` into (BPE then runs inside each piece).
        SentencePiece vocabularies have no pre-tokenizer: one piece."""
        if self.kind == "spm":
            return [text] if text else []
        pieces = self._plain.pre_tokenizer.pre_tokenize_str(text)
        return [_token_text_to_bytes(p).decode("utf-8", "replace") for p, _ in pieces]

    def token_id(self, text: str) -> int | None:
        """The id of a token written exactly as in the vocabulary (`"<|im_end|>"`), or None."""
        return self._ids.get(text)

    # -- ids -> text -------------------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for (a special token: its text). May be part of a UTF-8 character."""
        if not 0 <= int(token_id) < self.n_vocab:
            raise ValueError(f"token id {token_id} is outside the vocabulary of {self.n_vocab} tokens")
        return self._bytes[int(token_id)]

    def token_text(self, token_id: int) -> str:
        """The token as the vocabulary writes it (byte-level characters, e.g. 'Ġthe')."""
        return self._vocab.tokens[int(token_id)]

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of a token sequence; bytes that do not form UTF-8 become U+FFFD."""
        out = []
        for i in ids:
            if skip_special and int(i) in self.special_ids:
                continue
            out.append(self.token_bytes(i))
        return b"".join(out).decode("utf-8", errors="replace")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _encoded(tok: Any, text: str) -> Any:
    """tokenizers' encoding of `text`; a surrogate in it (no UTF-8 holds one: a JSON escape such as a tool call's
    arguments '"a\\ud800"', parsed for a template) read as U+FFFD, as a UTF-8 decoder reads a broken byte (the
    library's TypeError was a 500). One character for one, so that offsets stay the text's.
    encode_batch, not encode: the same encoding, but the library lets go of the GIL while it works; its `encode`
    held it, and a 10 MB prompt's 12 s held the server's event loop (every other client) that long."""
    try:
        return tok.encode_batch([text], add_special_tokens=False)[0]
    except TypeError:
        mended = _SURROGATE.sub("\ufffd", text)
        if mended == text:
            raise
        return tok.encode_batch([mended], add_special_tokens=False)[0]
