"""Replay measurement behind the slot policy defaults (benchmarks/RESULTS.md, "Slot policy replay").

Runs `strata replay`'s engine (strata.server.replay.cli.replay) over the Mooncake traces and
generated agent timelines from 2 to 128 slots, prints one markdown table per case (change in prompt
tokens read against LRU; thinned cases: mean of the draws and the worst single draw) and a check of
the goals for `default` and `affinity`: fewer tokens than lru and lcp-lru at every slot count, the gap to the
offline yardstick, and no thinned draw above LRU. Takes several minutes on one core:

    .venv/bin/python benchmarks/replay_policies.py [--quick] [--traces /work/shared/traces]

`--side-by-side` instead prints, for the worst cells of issue 5 (agents seed 1 at 3 slots, the
Mooncake synthetic trace 10% at 6 slots and whole at 32), `default`'s evictions compared with the
yardstick's choice from the same slots (server/replay/compare.py): how often they differ and, by when
each victim is next continued, what `default`'s victims would have reused.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata.server.replay.cli import policy_cell, replay  # noqa: E402
from strata.server.replay.compare import compare  # noqa: E402
from strata.server.replay.generate import generate  # noqa: E402
from strata.server.replay.simulator import SimOptions  # noqa: E402
from strata.server.replay.timeline import overlay, read_mooncake, thin  # noqa: E402

# `default` is what `strata serve` does (the learned choice in seed 000's order); `affinity` is seed
# 000's place() alone (STRATA_SLOT_LEARNED=0)
POLICIES = ["lru", "lcp-lru", "expire:600", "expire:300", "shortest", "gds", "gds+expire:600", "affinity",
            "default", "learned+protect", "oracle"]
CHECKED = ("default", "affinity")  # the goals are checked for these


def goal_notes(policy: str, by: dict, counts: list[int], draws: int) -> list[str]:
    """Issue 5's goals for one policy: below lru and lcp-lru, within a point of the yardstick, no
    thinned draw above lru."""
    notes = []
    for n in counts:
        d, lru, lcp, orc = by[(policy, n)], by[("lru", n)], by[("lcp-lru", n)], by[("oracle", n)]
        key = "vs_lru_mean" if draws > 1 else "vs_lru"
        if not d["prompt_tokens_read"] < lru["prompt_tokens_read"]:
            notes.append(f"{n} slots: {policy} not below lru")
        if not d["prompt_tokens_read"] < lcp["prompt_tokens_read"]:
            notes.append(f"{n} slots: {policy} not below lcp-lru")
        gap = (d[key] - orc[key]) * 100
        if gap > 1.0:
            notes.append(f"{n} slots: {policy} {gap:.1f} points from the yardstick")
        if draws > 1 and d["vs_lru_worst"] > 0:
            notes.append(f"{n} slots: a {policy} draw {d['vs_lru_worst'] * 100:+.2f}% above lru")
    return notes


def default_vs_place(by: dict, counts: list[int], draws: int) -> list[str]:
    """Where `default` (the learned choice) does not read fewer tokens than `affinity` (seed 000's
    place() alone; mean of the draws), or has a draw above lru where `affinity` has none."""
    out = []
    key = "vs_lru_mean" if draws > 1 else "vs_lru"
    for n in counts:
        d, a = by[("default", n)], by[("affinity", n)]
        if not d[key] < a[key]:
            out.append(f"{n} slots: default {d[key] * 100:+.1f}% vs affinity {a[key] * 100:+.1f}%")
        if draws > 1 and d["vs_lru_worst"] > 0 and not a["vs_lru_worst"] > 0:
            out.append(f"{n} slots: a default draw {d['vs_lru_worst'] * 100:+.2f}% above lru (affinity none)")
    return out


def table(title: str, command: str, rows: list[dict]) -> tuple[str, list[str], list[str]]:
    counts = sorted({r["slots"] for r in rows})
    by = {(r["policy"], r["slots"]): r for r in rows}
    draws = rows[0]["draws"]
    out = [f"#### {title}", "", f"`{command}`", "",
           "| policy | " + " | ".join(f"{n} slots" for n in counts) + " |",
           "| --- | " + " | ".join("---:" for _ in counts) + " |"]
    for p in dict.fromkeys(r["policy"] for r in rows):
        cells = [policy_cell(by[(p, n)], draws) for n in counts]
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    total = rows[0]["prompt_tokens_total"] / 1e6
    out.append("")
    out.append(f"Prompt tokens in the timeline: {total:.2f}M" + (
        f" over {draws} draws; cells: mean change of the draws (worst single draw)." if draws > 1 else "."))
    notes = []
    for policy in CHECKED:
        mine = goal_notes(policy, by, counts, draws)
        out.append("")
        out.append(f"Goals for `{policy}`: " + ("all met." if not mine else "; ".join(mine) + "."))
        notes += mine
    versus = default_vs_place(by, counts, draws)
    out.append("")
    out.append("`default` against `affinity` (place() alone): " + ("fewer tokens at every slot count."
                                                                  if not versus else "; ".join(versus) + "."))
    return "\n".join(out) + "\n", notes, versus


def side_by_side(title: str, timelines: list, n_slots: int) -> str:
    """`default` against the yardstick, decision by decision, summed over the timelines (draws)."""
    read = lru = agree = 0
    count: Counter = Counter()
    tokens: Counter = Counter()
    for tl in timelines:
        c = compare(tl, n_slots, "default")
        read += c.result.prompt_tokens_read
        lru += replay(tl, [n_slots], ["lru"], SimOptions())[0]["prompt_tokens_read"]
        agree += c.agree
        k, t = c.classes()
        count.update(k)
        tokens.update(t)
    out = [f"#### {title}, {n_slots} slots", "",
           f"`default` read {read / 1e6:.2f}M ({(read / lru - 1) * 100:+.1f}% against lru, totals of the draws); evictions where the "
           f"yardstick gives up the same history: {agree}; another: {sum(count.values())}.", "",
           "| `default`'s reason | its victim next continued | the yardstick's victim | decisions | tokens "
           "`default`'s victim would have reused |", "| --- | --- | --- | ---: | ---: |"]
    for (reason, mine, theirs), n in count.most_common(12):
        out.append(f"| {reason} | {mine} | {theirs} | {n} | {tokens[(reason, mine, theirs)] / 1e6:.2f}M |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--quick", action="store_true", help="fewer draws and slot counts (a smoke run)")
    ap.add_argument("--side-by-side", action="store_true", help="default against the yardstick, decision by decision")
    args = ap.parse_args()
    conv = read_mooncake(Path(args.traces) / "mooncake_conversation_trace.jsonl")
    synth = read_mooncake(Path(args.traces) / "mooncake_synthetic_trace.jsonl")
    agents = {s: generate("agents", 8.0, s) for s in (1, 2, 3)}
    if args.side_by_side:
        print(side_by_side("Generated agent timeline, 8 hours, seed 1", [agents[1]], 3))
        print(side_by_side("Mooncake synthetic trace, 10% of its conversations (5 draws)",
                           [thin(synth, 0.1, d) for d in range(5)], 6))
        print(side_by_side("Mooncake synthetic trace, whole", [synth], 32))
        print(side_by_side("Mooncake conversation trace, 10% of its conversations (5 draws)",
                           [thin(conv, 0.1, d) for d in range(5)], 8))
        return 0
    draws = 2 if args.quick else 5
    small = [2, 4] if args.quick else [2, 3, 4, 6, 8]
    big = [32] if args.quick else [32, 64, 128]
    opts = SimOptions()
    conv_path = "../shared/traces/mooncake_conversation_trace.jsonl"
    synth_path = "../shared/traces/mooncake_synthetic_trace.jsonl"
    pol = ",".join(POLICIES)
    cases = [
        (f"Mooncake conversation trace, {int(s * 100)}% of its conversations", conv, small, s, draws,
         f"strata replay {conv_path} --slots {','.join(map(str, small))} --thin {s} --draws {draws}")
        for s in (0.05, 0.10, 0.25, 0.50)
    ]
    cases.append(("Mooncake conversation trace, whole", conv, [8] + big, 1.0, 1,
                  f"strata replay {conv_path} --slots {','.join(map(str, [8] + big))}"))
    cases += [(f"Mooncake synthetic trace, {int(s * 100)}% of its conversations", synth, small, s, draws,
               f"strata replay {synth_path} --slots {','.join(map(str, small))} --thin {s} --draws {draws}")
              for s in (0.10, 0.25)]
    cases.append(("Mooncake synthetic trace, whole", synth, [8] + big, 1.0, 1,
                  f"strata replay {synth_path} --slots {','.join(map(str, [8] + big))}"))
    for seed, tl in agents.items():
        cases.append((f"Generated agent timeline, 8 hours, seed {seed}", tl, small + [16], 1.0, 1,
                      f"strata replay agents:8:{seed} --slots {','.join(map(str, small + [16]))}"))
    cases.append(("Generated agent timeline (seed 1), half of its conversations", agents[1], small, 0.5, draws,
                  f"strata replay agents:8:1 --slots {','.join(map(str, small))} --thin 0.5 --draws {draws}"))
    for k, n in zip((4, 8, 16), big, strict=False):
        cases.append((f"Generated agent timeline (seed 1) laid over itself {k} times", overlay(agents[1], k), [n],
                       1.0, 1, f"strata replay agents:8:1 --overlay {k} --slots {n}"))
    all_notes, all_versus = [], []
    for title, tl, slots, share, k, command in cases:
        t0 = time.time()
        rows = replay(tl, slots, POLICIES, opts, share, k if share < 1 else 1)
        text, notes, versus = table(title, command + f" --policies {pol}", rows)
        print(text, flush=True)
        print(f"<!-- {time.time() - t0:.1f} s -->\n", flush=True)
        all_notes += [f"{title}: {x}" for x in notes]
        all_versus += [f"{title}: {x}" for x in versus]
    print("#### Goals not met by `default` or `affinity`\n")
    print("\n".join(f"- {x}" for x in all_notes) if all_notes else "none")
    print("\n#### Where `default` (the learned choice) does not beat `affinity` (seed 000's place() alone)\n")
    print("\n".join(f"- {x}" for x in all_versus) if all_versus else "nowhere")
    return 0


if __name__ == "__main__":
    sys.exit(main())
