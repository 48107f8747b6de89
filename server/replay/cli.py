"""`strata replay`: run a request timeline through simulated slots under each policy and print the
prompt tokens read and the change against LRU (seed 001's tables). Also
`strata replay generate --kind agents --hours H --seed S` to write an agent-style timeline.

Timeline: a Mooncake JSONL file, a Strata timeline JSONL file (docs/slot-policy.md), or
`agents:HOURS:SEED` for a generated one. Not here: the simulation (simulator.py), the policies.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .generate import KINDS, generate
from .policies import POLICY_NAMES, make_policy
from .simulator import SimOptions, simulate
from .timeline import Request, TimelineError, load, overlay, thin, write_strata

DEFAULT_POLICIES = "lru,lcp-lru,expire:600,expire:300,shortest,gds,gds+expire:600,affinity,default,learned,oracle"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("timeline", help="a Mooncake or Strata JSONL file, `agents:HOURS:SEED`, or `generate`")
    parser.add_argument("--slots", default="2,4,6,8", help="slot counts, comma-separated (default 2,4,6,8)")
    parser.add_argument("--policies", default=DEFAULT_POLICIES,
                        help=f"comma-separated, from: {', '.join(POLICY_NAMES)} (default: {DEFAULT_POLICIES}; the others "
                             "run only when named)")
    parser.add_argument("--groups", type=int, default=1, help="slot groups (slot i in group i %% G), for affinity")
    parser.add_argument("--thin", type=float, default=1.0, help="replay this share of the conversations")
    parser.add_argument("--draws", type=int, default=1, help="random draws of --thin (seeds 0..K-1)")
    parser.add_argument("--overlay", type=int, default=1,
                        help="lay the timeline over itself K times (renamed, shifted copies) for many slots")
    parser.add_argument("--ram-cache-tokens", type=int, default=0, help="a RAM conversation cache below the slots")
    parser.add_argument("--ram-min-tokens", type=int, default=4096, help="smallest history the RAM cache keeps")
    parser.add_argument("--prefill-tps", type=float, default=0.0, help="prompt tokens/s; 0: instant service")
    parser.add_argument("--decode-tps", type=float, default=0.0, help="output tokens/s; 0: instant service")
    parser.add_argument("--prompt-rate", type=float, default=2000.0, help="tokens/s told to policies (near matches)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    gen = parser.add_argument_group("generate")
    gen.add_argument("--kind", default="agents", help=f"generator kind ({', '.join(KINDS)})")
    gen.add_argument("--hours", type=float, default=8.0, help="length of the generated timeline in hours (default 8)")
    gen.add_argument("--seed", type=int, default=0, help="random seed of the generator (default 0)")
    gen.add_argument("--out", default="-", help="file for the generated timeline (default: stdout)")


MAX_SLOTS = 65536
GENERATE_ONLY = ("kind", "hours", "seed", "out")   # the `generate` group: a replay reads none of them


def ignored_flags(args: argparse.Namespace) -> list[str]:
    """The flags set off their defaults that this form of the command does not read: `--hours`, `--seed`,
    `--out` with a timeline to replay (`strata replay TRACE --out f.jsonl` replayed and wrote nothing), the
    replay's own with `generate`. A flag typed with its default value cannot be told from one not typed."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = vars(parser.parse_args([args.timeline]))
    generating = args.timeline == "generate"
    return ["--" + k.replace("_", "-") for k, v in vars(args).items()
            if k in defaults and k != "timeline" and v != defaults[k] and (k in GENERATE_ONLY) != generating]


