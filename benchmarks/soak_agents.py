"""A day of agent work on one `strata serve`, compressed: a soak that starts the server itself, drives it with
the real `anthropic` and `openai` SDKs in the shapes coding agents send, restarts it once in the middle and
samples it every 30 s.

Agents (one thread each):
- claude: a Claude Code shaped conversation (Anthropic beta stream, system blocks, tools, tool_use /
  tool_result turns with code as results), its Task subagents (a shared subagent system prompt), and its side
  requests (a title, a summary: short, other system prompts).
- codex: a Codex shaped conversation over the Responses API (stream, function_call / function_call_output).
- chat: an opencode-like OpenAI chat conversation with tool calls; some streams are cancelled midway, and
  now and then a raw client sends a request and disconnects (before the answer, and mid-stream).
- session: an OpenAI chat conversation saved as a named session, continued, then restored and branched from
  the saved point (before and after the restart).
- editor: code completions as a user types (llama.vscode's POST /infill with input_extra chunks, a request
  every 1-2 s, the one before abandoned when unanswered at the next keystroke; now and then Continue's streamed
  /v1/completions with a `suffix`). The model is the default one with FIM token ids named in a copy's metadata
  (benchmarks/fim_beside_agent.py's fim_smollm2).
Each agent sleeps a minute now and then (idle gaps). A slow reader holds `/v1/monitor/events?interval=0.25`
open the whole time, reading a few KiB a second.

Every answer's usage is logged with the ideal reuse of its prompt: the whole of the conversation's previous
prompt (each prompt extends the one before; a conversation that branches from a session: the session's
tokens). A sampler records RSS (and its peak), fds, threads, the cache folders' bytes and files against the
budgets (temporary files and half pairs apart), /metrics, /v1/slots and the log's size every --sample-s.
At half time the agents pause, the server is stopped with SIGTERM (its stop timed) and started again on the
same folders; at the end it is stopped the same way. Output: --out folder with samples.jsonl, requests.jsonl,
server-N.log and summary.json.

    .venv/bin/python benchmarks/soak_agents.py --minutes 40 --out /tmp/soak/run1
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx2 as httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.fim_beside_agent import fim_smollm2  # noqa: E402
from benchmarks.soak_log import Log, failure  # noqa: E402
from benchmarks.soak_summary import summarize  # noqa: E402

WORDS = ("parser token cache slot engine buffer socket thread queue vector matrix kernel module import return "
         "yield class struct enum trait async await lambda closure request handler config budget").split()
CC_SYSTEM = [{"type": "text", "text": "You are Claude Code, a coding agent. Work in small steps, run the tests."},
             {"type": "text", "text": "Tools: Bash, Read, Edit. Be brief.", "cache_control": {"type": "ephemeral"}}]
CC_TOOLS = [{"name": "Bash", "description": "Run a shell command.", "input_schema": {
                "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
            {"name": "Read", "description": "Read a file.", "input_schema": {
                "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]
SUB_SYSTEM = [{"type": "text", "text": "You are a subagent of Claude Code. Search the code base and report what "
               "you find in a few lines. " + " ".join(f"Rule {i}: stay on the task, cite file paths." for i in range(12))}]
OAI_TOOLS = [{"type": "function", "function": {"name": "shell", "description": "Run a command",
              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
RESP_TOOLS = [{"type": "function", "name": "shell", "description": "Run a command in the workspace",
               "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}},
                              "required": ["command"]}}]
LONG_LIMIT = 9000          # prompt tokens past which an agent compacts (starts its conversation again)
ROOT = Path(__file__).resolve().parents[1]
EDITED_FILES = sorted((ROOT / "server").glob("*.py"))    # the editor's files: the one typed in, the chunks
PAUSE_WAIT_S = 60.0        # how long the editor waits for the completion after a burst's last keystroke


def code(rng: random.Random, n_lines: int) -> str:
    return "\n".join(f"def {rng.choice(WORDS)}_{i}({rng.choice(WORDS)}): return {rng.randrange(1000)}  # "
                     f"{rng.choice(WORDS)} {rng.choice(WORDS)}" for i in range(n_lines))


# ---------------------------------------------------------------------------------------------------------- server

def wait_healthy(url: str, proc: subprocess.Popen, log_path: Path, t0: float, limit_s: float = 300) -> float:
    """Seconds from t0 until the server at url answers /health with 200; SystemExit naming its log if it exits
    or is not ready within limit_s."""
    while time.time() - t0 < limit_s:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return time.time() - t0
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}; see {log_path}")
        time.sleep(0.5)
    raise SystemExit(f"server not ready in {limit_s:g} s")

class Server:
    def __init__(self, args: argparse.Namespace, out: Path) -> None:
        self.args, self.out, self.proc, self.n = args, out, None, 0
        self.root = Path(args.root)
        self.dirs = {name: self.root / name for name in ("warm", "cold", "segments", "system-prompts", "sessions")}
        self.budgets = {"warm": args.warm_mib, "cold": args.cold_mib, "segments": args.segment_mib,
                        "system-prompts": args.system_prompt_mib}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.args.port}"

    def start(self) -> float:
        self.n += 1
        a, d = self.args, self.dirs
        cmd = [str(Path(sys.executable).parent / "strata"), "serve", "--no-config", "--port", str(a.port),
               "--model", a.model,
               "--threads", "1", "--batch", "4", "--ctx", "16384", "--log-level", "info",
               "--conversation-cache-mib", str(a.ram_mib),
               "--conversation-cache-warm-dir", str(d["warm"]), "--conversation-cache-warm-mib", str(a.warm_mib),
               "--conversation-cache-cold-dir", str(d["cold"]), "--conversation-cache-cold-mib", str(a.cold_mib),
               "--conversation-cache-segment-dir", str(d["segments"]),
               "--conversation-cache-segment-mib", str(a.segment_mib),
               "--conversation-cache-system-prompt-dir", str(d["system-prompts"]),
               "--conversation-cache-system-prompt-mib", str(a.system_prompt_mib),
               "--conversation-cache-sessions-dir", str(d["sessions"]), *a.serve_arg]
        env = {**os.environ, "HOME": str(self.root / "home")}
        (self.root / "home").mkdir(parents=True, exist_ok=True)
        self.log_path = self.out / f"server-{self.n}.log"
        t0 = time.time()
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT, env=env)
        return wait_healthy(self.url, self.proc, self.log_path, t0)

    def stop(self) -> dict:
        t0 = time.time()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=600)
        return {"stop_s": round(time.time() - t0, 2), "rc": rc}


def folder_stats(path: Path) -> dict:
    files = list(path.glob("*")) if path.exists() else []
    names = {f.name for f in files}
    imgs = [f for f in files if f.name.endswith(".img")]
    sides = [f for f in files if f.name.endswith(".json")]
    tmp = [f.name for f in files if f.name.endswith(".tmp")]
    half = [f.name for f in imgs if f.name.startswith("strata-conv-") and f.name[:-4] + ".json" not in names]
    half += [f.name for f in sides if f.name.startswith("strata-conv-") and f.name[:-5] + ".img" not in names]
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except FileNotFoundError:
            pass
    return {"mib": round(size / 2**20, 2), "files": len(files), "tmp": tmp, "half_pairs": half}


def parse_metrics(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line.startswith("strata_") and " " in line:
            name, value = line.rsplit(" ", 1)
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


COUNTERS = ("_total",)


class Sampler(threading.Thread):
    def __init__(self, server: Server, log: Log, every: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.server, self.log, self.every, self.stop_ev = server, log, every, stop
        self.last: dict = {}
        self.last_phase = 0
        self.lock = threading.Lock()

    def sample(self) -> dict:
        s = self.server
        rec: dict = {"kind": "sample", "phase": s.n}
        pid = s.proc.pid if s.proc and s.proc.poll() is None else None
        if pid:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                for line in status.splitlines():
                    key, _, val = line.partition(":")
                    if key in ("VmRSS", "VmHWM", "Threads"):
                        rec[key] = int(val.split()[0])
                rec["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
            except FileNotFoundError:
                pass
        rec["folders"] = {name: folder_stats(p) for name, p in s.dirs.items()}
        rec["log_bytes"] = s.log_path.stat().st_size if s.log_path.exists() else 0
        try:
            metrics = parse_metrics(httpx.get(s.url + "/metrics", timeout=10).text)
            r = httpx.get(s.url + "/v1/slots", timeout=10)
            if r.status_code != 200:       # a restarted server answers 503 until its model is loaded
                rec["error"] = f"/v1/slots: {r.status_code} {r.text[:200]}"
                return rec
            slots = r.json()
            if s.n != self.last_phase:     # a new server's counters start at 0
                self.last, self.last_phase = {}, s.n
            rec["slots"] = [(c["id"], c["state"], c["tokens"]) for c in slots["slots"]]
            went_back = {k: (self.last[k], v) for k, v in metrics.items()
                         if k.split("{")[0].endswith(COUNTERS) and k in self.last and v < self.last[k]}
            rec["counters_went_back"] = went_back
            self.last = metrics
            rec["metrics"] = metrics
        except (httpx.HTTPError, ValueError) as e:
            rec["error"] = repr(e)
        return rec

    def run(self) -> None:
        while not self.stop_ev.is_set():
            with self.lock:
                self.log.write(self.sample())
            self.stop_ev.wait(self.every)


class SlowReader(threading.Thread):
    """Holds /v1/monitor/events open, reading 4 KiB every 0.5 s with a small receive buffer; logs how far
    behind the snapshots it reads are (their `time` against now) and reconnects after a restart."""

    def __init__(self, server: Server, log: Log, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.server, self.log, self.stop_ev = server, log, stop

    def run(self) -> None:
        while not self.stop_ev.is_set():
            try:
                self.read_once()
            except OSError as e:
                self.log.write({"kind": "events", "error": repr(e)})
            self.stop_ev.wait(2)

    def read_once(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.connect(("127.0.0.1", self.server.args.port))
        sock.sendall(b"GET /v1/monitor/events?interval=0.25 HTTP/1.1\r\nHost: x\r\n\r\n")
        buf, n, lags, sizes, last_log = b"", 0, [], [], time.time()
        sock.settimeout(30)
        try:
            while not self.stop_ev.is_set():
                chunk = sock.recv(4096)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if line.startswith(b"data: "):
                            n += 1
                            sizes.append(len(line))
                            try:
                                lags.append(time.time() - json.loads(line[6:])["time"])
                            except (ValueError, KeyError):
                                pass
                if time.time() - last_log >= 30:
                    self.log.write({"kind": "events", "n": n, "lag_max_s": round(max(lags, default=0), 1),
                                    "lag_last_s": round(lags[-1] if lags else 0, 1),
                                    "size_max": max(sizes, default=0), "pending": len(buf)})
                    lags, sizes, last_log = [], [], time.time()
                time.sleep(0.5)
        finally:
            sock.close()


# ---------------------------------------------------------------------------------------------------------- agents
class Agent(threading.Thread):
    name_: str = "agent"

    def __init__(self, server: Server, log: Log, gate: threading.Event, stop: threading.Event, seed: int) -> None:
        super().__init__(daemon=True)
        self.server, self.log, self.gate, self.stop_ev = server, log, gate, stop
        self.rng = random.Random(seed)
        self.busy = False
        self.claude = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=600)
        self.oai = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=600)
        self.n_conv = 0
        self.saved: dict | None = None   # SessionAgent's saved point
        self.reset()

    def run(self) -> None:
        while not self.stop_ev.is_set():
            self.gate.wait()
            if self.stop_ev.is_set():
                break
            self.busy = True
            try:
                self.step()
            except Exception as e:  # every failure is a finding: logged, the agent goes on
                self.log.write({"kind": "error", "agent": self.name_, "error": f"{type(e).__name__}: {e}"[:500]})
                self.reset()
            finally:
                self.busy = False
            if self.rng.random() < 0.04:
                self.stop_ev.wait(60)          # an idle gap: the user reads, thinks, types
            else:
                self.stop_ev.wait(self.rng.uniform(0.5, 4))

    def record(self, conv: str, kind: str, prompt: int, cached: int, ideal: int, **extra) -> None:
        self.log.write({"kind": "request", "agent": self.name_, "conv": conv, "req": kind, "prompt": prompt,
                        "cached": cached, "ideal": ideal, "phase": self.server.n, **extra})

    def reset(self) -> None:
        """A new conversation: numbered `<name_>-<n>`, its first messages from begin()."""
        self.n_conv += 1
        self.conv = f"{self.name_}-{self.n_conv}"
        self.begin()

    def begin(self) -> None:
        pass


class ClaudeAgent(Agent):
    name_ = "claude"

    def begin(self) -> None:
        self.messages = [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nBe brief.\n</system-reminder>\n"},
            {"type": "text", "text": f"Fix the failing test in module {self.rng.choice(WORDS)} ({self.n_conv})."}]}]
        self.prev_prompt = 0

    def ask(self, system, tools, messages, max_tokens, tool_choice=None) -> tuple:
        extra = {"tool_choice": tool_choice} if tool_choice else {}
        with self.claude.beta.messages.stream(model="claude-sonnet", max_tokens=max_tokens, system=system,
                                              tools=tools, messages=messages, extra_body={"temperature": 0},
                                              betas=["claude-code-20250219"], **extra) as stream:
            msg = stream.get_final_message()
        u = msg.usage
        return msg, u.input_tokens + (u.cache_read_input_tokens or 0), u.cache_read_input_tokens or 0

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.12:
            return self.side_request()
        if r < 0.22:
            return self.subagent()
        force = self.rng.random() < 0.6
        msg, prompt, cached = self.ask(CC_SYSTEM, CC_TOOLS, self.messages, 48,
                                       {"type": "any"} if force else None)
        self.record(self.conv, "turn", prompt, cached, self.prev_prompt, turns=len(self.messages))
        self.prev_prompt = prompt
        content = [b.model_dump(exclude_none=True) for b in msg.content
                   if b.type in ("text", "tool_use") and (b.type != "text" or b.text)]
        if not content:
            content = [{"type": "text", "text": "ok"}]
        self.messages.append({"role": "assistant", "content": content})
        uses = [b for b in content if b["type"] == "tool_use"]
        if uses:
            self.messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": b["id"], "content": code(self.rng, self.rng.randint(8, 40))}
                for b in uses]})
        else:
            self.messages.append({"role": "user", "content": f"Now {self.rng.choice(WORDS)} the "
                                  f"{self.rng.choice(WORDS)}:\n" + code(self.rng, self.rng.randint(2, 12))})
        if prompt > LONG_LIMIT:
            self.reset()

    def side_request(self) -> None:
        kind = self.rng.choice(["title", "summary"])
        text = (self.messages[0]["content"][1]["text"] if kind == "title" else
                json.dumps(self.messages[-4:])[:3000])
        msg = self.claude.messages.create(
            model="claude-haiku", max_tokens=16, extra_body={"temperature": 0},
            system=f"Write a {kind} of this conversation in a few words.",
            messages=[{"role": "user", "content": text}])
        u = msg.usage
        self.record("side", kind, u.input_tokens + (u.cache_read_input_tokens or 0), u.cache_read_input_tokens or 0, 0)

    def subagent(self) -> None:
        conv = f"sub-{self.rng.randrange(10**6)}"
        messages = [{"role": "user", "content": f"Find where {self.rng.choice(WORDS)} is handled."}]
        prev = 0
        for turn in range(self.rng.randint(1, 3)):
            msg, prompt, cached = self.ask(SUB_SYSTEM, CC_TOOLS, messages, 32, {"type": "tool", "name": "Bash"})
            self.record(conv, "subagent", prompt, cached, prev, turn=turn)
            prev = prompt
            uses = [b.model_dump(exclude_none=True) for b in msg.content if b.type == "tool_use"]
            if not uses:
                break
            messages += [{"role": "assistant", "content": uses},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"],
                                                       "content": code(self.rng, 6)} for b in uses]}]


class CodexAgent(Agent):
    name_ = "codex"

    def begin(self) -> None:
        self.items = [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"<environment_context>cwd /work/{self.n_conv}</environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Add a test."}]}]
        self.prev_prompt = 0

    def step(self) -> None:
        force = self.rng.random() < 0.6
        with self.oai.responses.stream(model="gpt-5-codex", instructions="You are Codex, a coding agent.",
                                       input=self.items, tools=RESP_TOOLS, max_output_tokens=48, temperature=0,
                                       tool_choice="required" if force else "auto") as stream:
            resp = None
            for event in stream:       # a cut answer ends with response.incomplete, not response.completed
                if event.type in ("response.completed", "response.incomplete"):
                    resp = event.response
        u = resp.usage
        prompt, cached = u.input_tokens, u.input_tokens_details.cached_tokens
        self.record(self.conv, "turn", prompt, cached, self.prev_prompt, items=len(self.items))
        self.prev_prompt = prompt
        calls = []
        for item in resp.output:
            d = item.model_dump(exclude_none=True)
            d.pop("status", None)
            if item.type == "function_call":
                d.pop("id", None)
                calls.append(d)
            if item.type in ("message", "function_call"):
                self.items.append(d)
        for c in calls:
            self.items.append({"type": "function_call_output", "call_id": c["call_id"],
                               "output": code(self.rng, self.rng.randint(8, 40))})
        if not calls:
            self.items.append({"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Go on: " + code(self.rng, self.rng.randint(2, 10))}]})
        if prompt > LONG_LIMIT:
            self.reset()


class ChatAgent(Agent):
    name_ = "chat"

    def begin(self) -> None:
        self.messages = [{"role": "system", "content": "You are opencode, an agent for software work."},
                         {"role": "user", "content": f"Refactor the {self.rng.choice(WORDS)} module ({self.n_conv})."}]
        self.prev_prompt = 0

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.08:
            return self.disconnect(before_answer=self.rng.random() < 0.5)
        if r < 0.2:
            return self.cancelled()
        force = self.rng.random() < 0.6
        stream = self.oai.chat.completions.create(
            model="gpt-4o", messages=self.messages, tools=OAI_TOOLS, max_tokens=48, temperature=0, stream=True,
            stream_options={"include_usage": True}, tool_choice="required" if force else "auto")
        text, calls, usage = "", {}, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                text += ch.delta.content or ""
                for tc in ch.delta.tool_calls or []:
                    c = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                    c["id"] = tc.id or c["id"]
                    if tc.function:
                        c["name"] += tc.function.name or ""
                        c["args"] += tc.function.arguments or ""
        prompt = usage.prompt_tokens
        cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
        self.record(self.conv, "turn", prompt, cached, self.prev_prompt, turns=len(self.messages))
        self.prev_prompt = prompt
        msg: dict = {"role": "assistant", "content": text or None}
        if calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["args"]}} for c in calls.values()]
        elif not text:
            msg["content"] = "ok"
        self.messages.append(msg)
        for c in calls.values():
            self.messages.append({"role": "tool", "tool_call_id": c["id"], "content": code(self.rng, self.rng.randint(8, 40))})
        if not calls:
            self.messages.append({"role": "user", "content": "Next: " + code(self.rng, self.rng.randint(2, 10))})
        if prompt > LONG_LIMIT:
            self.reset()

    def cancelled(self) -> None:
        """The user presses Esc: the stream is closed after a few chunks; the conversation goes on without it."""
        stream = self.oai.chat.completions.create(model="gpt-4o", messages=self.messages, max_tokens=200,
                                                  temperature=0, stream=True, tools=OAI_TOOLS)
        n = 0
        for _ in stream:
            n += 1
            if n >= 3:
                break
        stream.close()
        self.log.write({"kind": "cancelled", "agent": self.name_, "chunks": n, "phase": self.server.n})

    def disconnect(self, before_answer: bool) -> None:
        """A client that goes away: the socket closed before the answer's first byte, or after a few bytes."""
        body = json.dumps({"model": "m", "messages": self.messages + [{"role": "user", "content": "and?"}],
                           "max_tokens": 64, "stream": True})
        conn = http.client.HTTPConnection("127.0.0.1", self.server.args.port, timeout=60)
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        if not before_answer:
            resp = conn.getresponse()
            resp.read(200)
        else:
            time.sleep(0.3)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        self.log.write({"kind": "disconnect", "agent": self.name_, "before_answer": before_answer,
                        "phase": self.server.n})


