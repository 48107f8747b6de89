"""The yardstick checked (benchmarks/RESULTS.md, "Slot policy, session 20").

For every cell of `benchmarks/replay_policies.py` (the same timelines, draws and slot counts), prints
one row: `default` and the best online policy against LRU, the offline yardstick `oracle` (the better
of its cost rule and Belady per timeline), the exact optimum `oracle-opt` (server/replay/optimum.py),
default's gap to each, and an online variant of the learned choice tried this session (`len8`: the
learned length buckets above 128K split every 8K, so a cliff such as a client's compaction threshold
can be learned; not a policy of `strata replay`, built here from slot_returns.py with other edges).
Then the reuse split of `default` and `oracle-opt` (from the request's parent history / from any other)
for a few cells. About 15 minutes on one core:

    .venv/bin/python benchmarks/replay_yardstick.py [--traces /work/shared/traces] [--quick]

`--sticky B1,B2,...` instead replays a few cells with `sticky:B`: the learned choice where a history
whose request reused at least half of its prompt counts its expected re-read cost times 1 + B (keep
the conversations that are hitting; B < 0 the opposite; B = 0 is `default`).

`--ram` instead replays with a RAM conversation cache below the slots (seed 001's setting) and a
RAM-aware variant of the learned choice (`ram:F`: the expected re-read cost of a history the RAM
cache would keep, 4,096 tokens up to its budget, multiplied by F; not a policy of `strata replay`).
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strata.server import slot_policy as sp  # noqa: E402
from strata.server import slot_returns  # noqa: E402
from strata.server.replay import optimum  # noqa: E402
from strata.server.replay import policies as pol  # noqa: E402
from strata.server.replay.cli import replay  # noqa: E402
from strata.server.replay.generate import generate  # noqa: E402
from strata.server.replay.simulator import SimOptions, simulate  # noqa: E402
from strata.server.replay.timeline import overlay, read_mooncake, thin  # noqa: E402

ONLINE = ["lru", "lcp-lru", "expire:600", "expire:300", "shortest", "gds", "gds+expire:600", "affinity", "default",
          "learned+protect"]
LEN8_EDGES = (0, 1_024, 2_048, 4_096, 16_384, 65_536) + tuple(range(131_072, 262_145, 8_192))


def slot_returns_variant(name: str, old: str, new: str) -> types.ModuleType:
    """slot_returns with one line of its text replaced (its ReturnStats shape follows LEN_EDGES at
    import, so other buckets need a module of their own)."""
    text = Path(slot_returns.__file__).read_text()
    assert old in text, f"slot_returns changed ({old!r} is gone): update this script"
    mod = types.ModuleType(f"strata.server.slot_returns_{name}")
    mod.__package__ = "strata.server"
    sys.modules[mod.__name__] = mod
    exec(compile(text.replace(old, new), mod.__name__, "exec"), mod.__dict__)
    return mod


def learned_with_length_edges(edges: tuple[int, ...]) -> types.ModuleType:
    return slot_returns_variant("len8", "LEN_EDGES: tuple[int, ...] = (0, 1_024, 2_048, 4_096, 16_384, 65_536, 131_072)",
                                f"LEN_EDGES = {edges!r}")


def learned_ram_aware(factor: float, ram_min: int, budget: int) -> types.ModuleType:
    old = "    return p * max(s.n_tokens - s.common, 0) / max(wait, MIN_WAIT_S)"
    new = (f"    f = {factor!r} if {ram_min} <= s.n_tokens <= {budget} else 1.0\n"
           "    return f * p * max(s.n_tokens - s.common, 0) / max(wait, MIN_WAIT_S)")
    return slot_returns_variant(f"ram{budget}_{factor}".replace(".", "_"), old, new)


class Len8(pol.LearnedPolicy):
    """The default's learned choice with another slot_returns module (policies.LearnedPolicy reads
    `pol.sr`): LEN8_EDGES unless `module` is given."""

    len8: types.ModuleType | None = None

    def __init__(self, name: str = "len8", module: types.ModuleType | None = None) -> None:
        super().__init__(name, sp.PolicyConfig())
        if module is None:
            if Len8.len8 is None:
                Len8.len8 = learned_with_length_edges(LEN8_EDGES)
            module = Len8.len8
        self.module = module

    def _with(self, fn, *args):
        saved, pol.sr = pol.sr, self.module
        try:
            return fn(*args)
        finally:
            pol.sr = saved

    def reset(self, slots, requests, opts):
        self._with(super().reset, slots, requests, opts)

    def choose(self, i, now, commons):
        return self._with(super().choose, i, now, commons)

    def served(self, slot, i, end):
        self._with(super().served, slot, i, end)


def cases(traces: Path, quick: bool) -> list[tuple[str, list, list[int], float, int]]:
    """The cells of benchmarks/replay_policies.py: (title, timeline, slot counts, share, draws)."""
    conv = read_mooncake(traces / "mooncake_conversation_trace.jsonl")
    synth = read_mooncake(traces / "mooncake_synthetic_trace.jsonl")
    agents = {s: generate("agents", 8.0, s) for s in (1, 2, 3)}
    draws = 2 if quick else 5
    small = [2, 4] if quick else [2, 3, 4, 6, 8]
    big = [32] if quick else [32, 64, 128]
    out = [(f"conversation {int(s * 100)}%", conv, small, s, draws) for s in (0.05, 0.10, 0.25, 0.50)]
    out.append(("conversation whole", conv, [8] + big, 1.0, 1))
    out += [(f"synthetic {int(s * 100)}%", synth, small, s, draws) for s in (0.10, 0.25)]
    out.append(("synthetic whole", synth, [8] + big, 1.0, 1))
    out += [(f"agents seed {s}", tl, small + [16], 1.0, 1) for s, tl in agents.items()]
    out.append(("agents seed 1, half", agents[1], small, 0.5, draws))
    out += [(f"agents seed 1 x{k}", overlay(agents[1], k), [n], 1.0, 1) for k, n in zip((4, 8, 16), big, strict=False)]
    return out


class Sticky(pol.LearnedPolicy):
    """`sticky:B` (module docstring): the learned choice re-ranked with the hit factor."""

    def __init__(self, beta: float) -> None:
        super().__init__(f"sticky:{beta:g}", sp.PolicyConfig())
        self.beta = beta

    def reset(self, slots, requests, opts):
        super().reset(slots, requests, opts)
        self.hit: dict[int, bool] = {}

    def choose(self, i, now, commons):
        t, src, reason = super().choose(i, now, commons)
        if reason == "learned":
            views, load = pol.slot_views(self.slots, now, commons, self.turn)
            req = sp.RequestView(self.requests[i].n_prompt, self.opts.prompt_rate_tps)
            lcfg, memo = self.cfg.learn, {}
            idle = [v for v in views if not v.busy]
            cost = {}
            for v in idle:
                c = slot_returns.expected_reread_rate(v, now, self.stats, lcfg, memo)
                held = self.slots[v.slot - 1].req
                cost[v.slot] = c * (1 + self.beta) if held is not None and self.hit.get(held) else c
            best = min(idle, key=lambda v: (cost[v.slot] >= lcfg.keep_tps, load.get(v.group, 0), cost[v.slot],
                                            v.last_use, v.slot))
            t, src, reason = pol.as_choice(sp.decide_to(best, "learned", views, req, now, self.cfg))
        reused = max(commons[t], commons[src] if src is not None else 0)
        self.hit[i] = reused >= 0.5 * self.requests[i].n_prompt
        return t, src, reason


def sticky_table(traces: Path, betas: list[float]) -> None:
    conv = read_mooncake(traces / "mooncake_conversation_trace.jsonl")
    synth = read_mooncake(traces / "mooncake_synthetic_trace.jsonl")
    cells = [(f"agents seed {s}", [generate("agents", 8.0, s)], [2, 3, 4, 6]) for s in (1, 2, 3)]
    cells.append(("conversation 10%", [thin(conv, 0.10, d) for d in range(5)], [2, 4, 6]))
    cells.append(("synthetic 10%", [thin(synth, 0.10, d) for d in range(5)], [2, 4, 6]))
    print("| cell | slots | default | " + " | ".join(f"sticky:{b:g}" for b in betas) + " |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in betas) + " |")
    for title, timelines, counts in cells:
        for n in counts:
            base = [simulate(x, n, pol.make_policy("lru")).prompt_tokens_read for x in timelines]

            def mean(make, timelines=timelines, n=n, base=base):
                reads = [simulate(x, n, make()).prompt_tokens_read for x in timelines]
                return sum(r / b - 1 for r, b in zip(reads, base, strict=True)) / len(reads) * 100
            row = [mean(lambda: pol.make_policy("default"))] + [mean(lambda b=b: Sticky(b)) for b in betas]
            print(f"| {title} | {n} | " + " | ".join(f"{x:+.2f}%" for x in row) + " |", flush=True)


def ram_table(traces: Path) -> None:
    """default, oracle-opt (a schedule here, not the optimum) and ram:F with a RAM cache."""
    conv = read_mooncake(traces / "mooncake_conversation_trace.jsonl")
    synth = read_mooncake(traces / "mooncake_synthetic_trace.jsonl")
    cells = [(f"agents seed {s}", [generate("agents", 8.0, s)], [2, 3, 4, 6], 500_000) for s in (1, 2, 3)]
    cells.append(("conversation 25%", [thin(conv, 0.25, d) for d in range(5)], [2, 4, 6], 200_000))
    cells.append(("synthetic 10%", [thin(synth, 0.10, d) for d in range(5)], [2, 4, 6], 200_000))
    print("| cell | RAM cache tokens | slots | lru read | default | oracle-opt | ram:0.25 | ram:0 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for title, timelines, counts, ram in cells:
        opts = SimOptions(ram_cache_tokens=ram)
        variants = {f"ram:{f:g}": learned_ram_aware(f, opts.ram_min_tokens, ram) for f in (0.25, 0.0)}
        for n in counts:
            out = {}
            for name in ["lru", "default", "oracle-opt", *variants]:
                reads = [simulate(x, n, Len8(name, variants[name]) if name in variants else pol.make_policy(name),
                                  opts).prompt_tokens_read for x in timelines]
                out[name] = reads
            base = out["lru"]
            cell = {k: sum(r / b - 1 for r, b in zip(v, base, strict=True)) / len(v) * 100 for k, v in out.items()}
            print(f"| {title} | {ram} | {n} | {sum(base) / 1e6:.2f}M | {cell['default']:+.1f}% | {cell['oracle-opt']:+.1f}% "
                  f"| {cell['ram:0.25']:+.1f}% | {cell['ram:0']:+.1f}% |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="/work/shared/traces")
    ap.add_argument("--quick", action="store_true", help="fewer draws and slot counts (a smoke run)")
    ap.add_argument("--ram", action="store_true", help="the RAM cache table instead")
    ap.add_argument("--sticky", help="the sticky:B table for these B instead (comma-separated)")
    args = ap.parse_args()
    if args.sticky:
        sticky_table(Path(args.traces), [float(x) for x in args.sticky.split(",")])
        return 0
    if args.ram:
        ram_table(Path(args.traces))
        return 0
    opts = SimOptions()
    print("| cell | slots | default | best online | oracle | oracle-opt | default to oracle | default to "
          "oracle-opt | len8 (worst draw) |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    within = {"oracle": 0, "oracle-opt": 0}
    beaten = []
    len8_more = []
    cells = 0
    t0 = time.time()
    all_cases = cases(Path(args.traces), args.quick)
    for title, tl, counts, share, k in all_cases:
        timelines = [thin(tl, share, d) for d in range(k)] if share < 1 else [tl]
        rows = replay(tl, counts, ONLINE + ["oracle", "oracle-opt"], opts, share, k if share < 1 else 1)
        key = "vs_lru_mean" if share < 1 else "vs_lru"
        for n in counts:
            by = {r["policy"]: r for r in rows if r["slots"] == n}
            v = {p: by[p][key] * 100 for p in by}
            best = min(ONLINE, key=lambda p: v[p])
            base = [simulate(x, n, pol.make_policy("lru"), opts).prompt_tokens_read for x in timelines]
            mine = [simulate(x, n, Len8(), opts).prompt_tokens_read for x in timelines]
            changes = [m / b - 1 for m, b in zip(mine, base, strict=True)]
            len8 = (sum(changes) / len(changes) if share < 1 else sum(mine) / sum(base) - 1) * 100
            gap, gap_opt = v["default"] - v["oracle"], v["default"] - v["oracle-opt"]
            cells += 1
            within["oracle"] += gap <= 1.0
            within["oracle-opt"] += gap_opt <= 1.0
            if v[best] < v["oracle"]:
                beaten.append(f"{title}, {n} slots: {best} {v[best]:+.1f}% < oracle {v['oracle']:+.1f}%")
            if len8 > v["default"] + 1e-9 or max(changes) > 0:
                len8_more.append(f"{title}, {n} slots: {len8:+.2f}% (default {v['default']:+.2f}%)")
            print(f"| {title} | {n} | {v['default']:+.1f}% | {best} {v[best]:+.1f}% | {v['oracle']:+.1f}% | "
                  f"{v['oracle-opt']:+.1f}% | {gap:.1f} | {gap_opt:.1f} | {len8:+.2f}% ({max(changes) * 100:+.1f}%) |",
                  flush=True)
    print(f"\ncells: {cells}; default within one point of oracle: {within['oracle']}, of oracle-opt: "
          f"{within['oracle-opt']} ({time.time() - t0:.0f} s)")
    print("online policies reading less than `oracle`:", "; ".join(beaten) or "none")
    print("len8 reading more than default (or a draw above lru):", "; ".join(len8_more) or "none")
    print("\n| cell | slots | policy | reused from the parent | reused from another history |")
    print("| --- | ---: | --- | ---: | ---: |")
    split_cells = [("conversation 10%", [2, 8]), ("synthetic 10%", [2, 6]), ("conversation whole", [8]),
                   ("synthetic whole", [32]), ("agents seed 1", [3])]
    timeline_of = {c[0]: (c[1], c[3]) for c in all_cases}
    for title, counts in split_cells:
        tl, share = timeline_of[title]
        timelines = [thin(tl, share, d) for d in range(2 if args.quick else 5)] if share < 1 else [tl]
        for n in counts:
            for p in ("lru", "default", "oracle-opt"):
                parent = other = 0
                for x in timelines:
                    w = optimum.SplitReuse(pol.make_policy(p))
                    simulate(x, n, w, opts)
                    parent += w.split.parent
                    other += w.split.other
                print(f"| {title} | {n} | {p} | {parent / 1e6:.2f}M | {other / 1e6:.2f}M |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
