"""place() against the staged reference (tests/policy/reference.py) on many random slot tables,
the check seed 000 reports for 200,000 tables. Not a speed benchmark; run on demand:

    .venv/bin/python benchmarks/policy_properties.py [--tables 200000] [--seed 0]

Prints how many tables were checked per configuration and any table where the two differ.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata.server.slot_policy import PolicyConfig, place  # noqa: E402

from tests.policy.reference import NOW, place_reference, random_table  # noqa: E402

CONFIGS = {"default": PolicyConfig(), "decay 150 s": PolicyConfig(idle_value_zero_s=150),
           "no decay": PolicyConfig(idle_value_zero_s=0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    differ = 0
    for _ in range(args.tables):
        slots, request, load = random_table(rng)
        for name, cfg in CONFIGS.items():
            a = place(slots, request, NOW, cfg, load).slot
            b = place_reference(slots, request, NOW, cfg, load)
            if a != b:
                differ += 1
                if differ <= 5:
                    print(f"DIFFER ({name}): place={a} reference={b} slots={slots} load={load}")
    print(f"{args.tables} random slot tables x {len(CONFIGS)} configurations: "
          f"place() and the staged reference chose the same slot in all but {differ}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
