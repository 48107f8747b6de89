"""The prompt of a code completion (server/fim_prompt.py) against llama.cpp's documented order (its server's
`format_infill`): [FIM_REP]myproject\\n, each input_extra chunk as [FIM_SEP]{filename}\\n{text}, [FIM_SEP]filename\\n,
[BOS] when the model adds one, then [FIM_PRE]{prefix}{prompt}[FIM_SUF]{suffix}[FIM_MID]; the prefix keeps its last
1,536 tokens (a longer one loses its start in steps of 256, so that it stays put as the user types on), the suffix its
first 510 - len(prompt), the repo-level part its last n_ctx - 2048 - 2 n_predict; with --spm-infill the suffix comes
first ([FIM_SUF]{suffix}[FIM_PRE]{prefix}{prompt}[FIM_MID]), its room for the typed part in steps of 64 tokens. On a real tokenizer (a tiny model with Qwen2.5-Coder's FIM tokens); no server."""

from __future__ import annotations

from dataclasses import replace

import pytest
from strata.engine import GGUFFile
from strata.engine.fim import FimTokens
from strata.engine.tokenizer import Tokenizer
from strata.server.fim_prompt import ExtraChunk, FimRequest, fim_prompt, kept_prefix

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
    n = kept_prefix(len(p))
    assert 1536 - 256 < n <= 1536 and (len(p) - n) % 256 == 0
    assert out.tokens == [PRE, *p[-n:], *plain(tok, "x"), SUF, *s[:510 - n_prompt], MID]
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
                          SUF, *s[:510 - 64], PRE, *p[-kept_prefix(len(p)):], *x, MID]
    psm = fim_prompt(bos, replace(req, spm=False))
    # the same pieces; the suffix in the default order leaves room for the typed part's own tokens only
    assert sorted(psm.tokens) == sorted(out.tokens + s[510 - 64:510 - len(x)]) and psm.tokens != out.tokens
    assert out.truncated


def test_kept_prefix_drops_its_start_in_steps():
    assert [kept_prefix(n) for n in (0, 1536, 1537, 1792, 1793, 3053)] == [0, 1536, 1281, 1536, 1281, 1517]


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_line_ended_keeps_the_prefix_start_so_the_next_keystroke_reads_on_from_there(tok):
    """The user ends a line (it leaves the typed part for the prefix's end): the prefix's first kept token is the same,
    so the next keystroke's prompt shares everything up to that line (before: cut one token at a time, its start
    moved and it shared nothing past [FIM_PRE])."""
    lines = [f"value_{i} = compute(value_{i - 1})\n" for i in range(400)]
    typed = "result = place(job)\n"
    suffix = "return value\n" * 200
    before = fim_prompt(tok, FimRequest(prefix="".join(lines), suffix=suffix, prompt=typed[:-1])).tokens
    after = fim_prompt(tok, FimRequest(prefix="".join(lines) + typed, suffix=suffix, prompt="")).tokens
    assert len(plain(tok, "".join(lines))) > 1536
    head = before.index(SUF) - len(plain(tok, typed[:-1]))    # [FIM_PRE] and the prefix before the line
    assert _common(before, after) >= head - 1   # the line's first tokens may merge with the text before it


def test_spm_keystrokes_share_all_but_the_typed_tail(tok):
    """--spm-infill: the suffix comes first and keeps its length while a line is typed (room for the typed part in
    steps of 64 tokens), so each keystroke's prompt shares all but the typed part's last tokens with the one before
    (before: the suffix lost a token per typed token, and everything after it, the prefix, was new each time)."""
    prefix, suffix = "value = compute(value)\n" * 400, "return value\n" * 200
    target = "result = self.place(job, now=time.monotonic(), reason='typed')"
    prev: list[int] = []
    for k in range(3, len(target), 4):
        toks = fim_prompt(tok, FimRequest(prefix=prefix, suffix=suffix, prompt=target[:k], spm=True)).tokens
        if prev:
            assert len(toks) - _common(prev, toks) <= len(plain(tok, target[k - 4:k])) + 3
        prev = toks


def _with_fim(tok, fim: FimTokens, add_bos: bool = False):
    """The same tokenizer with other FIM tokens / BOS rule (a shallow copy: the vocabulary is shared)."""
    import copy

    other = copy.copy(tok)
    other.fim = fim
    other.add_bos = add_bos
    return other
