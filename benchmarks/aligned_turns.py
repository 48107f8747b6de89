"""How many turns of an agent conversation read only their new tokens, with an arriving prompt aligned to the
history's own tokens (server/byte_align.py) and without it.

One conversation in Claude Code's shape (long_agent_trial.py's system prompt, tools and tool results of this
repository's source, the real `anthropic` SDK, temperature 0, tool_choice any every other turn), --turns turns on
a fresh `strata serve` for each arm, the arms one after the other (--arms, default on,off,on): `on` is the server
as it is; `off` the same server started with context_choice.align_arrival a no-op (the request's prompt as
tokenized, as before session 35). Counted tokens do not depend on the machine's load; the conversations of the two
arms part once an aligned turn's answer differs (the model read other tokens).

A turn read only its new tokens when cache_read >= ideal - 1 (ideal: the previous prompt plus its answer; the
answer's last token is sampled, never read). Read again: ideal - 1 - cache_read where positive, counted apart
for turns after an answer cut by max_tokens (the client sends back only the whole blocks of a cut answer).

    .venv/bin/python benchmarks/aligned_turns.py --root /tmp/aligned --out /tmp/aligned/out
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import anthropic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.long_agent_trial import SYSTEM_A, Conversation, Server, Trial, setup  # noqa: E402

# the server's command line with the alignment turned off (the `off` arm)
OFF = ("import sys; import strata.server.context_choice as c; c.align_arrival = lambda *a, **k: None; "
       "from strata.cli import main; sys.argv = ['strata'] + sys.argv[1:]; sys.exit(main())")
TASK = "The test tests/server/test_cache_levels.py fails after my change to the spill order. Find why and fix it."


class ArmServer(Server):
    def __init__(self, args: argparse.Namespace, arm: str) -> None:
        super().__init__(args)
        self.arm = arm

    def command(self) -> list[str]:
        cmd = super().command()
        return cmd if self.arm == "on" else [sys.executable, "-c", OFF] + cmd[1:]


def summary(rows: list[dict], prev_stops: list[str | None]) -> dict:
    turns = [(r, s) for r, s in zip(rows, prev_stops, strict=True) if r["ideal"] > 0]
    again = [(max(0, r["ideal"] - 1 - r["cached"]), s) for r, s in turns]
    return {"continued": len(turns), "only_new": sum(1 for a, _ in again if a == 0),
            "read_again": sum(a for a, s in again if s != "max_tokens"),
            "read_again_after_cut": sum(a for a, s in again if s == "max_tokens"),
            "per_turn_again": [a for a, _ in again], "prompt_last": rows[-1]["prompt"] if rows else 0}


def run_arm(args: argparse.Namespace, arm: str, k: int) -> dict:
    a = copy.copy(args)      # each arm its own folders: a later arm must not restore the earlier one's turns
    a.root, a.out = args.root / f"{k}-{arm}", args.out / f"{k}-{arm}"
    a.out.mkdir(parents=True, exist_ok=True)
    setup(a)
    server = ArmServer(a, arm)
    print(f"[{arm}] serve:", " ".join(server.command()), flush=True)
    print(f"[{arm}] started in {server.start():.1f} s", flush=True)
    trial = Trial(a, server)
    conv = Conversation("A", SYSTEM_A, TASK, args.seed)
    stops: list[str | None] = []
    try:
        for t in range(args.turns):
            try:
                trial.turn(conv, arm, force_tool=t % 2 == 0)
            except anthropic.BadRequestError as e:    # the conversation outgrew --ctx: the arm ends there
                print(f"[{arm}] turn {t + 1} refused, the arm ends: {e}", flush=True)
                break
    finally:
        server.stop()
        trial.turns.close()
    rows = [json.loads(line) for line in (a.out / "turns.jsonl").read_text().splitlines()]
    stops = [None] + [r.get("stop") for r in rows[:-1]]
    aligned = sum(1 for p in sorted(a.out.glob("server-*.log"))
                  for line in p.read_text(errors="replace").splitlines() if "in other tokens;" in line)
    return {"arm": arm, **summary(rows, stops), "aligned_log_lines": aligned}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True, help="the run's folder: each arm's config, cache folder, HOME")
    p.add_argument("--out", type=Path, required=True, help="each arm's turns.jsonl and server log")
    p.add_argument("--port", type=int, default=8393)
    p.add_argument("--ctx", type=int, default=16384, help="--ctx and --slot-ctx (default 16384)")
    p.add_argument("--turns", type=int, default=12, help="turns of the conversation in each arm (default 12)")
    p.add_argument("--arms", default="on,off,on", help="the arms in order, each on or off (default on,off,on)")
    p.add_argument("--answer-tokens", type=int, default=160, help="max_tokens of each turn")
    p.add_argument("--seed", type=int, default=35)
    p.add_argument("--serve-arg", action="append", default=[], help="one more strata serve argument (repeat)")
    return p


def main() -> None:
    args = parser().parse_args()
    arms = args.arms.split(",")
    bad = [x for x in arms if x not in ("on", "off")]
    if bad:
        raise SystemExit(f"--arms takes on / off, got {bad[0]!r}")
    for name in ("turns", "answer_tokens", "ctx"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    args.warm_mib, args.ram_mib = 0, None          # long_agent_trial's Server: setup's levels as they are
    args.out.mkdir(parents=True, exist_ok=True)
    results = [run_arm(args, arm, k) for k, arm in enumerate(arms)]
    for r in results:
        print(json.dumps(r), flush=True)
    (args.out / "summary.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
