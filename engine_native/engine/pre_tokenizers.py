"""llama.cpp's pre-tokenizers: the regexes that cut text into pieces before byte-level BPE, per the GGUF's
`tokenizer.ggml.pre` name, with the two other settings llama.cpp ties to the name (llama-vocab.cpp,
`llama_vocab::impl::load` and `llm_tokenizer_bpe`): whether merges are ignored (a piece that is a token is
that token) and whether BOS is added when the file has no `tokenizer.ggml.add_bos_token` key.

What it is not: the tokenizer (tokenizer.py builds it from this table). llama.cpp's `clean_spaces` is not
here: it only changes detokenization, which Strata does not clean up for any name.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------------
# Pre-tokenizer regexes, applied in sequence (each splits the pieces of the previous), from llama.cpp
# ---------------------------------------------------------------------------------------------------

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# o200k (GPT-4o, gpt-oss): the original regex of its tokenizer.json (llama.cpp runs a rewrite of it
# without \p{M}, which its own regex engine lacks; Hugging Face's runs the original)
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Mistral's tekken (Nemo, Small 3.x, Devstral, Magistral, Ministral 3): o200k's regex without the
# contractions and with single digits, the original of its tokenizer.json (as for _GPT4O, llama.cpp runs a
# rewrite without \p{M})
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Seed-Coder's and Seed-OSS's ("seed-coder"): Qwen 2's with single digits written \p{N}{1} and no newline in
# a punctuation run (llama.cpp's rewrite of (?i:...) as in _LLAMA3)
_SEED_CODER = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}"
    r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# DeepSeek LLM 7B ("deepseek-llm"): newlines alone, Latin / Greek / Cyrillic / ... letter runs, ASCII and
# full-width punctuation runs, trailing whitespace, CJK / Hangul runs, digit runs
_DEEPSEEK_LLM = (
    r"[\r\n]",
    "\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf"
    "\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4"
    "\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
    "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb"
    "\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    r"\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
    r"\p{N}+",
)
# DeepSeek Coder ("deepseek-coder"): newlines alone, letter runs, punctuation runs, CJK / Hangul, single digits
_DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}")
# Falcon ("falcon"): the default's punctuation runs (with the backquote), GPT-2's, digits in threes
_FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")
# Viking ("viking"): anything but whitespace and sentence punctuation, then single digits
_VIKING = (" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+", r"\p{N}")
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")

# name in tokenizer.ggml.pre -> (regexes, ignore_merges, default add_bos)
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool, bool]] = {
    "default": (_DEFAULT, False, False),
    **{name: ((_LLAMA3,), True, True) for name in ("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral")},
    **{name: ((_QWEN2,), False, False) for name in ("qwen2", "deepseek-r1-qwen", "stablelm2")},
    **{name: ((_GPT2,), False, False) for name in ("gpt2", "gpt-2", "phi-2", "mpt", "olmo")},
    # llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT4O names and MiniMax-M2 (the same regex); merges not ignored,
    # no BOS by default
    **{name: ((_GPT4O,), False, False) for name in ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2")},
    # llama.cpp's LLAMA_VOCAB_PRE_TYPE_TEKKEN: merges ignored (a piece that is a token is that token), BOS
    "tekken": ((_TEKKEN,), True, True),
    # llama.cpp's LLAMA_VOCAB_PRE_TYPE_CHATGLM4 (GLM-4, GLM-4.5 / 4.6 / 4.7, GLM-5): llama 3's regex, no BOS
    # by default (the templates write "[gMASK]<sop>" themselves); "glm4" / "glm5" ignore merges, the older
    # "chatglm-bpe" does not
    **{name: ((_LLAMA3,), True, False) for name in ("glm4", "glm5")},
    "chatglm-bpe": ((_LLAMA3,), False, False),
    **{
        name: ((r"\p{N}", _GPT2), False, False)
        for name in ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b")
    },
    # names whose models run as architectures Strata runs (convert_hf_to_gguf_update.py's repos): Seed-Coder
    # and Seed-OSS; Smaug-Llama-3 (llama 3's regex with merges and no BOS, llama.cpp's SMAUG); DeepSeek LLM
    # and DeepSeek Coder (llama); Midm 2.0 (llama, llama.cpp's LLAMA3 group); Megrez (llama), Solar Open
    # (glm4moe), KORMo (qwen2) and F2LLM-v2 (qwen3) on Qwen 2's regex; A.X 4.0 (qwen2), EXAONE 4.0, Mellum and Trillion on GPT-2's; Viking
    # (llama); Falcon (llama.cpp's FALCON; Falcon 3 is "falcon3")
    "seed-coder": ((_SEED_CODER,), False, False),
    "smaug-bpe": ((_LLAMA3,), False, False),
    "deepseek-llm": (_DEEPSEEK_LLM, False, False),
    "deepseek-coder": (_DEEPSEEK_CODER, False, False),
    "midm-2.0": ((_LLAMA3,), True, True),
    **{name: ((_QWEN2,), False, False) for name in ("megrez", "solar-open", "kormo", "f2llmv2")},
    **{name: ((_GPT2,), False, False) for name in ("a.x-4.0", "exaone4", "mellum", "trillion")},
    "viking": (_VIKING, False, False),
    "falcon": (_FALCON, False, False),
}
