"""Record llama.cpp's token ids on Mistral's tekken vocabulary, as parity data for Strata's tests.

What it is: a script run with llama-cpp-python (a side environment, not a Strata dependency) that
writes `tests/data/llamacpp_tekken_tokens.json`: for each text of tests/fixtures/tekken_vocab.py
(CORPUS, 120 seeded random texts, a rendered agent prompt) llama.cpp's ids with special-token parsing
on and off, BOS added. The vocabulary-only GGUF it loads is written by Strata's environment (gguf-py's
MistralVocab on mistral-common's tekken_240911.json, as llama.cpp's converter does).

What it is not: a test (tests/text/test_tokenizer_tekken_llamacpp.py reads the JSON).

Run (from the repository root):
    .venv/bin/python -c "from tests.fixtures.tekken_vocab import write_vocab_gguf; write_vocab_gguf('/tmp/tekken.gguf')"
    /work/refenv/venv2/bin/python benchmarks/make_llamacpp_tekken_tokens.py --gguf /tmp/tekken.gguf \
        --out tests/data/llamacpp_tekken_tokens.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamacpp_vocab import open_vocab, token_cases, write_cases  # noqa: E402

from tests.fixtures.tekken_vocab import CORPUS, random_texts  # noqa: E402

PROMPT = ('<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][AVAILABLE_TOOLS][{"type": "function", "function": '
          '{"name": "bash"}}][/AVAILABLE_TOOLS][INST]ls[/INST][TOOL_CALLS]bash[ARGS]{"cmd": "ls"}</s>'
          '[TOOL_RESULTS]a.py[/TOOL_RESULTS][THINK]x[/THINK]y')


def main() -> None:
    llama_cpp, llm, args = open_vocab(__doc__)
    cases = token_cases(llm, [*CORPUS, *random_texts(120, seed=99), PROMPT])
    head = {"command": "benchmarks/make_llamacpp_tekken_tokens.py", "llama_cpp": llama_cpp.__version__}
    write_cases(args.out, head, cases)
    print(f"{len(cases)} cases -> {args.out}")


if __name__ == "__main__":
    main()
