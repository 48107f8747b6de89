"""Trial: how far the default model's greedy answer after a KV shift (Engine.shift, llama.cpp's --cache-reuse) is from
a fresh read of the same tokens, on code.

For each of the first 12 files of server/*.py (sorted) with at least 720 tokens: its first 700 tokens read, then
tokens [a, b) dropped by a shift (a 12-token cut at 300 and a 256-token cut at 40), 8 more tokens read and 16 greedy
tokens, against the same 700 - (b - a) + 8 tokens read fresh. Printed per case: how many leading tokens of the two
answers agree (16: all), then the totals. The files change with the tree: name the commit with the numbers.

    .venv/bin/python benchmarks/kv_shift_greedy.py [f16|q8_0]
"""

from __future__ import annotations

import glob
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from strata.engine import Engine  # noqa: E402

from tests.conftest import find_default_model  # noqa: E402

CUTS = ((300, 312), (40, 296))
READ, TAIL, ANSWER = 700, 8, 16


def main() -> None:
    e = Engine(find_default_model(), n_ctx=2048, n_threads=2, kv_type=sys.argv[1] if len(sys.argv) > 1 else "f16")

    def greedy() -> list[int]:
        out = []
        for _ in range(ANSWER):
            out.append(int(np.argmax(e.logits(0))))
            e.prefill(0, out[-1:])
        return out

    agree = []
    for path in sorted(glob.glob(str(ROOT / "server" / "*.py")))[:12]:
        toks = e.tokenize(Path(path).read_text()[:6000], special=False)
        if len(toks) < READ + 20:
            continue
        for a, b in CUTS:
            e.truncate(0, 0)
            e.prefill(0, toks[:READ])
            e.shift(0, a, b)
            e.prefill(0, toks[READ:READ + TAIL])
            got = greedy()
            e.truncate(0, 0)
            e.prefill(0, toks[:a] + toks[b:READ + TAIL])
            want = greedy()
            same = next((k for k in range(ANSWER) if got[k] != want[k]), ANSWER)
            agree.append(same)
            print(f"{Path(path).name} cut {b - a}: {same} leading tokens agree", flush=True)
    print(f"first token equal in {sum(s >= 1 for s in agree)} of {len(agree)}, all {ANSWER} in "
          f"{sum(s == ANSWER for s in agree)}")


if __name__ == "__main__":
    main()