class SessionAgent(Agent):
    """A user who saves the conversation as a named session, goes on, and later restores it and branches."""

    name_ = "session"

    def begin(self) -> None:
        self.messages = [{"role": "system", "content": "You are a pair programmer. " + code(self.rng, 20)},
                         {"role": "user", "content": "Review this: " + code(self.rng, 30)}]
        self.prev_prompt = 0

    def chat(self, messages: list, ideal: int, kind: str) -> tuple:
        raw = self.oai.chat.completions.with_raw_response.create(model="m", messages=messages, max_tokens=32,
                                                                  temperature=0)
        c = raw.parse()
        req = int(raw.headers.get("x-strata-request", 0))
        u = c.usage
        cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
        self.record(self.conv, kind, u.prompt_tokens, cached, ideal, request=req)
        return c, req, u.prompt_tokens + u.completion_tokens

    def step(self) -> None:
        if self.saved and self.rng.random() < 0.25:
            return self.restore_and_branch()
        c, req, total = self.chat(self.messages, self.prev_prompt, "turn")
        self.prev_prompt = total - c.usage.completion_tokens
        self.messages += [{"role": "assistant", "content": c.choices[0].message.content or "ok"},
                          {"role": "user", "content": "And this: " + code(self.rng, self.rng.randint(5, 25))}]
        if self.saved is None or self.rng.random() < self.server.args.session_save_p:
            self.save(req, total)
        if self.prev_prompt > LONG_LIMIT:
            self.reset()

    def save(self, req: int, total: int) -> None:
        """Saves the conversation by its messages, the answer included (POST /v1/sessions/{name}/save
        {"messages"}): the server finds the context or cache entry holding it, wherever another request moved it.
        Saving the slot request `req` ran in stored another request's history when one took the slot between the
        answer and the save (5 of 24 saves in session 30's soak). A save whose n_tokens is not this conversation's
        (at least its prompt, at most its prompt and answer) is logged as `other` and not taken as the saved
        point; with --check-saves each save is restored into main and checked by a 1-token turn's cached tokens."""
        history = [dict(m) for m in self.messages[:-1]]   # through the answer: the next user message is not sent yet
        if self.server.args.check_saves:
            self.guard_slot(req, history)
        t0 = time.time()
        r = httpx.post(f"{self.server.url}/v1/sessions/soak-work/save", json={"messages": history}, timeout=600)
        body = r.json() if r.status_code == 200 else {}
        n = body.get("n_tokens", 0)
        other = r.status_code == 200 and not self.prev_prompt <= n <= total
        self.log.write({"kind": "session_save", **failure(r), "body": r.text[:300], "slot": body.get("slot"),
                        "source": body.get("source"), "n_tokens": n, "prompt": self.prev_prompt, "total": total,
                        "s": round(time.time() - t0, 2), "other": other, "phase": self.server.n})
        if r.status_code == 200 and not other:
            # the saved context held the prompt and answer; a branch resends the history up to the answer
            self.saved = {"messages": history, "conv": self.conv}
            if self.server.args.check_saves:
                self.check_save(history, n)

    def guard_slot(self, req: int, history: list) -> None:
        """What a save of the slot request `req` ran in (as this agent saved before) would have stored: that slot's
        save guarded by the messages, under a name of its own, is a 409 when another request took the slot."""
        where = [d["slot"] for d in httpx.get(self.server.url + "/v1/slots", timeout=30).json()["decisions"]
                 if d.get("request") == req and not d.get("park")]
        if not where:
            return
        r = httpx.post(f"{self.server.url}/v1/sessions/soak-slot/save", json={"slot": where[-1], "messages": history},
                       timeout=600)
        self.log.write({"kind": "session_slot_guard", **failure(r), "slot": where[-1],
                        "body": r.text[:300], "phase": self.server.n})

    def check_save(self, history: list, n_saved: int) -> None:
        """Restores the save into main, then asks whether main holds this conversation's history: a save of main
        guarded by the messages (the server compares main's tokens with them: 200 with n_saved tokens, or a 409
        when another request took main meanwhile), and a turn of its history with one more user message
        (max_tokens 1) that reuses them all (cached_tokens >= n_saved - 1) from main (run there, or copied from it:
        the decision's source). `right`: the restore gave n_saved tokens and the guarded save found them all."""
        r = httpx.post(f"{self.server.url}/v1/sessions/soak-work/restore", json={"slot": "main"}, timeout=600)
        restored = r.json().get("n_tokens", 0) if r.status_code == 200 else 0
        guard = httpx.post(f"{self.server.url}/v1/sessions/soak-check/save",
                           json={"slot": "main", "messages": history}, timeout=600) if r.status_code == 200 else None
        held = guard.json().get("n_tokens", 0) if guard is not None and guard.status_code == 200 else 0
        cached, ran_in, from_slot = 0, None, None
        if r.status_code == 200:
            raw = self.oai.chat.completions.with_raw_response.create(
                model="m", messages=history + [{"role": "user", "content": "Check."}], max_tokens=1, temperature=0)
            u = raw.parse().usage
            cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
            req = int(raw.headers.get("x-strata-request", 0))
            decisions = httpx.get(self.server.url + "/v1/slots", timeout=30).json()["decisions"]
            mine = [d for d in decisions if d.get("request") == req and not d.get("park")]
            if mine:
                ran_in, from_slot = mine[-1].get("slot"), mine[-1].get("source_slot")
        self.log.write({"kind": "session_check", **failure(r), "restored": restored, "saved": n_saved,
                        **(failure(guard, "guard_") if guard is not None else {"guard_status": None}), "main_held": held,
                        "cached": cached, "ran_in": ran_in, "from_slot": from_slot,
                        "cached_from_main": "main" in (ran_in, from_slot) and cached >= n_saved - 1,
                        "right": r.status_code == 200 and restored == n_saved and held == n_saved,
                        "phase": self.server.n})

    def restore_and_branch(self) -> None:
        busy = [c for c in httpx.get(self.server.url + "/v1/slots", timeout=30).json()["slots"]
                if c["id"] == "main" and c["state"] not in ("idle", "empty")]   # what the restore may wait for
        t0 = time.time()
        r = httpx.post(f"{self.server.url}/v1/sessions/soak-work/restore", json={"slot": "main"}, timeout=600)
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        self.log.write({"kind": "session_restore", **failure(r), "body": r.text[:300],
                        "s": round(time.time() - t0, 2), "main_busy": bool(busy), "phase": self.server.n})
        if r.status_code != 200:
            return
        messages = self.saved["messages"] + [{"role": "user", "content": "Branch: " + code(self.rng, 4)}]
        self.chat(messages, body.get("n_tokens", 0) - 1, "branch")


