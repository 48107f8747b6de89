"""Record llama.cpp's token ids for the pre-tokenizer names of tests/fixtures/pre_vocab.py, as parity data for
Strata's tests.

What it is: a script run with llama-cpp-python (a side environment, not a Strata dependency) that writes
`tests/data/llamacpp_pre_tokens.json`: for each name, whether llama.cpp adds BOS (no add_bos key in the file:
the name's default) and, for each text of pre_vocab.TEXTS, llama.cpp's ids (add_bos=True, special=False).
The vocabulary-only GGUFs it loads are written by Strata's environment (pre_vocab.write_vocab_gguf).

What it is not: a test (tests/text/test_tokenizer_pre_llamacpp.py reads the JSON).

Run (from the repository root):
    .venv/bin/python -c "from tests.fixtures.pre_vocab import NAMES, write_vocab_gguf; \
from strata.engine.models import default_model_path; \
[write_vocab_gguf(default_model_path(), n, f'/tmp/pre/{n}.gguf') for n in NAMES]"
    /work/refenv/venv2/bin/python benchmarks/make_llamacpp_pre_tokens.py --dir /tmp/pre \
        --out tests/data/llamacpp_pre_tokens.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.pre_vocab import NAMES, TEXTS  # noqa: E402


def main() -> None:
    import llama_cpp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="folder holding <name>.gguf for each name")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    lines = []
    for name in NAMES:
        llm = llama_cpp.Llama(str(Path(args.dir) / f"{name}.gguf"), vocab_only=True, verbose=False)
        add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model)))
        tokens = [llm.tokenize(t.encode("utf-8"), add_bos=True, special=False) for t in TEXTS]
        lines.append(json.dumps({"pre": name, "add_bos": add_bos, "tokens": tokens}, separators=(",", ":")))
        del llm
    head = {"command": "benchmarks/make_llamacpp_pre_tokens.py", "llama_cpp": llama_cpp.__version__,
            "texts": list(TEXTS)}
    text = json.dumps(head, ensure_ascii=False)[:-1] + ', "names": [\n' + ",\n".join(lines) + "\n]}\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"{len(NAMES)} names x {len(TEXTS)} texts -> {args.out}")


if __name__ == "__main__":
    main()
