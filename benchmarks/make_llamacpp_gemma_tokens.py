"""Record llama.cpp's token ids and end-of-generation tokens on a SentencePiece vocabulary in Gemma 3's shape,
as parity data for Strata's tests.

What it is: a script run with llama-cpp-python (a side environment, not a Strata dependency) that writes
`tests/data/llamacpp_gemma_tokens.json`: for each text of tests/text/gemma_vocab.py TEXTS llama.cpp's ids with
special-token parsing on and off (add_bos=True: the file's add_bos_token decides), whether llama.cpp adds BOS,
and the ids it treats as end of generation. The GGUF it loads is written by Strata's environment
(gemma_vocab.write_gemma_gguf).

What it is not: a test (tests/text/test_tokenizer_gemma_llamacpp.py reads the JSON).

Run (from the repository root):
    .venv/bin/python -c "from tests.text.gemma_vocab import write_gemma_gguf; write_gemma_gguf('/tmp/gemma.gguf')"
    /work/refenv/venv2/bin/python benchmarks/make_llamacpp_gemma_tokens.py --gguf /tmp/gemma.gguf \
        --out tests/data/llamacpp_gemma_tokens.json
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamacpp_vocab import eog_ids, open_vocab, token_cases, write_cases  # noqa: E402

from tests.text.gemma_vocab import TEXTS  # noqa: E402


def main() -> None:
    llama_cpp, llm, args = open_vocab(__doc__)
    eog = eog_ids(llama_cpp, llm)
    cases = token_cases(llm, list(TEXTS))
    head = {"command": "benchmarks/make_llamacpp_gemma_tokens.py", "llama_cpp": llama_cpp.__version__,
            "gguf_sha256": hashlib.sha256(Path(args.gguf).read_bytes()).hexdigest(),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))),
            "eog": eog}
    write_cases(args.out, head, cases)
    print(f"{len(cases)} cases, add_bos {head['add_bos']}, eog {eog} -> {args.out}")


if __name__ == "__main__":
    main()
