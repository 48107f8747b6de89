"""What `prompting.answer_format` reads of an engine, and nothing else: its vocabulary's token ids by text and
the prompt's text. For tests of which answer readers a vocabulary turns on (the Mistral, GLM and Seed-OSS
answer tests); the live tests run the same choice on real engines."""

from __future__ import annotations


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