def _slot_counts(text: str) -> list[int]:
    items = text.split(",")
    if text.strip() and not all(x.strip() for x in items):   # `2,,4` was taken as 2,4: a count left out by mistake
        empty = next(i for i, x in enumerate(items, 1) if not x.strip())
        raise ValueError(f"--slots {text!r}: item {empty} is empty; expected whole numbers separated by commas "
                         "(2,4,6,8)")
    try:
        counts = [int(x) for x in items if x.strip()]
    except ValueError:
        raise ValueError(f"--slots {text!r}: expected whole numbers separated by commas") from None
    if not counts or any(not 1 <= n <= MAX_SLOTS for n in counts):   # 10^11 slots ran for minutes, then out of memory
        raise ValueError(f"--slots {text!r}: expected counts from 1 to {MAX_SLOTS}")
    return counts


def _refuse_to_replace(out: str) -> None:
    """`strata replay generate --out F` wrote over F without a word: a timeline recorded from real traffic
    (`strata serve --timeline-out`) cannot be made again. A file with something in it is kept."""
    path = Path(out).expanduser()
    if path.is_file() and path.stat().st_size > 0:
        raise ValueError(f"--out {out}: a file is already there ({path.stat().st_size} bytes), kept; remove it "
                         "first or give another --out")


def _timeline(spec: str) -> list[Request]:
    if spec.startswith("agents:"):
        parts = spec.split(":")
        try:
            hours, seed = float(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            raise ValueError(f"{spec!r}: expected agents:HOURS:SEED") from None
        return generate("agents", hours, seed)
    return load(spec)


def replay(requests: list[Request], slot_counts: list[int], policy_names: list[str], opts: SimOptions,
           share: float = 1.0, draws: int = 1) -> list[dict]:
    """Rows of results: per slot count and policy, totals summed over the draws, the change against
    LRU on the summed totals (`vs_lru`), and the worst single draw's change (`vs_lru_worst`)."""
    for name in policy_names:
        make_policy(name, opts.n_groups)  # refuse unknown names before any work
    names = ["lru"] + [p for p in policy_names if p != "lru"]
    timelines = [thin(requests, share, d) for d in range(draws)] if share < 1 else [requests]
    rows = []
    for n in slot_counts:
        per: dict[str, list] = {p: [] for p in names}
        for tl in timelines:
            for p in names:
                r = simulate(tl, n, make_policy(p, opts.n_groups), opts)
                if p == "oracle":  # the yardstick: the better of the two offline rules
                    alt = simulate(tl, n, make_policy("oracle-belady", opts.n_groups), opts)
                    r = alt if alt.prompt_tokens_read < r.prompt_tokens_read else r
                per[p].append(r)
        base = [r.prompt_tokens_read for r in per["lru"]]
        for p in names:
            if p == "lru" and "lru" not in policy_names:
                continue
            total = sum(r.prompt_tokens_total for r in per[p])
            read = sum(r.prompt_tokens_read for r in per[p])
            changes = [r.prompt_tokens_read / b - 1 if b else 0.0 for r, b in zip(per[p], base, strict=True)]
            rows.append({"slots": n, "policy": p, "prompt_tokens_total": total, "prompt_tokens_read": read,
                         "vs_lru": (read / sum(base) - 1) if sum(base) else 0.0,
                         "vs_lru_mean": sum(changes) / len(changes), "vs_lru_worst": max(changes),
                         "draws": len(timelines), "reused_ram": sum(r.reused_ram for r in per[p])})
    return rows


def token_count(n: float) -> str:
    """138.64M, 12.3K or 512: a small timeline (one's own --timeline-out) must not read 0.00M."""
    if n >= 1e6:
        return f"{n / 1e6:.2f}M"
    return f"{n / 1e3:.1f}K" if n >= 1e3 else f"{n:.0f}"


def policy_cell(row: dict, draws: int) -> str:
    """One cell of a replay table: tokens read for lru, the change against lru for the others (mean
    and worst single draw when there are several draws)."""
    if row["policy"] == "lru":
        return f"{token_count(row['prompt_tokens_read'])} read"
    if draws > 1:
        return f"{row['vs_lru_mean'] * 100:+.1f}% (worst {row['vs_lru_worst'] * 100:+.1f}%)"
    return f"{row['vs_lru'] * 100:+.1f}%"


def legend(policies: list[str]) -> str:
    """What a table's cells are (it said nothing of it: is +181.3% better or worse?)."""
    said = ["lru: the prompt tokens it read"] if "lru" in policies else []
    if any(p != "lru" for p in policies):
        said.append(f"{'the others' if said else 'each'}: prompt tokens read against lru's (below 0: fewer, better)")
    return "; ".join(said)


def format_table(rows: list[dict]) -> str:
    counts = sorted({r["slots"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    by = {(r["policy"], r["slots"]): r for r in rows}
    width = max(len(p) for p in policies) + 2
    head = "policy".ljust(width) + "".join(f"{f'{n} slot' + 's' * (n != 1):>24}" for n in counts)
    lines = [head, "-" * len(head)]
    draws = rows[0]["draws"] if rows else 1
    for p in policies:
        cells = [policy_cell(by[(p, n)], draws) for n in counts]
        lines.append(p.ljust(width) + "".join(f"{c:>24}" for c in cells))
    if rows:
        lines.append(legend(policies))
        lines.append(f"prompt tokens in the timeline: {token_count(rows[0]['prompt_tokens_total'])}"
                     + (f" over {draws} draws (change: mean of the draws, worst single draw)" if draws > 1 else ""))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        ignored = ignored_flags(args)
        if ignored and args.timeline == "generate":
            raise ValueError(f"{', '.join(ignored)}: options of a replay; `strata replay generate` only writes "
                             "a timeline (replay it with `strata replay FILE ...`)")
        if ignored:
            raise ValueError(f"{', '.join(ignored)}: options of `strata replay generate`, not read when a timeline "
                             "is replayed (a generated one: `agents:HOURS:SEED` as the timeline)")
        if args.timeline == "generate":
            reqs = generate(args.kind, args.hours, args.seed)
            if args.out == "-":
                write_strata(reqs, sys.stdout)
            else:
                _refuse_to_replace(args.out)
                try:
                    write_strata(reqs, args.out)
                except OSError as e:   # a folder that is not there, a folder as --out: the user's path, status 2
                    raise ValueError(f"--out {args.out}: cannot write it ({e.strerror or e}); give a file in a "
                                     "folder that exists") from None
                print(f"wrote {len(reqs)} requests of {len({r.conversation for r in reqs})} conversations "
                      f"to {args.out}", file=sys.stderr)
            return 0
        opts = SimOptions(n_groups=args.groups, ram_cache_tokens=args.ram_cache_tokens,
                          ram_min_tokens=args.ram_min_tokens, prefill_tps=args.prefill_tps,
                          decode_tps=args.decode_tps, prompt_rate_tps=args.prompt_rate)
        if args.draws < 1:
            raise ValueError(f"--draws {args.draws}: expected >= 1")
        if not 0 < args.thin <= 1:
            raise ValueError(f"--thin {args.thin}: expected a share in (0, 1]")
        if args.draws > 1 and args.thin == 1:
            raise ValueError(f"--draws {args.draws} needs --thin below 1: the whole timeline has one draw")
        counts = _slot_counts(args.slots)
        if args.groups > min(counts):   # as strata serve refuses --batch-groups above --batch: a group with no slot
            raise ValueError(f"--groups {args.groups} is more than --slots {min(counts)}")
        names = [p.strip() for p in args.policies.split(",") if p.strip()]
        if not names:   # `--policies ,` or `--policies ""` ended in a traceback after the whole replay
            raise ValueError(f"--policies {args.policies!r}: expected at least one policy, from: "
                             + ", ".join(POLICY_NAMES))
        rows = replay(overlay(_timeline(args.timeline), args.overlay), counts, names, opts, args.thin, args.draws)
    except (ValueError, TimelineError) as e:
        print(f"strata replay: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"results": rows}))
    else:
        print(format_table(rows))
    return 0
