"""What aligning an arriving prompt with the contexts' histories (server/byte_align.py) costs the scheduler's
thread: byte_align.aligned_prompt over 5 histories, the default model's tokenizer, median of 5 calls. Cases: a
text split otherwise all through (every token of 3+ bytes in two, from the start: the per-stretch bound), every
other token split (shared tokens between the splits: the bound in all is reached), and an agent's turn (a 20K-token
history whose last 160-token answer has 3 splits, beside 4 other contexts). The text: server/scheduler.py x3.

    .venv/bin/python benchmarks/align_walk_cost.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from strata.engine import Engine
    from strata.server.byte_align import aligned_prompt
    from strata.server.slots import common_prefix

    from tests.conftest import find_default_model

    tok = Engine(str(find_default_model()), n_ctx=64, n_threads=1).tokenizer
    canon = tok.encode((ROOT / "server" / "scheduler.py").read_text() * 3, add_bos=False)

    def split(every: int) -> list[int]:
        out: list[int] = []
        for x, t in enumerate(canon):
            s = tok.token_bytes(t).decode(errors="ignore")
            whole = len(s) >= 3 and s.encode() == tok.token_bytes(t)
            out += tok.encode(s[:1], add_bos=False) + tok.encode(s[1:], add_bos=False) if whole and x % every == 0 else [t]
        assert tok.decode(out) == tok.decode(canon)
        return out

    def timed(label: str, hists: list[list[int]], prompt: list[int]) -> None:
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            out = aligned_prompt(hists, prompt, tok.token_bytes, tok.parsed_ids, common=common_prefix)
            ts.append(time.perf_counter() - t0)
        print(f"{label}: median {sorted(ts)[2] * 1000:.2f} ms (held {out.held_before} -> {out.held_after})")

    timed("5 histories, every long token split", [split(1)] * 5, canon + [1, 2, 3])
    timed("5 histories, every other long token split", [split(2)] * 5, canon + [1, 2, 3])
    base, answer = canon[:20000], list(canon[20000:20160])
    for at in (130, 70, 10):
        s = tok.token_bytes(answer[at]).decode(errors="ignore")
        if len(s) >= 2 and s.encode() == tok.token_bytes(answer[at]):
            answer[at:at + 1] = tok.encode(s[:1], add_bos=False) + tok.encode(s[1:], add_bos=False)
    others = [canon[:5000], canon[:12000], canon[:300], canon[:15000]]
    timed("an agent turn: 20K history, a 160-token answer with 3 splits, 4 other contexts",
          [base + answer] + others, canon[:21000])


if __name__ == "__main__":
    main()
