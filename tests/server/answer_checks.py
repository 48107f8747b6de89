"""Shared by the Mistral, GLM and Seed-OSS answer tests: `VocabEngine`, what `prompting.answer_format` reads of
an engine and nothing else (its vocabulary's token ids by text and the prompt's text: which answer readers
a vocabulary turns on; the live tests run the same choice on real engines), and `streamed`, an answer fed
to the AnswerStream in pieces as a server streams it."""


from __future__ import annotations

from strata.server.prompting import AnswerFormat, AnswerStream


class _Vocab:
    def __init__(self, tokens: dict[str, int]):
        self._tokens = tokens

    def token_id(self, text: str) -> int | None:
        return self._tokens.get(text)


class VocabEngine:
    """`tokens`: {text: id} the vocabulary holds; `prompt_text`: what the prompt's ids detokenize to."""

    def __init__(self, tokens: dict[str, int], prompt_text: str = ""):
        self.tokenizer = _Vocab(tokens)
        self._prompt_text = prompt_text

    def detokenize(self, ids) -> str:
        return self._prompt_text


def streamed(fmt: AnswerFormat, tools: list[dict] | None, answer: str,
             cuts: list[int]) -> tuple[str | None, str, list[dict], list[str]]:
    """(reasoning, content, calls, the text pieces) of `answer` fed cut at `cuts`; reasoning None unless the
    answer opens (or the prompt opened) the format's thinking block, as split_answer gives it."""
    s = AnswerStream(fmt, tools)
    bounds = sorted({c for c in cuts if 0 < c < len(answer)}) + [len(answer)]
    pieces, last = [], 0
    for b in bounds:
        pieces += s.feed(answer[last:b])
        last = b
    tail, rest, calls = s.finish(answer)
    pieces += tail
    texts = [t for k, t in pieces if k == "text"]
    reasoning = "".join(t for k, t in pieces if k == "reasoning")
    thought = fmt.opened or answer.lstrip().startswith(fmt.think[0])
    return (reasoning if thought else None), "".join(texts) + rest, calls, texts