class EditorAgent(Agent):
    """An editor's code completions as its user types: llama.vscode's POST /infill (input_prefix, the typed part
    of the line as `prompt`, input_suffix, two ring-buffer chunks as input_extra), now and then Continue's
    streamed /v1/completions with a `suffix`. A step is a burst of keystrokes 1-2 s apart, each sending a
    completion; one not answered when the next keystroke comes is abandoned (the client closes the socket). The
    burst's last one is waited for (up to PAUSE_WAIT_S): the user pauses, and the editor shows the suggestion."""

    name_ = "editor"

    def begin(self) -> None:
        """A file opened at a line: the line to type there, the chunks llama.vscode's ring buffer holds."""
        path = self.rng.choice(EDITED_FILES)
        self.lines = path.read_text().splitlines(keepends=True)
        self.line = self.rng.randrange(len(self.lines) // 4, len(self.lines))
        self.target = f"        result = self.{self.rng.choice(WORDS)}(job, now=time.monotonic(), reason='typed')\n"
        self.typed = ""
        self.extra = [{"filename": f.name, "text": "".join(f.read_text().splitlines(keepends=True)[:64])}
                      for f in self.rng.sample(EDITED_FILES, 2)]

    def step(self) -> None:
        n = self.rng.randint(4, 20)
        for i in range(n):
            if not self.gate.is_set() or self.stop_ev.is_set():
                return
            self.keystroke()
            deadline = time.time() + (self.rng.uniform(1.0, 2.0) if i < n - 1 else PAUSE_WAIT_S)
            prefix, suffix = "".join(self.lines[max(0, self.line - 256):self.line]), "".join(self.lines[self.line:])
            if self.rng.random() < 0.15:
                self.suffix_completion(prefix + self.typed, suffix[:4000], deadline)
            else:
                self.infill(prefix, suffix, deadline)
            self.stop_ev.wait(max(0.0, deadline - time.time()))

    def keystroke(self) -> None:
        """The typed line grows by 2-5 characters; a finished line goes into the file and the next one begins."""
        self.typed += self.target[len(self.typed):len(self.typed) + self.rng.randint(2, 5)]
        if len(self.typed) >= len(self.target) - 1:
            self.lines.insert(self.line, self.target)
            self.line, self.typed = self.line + 1, ""

    def infill(self, prefix: str, suffix: str, deadline: float) -> None:
        body = {"input_prefix": prefix, "prompt": self.typed, "input_suffix": "".join(suffix.splitlines(True)[:64]),
                "input_extra": self.extra, "n_predict": 32, "n_indent": 8, "t_max_predict_ms": 1000,
                "cache_prompt": True, "samplers": ["top_k", "top_p", "infill"], "top_k": 40, "top_p": 0.99}
        t0 = time.time()
        conn = http.client.HTTPConnection("127.0.0.1", self.server.args.port, timeout=max(0.05, deadline - t0))
        try:
            conn.request("POST", "/infill", body=json.dumps(body), headers={"Content-Type": "application/json"})
            conn.sock.settimeout(max(0.05, deadline - time.time()))
            resp = conn.getresponse()
            conn.sock.settimeout(max(0.05, deadline - time.time()))
            status, data = resp.status, resp.read()
        except TimeoutError:
            if conn.sock is not None:              # the next keystroke: llama.vscode aborts the request
                conn.sock.shutdown(socket.SHUT_RDWR)
            return self.completion("infill", t0, abandoned=True)
        finally:
            conn.close()
        if status != 200:
            raise RuntimeError(f"/infill answered {status}: {data[:300]!r}")
        a = json.loads(data)
        self.completion("infill", t0, evaluated=a["tokens_evaluated"], cache_n=a["timings"]["cache_n"])

    def suffix_completion(self, prompt: str, suffix: str, deadline: float) -> None:
        t0, n = time.time(), 0
        try:
            stream = self.oai.with_options(timeout=max(0.05, deadline - t0)).completions.create(
                model="autocomplete", prompt=prompt, suffix=suffix, max_tokens=48, temperature=0.01, stream=True,
                stop=["\n\n", "\n}"])
            for _ in stream:
                n += 1
                if time.time() > deadline:
                    stream.close()        # Continue aborts the stream at the next keystroke
                    return self.completion("suffix", t0, abandoned=True, chunks=n)
        except openai.APITimeoutError:
            return self.completion("suffix", t0, abandoned=True, chunks=n)
        self.completion("suffix", t0, chunks=n)

    def completion(self, api: str, t0: float, abandoned: bool = False, **extra) -> None:
        self.log.write({"kind": "completion", "api": api, "abandoned": abandoned, "s": round(time.time() - t0, 3),
                        "phase": self.server.n, **extra})


# ---------------------------------------------------------------------------------------------------------- driver
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=40.0)
    p.add_argument("--out", default="/tmp/soak/run")
    p.add_argument("--root", default="", help="folder for the cache levels and HOME (default: --out)")
    p.add_argument("--port", type=int, default=8199)
    p.add_argument("--sample-s", type=float, default=30.0)
    p.add_argument("--ram-mib", type=int, default=64)
    p.add_argument("--warm-mib", type=int, default=128)
    p.add_argument("--cold-mib", type=int, default=320)
    p.add_argument("--segment-mib", type=int, default=64)
    p.add_argument("--system-prompt-mib", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--session-save-p", type=float, default=0.15,
                   help="the chance that the session agent saves after a turn (besides its first save)")
    p.add_argument("--check-saves", action="store_true",
                   help="restore each session save into main and check it by a 1-token turn's cached tokens")
    p.add_argument("--serve-arg", action="append", default=[], metavar="FLAG",
                   help="a flag added to strata serve's command, after the soak's own (repeat it; write "
                        "--serve-arg=--flag=value), e.g. a sessions folder budget the saves reach: "
                        "--serve-arg=--conversation-cache-sessions-mib=400")
    return p


