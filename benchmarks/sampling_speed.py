"""Microseconds per Sampler.sample on a 49152-entry logits row (SmolLM2's vocabulary), per configuration.

What it is: a quick benchmark of strata.engine.sampling (the goal: greedy well under a millisecond).
What it is not: a test; nothing is asserted.
Run: .venv/bin/python benchmarks/sampling_speed.py
"""

from __future__ import annotations

import time

import numpy as np
from strata.engine.sampling import Sampler, SamplingParams

N_VOCAB = 49152
CONFIGS = {
    "greedy": SamplingParams(),
    "greedy + penalties (64 of 200 history)": SamplingParams(repeat_penalty=1.1, frequency_penalty=0.1,
                                                             presence_penalty=0.1),
    "temperature 0.8": SamplingParams(temperature=0.8, seed=0),
    "temperature 0.8, top-k 40, top-p 0.95, min-p 0.05": SamplingParams(temperature=0.8, top_k=40, top_p=0.95,
                                                                         min_p=0.05, seed=0),
    "temperature 0.8, top-p 0.9": SamplingParams(temperature=0.8, top_p=0.9, seed=0),
}


def main() -> None:
    rng = np.random.default_rng(0)
    history = [int(x) for x in rng.integers(0, N_VOCAB, 200)]
    # a language model's logits are peaked (a few tokens hold most of the mass); flat ones are the worst case
    for shape, scale in (("peaked", 8.0), ("flat", 1.0)):
        logits = (rng.standard_normal(N_VOCAB) * scale).astype(np.float32)  # (n_vocab,)
        for name, params in CONFIGS.items():
            sampler = Sampler(params, N_VOCAB)
            n = 200
            t0 = time.perf_counter()
            for _ in range(n):
                sampler.sample(logits, history)
            print(f"{shape:>6} {name:>52}: {(time.perf_counter() - t0) / n * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
