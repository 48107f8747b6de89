"""One coding agent's long conversation through every cache level, as a user runs it (session 34's trial).

The server is started as a user would: `strata setup --yes` writes the configuration (its conversation cache
folder under --root), then `strata serve --config ...` with the context raised past the default model's 8,192
(--ctx; docs/configuration.md: a warning when longer than trained), a warm folder set by hand (setup leaves the
warm level off: it needs a second disk) and the log at INFO in a file. The real `anthropic` SDK drives it in
Claude Code's shape: a long system prompt with tool definitions, streamed turns with tool_use / tool_result
blocks, each tool result a few hundred to a few thousand tokens of this repository's source. Between turns: short
side requests (a title, a count_tokens). Phases:

  grow      conversation A grows to --first-tokens
  other     conversation B (another system prompt) grows, pushing A out of its context; side requests
  others    --others one-turn conversations, each with its own system prompt (the placement parked them over
            each other's slots and kept A's and B's: six did not push A to the RAM level)
  back      A continues (from wherever it went)
  restart   SIGTERM, the server started again on the same folders; A and B continue
  grow2     A grows to --tokens
  compact   the client rewrites A's earlier tool results as a summary (a compaction) and goes on

Every turn is one JSON line in --out/turns.jsonl: phase, prompt tokens, usage.cache_read_input_tokens, the ideal
(the previous prompt plus its answer, which the next prompt extends), time to first streamed token, decode
tokens/s (output tokens after the first over the time after it), and the server log's `request ... ended` line
for it (its context, reused tokens and their source). A table of them is printed at the end.

    .venv/bin/python benchmarks/long_agent_trial.py --root /tmp/trial --out /tmp/trial/out
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anthropic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.soak_agents import wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "server").rglob("*.py"))      # what the agent's Read / Bash tools return
ENDED = re.compile(r"request (\S+) \((\S+)\) ended \(([^)]*)\): context (\S+), prompt (\d+) \(reused (\d+) from "
                   r"(\S+)\), output (\d+), ttft (.*)$")
TOOLS = [
    {"name": "Bash", "description": "Executes a bash command in a persistent shell session with an optional "
     "timeout. Use it for git, tests and builds; never for reading files (use Read).",
     "input_schema": {"type": "object", "properties": {
         "command": {"type": "string", "description": "The command to execute"},
         "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
         "description": {"type": "string", "description": "Clear, concise description in 5-10 words"}},
         "required": ["command"]}},
    {"name": "Read", "description": "Reads a file from the local filesystem. Lines are numbered like cat -n.",
     "input_schema": {"type": "object", "properties": {
         "file_path": {"type": "string", "description": "The absolute path to the file to read"},
         "offset": {"type": "number"}, "limit": {"type": "number"}}, "required": ["file_path"]}},
    {"name": "Edit", "description": "Performs exact string replacements in files.",
     "input_schema": {"type": "object", "properties": {
         "file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
         "required": ["file_path", "old_string", "new_string"]}},
    {"name": "Grep", "description": "A powerful search tool built on ripgrep. Supports full regex syntax.",
     "input_schema": {"type": "object", "properties": {
         "pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"}},
         "required": ["pattern"]}},
]
RULES = "\n".join(f"- Rule {i}: {r}" for i, r in enumerate([
    "Read a file before editing it.", "Run the tests that cover what you change.", "Keep answers short.",
    "Never commit unless asked.", "Prefer editing existing files to creating new ones.",
    "Use Grep to search, never grep in Bash.", "Quote paths with spaces.", "Follow the house style.",
    "Say what you verified and how.", "Do not add comments that restate the code."] * 6))
SYSTEM_A = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            {"type": "text", "text": "You are an interactive CLI tool that helps users with software engineering "
             "tasks.\n# Rules\n" + RULES + "\n# Environment\nWorking directory: /work/main\nPlatform: linux",
             "cache_control": {"type": "ephemeral"}}]
SYSTEM_B = [{"type": "text", "text": "You are a code review agent. Read the diff and the files it touches and "
             "report problems in a few lines.\n" + RULES.replace("Rule", "Check"),
             "cache_control": {"type": "ephemeral"}}]


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.n, self.proc = args, 0, None
        self.url = f"http://127.0.0.1:{args.port}"
        self.log_path: Path | None = None
        self.log_pos = 0

    def command(self) -> list[str]:
        a = self.args
        cmd = [str(Path(sys.executable).parent / "strata"), "serve", "--config", str(a.root / "config.toml"),
               "--port", str(a.port), "--ctx", str(a.ctx), "--slot-ctx", str(a.ctx), "--log-level", "info"]
        if a.warm_mib:
            cmd += ["--conversation-cache-warm-dir", str(a.root / "warm"),
                    "--conversation-cache-warm-mib", str(a.warm_mib)]
        if a.ram_mib is not None:
            cmd += ["--conversation-cache-mib", str(a.ram_mib)]
        return cmd + a.serve_arg

    def start(self) -> float:
        self.n += 1
        self.log_path = self.args.out / f"server-{self.n}.log"
        self.log_pos = 0
        env = {**os.environ, "HOME": str(self.args.root / "home")}
        t0 = time.time()
        self.proc = subprocess.Popen(self.command(), stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
                                     env=env)
        return wait_healthy(self.url, self.proc, self.log_path, t0)

    def stop(self) -> float:
        t0 = time.time()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=600)
        return time.time() - t0

    def new_lines(self) -> list[str]:
        """The log lines written since the last call (requests are sent one at a time: they are its lines)."""
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            f.seek(self.log_pos)
            text = f.read()
            self.log_pos = f.tell()
        return text.splitlines()


def setup(args: argparse.Namespace) -> None:
    """`strata setup --yes` as a user runs it, the conversations' folder under --root."""
    if (args.root / "config.toml").exists():
        return
    args.root.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([str(Path(sys.executable).parent / "strata"), "setup", "--yes",
                          "--config", str(args.root / "config.toml"), "--cold-dir", str(args.root / "conversations"),
                          "--disk-bench-mib", "64"], capture_output=True, text=True,
                         env={**os.environ, "HOME": str(args.root / "home")})
    (args.out / "setup.out").write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise SystemExit(f"strata setup failed ({out.returncode}); see {args.out / 'setup.out'}")