def main() -> None:
    p = parser()
    args = p.parse_args()
    if not 0.0 <= args.session_save_p <= 1.0:
        p.error(f"--session-save-p must be a chance from 0 to 1, got {args.session_save_p!r}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.root = args.root or str(out)
    args.model = str(fim_smollm2(Path(args.root) / "smollm2-fim.gguf"))   # the default model, FIM tokens named
    log = Log(out / "requests.jsonl")
    server = Server(args, out)
    summary: dict = {"args": vars(args), "phases": []}
    stop, gate = threading.Event(), threading.Event()
    summary["phases"].append({"start_s": round(server.start(), 1)})
    sampler = Sampler(server, log, args.sample_s, stop)
    agents = [cls(server, log, gate, stop, args.seed * 10 + i)
              for i, cls in enumerate((ClaudeAgent, CodexAgent, ChatAgent, SessionAgent, EditorAgent))]
    gate.set()
    for t in (sampler, SlowReader(server, log, stop), *agents):
        t.start()
    half = time.time() + args.minutes * 30
    end = time.time() + args.minutes * 60
    restarted = False
    while time.time() < end:
        time.sleep(5)
        if not restarted and time.time() >= half:
            restarted = True
            summary["phases"][-1].update(drain_and_stop(server, gate, agents, sampler, log))
            summary["phases"].append({"start_s": round(server.start(), 1)})
            gate.set()
    summary["phases"][-1].update(drain_and_stop(server, gate, agents, sampler, log))
    stop.set()
    gate.set()
    summary["requests"] = summarize(log.records)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


def drain_and_stop(server: Server, gate: threading.Event, agents: list, sampler: Sampler, log: Log) -> dict:
    gate.clear()
    t0 = time.time()
    while any(a.busy for a in agents) and time.time() - t0 < 300:
        time.sleep(0.5)
    time.sleep(2)
    with sampler.lock:
        last = sampler.sample()
        log.write({**last, "kind": "final_sample"})
        stopped = server.stop()
    after = {name: folder_stats(p) for name, p in server.dirs.items()}
    log.write({"kind": "stopped", **stopped, "folders": after})
    return {**stopped, "drain_s": round(time.time() - t0, 1), "folders_after_stop": after}


if __name__ == "__main__":
    main()
