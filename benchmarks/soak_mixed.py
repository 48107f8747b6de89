"""A long mixed soak of a running `strata serve`: 8 clients mixing OpenAI chat (stream and not), Anthropic
messages, the Responses API, /v1/completions with token ids, tool calls, stop sequences, long prompts,
continued conversations, streams cancelled midway and bad bodies, while a watcher reads /v1/slots,
/metrics and /v1/monitor/events and samples the server's RSS, open fds and cache folders.

Every request is greedy (temperature 0) and logged whole (endpoint, body, status, usage, answer) to a
JSONL file, so that a fresh server can replay them (`--replay`) and the answers be compared. The
conversations live in a state file, so a second run after a restart continues the same ones.

    python benchmarks/soak_mixed.py --url http://127.0.0.1:8199 --pid PID --minutes 18 \
        --state /tmp/soak/state.json --log /tmp/soak/phase1.jsonl --watch-dir /tmp/soak/warm ...
    python benchmarks/soak_mixed.py --url URL --replay /tmp/soak/phase1.jsonl --out /tmp/soak/replay.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
from pathlib import Path

import httpx2 as httpx

WORDS = ("alpha beta gamma delta parser token cache slot engine buffer socket thread queue vector matrix "
         "kernel module import return yield class struct enum trait async await lambda closure").split()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SHORT_LIMIT = 3000          # a conversation's rough token count past which it starts again (slots hold 4096)
LONG_LIMIT = 15500


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def code_doc(rng: random.Random, n_lines: int) -> str:
    lines = []
    for i in range(n_lines):
        a, b = rng.choice(WORDS), rng.choice(WORDS)
        lines.append(f"def {a}_{i}({b}): return {b} + {rng.randrange(1000)}  # {rng.choice(WORDS)}")
    return "\n".join(lines)


class Log:
    def __init__(self, path: str) -> None:
        self.f = open(path, "a")
        self.lock = threading.Lock()

    def write(self, rec: dict) -> None:
        with self.lock:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()


def approx_tokens(conv: dict) -> int:
    return conv.get("last_prompt", 0) + 60


def new_conv(rng: random.Random, cid: str, long: bool) -> dict:
    system = f"You are agent {cid}-{rng.randrange(10**6)}. " + words(rng, rng.randrange(40, 300))
    msgs = [{"role": "system", "content": system}]
    first = f"Question {rng.randrange(1000)}: " + words(rng, rng.randrange(5, 40))
    if long:
        first = "Read this file:\n" + code_doc(rng, rng.randrange(450, 700)) + "\n\nWhat does it do?"
    msgs.append({"role": "user", "content": first})
    return {"id": cid, "gen": rng.randrange(10**9), "msgs": msgs, "turn": 0, "last_prompt": 0, "long": long}


def to_anthropic(msgs: list[dict]) -> tuple[str, list[dict]]:
    out = []
    for m in msgs[1:]:
        if m["role"] == "assistant" and m.get("tool_calls"):
            tc = m["tool_calls"][0]
            out.append({"role": "assistant", "content": [{"type": "tool_use", "id": tc["id"],
                        "name": tc["function"]["name"], "input": json.loads(tc["function"]["arguments"] or "{}")}]})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                                                     "content": m["content"]}]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return msgs[0]["content"], out


def to_responses(msgs: list[dict]) -> tuple[str, list[dict]]:
    out = []
    for m in msgs[1:]:
        if m["role"] == "assistant" and m.get("tool_calls"):
            tc = m["tool_calls"][0]
            out.append({"type": "function_call", "call_id": tc["id"], "name": tc["function"]["name"],
                        "arguments": tc["function"]["arguments"]})
        elif m["role"] == "tool":
            out.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return msgs[0]["content"], out


def sse_events(r: httpx.Response):
    event = None
    for line in r.iter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            if data == "[DONE]":
                return
            yield event, json.loads(data)


class Client:
    def __init__(self, n: int, url: str, state: dict, log: Log, stop_at: float, phase: str) -> None:
        self.n, self.url, self.log, self.stop_at, self.phase = n, url, log, stop_at, phase
        self.rng = random.Random(1000 + n + sum(map(ord, phase)) * 7)
        self.state = state
        key = f"c{n}"
        if key not in state:
            state[key] = new_conv(self.rng, key, long=False)
            if n < 2:
                state[f"L{n}"] = new_conv(self.rng, f"L{n}", long=True)
            state[f"T{n}"] = {"id": f"T{n}", "gen": self.rng.randrange(10**9), "ids": [1] + [
                self.rng.randrange(100, 40000) for _ in range(self.rng.randrange(200, 900))], "turn": 0,
                "last_prompt": 0}
        self.http = httpx.Client(timeout=600)

    def run(self) -> None:
        kinds = ["chat", "chat_stream", "messages", "messages_stream", "responses", "responses_stream",
                 "completion_ids", "tools", "stop", "cancel", "bad"]
        weights = [3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1]
        while time.time() < self.stop_at:
            kind = self.rng.choices(kinds, weights)[0]
            conv = self.state[f"c{self.n}"]
            if self.n < 2 and self.rng.random() < 0.12:
                conv = self.state[f"L{self.n}"]
                kind = self.rng.choice(["chat", "messages_stream", "responses", "chat_stream"])
            if kind == "completion_ids":
                conv = self.state[f"T{self.n}"]
            try:
                self.step(kind, conv)
            except Exception as e:      # a transport failure: logged as such, the soak goes on
                self.log.write({"phase": self.phase, "client": self.n, "kind": kind, "conv": conv["id"],
                                "exception": repr(e), "t": time.time()})
                time.sleep(1)

    def record(self, kind: str, conv: dict, endpoint: str, body: dict, status: int, usage: dict | None,
               answer, t0: float, extra: dict | None = None) -> None:
        rec = {"phase": self.phase, "client": self.n, "kind": kind, "conv": conv["id"], "gen": conv["gen"],
               "turn": conv["turn"], "prev_prompt": conv["last_prompt"], "endpoint": endpoint, "body": body,
               "status": status, "usage": usage, "answer": answer, "t": t0, "s": round(time.time() - t0, 3)}
        rec.update(extra or {})
        self.log.write(rec)

    def post(self, ep: str, body: dict) -> tuple[int, dict, dict]:
        """POSTs `body` to `ep`: the status, the JSON answer and its usage ({} without one)."""
        r = self.http.post(self.url + ep, json=body)
        j = r.json()
        return r.status_code, j, j.get("usage") or {}

    def stream(self, ep: str, body: dict) -> tuple[int, list[tuple[str | None, dict]], str | None]:
        """POSTs a streamed `body` to `ep`: the status, its server-sent events read to the end ((event name, data)
        pairs; none but on a 200) and the error's body text (None on a 200)."""
        with self.http.stream("POST", self.url + ep, json=body) as r:
            if r.status_code != 200:
                r.read()
                return r.status_code, [], r.text
            return r.status_code, list(sse_events(r)), None

    def step(self, kind: str, conv: dict) -> None:
        rng = self.rng
        t0 = time.time()
        max_tokens = rng.randrange(8, 48)
        if kind == "completion_ids":
            conv["ids"] += [rng.randrange(100, 40000) for _ in range(rng.randrange(10, 80))]
            if len(conv["ids"]) > SHORT_LIMIT:
                conv.update(ids=conv["ids"][:1] + [rng.randrange(100, 40000) for _ in range(300)], turn=0,
                            last_prompt=0, gen=rng.randrange(10**9))
            body = {"model": "m", "prompt": conv["ids"], "max_tokens": max_tokens, "temperature": 0}
            status, j, u = self.post("/v1/completions", body)
            usage = {"prompt": u.get("prompt_tokens"), "completion": u.get("completion_tokens"),
                     "cached": (u.get("prompt_tokens_details") or {}).get("cached_tokens")}
            ans = j["choices"][0]["text"] if status == 200 else j
            self.record(kind, conv, "/v1/completions", body, status, usage, ans, t0)
            if status == 200:
                conv["turn"] += 1
                conv["last_prompt"] = usage["prompt"]
            return
        if kind == "bad":
            bad = rng.choice([
                b"{not json", b'{"messages": "hi"}', b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
                b'{"messages": [], "max_tokens": 5}', b'{"model": "m", "messages": [{"role": "wizard", "content": 1}]}',
                b'[1, 2, 3]', b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}'])
            ep = rng.choice(["/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/completions"])
            r = self.http.post(self.url + ep, content=bad, headers={"content-type": "application/json"})
            self.record(kind, conv, ep, {"raw": bad.decode()}, r.status_code, None, r.text[:300], t0)
            return
        if approx_tokens(conv) > (LONG_LIMIT if conv["long"] else SHORT_LIMIT):
            self.state[conv["id"]] = conv = new_conv(rng, conv["id"], conv["long"])
        msgs = conv["msgs"]
        if msgs[-1]["role"] == "assistant":
            msgs.append({"role": "user", "content": f"Next {rng.randrange(1000)}: " + words(rng, rng.randrange(3, 30))})
        answer, usage, status, extra = None, None, None, {}
        if kind in ("chat", "chat_stream", "stop", "tools", "cancel"):
            body = {"model": "m", "messages": list(msgs), "max_tokens": max_tokens, "temperature": 0}  # a copy: msgs grows
            if kind == "stop":
                body["stop"] = rng.sample([".", "\n", " the", "alpha", ","], 2)
            if kind == "tools":
                body["tools"] = TOOLS
                body["tool_choice"] = rng.choice(["required", "auto"])
                body["max_tokens"] = 60
            if kind in ("chat_stream", "cancel"):
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            if kind == "cancel":
                body["max_tokens"] = 400
                with self.http.stream("POST", self.url + "/v1/chat/completions", json=body) as r:
                    n = 0
                    for _ in r.iter_lines():
                        n += 1
                        if n >= rng.randrange(3, 12):
                            break
                    status = r.status_code
                self.record(kind, conv, "/v1/chat/completions", body, status, None, None, t0, {"lines": n})
                return
            if body.get("stream"):
                text, u, finish = "", {}, None
                status, events, error = self.stream("/v1/chat/completions", body)
                for _, ev in events:
                    if ev.get("usage"):
                        u = ev["usage"]
                    for ch in ev.get("choices") or []:
                        text += ch["delta"].get("content") or ""
                        finish = ch.get("finish_reason") or finish
                answer = text if error is None else error
                extra["finish"] = finish
            else:
                status, j, u = self.post("/v1/chat/completions", body)
                if status == 200:
                    m = j["choices"][0]["message"]
                    extra["finish"] = j["choices"][0]["finish_reason"]
                    calls = m.get("tool_calls") or []
                    answer = {"content": m.get("content"), "tool_calls": [
                        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls]}
                    if calls:
                        c = calls[0]
                        msgs.append({"role": "assistant", "content": None, "tool_calls": [
                            {"id": c["id"], "type": "function", "function": c["function"]}]})
                        msgs.append({"role": "tool", "tool_call_id": c["id"], "content": f"{rng.randrange(-20, 40)} C"})
                else:
                    answer = j
            usage = {"prompt": u.get("prompt_tokens"), "completion": u.get("completion_tokens"),
                     "cached": (u.get("prompt_tokens_details") or {}).get("cached_tokens")}
            if status == 200 and not (kind in ("chat", "stop", "tools") and answer.get("tool_calls")):
                text = answer if isinstance(answer, str) else answer.get("content") or ""
                msgs.append({"role": "assistant", "content": text})
            ep = "/v1/chat/completions"
        elif kind in ("messages", "messages_stream"):
            system, amsgs = to_anthropic(msgs)
            body = {"model": "m", "system": system, "messages": amsgs, "max_tokens": max_tokens, "temperature": 0}
            ep = "/v1/messages"
            u = {}
            if kind == "messages_stream":
                body["stream"] = True
                text = ""
                status, events, error = self.stream(ep, body)
                for ev_name, ev in events:
                    if ev_name == "message_start":
                        u.update(ev["message"]["usage"])
                    elif ev_name == "message_delta":
                        u.update(ev["usage"])     # the final counts (message_start may come while queued)
                    elif ev_name == "content_block_delta" and ev["delta"]["type"] == "text_delta":
                        text += ev["delta"]["text"]
                answer = text if error is None else error
            else:
                status, j, u = self.post(ep, body)
                answer = "".join(b.get("text", "") for b in j.get("content", [])) if status == 200 else j
            if u:
                usage = {"prompt": (u.get("input_tokens") or 0) + (u.get("cache_read_input_tokens") or 0),
                         "completion": u.get("output_tokens"), "cached": u.get("cache_read_input_tokens")}
            if status == 200:
                msgs.append({"role": "assistant", "content": answer})
        else:   # responses
            instructions, items = to_responses(msgs)
            body = {"model": "m", "instructions": instructions, "input": items, "max_output_tokens": max(16, max_tokens),
                    "temperature": 0, "store": False}
            ep = "/v1/responses"
            u = {}
            if kind == "responses_stream":
                body["stream"] = True
                text = ""
                status, events, error = self.stream(ep, body)
                for _, ev in events:
                    if ev.get("type") == "response.output_text.delta":
                        text += ev["delta"]
                    elif ev.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                        u = ev["response"].get("usage") or {}
                answer = text if error is None else error
            else:
                status, j, u = self.post(ep, body)
                if status == 200:
                    answer = "".join(c.get("text", "") for o in j.get("output", []) if o.get("type") == "message"
                                     for c in o.get("content", []))
                else:
                    answer = j
            if u:
                usage = {"prompt": u.get("input_tokens"), "completion": u.get("output_tokens"),
                         "cached": (u.get("input_tokens_details") or {}).get("cached_tokens")}
            if status == 200:
                msgs.append({"role": "assistant", "content": answer})
        self.record(kind, conv, ep, body, status, usage, answer, t0, extra)
        if status == 200 and usage and usage.get("prompt"):
            conv["turn"] += 1
            conv["last_prompt"] = usage["prompt"]


class Watcher:
    """Samples the server while the clients run: /v1/slots, /metrics, the monitor's events, RSS, fds,
    cache folder sizes and stray temp files."""

    def __init__(self, url: str, pid: int, dirs: list[str], out: str, phase: str) -> None:
        self.url, self.pid, self.dirs, self.phase = url, pid, dirs, phase
        self.out = Log(out)
        self.stop = threading.Event()
        self.events = 0
        self.event_errors: list[str] = []

    def sample(self) -> dict:
        rec: dict = {"phase": self.phase, "t": time.time()}
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rec["rss_mib"] = int(line.split()[1]) / 1024
            rec["fds"] = len(os.listdir(f"/proc/{self.pid}/fd"))
            rec["threads"] = len(os.listdir(f"/proc/{self.pid}/task"))
        except OSError as e:
            rec["proc_error"] = repr(e)
        for d in self.dirs:
            files = [p for p in Path(d).rglob("*") if p.is_file()]
            rec[f"dir:{d}"] = {"mib": sum(p.stat().st_size for p in files if p.exists()) / 2**20, "files": len(files),
                               "temp": [p.name for p in files if ".tmp" in p.name or p.name.startswith(".")][:5]}
        try:
            rec["slots"] = [(s["id"], s["state"], s["tokens"]) for s in httpx.get(self.url + "/v1/slots", timeout=30).json()["slots"]]
            rec["metrics"] = parse_metrics(httpx.get(self.url + "/metrics", timeout=30).text)
        except Exception as e:
            rec["http_error"] = repr(e)
        rec["events"] = self.events
        return rec

    def follow_events(self) -> None:
        while not self.stop.is_set():
            try:
                with httpx.stream("GET", self.url + "/v1/monitor/events", timeout=60) as r:
                    for line in r.iter_lines():
                        if line.startswith("data:"):
                            json.loads(line[5:])
                            self.events += 1
                        if self.stop.is_set():
                            return
            except Exception as e:
                self.event_errors.append(repr(e))
                time.sleep(1)

    def run(self) -> None:
        threading.Thread(target=self.follow_events, daemon=True).start()
        while not self.stop.wait(5):
            self.out.write(self.sample())
        self.out.write(dict(self.sample(), final=True, event_errors=self.event_errors[:20]))


def parse_metrics(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def replay(url: str, log_path: str, out: str, only_phase: str | None, limit: int, strip_answers: bool = False,
           kinds: str = "") -> None:
    """Sends each logged successful greedy request (not cancelled) again, one at a time, and compares."""
    recs = [json.loads(line) for line in open(log_path)]
    recs = [r for r in recs if r.get("status") == 200 and r["kind"] not in ("cancel", "bad")
            and (only_phase is None or r["phase"] == only_phase) and (not kinds or r["kind"] in kinds.split(","))]
    random.Random(7).shuffle(recs)
    long = [r for r in recs if r["conv"].startswith("L")][:3]      # a long prompt costs ~30 s to read again
    recs = [r for r in recs if not r["conv"].startswith("L")][:limit] + long
    results = []
    http = httpx.Client(timeout=600)
    for r in recs:
        body = dict(r["body"], stream=False)
        if strip_answers and "messages" in body:      # logs written before the copy above held the answer too
            calls = isinstance(r["answer"], dict) and r["answer"].get("tool_calls")
            body["messages"] = body["messages"][:-2 if calls else -1]
        body.pop("stream_options", None)
        j = http.post(url + r["endpoint"], json=body).json()
        if r["endpoint"] == "/v1/chat/completions":
            m = j["choices"][0]["message"]
            calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in m.get("tool_calls") or []]
            got = {"content": m.get("content"), "tool_calls": calls} if isinstance(r["answer"], dict) else (m.get("content") or "")
        elif r["endpoint"] == "/v1/messages":
            got = "".join(b.get("text", "") for b in j.get("content", []))
        elif r["endpoint"] == "/v1/responses":
            got = "".join(c.get("text", "") for o in j.get("output", []) if o.get("type") == "message" for c in o.get("content", []))
        else:
            got = j["choices"][0]["text"]
        results.append({"conv": r["conv"], "turn": r["turn"], "kind": r["kind"], "phase": r["phase"],
                        "same": got == r["answer"], "soak": r["answer"], "fresh": got})
    json.dump(results, open(out, "w"), indent=1)
    print(f"replayed {len(results)}: {sum(x['same'] for x in results)} identical")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int)
    ap.add_argument("--minutes", type=float, default=1)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--state")
    ap.add_argument("--log")
    ap.add_argument("--watch-log")
    ap.add_argument("--watch-dir", action="append", default=[])
    ap.add_argument("--phase", default="p1")
    ap.add_argument("--replay")
    ap.add_argument("--replay-phase")
    ap.add_argument("--replay-limit", type=int, default=200)
    ap.add_argument("--out")
    ap.add_argument("--strip-answers", action="store_true")
    ap.add_argument("--replay-kinds", default="")
    a = ap.parse_args()
    if a.replay:
        replay(a.url, a.replay, a.out, a.replay_phase, a.replay_limit, a.strip_answers, a.replay_kinds)
        return
    state = json.load(open(a.state)) if a.state and os.path.exists(a.state) else {}
    log = Log(a.log)
    stop_at = time.time() + a.minutes * 60
    watcher = Watcher(a.url, a.pid, a.watch_dir, a.watch_log, a.phase)
    wt = threading.Thread(target=watcher.run, daemon=True)
    wt.start()
    clients = [Client(n, a.url, state, log, stop_at, a.phase) for n in range(a.clients)]
    threads = [threading.Thread(target=c.run) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(3)       # let the cancelled streams' slots settle before the last sample
    watcher.stop.set()
    wt.join()
    json.dump(state, open(a.state, "w"))


if __name__ == "__main__":
    main()
