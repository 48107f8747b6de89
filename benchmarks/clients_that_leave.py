"""Clients that go away, as agents do, against a running `strata serve` (start it yourself: any --batch).

Each case sends a request, goes away in its own way, then measures: how long until nothing is busy
(/metrics requests_in_flight and queue_depth, /v1/slots), the tokens generated after the client left, and
what the same request sent again reuses (usage cached tokens). Cases:
  stream     openai SDK, streamed, closed after 4 chunks
  anthropic  anthropic SDK, streamed, closed after 6 events
  timeout    openai SDK with a 0.5 s timeout while a ~3,000-token prompt is read (--no-retry: not sent again)
  retry_now  the same, sent again at once (an SDK's own retry, before the server saw the first one go)
  slow       a raw socket that reads nothing for --slow-s, then closes
  hung       a raw socket that never reads nor closes: how long until the server ends it (--answer-unread-s)
  burst      20 short requests at once (aiohttp), every other one cancelled 0.3 s in
  NAME_busy  NAME while another long streamed request runs (so it goes to a batch slot)
RSS (from /proc/PID) and the RAM level's bytes are printed every 5 rounds: RSS less the cache is what grows
without a reason. Session 40's numbers: benchmarks/RESULTS.md "Clients that go away".

    .venv/bin/python benchmarks/clients_that_leave.py --url http://127.0.0.1:8080 --pid PID --rounds 50 \\
        --cases stream,anthropic,burst,timeout,slow --no-retry
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import threading
import time

import aiohttp
import anthropic
import httpx2 as httpx
import openai

LONG = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog number {i}." for i in range(150))
STORY = [{"role": "user", "content": "Write a very long story about a dragon and a knight who become friends."}]


class Trial:
    def __init__(self, args: argparse.Namespace) -> None:
        self.url, self.pid, self.args = args.url, args.pid, args
        self.oai = openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=600)
        self.claude = anthropic.Anthropic(base_url=self.url, api_key="x", max_retries=0, timeout=600)
        self.base = 0          # requests of the background load (the _busy cases)

    # ----- what the server says -----

    def metrics(self) -> dict[str, float]:
        out = {}
        for line in httpx.get(self.url + "/metrics", timeout=30).text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def generated(self) -> float:
        return self.metrics()["strata_generated_tokens_total"]

    def rss_mib(self) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            return next(int(ln.split()[1]) / 1024 for ln in f if ln.startswith("VmRSS"))

    def wait_free(self, t0: float, timeout: float = 120.0) -> float:
        """Seconds from t0 until no request but the background's holds a context and none waits."""
        while time.monotonic() - t0 < timeout:
            m = self.metrics()
            slots = httpx.get(self.url + "/v1/slots", timeout=30).json()["slots"]
            busy = [s["id"] for s in slots if s["state"] not in ("empty", "idle")]
            if m["strata_queue_depth"] == 0 and m["strata_requests_in_flight"] <= self.base and len(busy) <= self.base:
                return round(time.monotonic() - t0, 3)
            time.sleep(0.02)
        raise SystemExit(f"still busy {timeout} s after the client left")

    # ----- the cases -----

    def stream(self, tag: str) -> dict:
        msgs = [{"role": "system", "content": f"You are helper {tag}."}] + STORY
        s = self.oai.chat.completions.create(model="m", messages=msgs, max_tokens=400, stream=True, temperature=0)
        for n, _ in enumerate(s):
            if n >= 3:
                break
        return self._after_close(s.close, lambda: self._cached_chat(msgs))

    def anthropic(self, tag: str) -> dict:
        s = self.claude.messages.create(model="m", max_tokens=400, messages=STORY, system=f"helper {tag}", stream=True)
        for n, _ in enumerate(s):
            if n >= 5:
                break

        def again() -> dict:
            r = self.claude.messages.create(model="m", max_tokens=2, messages=STORY, system=f"helper {tag}")
            return dict(retry_input=r.usage.input_tokens, retry_cache_read=r.usage.cache_read_input_tokens)
        return self._after_close(s.close, again)

    def timeout(self, tag: str) -> dict:
        msgs = [{"role": "user", "content": f"[{tag}] Summarise this:\n" + LONG}]
        read0 = self.metrics()["strata_prompt_tokens_read_total"]
        self._time_out(msgs)
        out = dict(free_s=self.wait_free(time.monotonic()))
        out["read_by_cancelled"] = self.metrics()["strata_prompt_tokens_read_total"] - read0
        if not self.args.no_retry:
            out.update(self._cached_chat(msgs))
        return out

    def retry_now(self, tag: str) -> dict:
        msgs = [{"role": "user", "content": f"[{tag}] Summarise this:\n" + LONG}]
        read0 = self.metrics()["strata_prompt_tokens_read_total"]
        self._time_out(msgs)
        out = self._cached_chat(msgs)
        out["read_by_both"] = self.metrics()["strata_prompt_tokens_read_total"] - read0
        return out

    def slow(self, tag: str) -> dict:
        sk = self._raw_stream(f"helper {tag}", 300)
        time.sleep(self.args.slow_s)
        return self._after_close(sk.close, None)

    def hung(self, tag: str) -> dict:
        sk = self._raw_stream(f"helper {tag}", 3000)
        g0, t0 = self.generated(), time.monotonic()
        try:
            ended = self.wait_free(t0, timeout=600)
        finally:
            sk.close()
        return dict(ended_after_s=ended, generated_for_it=self.generated() - g0)

    def burst(self, tag: str) -> dict:
        async def run() -> list:
            async with aiohttp.ClientSession() as sess:
                async def one(i: int):
                    body = {"model": "m", "messages": [{"role": "user", "content": f"[{tag}] Say a word number {i}."}],
                            "max_tokens": 20, "temperature": 0, "stream": i % 4 == 0}
                    async with sess.post(self.url + "/v1/chat/completions", json=body) as r:
                        return r.status, await r.read()
                tasks = [asyncio.create_task(one(i)) for i in range(20)]
                await asyncio.sleep(0.3)
                for t in tasks[::2]:
                    t.cancel()
                return await asyncio.gather(*tasks, return_exceptions=True)
        res = asyncio.run(run())
        ok = sum(1 for r in res if isinstance(r, tuple) and r[0] == 200)
        return dict(answered=ok, cancelled=len(res) - ok, free_s=self.wait_free(time.monotonic()))

    # ----- helpers -----

    def _after_close(self, close, again) -> dict:
        g0, t0 = self.generated(), time.monotonic()
        close()
        out = dict(free_s=self.wait_free(t0), generated_after=self.generated() - g0)
        if again is not None:
            out.update(again())
        return out

    def _cached_chat(self, msgs: list) -> dict:
        r = self.oai.chat.completions.create(model="m", messages=msgs, max_tokens=2, temperature=0)
        return dict(retry_prompt=r.usage.prompt_tokens, retry_cached=r.usage.prompt_tokens_details.cached_tokens)

    def _time_out(self, msgs: list) -> None:
        c = openai.OpenAI(base_url=self.url + "/v1", api_key="x", max_retries=0, timeout=0.5)
        try:
            c.chat.completions.create(model="m", messages=msgs, max_tokens=50, temperature=0)
        except openai.APITimeoutError:
            pass

    def _raw_stream(self, system: str, max_tokens: int) -> socket.socket:
        host, port = self.url.split("//")[1].rsplit(":", 1)
        body = json.dumps({"model": "m", "messages": [{"role": "system", "content": system}] + STORY,
                           "max_tokens": max_tokens, "stream": True, "temperature": 0, "ignore_eos": True}).encode()
        sk = socket.socket()
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sk.connect((host, int(port)))
        sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        return sk

    def busy(self, case):
        """`case` while another long streamed request holds a context."""
        def run(tag: str) -> dict:
            stop = threading.Event()

            def load() -> None:
                s = self.oai.chat.completions.create(model="m", max_tokens=600, stream=True,
                                                     messages=[{"role": "user", "content": "Count to a thousand."}])
                for _ in s:
                    if stop.is_set():
                        break
                s.close()
            t = threading.Thread(target=load)
            t.start()
            time.sleep(0.5)
            self.base = 1
            try:
                return case(tag)
            finally:
                self.base = 0
                stop.set()
                t.join()
        return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (its RSS)")
    ap.add_argument("--cases", default="stream,anthropic,timeout,retry_now,slow,burst")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--slow-s", type=float, default=3.0)
    ap.add_argument("--no-retry", action="store_true", help="timeout: do not send the request again")
    args = ap.parse_args()
    trial = Trial(args)
    rss0 = trial.rss_mib()
    for rnd in range(args.rounds):
        for name in args.cases.split(","):
            case = trial.busy(getattr(trial, name[:-5])) if name.endswith("_busy") else getattr(trial, name)
            res = case(f"{os.getpid()}-{name}-r{rnd}")
            if rnd < 2 or rnd == args.rounds - 1:
                print(rnd, name, res, flush=True)
        if rnd % 5 == 4 or rnd == 0:
            cache = trial.metrics().get('strata_cache_level_bytes{level="ram"}', 0) / 2**20
            rss = trial.rss_mib()
            print(f"round {rnd}: RSS {rss:.1f} MiB (at the start {rss0:.1f}), RAM level {cache:.1f} MiB, "
                  f"RSS less the RAM level {rss - cache:.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