class Conversation:
    def __init__(self, name: str, system: list, task: str, seed: int) -> None:
        self.name, self.system, self.rng = name, system, random.Random(seed)
        self.messages: list = [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nAs you answer, use the context below.\n</system-reminder>"},
            {"type": "text", "text": task}]}]
        self.prev_prompt = 0      # the previous turn's prompt tokens
        self.prev_ideal = 0       # ... plus its answer: what this turn's prompt extends
        self.last_prompt = 0

    def tool_output(self) -> str:
        """A Read of one of this repository's files: a few hundred to a few thousand tokens."""
        path = self.rng.choice(SOURCES)
        lines = path.read_text(encoding="utf-8").splitlines()
        n = self.rng.randint(40, 260)
        start = self.rng.randrange(max(1, len(lines) - n))
        return "\n".join(f"{start + i + 1:6d}\t{line}" for i, line in enumerate(lines[start:start + n])) or "(empty)"


class Trial:
    def __init__(self, args: argparse.Namespace, server: Server) -> None:
        self.args, self.server = args, server
        self.client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=900)
        self.turns = open(args.out / "turns.jsonl", "a")
        self.n = 0

    def record(self, row: dict) -> None:
        self.n += 1
        row = {"n": self.n, "t": time.strftime("%H:%M:%S", time.gmtime()), **row}
        self.turns.write(json.dumps(row) + "\n")
        self.turns.flush()
        print(table_row(row), flush=True)

    def ended(self) -> dict:
        """The server's `request ... ended` line for the request just answered, and its placement lines."""
        found, places = {}, []
        for line in self.server.new_lines():
            m = ENDED.search(line)
            if m:
                found = {"req": m[1], "context": m[4], "log_prompt": int(m[5]), "reused": int(m[6]),
                         "source": m[7], "output": int(m[8]), "log_ttft": m[9].strip()}
            elif "-> slot" in line or "restor" in line or "spill" in line or "WARNING" in line or "ERROR" in line:
                places.append(line.split(" ", 2)[-1][:240])
        return {**found, "lines": places}

    def turn(self, conv: Conversation, phase: str, force_tool: bool) -> None:
        extra = {"tool_choice": {"type": "any"}} if force_tool else {}
        t0 = time.perf_counter()
        first = None
        with self.client.beta.messages.stream(
                model="claude-sonnet-4-5", max_tokens=self.args.answer_tokens, system=conv.system, tools=TOOLS,
                messages=conv.messages, extra_body={"temperature": 0}, betas=["claude-code-20250219"],
                **extra) as stream:
            for event in stream:
                if first is None and event.type in ("content_block_delta", "text", "input_json"):
                    first = time.perf_counter()
            msg = stream.get_final_message()
        t1 = time.perf_counter()
        u = msg.usage
        cached = u.cache_read_input_tokens or 0
        prompt = u.input_tokens + cached + (u.cache_creation_input_tokens or 0)
        out = u.output_tokens
        log = self.ended()
        # the server's first token (a tool call's JSON may reach the client only when whole): decode is
        # the tokens after it over the time after it, as the client saw the end
        ttft = float(log["log_ttft"].split()[0]) / 1000.0 if log.get("log_ttft", "-") != "-" else None
        decode = (out - 1) / (t1 - t0 - ttft) if ttft is not None and out > 1 and t1 - t0 > ttft else None
        self.record({"phase": phase, "conv": conv.name, "kind": "turn", "prompt": prompt, "cached": cached,
                     "ideal": conv.prev_ideal, "new": prompt - cached, "ttft_s": ttft,
                     "first_event_s": round((first or t1) - t0, 3), "wall_s": round(t1 - t0, 3),
                     "decode_tps": None if decode is None else round(decode, 1), "output": out,
                     "stop": msg.stop_reason, **log})
        conv.prev_prompt, conv.prev_ideal, conv.last_prompt = prompt, prompt + out, prompt
        content = [b.model_dump(exclude_none=True) for b in msg.content
                   if b.type in ("text", "tool_use") and (b.type != "text" or b.text)]
        conv.messages.append({"role": "assistant", "content": content or [{"type": "text", "text": "ok"}]})
        uses = [b for b in content if b["type"] == "tool_use"]
        if uses:
            conv.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b["id"], "content": conv.tool_output()} for b in uses]})
        else:
            conv.messages.append({"role": "user", "content": "Here is the file:\n" + conv.tool_output()})

    def side(self, conv: Conversation, phase: str) -> None:
        """What Claude Code sends between turns: a title request (another system prompt, short) and a
        count_tokens of the whole conversation."""
        t0 = time.perf_counter()
        msg = self.client.messages.create(
            model="claude-haiku-4-5", max_tokens=12, extra_body={"temperature": 0},
            system="Analyze if this message indicates a new conversation topic. Answer with a title.",
            messages=[{"role": "user", "content": conv.messages[-1]["content"] if isinstance(
                conv.messages[-1]["content"], str) else json.dumps(conv.messages[-1]["content"])[:1500]}])
        t1 = time.perf_counter()
        self.record({"phase": phase, "conv": "side", "kind": "title", "prompt": msg.usage.input_tokens +
                     (msg.usage.cache_read_input_tokens or 0), "cached": msg.usage.cache_read_input_tokens or 0,
                     "ideal": 0, "ttft_s": round(t1 - t0, 3), "output": msg.usage.output_tokens, **self.ended()})
        t0 = time.perf_counter()
        n = self.client.messages.count_tokens(model="claude-sonnet-4-5", system=conv.system, tools=TOOLS,
                                              messages=conv.messages).input_tokens
        self.record({"phase": phase, "conv": conv.name, "kind": "count_tokens", "prompt": n, "cached": 0,
                     "ideal": 0, "ttft_s": round(time.perf_counter() - t0, 3), **self.ended()})

    def grow(self, conv: Conversation, phase: str, until: int, side_every: int = 2) -> None:
        k = 0
        while conv.last_prompt < until:
            self.turn(conv, phase, force_tool=k % 2 == 0)
            k += 1
            if side_every and k % side_every == 0:
                self.side(conv, phase)

    def compact(self, conv: Conversation, keep_first: int, upto: int) -> None:
        """A client compaction: messages[keep_first:upto] (tool results included) replaced by one summary
        pair; the messages after them stay as they were."""
        head, tail = conv.messages[:keep_first], conv.messages[upto:]
        if tail and tail[0]["role"] != "user":
            tail = tail[1:]
        if tail and not isinstance(tail[0]["content"], str):   # its tool_use went with the summarized part
            tail[0] = {"role": "user", "content": [
                {"type": "text", "text": b["content"]} if b["type"] == "tool_result" else b
                for b in tail[0]["content"]]}
        summary = [{"role": "assistant", "content": [{"type": "text", "text": "Summary of the work so far: "
                                                      "read the cache and scheduler modules; no edits yet."}]}]
        conv.messages = head + summary + tail
        conv.prev_ideal = 0


