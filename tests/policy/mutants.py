"""Deliberately broken versions of the slot policy; each must fail some test in tests/policy.

Run on demand (about a minute): `.venv/bin/python -m tests.policy.mutants`. Each mutant is a
one-line change of server/slot_policy.py's (or server/slot_returns.py's) source, executed into the module in a fresh process
before pytest imports the tests; the file on disk is never touched. Prints one line per mutant
(killed by which test, or SURVIVED) and exits 1 if any survives. Output recorded in
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "server" / "slot_policy.py"

# name -> (original text, broken text); the original must occur exactly once
MUTANTS: dict[str, tuple[str, str]] = {
    "protection curve point 2K -> 4 s": ("(2_000, 2.0)", "(2_000, 4.0)"),
    "retention exponent 0.7 -> 0.5": ("RETENTION_EXPONENT = 0.7", "RETENTION_EXPONENT = 0.5"),
    "expired floor 0.25 -> 0.5": ("RETENTION_EXPIRED_FLOOR = 0.25", "RETENTION_EXPIRED_FLOOR = 0.5"),
    "linear decay instead of quadratic": ("floor * (1.0 - x * x)", "floor * (1.0 - x)"),
    "idle limit 0 means zero value, not no decay": ("    if zero <= 0:\n        return floor",
                                                   "    if zero <= 0:\n        return 0.0"),
    "a shorter idle limit cuts protection": ("    if age_s < ttl:\n        return retention",
                                             "    if age_s < min(ttl, zero or ttl):\n        return retention"),
    "continued conversation ignores its own slot (place)": (
        "    own = [s for s in idle if holds_own_prefix(s, tol, cfg)]\n    if own:\n        t = max(own, key=lambda s: (s.common, -group_load",
        "    own = []\n    if own:\n        t = max(own, key=lambda s: (s.common, -group_load"),
    "group balance first: continued moves to any slot of a less loaded group": (
        "blank = [s for s in idle if (s.blank or s.n_tokens <= 0) and group_load.get(s.group, 0) < load]",
        "blank = [s for s in idle if group_load.get(s.group, 0) < load]"),
    "worth keeping not last": ("    return (worth_keeping, group_load.get(s.group, 0)", "    return (False, group_load.get(s.group, 0)"),
    "group load ignored in the reclaim order": ("(worth_keeping, group_load.get(s.group, 0), v,", "(worth_keeping, 0, v,"),
    "blank not first at an equal value": ("v, not blank, s.last_use, s.slot)", "v, blank, s.last_use, s.slot)"),
    "protected slots reclaimed like expired ones": ("        if s.busy or is_protected(s, now, cfg):\n            continue",
                                                   "        if s.busy:\n            continue"),
    "no-wait losses within 10% ignore group load": ("least * (1.0 + cfg.loss_tie_share)", "least"),
    "no wait: waits (no slot) when every history is protected": (
        "    t = least_loss_slot(idle, now, cfg, group_load)\n    assert t is not None",
        "    return Decision(None, \"wait\")\n    t = least_loss_slot(idle, now, cfg, group_load)\n    assert t is not None"),
    "expiry needs strictly more than expire_s": ("now - s.last_use >= cfg.expire_s", "now - s.last_use > cfg.expire_s"),
    "expire fallback takes the longest history": ("(s.n_tokens, s.last_use, s.slot))\n        return _with_source(t, \"shortest\"",
                                                  "(-s.n_tokens, s.last_use, s.slot))\n        return _with_source(t, \"shortest\""),
    "expire: most recently used of the expired": ("t = min(expired, key=lambda s: (s.last_use, s.slot))",
                                                  "t = max(expired, key=lambda s: (s.last_use, s.slot))"),
    "empty slot not preferred in pick_slot": ("    blank = [s for s in idle if s.blank or s.n_tokens <= 0]\n    if blank:",
                                              "    blank = []\n    if blank:"),
    "own slot without the half-shared condition": ("\n            and s.common >= cfg.own_min_share * s.n_tokens)", ")"),
    "near-match tolerance without the 4096 cap": ("cfg.near_match_s * prompt_rate_tps), cfg.near_match_tokens))",
                                                  "cfg.near_match_s * prompt_rate_tps), 1e12))"),
    "park: kept share compared with the whole history": ("s.common >= need for s in slots", "s.common >= main.n_tokens for s in slots"),
    "park: value ratio inverted": ("main_value / cfg.park_value_ratio if", "main_value * cfg.park_value_ratio if"),
    "park: min value not checked": ("or main_value < cfg.park_min_value ", ""),
    "park: keep score not checked": ("main_value < cfg.expired_keep_score or ", ""),
    "park: own older copy not first": ("    if own:\n        t = max(own, key=lambda s: (s.common, -s.slot))",
                                       "    if False:\n        t = max(own, key=lambda s: (s.common, -s.slot))"),
    "park renews the last use": ("ParkDecision(t.slot, why, None, t.common, main.last_use, lost)",
                                 "ParkDecision(t.slot, why, None, t.common, now, lost)"),
    "from_env reads an unknown 0/1 word as off": (
        "                out[name] = False\n            else:\n"
        "                raise ValueError(f\"{var}={raw!r}: expected 0 or 1\")\n            continue",
        "                out[name] = False\n            else:\n"
        "                out[name] = False\n            continue"),
}

# The learned policy (server/slot_returns.py): the same, against that module.
LEARNED_MUTANTS: dict[str, tuple[str, str]] = {
    "learned: no pseudo-histories from the coarser level": ("w = prior_weight if r != top else 0.0", "w = 0.0"),
    "learned: levels blended from fine to coarse": ("for r in (top, coarse, fine):", "for r in (fine, coarse, top):"),
    "learned: the current bin counts whole": ("f += q[g] * (t - lo) / (hi - lo)", "f += q[g]"),
    "learned: wait not measured from the idle age": ("wait += m * ((lo + hi) / 2 - age_s)", "wait += m * ((lo + hi) / 2)"),
    "learned: p not conditioned on not yet back": ("return min(mass / alive, 1.0), wait / mass",
                                                  "return min(mass, 1.0), wait / mass"),
    "learned: cost ignores the shared prefix": ("p * max(s.n_tokens - s.common, 0) / max(wait, MIN_WAIT_S)",
                                                "p * s.n_tokens / max(wait, MIN_WAIT_S)"),
    "learned: cost ignores the wait": ("p * max(s.n_tokens - s.common, 0) / max(wait, MIN_WAIT_S)",
                                       "p * max(s.n_tokens - s.common, 0)"),
    "learned: min_histories ignored": ("if d.reason in SEED_KEPT or stats.histories < lcfg.min_histories:",
                                       "if d.reason in SEED_KEPT:"),
    "learned: protection ignored when asked for": ("    if lcfg.protect:\n", "    if False:\n"),
    "learned: keep_tps tier dropped": ("(costs[s.slot] >= lcfg.keep_tps, group_load", "(False, group_load"),
    "learned: turn buckets shifted by one": ("bisect.bisect_right(TURN_EDGES, max(turn, 1)) - 1",
                                            "bisect.bisect_right(TURN_EDGES, max(turn, 1))"),
    "learned: a continued conversation may move (own prefix not kept)": (
        'SEED_KEPT = ("own_prefix", "blank_less_loaded", "all_busy", "blank", "empty")',
        'SEED_KEPT = ("all_busy", "blank", "empty")'),
}

RUNNER = """
import importlib
import sys
m = importlib.import_module(sys.argv[4])
src = open(m.__file__).read()
old, new = sys.argv[1], sys.argv[2]
assert src.count(old) == 1, 'mutant text must occur exactly once: ' + old
exec(compile(src.replace(old, new), m.__file__, 'exec'), m.__dict__)
import pytest
sys.exit(pytest.main(['-q', '-x', '-p', 'no:cacheprovider', '--no-header', sys.argv[3]]))
"""


def run_one(old: str, new: str, module: str = "strata.server.slot_policy") -> tuple[bool, str]:
    p = subprocess.run([sys.executable, "-c", RUNNER, old, new, str(ROOT / "tests" / "policy"), module],
                       cwd=ROOT, capture_output=True, text=True)
    if "mutant text must occur" in p.stderr:
        raise SystemExit(f"mutant text not found exactly once: {old!r}")
    failed = [ln.split(" ")[1] for ln in p.stdout.splitlines() if ln.startswith("FAILED ")]
    return p.returncode != 0, (failed[0].split("::", 1)[-1] if failed else p.stdout.strip().splitlines()[-1])


def main() -> int:
    survived = 0
    every = [(name, old, new, "strata.server.slot_policy") for name, (old, new) in MUTANTS.items()]
    every += [(name, old, new, "strata.server.slot_returns") for name, (old, new) in LEARNED_MUTANTS.items()]
    for name, old, new, module in every:
        killed, by = run_one(old, new, module)
        survived += not killed
        print(f"{'killed  ' if killed else 'SURVIVED'} {name}: {by if killed else ''}", flush=True)
    print(f"{len(every) - survived} of {len(every)} mutants killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
