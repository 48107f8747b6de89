"""The two model files the GPU scripts measure (benchmarks/gpu_check.sh, gpu_decode_profile.sh).

    python3 benchmarks/gpu_models.py SMOL_PATH [BIG_PATH | -]

SMOL_PATH: the default model's shape (SmolLM2-135M: 30 layers, 576 wide, 9 / 3 heads, 1536 FFN, Q4_1,
tied embeddings) with random weights and a 1,024-token vocabulary (the real file is over what a device
call may carry). BIG_PATH: a 1B-class shape (16 layers, 2048 wide, 32 / 8 heads, 8192 FFN, Q4_K with
Q6_K ffn_down / attn_v); "-" skips it. Random weights (tests/fixtures/tiny_gguf.py): speed figures only.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fixtures.tiny_gguf import make_tiny_gguf  # noqa: E402


def main() -> None:
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    t = time.time()
    make_tiny_gguf(sys.argv[1], n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_vocab=1024,
                   dtype="Q4_1", ctx_len=8192, rope_freq_base=100000.0, tied_embeddings=True, seed=1)
    if len(sys.argv) == 3 and sys.argv[2] != "-":
        make_tiny_gguf(sys.argv[2], n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192, n_vocab=1024,
                       dtype="Q4_K", ctx_len=131072, rope_freq_base=500000.0, seed=2,
                       type_overrides={"ffn_down": "Q6_K", "attn_v": "Q6_K"})
    print(f"models written in {time.time() - t:.1f} s")


if __name__ == "__main__":
    main()
