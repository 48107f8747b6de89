"""Record llama.cpp's token ids and end-of-generation tokens on a GLM-shaped vocabulary, as parity data for
Strata's tests.

What it is: a script run with llama-cpp-python (a side environment, not a Strata dependency) that writes
`tests/data/llamacpp_glm_tokens.json`: for each text of tests/fixtures/glm_vocab.py TEXTS llama.cpp's ids
with special-token parsing on and off (add_bos=True: llama.cpp adds none for "glm4" without the file's
add_bos key), and the ids llama.cpp treats as end of generation. The vocabulary-only GGUF it loads is
written by Strata's environment (glm_vocab.write_vocab_gguf: the default model's vocabulary under
tokenizer.ggml.pre "glm4" with GLM-4.5's markup, BOS, EOT and EOM).

What it is not: a test (tests/text/test_tokenizer_glm_llamacpp.py reads the JSON).

Run (from the repository root):
    .venv/bin/python -c "from tests.fixtures.glm_vocab import write_vocab_gguf; from strata.engine.models \
import default_model_path; write_vocab_gguf(default_model_path(), '/tmp/glm.gguf')"
    /work/refenv/venv2/bin/python benchmarks/make_llamacpp_glm_tokens.py --gguf /tmp/glm.gguf \
        --out tests/data/llamacpp_glm_tokens.json
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamacpp_vocab import eog_ids, open_vocab, token_cases, write_cases  # noqa: E402

from tests.fixtures.glm_vocab import TEXTS  # noqa: E402


def main() -> None:
    llama_cpp, llm, args = open_vocab(__doc__)
    eog = eog_ids(llama_cpp, llm)
    cases = token_cases(llm, list(TEXTS))
    head = {"command": "benchmarks/make_llamacpp_glm_tokens.py", "llama_cpp": llama_cpp.__version__, "eog": eog}
    write_cases(args.out, head, cases)
    print(f"{len(cases)} cases, eog {eog} -> {args.out}")


if __name__ == "__main__":
    main()