def table_row(r: dict) -> str:
    return (f"{r['n']:3d} {r['t']} {r['phase']:8s} {r['conv']:5s} {r['kind']:12s} prompt {r['prompt']:6d} "
            f"cached {r['cached']:6d} ideal {r.get('ideal', 0):6d} ttft {r['ttft_s'] or 0:7.2f}s "
            f"dec {r.get('decode_tps') or '-':>6} ctx {r.get('context', '-')} reused {r.get('reused', '-')} "
            f"from {r.get('source', '-')} {r.get('stop') or ''}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, required=True, help="the trial's folder: config, cache folders, HOME")
    p.add_argument("--out", type=Path, required=True, help="turns.jsonl and the server logs")
    p.add_argument("--port", type=int, default=8391)
    p.add_argument("--ctx", type=int, default=32768, help="--ctx and --slot-ctx (default 32768)")
    p.add_argument("--warm-mib", type=int, default=2048, help="warm level budget, 0 = off as setup leaves it")
    p.add_argument("--ram-mib", type=int, default=None, help="RAM level budget (default: setup's)")
    p.add_argument("--first-tokens", type=int, default=10000, help="A's size before B comes")
    p.add_argument("--other-tokens", type=int, default=6000, help="B's size")
    p.add_argument("--tokens", type=int, default=22000, help="A's final size")
    p.add_argument("--others", type=int, default=0,
                   help="one-turn conversations after B's, each its own system prompt (default 0)")
    p.add_argument("--answer-tokens", type=int, default=160, help="max_tokens of each turn")
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--serve-arg", action="append", default=[], help="one more strata serve argument (repeat)")
    return p


def main() -> None:
    args = parser().parse_args()
    if args.others < 0:
        raise SystemExit(f"--others must be >= 0, got {args.others}")
    for name in ("first_tokens", "other_tokens", "tokens", "answer_tokens", "ctx"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.tokens >= args.ctx:
        raise SystemExit(f"--tokens {args.tokens} does not fit --ctx {args.ctx}")
    args.out.mkdir(parents=True, exist_ok=True)
    setup(args)
    server = Server(args)
    print("serve:", " ".join(server.command()), flush=True)
    print(f"started in {server.start():.1f} s", flush=True)
    trial = Trial(args, server)
    a = Conversation("A", SYSTEM_A, "The test tests/server/test_cache_levels.py fails after my change to the "
                     "spill order. Find why and fix it.", args.seed)
    b = Conversation("B", SYSTEM_B, "Review the diff of server/cache/parking.py against main.", args.seed + 1)
    trial.grow(a, "grow", args.first_tokens)
    trial.grow(b, "other", args.other_tokens)
    for i in range(args.others):       # more conversations than contexts: does A keep its slot?
        system = [{"type": "text", "text": f"You are subagent {i} of a coding agent. " + SYSTEM_B[0]["text"]}]
        trial.turn(Conversation(f"C{i}", system, f"Review change {i} of server/cache/.", args.seed + 2 + i),
                   "others", force_tool=True)
    for _ in range(2):
        trial.turn(a, "back", force_tool=True)
    trial.turn(b, "back", force_tool=True)
    trial.turn(a, "back", force_tool=False)
    stop_s = server.stop()
    (args.out / "restart.json").write_text(json.dumps({"stop_s": round(stop_s, 2)}))
    print(f"stopped in {stop_s:.1f} s; restarted in {server.start():.1f} s", flush=True)
    trial.turn(a, "restart", force_tool=True)
    trial.turn(b, "restart", force_tool=True)
    trial.turn(a, "restart", force_tool=True)
    trial.grow(a, "grow2", args.tokens)
    trial.compact(a, 1, len(a.messages) // 2)
    for _ in range(3):
        trial.turn(a, "compact", force_tool=True)
    print(f"stopped in {server.stop():.1f} s", flush=True)


if __name__ == "__main__":
    main()
