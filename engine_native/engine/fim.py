"""The fill-in-the-middle (FIM) tokens of a GGUF vocabulary, found as llama.cpp finds them.

What it is: `find_fim_tokens(metadata, ids, token_id)` reads `tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id`
(and the older `prefix` / `suffix` / `middle` keys of CodeLlama-era converters); a role whose key is absent is
looked up by the texts code models write for it (Qwen2.5-Coder's `<|fim_prefix|>`, StarCoder and Granite's
`<fim_prefix>`, OpenCoder's `<fim-prefix>`, CodeLlama's `<PRE>`, GLM-4.5's `<|code_prefix|>`, ...), in the
order of FIM_TEXTS. An editor's completion request needs the prefix, suffix and middle tokens
(`FimTokens.usable`); the repo and file-separator tokens add the repo-level layout (server/fim_prompt.py).

What it is not: the prompt's layout (server/fim_prompt.py), the end of generation (tokenizer.py: Strata does not
end chat answers at the pad / repo / separator tokens; an infill request adds them as its own end tokens).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

ROLES = ("pre", "suf", "mid", "pad", "rep", "sep")

# the metadata keys of each role, newest first (llama.cpp reads `tokenizer.ggml.prefix_token_id` & co. as the
# deprecated names of the first three)
FIM_KEYS: Mapping[str, tuple[str, ...]] = {
    "pre": ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"),
    "suf": ("tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"),
    "mid": ("tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"),
    "pad": ("tokenizer.ggml.fim_pad_token_id",),
    "rep": ("tokenizer.ggml.fim_rep_token_id",),
    "sep": ("tokenizer.ggml.fim_sep_token_id",),
}

# the token texts of each role when the file names none (llama.cpp's llama-vocab.cpp lists the same; the first
# one the vocabulary has wins)
FIM_TEXTS: Mapping[str, tuple[str, ...]] = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}


@dataclass(frozen=True)
class FimTokens:
    """Token ids of the FIM roles; None where the vocabulary has none."""

    pre: int | None = None
    suf: int | None = None
    mid: int | None = None
    pad: int | None = None
    rep: int | None = None
    sep: int | None = None

    @property
    def usable(self) -> bool:
        """Whether a fill-in-the-middle prompt can be written: prefix, suffix and middle tokens."""
        return None not in (self.pre, self.suf, self.mid)

    @property
    def missing(self) -> tuple[str, ...]:
        """The roles a FIM prompt needs that the vocabulary lacks ("prefix", "suffix", "middle")."""
        names = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
        return tuple(names[r] for r in ("pre", "suf", "mid") if getattr(self, r) is None)

    @property
    def end_ids(self) -> frozenset[int]:
        """The tokens that end an infill's generation beside the model's end-of-turn ones: pad, repo and file
        separator (llama.cpp ends every generation at them; Strata only a completion's)."""
        return frozenset(i for i in (self.pad, self.rep, self.sep) if i is not None)


def find_fim_tokens(metadata: Mapping[str, object], ids: Mapping[str, int],
                    token_id: Callable[[str], int | None]) -> FimTokens:
    """The vocabulary's FIM tokens. `ids`: token text -> id; `token_id(key)`: a metadata key's token id, checked
    against the vocabulary (raises for a value that is not one), None when the key is absent."""
    found: dict[str, int | None] = {}
    for role in ROLES:
        value = next((v for v in map(token_id, FIM_KEYS[role]) if v is not None), None)
        if value is None:
            value = next((ids[t] for t in FIM_TEXTS[role] if t in ids), None)
        found[role] = value
    return FimTokens(**found)
