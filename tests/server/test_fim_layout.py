"""The prompt of a code completion (server/fim_prompt.py) against llama.cpp's documented order (its server's
`format_infill`): [FIM_REP]myproject\\n, each input_extra chunk as [FIM_SEP]{filename}\\n{text}, [FIM_SEP]filename\\n,
[BOS] when the model adds one, then [FIM_PRE]{prefix}{prompt}[FIM_SUF]{suffix}[FIM_MID]; the prefix keeps its last
1,536 tokens, the suffix its first 510 - len(prompt), the repo-level part its last n_ctx - 2048 - 2 n_predict;
with --spm-infill the suffix comes first ([FIM_SUF]{suffix}[FIM_PRE]{prefix}{prompt}[FIM_MID]). On a real tokenizer (a tiny model with Qwen2.5-Coder's FIM tokens); no server."""

from __future__ import annotations

from dataclasses import replace

import pytest
from strata.engine import GGUFFile
from strata.engine.fim import FimTokens
from strata.engine.tokenizer import Tokenizer
from strata.server.fim_prompt import ExtraChunk, FimRequest, fim_prompt

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model

PRE, SUF, MID, PAD, REP, SEP = range(512, 518)


@pytest.fixture(scope="module")
def tok(tiny_model_factory, tmp_path_factory):
    plain = tiny_model_factory(n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    return Tokenizer.from_metadata(GGUFFile(fim_model(plain, tmp_path_factory.mktemp("fim") / "fim.gguf")).metadata)


def plain(tok, text: str) -> list[int]:
    return tok.encode(text, special=False, add_bos=False)


def test_prefix_suffix_middle_with_the_repo_level_header(tok):
    req = FimRequest(prefix="def f(x):\n    ", suffix="\n    return y\n", prompt="y =", n_ctx=8192, n_predict=64,
                     extra=(ExtraChunk("util.py", "import os\n"), ExtraChunk("b.py", "x = 1\n")))
    out = fim_prompt(tok, req)
    assert out.tokens == [REP, *plain(tok, "myproject\n"),
                          SEP, *plain(tok, "util.py\n"), *plain(tok, "import os\n"),
                          SEP, *plain(tok, "b.py\n"), *plain(tok, "x = 1\n"),
                          SEP, *plain(tok, "filename\n"),
                          PRE, *plain(tok, "def f(x):\n    "), *plain(tok, "y ="),
                          SUF, *plain(tok, "\n    return y\n"), MID]
    assert not out.truncated


def test_special_texts_in_the_code_stay_text_and_the_prompt_parses_them(tok):
    out = fim_prompt(tok, FimRequest(prefix="a<|fim_middle|>", suffix="<|file_sep|>", prompt="<|fim_pad|>", n_ctx=8192))
    assert out.tokens.count(MID) == 1 and out.tokens.count(SEP) == 1    # the layout's own, not the code's
    assert PAD in out.tokens                                             # the prompt's, parsed


def test_a_small_context_leaves_the_repo_level_part_out(tok):
    """llama.cpp keeps n_ctx - n_batch - 2 n_predict tokens of it: none under 2,048 + 2 n_predict."""
    req = FimRequest(prefix="a", suffix="b", extra=(ExtraChunk("u.py", "import os\n"),), n_ctx=2048, n_predict=16)
    out = fim_prompt(tok, req)
    assert out.tokens == [PRE, *plain(tok, "a"), SUF, *plain(tok, "b"), MID] and out.truncated
    head = [REP, *plain(tok, "myproject\n"), SEP, *plain(tok, "u.py\n"), *plain(tok, "import os\n"),
            SEP, *plain(tok, "filename\n")]
    kept = fim_prompt(tok, replace(req, n_ctx=2048 + 32 + 5))            # room for its last 5 tokens
    assert kept.tokens[:5] == head[-5:] and kept.tokens[5] == PRE and kept.truncated
    assert fim_prompt(tok, replace(req, n_ctx=2048 + 32 + len(head))).truncated is False


def test_the_prefix_keeps_its_end_and_the_suffix_its_start(tok):
    line = "value = compute(value)\n"
    prefix, suffix = line * 400, line * 200
    out = fim_prompt(tok, FimRequest(prefix=prefix, suffix=suffix, prompt="x"))
    p, s = plain(tok, prefix), plain(tok, suffix)
    assert len(p) > 1536 and len(s) > 510
    n_prompt = len(plain(tok, "x"))
    assert out.tokens == [PRE, *p[-1536:], *plain(tok, "x"), SUF, *s[:510 - n_prompt], MID]
    assert out.truncated


def test_without_repo_and_separator_tokens_chunks_follow_a_snippet_line(tok):
    bare = _with_fim(tok, FimTokens(pre=PRE, suf=SUF, mid=MID))
    out = fim_prompt(bare, FimRequest(prefix="a", suffix="b", extra=(ExtraChunk("u.py", "z\n"),), n_ctx=8192))
    assert out.tokens == [*plain(tok, "\n\n--- snippet ---\n\n"), *plain(tok, "z\n"), PRE, *plain(tok, "a"),
                          SUF, *plain(tok, "b"), MID]


def test_bos_after_the_repo_level_part_when_the_model_adds_one(tok):
    bos = _with_fim(tok, tok.fim, add_bos=True)
    out = fim_prompt(bos, FimRequest(prefix="a", suffix="b", n_ctx=8192))
    assert out.tokens == [REP, *plain(tok, "myproject\n"), SEP, *plain(tok, "filename\n"), tok.bos_id, PRE,
                          *plain(tok, "a"), SUF, *plain(tok, "b"), MID]


def test_spm_infill_puts_the_suffix_first_cut_as_in_the_psm_order(tok):
    """--spm-infill (llama.cpp's format_infill with spm_infill): [extra][BOS][FIM_SUF]suffix[FIM_PRE]prefix
    prompt[FIM_MID]; the prefix keeps its end, the suffix its start, as in the default order."""
    line = "value = compute(value)\n"
    req = FimRequest(prefix=line * 400, suffix=line * 200, prompt="x", extra=(ExtraChunk("u.py", "z\n"),),
                     n_ctx=8192, spm=True)
    bos = _with_fim(tok, tok.fim, add_bos=True)
    p, s, x = plain(tok, line * 400), plain(tok, line * 200), plain(tok, "x")
    out = fim_prompt(bos, req)
    assert out.tokens == [REP, *plain(tok, "myproject\n"), SEP, *plain(tok, "u.py\n"), *plain(tok, "z\n"),
                          SEP, *plain(tok, "filename\n"), tok.bos_id,
                          SUF, *s[:510 - len(x)], PRE, *p[-1536:], *x, MID]
    psm = fim_prompt(bos, replace(req, spm=False))
    assert sorted(psm.tokens) == sorted(out.tokens) and psm.tokens != out.tokens and out.truncated


def _with_fim(tok, fim: FimTokens, add_bos: bool = False):
    """The same tokenizer with other FIM tokens / BOS rule (a shallow copy: the vocabulary is shared)."""
    import copy

    other = copy.copy(tok)
    other.fim = fim
    other.add_bos = add_bos
    return other
