"""The numbers a user sees agree with each other and with what happened, under a mixed workload on a
real server (loopback, the real openai and anthropic SDKs, the tiny model with batch slots, lookup
decoding and a conversation cache in RAM and on disk): concurrent conversations on both APIs, streamed
and not, a stream its client leaves, bad requests, then a restart whose turns restore from disk.

Checked: the answers' usage against /metrics and the monitor's request list (prompt = read + reused,
reuse by source, tokens generated, the cancelled one once with what it generated), each request's reuse
in its placement decision, lookup decoding's counts, the cache's hits by level against the requests'
sources, parks counted alike by the scheduler and the cache, gauges back at 0, and the monitor feed's
snapshot equal to /metrics and /v1/slots taken while idle."""

from __future__ import annotations

import collections
import threading
import time

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer, sdk_clients
from tests.server.test_metrics import scrape


class Answers:
    """(api, prompt tokens, reused tokens, completion tokens, timings or None) of every answer received."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self._lock = threading.Lock()

    def add(self, api: str, prompt: int, reused: int, completion: int, timings: dict | None) -> None:
        if timings is not None:
            assert (timings["cache_n"], timings["prompt_n"], timings["predicted_n"]) == (
                reused, prompt - reused, completion), timings
        with self._lock:
            self.rows.append((api, prompt, reused, completion))


def openai_conversation(server: LiveServer, answers: Answers, name: str, stream: bool, turns: int = 3,
                        msgs: list | None = None) -> list:
    oai, _ = sdk_clients(server)
    msgs = msgs or [{"role": "system", "content": "You are terse. " * 30},
                    {"role": "user", "content": f"conversation {name} " * 10}]
    for turn in range(turns):
        if stream:
            chunks = list(oai.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0,
                                                      stream=True, stream_options={"include_usage": True}))
            u, text = chunks[-1].usage, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            timings = next(c.model_extra["timings"] for c in chunks if c.choices and c.choices[0].finish_reason)
        else:
            r = oai.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0)
            u, text, timings = r.usage, r.choices[0].message.content, r.model_extra["timings"]
        answers.add("openai", u.prompt_tokens, u.prompt_tokens_details.cached_tokens, u.completion_tokens, timings)
        msgs = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": f"more {turn}"}]
    return msgs


def anthropic_conversation(server: LiveServer, answers: Answers, name: str, stream: bool, turns: int = 3,
                           msgs: list | None = None) -> list:
    _, claude = sdk_clients(server)
    msgs = msgs or [{"role": "user", "content": f"anthropic {name} " * 12}]
    kw = dict(model="m", max_tokens=12, system="be brief " * 20, extra_body={"temperature": 0})
    for turn in range(turns):
        if stream:
            with claude.messages.stream(messages=msgs, **kw) as s:
                m = s.get_final_message()
        else:
            m = claude.messages.create(messages=msgs, **kw)
        u = m.usage
        answers.add("anthropic", u.input_tokens + u.cache_read_input_tokens, u.cache_read_input_tokens,
                    u.output_tokens, (m.model_extra or {}).get("timings"))
        text = "".join(b.text for b in m.content if b.type == "text") or "ok"
        msgs = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": f"go on {turn}"}]
    return msgs


def leave_a_stream(server: LiveServer) -> None:
    """A streamed request whose client reads a few chunks and disconnects (alone: it runs in main, whose
    context leaves it room to generate until the server sees the client gone)."""
    body = {"model": "m", "stream": True, "max_tokens": 3500, "ignore_eos": True,
            "messages": [{"role": "user", "content": "leave me " * 40}]}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data:")
            if seen > 5:
                break


def idle(server: LiveServer, n_requests: int) -> list[dict]:
    """Waits (60 s at most) until `n_requests` requests ended and nothing runs or waits; their entries."""
    sched = server.state.scheduler
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = list(sched.requests)
        if len(done) >= n_requests and sched.in_flight == 0 and sched.queue_depth == 0:
            return done
        time.sleep(0.02)
    raise TimeoutError(f"{len(list(sched.requests))} of {n_requests} requests ended")


def reused_by_source(metrics: dict[str, float]) -> dict[str, float]:
    prefix = 'strata_prompt_tokens_reused_total{source="'
    return {k[len(prefix):-2]: v for k, v in metrics.items() if k.startswith(prefix) and v}


def check_agreement(server: LiveServer, answers: Answers, entries: list[dict], before: dict[str, float]) -> dict:
    """Everything the workload since `before` (a scrape) left in /metrics, the monitor and /v1/slots
    against the answers; returns the /metrics scrape."""
    after = scrape(server.url)
    mon = httpx.get(server.url + "/v1/monitor").json()
    slots = httpx.get(server.url + "/v1/slots").json()
    metrics = scrape(server.url)
    assert metrics == after, "/metrics moved while idle"
    d = {k: v - before.get(k, 0) for k, v in after.items()}

    ok = [e for e in entries if e["status"] == "ok"]
    cancelled = [e for e in entries if e["status"] == "cancelled"]
    assert sorted((e["prompt_tokens"], e["reused_tokens"], e["output_tokens"]) for e in ok) == \
        sorted(row[1:] for row in answers.rows)
    assert d['strata_requests_total{status="ok"}'] == len(answers.rows) == len(ok)
    assert d.get('strata_requests_total{status="cancelled"}', 0) == len(cancelled)
    # prompt tokens: every one read or reused (the cancelled stream had read its prompt: it generated)
    assert all(e["output_tokens"] > 0 for e in cancelled)
    assert d["strata_prompt_tokens_total"] == sum(e["prompt_tokens"] for e in entries)
    reused = sum(v for k, v in d.items() if k.startswith("strata_prompt_tokens_reused_total"))
    assert d["strata_prompt_tokens_read_total"] + reused == d["strata_prompt_tokens_total"]
    assert reused == sum(e["reused_tokens"] for e in entries)
    by_source = collections.Counter()
    for e in entries:
        by_source[e["source"]] += e["reused_tokens"]
    assert reused_by_source(d) == {k: v for k, v in by_source.items() if v}
    assert d["strata_generated_tokens_total"] == sum(e["output_tokens"] for e in entries)
    # each request's placement says the reuse it got
    placed = {x["request"]: x for x in slots["decisions"] if not x["park"] and not x["park_skip"]}
    assert all(placed[e["id"]]["reused"] == e["reused_tokens"] for e in entries), (placed, entries)
    # lookup decoding, per request and in total
    assert d["strata_lookup_drafted_tokens_total"] == sum(e.get("lookup_drafted", 0) for e in entries)
    assert d["strata_lookup_taken_tokens_total"] == sum(e.get("lookup_taken", 0) for e in entries)
    # the cache's hits by level are the requests restored from it; parks counted alike on both sides
    for level in ("ram", "warm", "cold"):
        assert d[f'strata_cache_hits_total{{level="{level}"}}'] == sum(e["source"] == level for e in entries)
    for dest in ("ram", "disk", "discard"):
        assert d.get(f'strata_parks_total{{kind="cache_{dest}"}}', 0) == \
            d[f'strata_cache_parks_total{{destination="{dest}"}}']
    assert not any(v for k, v in d.items() if k.startswith("strata_restore_fallbacks_total"))
    # gauges back at rest, and one story in the feed, /metrics and /v1/slots
    assert (after["strata_queue_depth"], after["strata_requests_in_flight"], after["strata_slots_busy"]) == (0, 0, 0)
    t = mon["totals"]
    assert (t["queue_depth"], t["in_flight"]) == (0, 0)
    assert t["requests"] == sum(v for k, v in after.items() if k.startswith("strata_requests_total{"))
    assert (t["prompt_tokens"], t["prompt_tokens_read"], t["generated_tokens"]) == (
        after["strata_prompt_tokens_total"], after["strata_prompt_tokens_read_total"],
        after["strata_generated_tokens_total"])
    assert t["prompt_tokens_reused"] == sum(reused_by_source(after).values())
    assert mon["slots"] == slots["slots"] and mon["decisions"] == slots["decisions"]
    for s in mon["slots"]:
        assert s["state"] in ("idle", "empty") and after[f'strata_slot_tokens{{slot="{s["id"]}"}}'] == s["tokens"]
    assert mon["cache"]["hits"] == {lvl: int(after[f'strata_cache_hits_total{{level="{lvl}"}}'])
                                    for lvl in mon["cache"]["hits"]}
    return after


@pytest.fixture
def flags(tiny_model, tmp_path):
    return dict(model=str(tiny_model), ctx=4096, batch=3, slot_ctx=1024, threads=1, conversation_cache_mib=64,
                conversation_cache_cold_dir=str(tmp_path / "cold"), conversation_cache_cold_mib=64)


def test_a_mixed_workload_and_a_restart_tell_one_story(flags):
    answers = Answers()
    with LiveServer(**flags) as s:
        before = scrape(s.url)
        kept: dict[str, list] = {}

        def run(key, fn, *args):
            kept[key] = fn(s, answers, *args)

        threads = [threading.Thread(target=run, args=(f"o{i}", openai_conversation, f"o{i}", i % 2 == 0))
                   for i in range(3)]
        threads += [threading.Thread(target=run, args=(f"a{i}", anthropic_conversation, f"a{i}", i % 2 == 1))
                    for i in range(2)]
        for t in threads:
            t.start()
        for _ in range(2):      # bad requests: refused, counted apart, nothing else moves
            assert httpx.post(s.url + "/v1/chat/completions", json={"model": "m", "messages": "no"}).status_code == 400
        for t in threads:
            t.join()
        leave_a_stream(s)
        entries = idle(s, 16)
        assert [e["status"] for e in entries].count("cancelled") == 1
        after = check_agreement(s, answers, entries, before)
        assert after['strata_requests_rejected_total{reason="bad_request"}'] - \
            before.get('strata_requests_rejected_total{reason="bad_request"}', 0) == 2
        assert sum(e["reused_tokens"] for e in entries) > 0 and after['strata_cache_hits_total{level="ram"}'] > 0

    # the stop kept the histories on disk; the next turn of two conversations restores them from there
    answers = Answers()
    with LiveServer(**flags) as s:
        before = scrape(s.url)
        openai_conversation(s, answers, "o1", False, turns=1, msgs=kept["o1"])
        anthropic_conversation(s, answers, "a0", True, turns=1, msgs=kept["a0"])
        entries = idle(s, 2)
        check_agreement(s, answers, entries, before)
        assert [e["source"] for e in entries] == ["cold", "cold"], entries
