"""/metrics is valid Prometheus text (0.0.4) and its counters move with the traffic they count."""

from __future__ import annotations

import re

import httpx2 as httpx

SAMPLE = re.compile(r'^strata_[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+-]+$')


def scrape(url: str) -> dict[str, float]:
    r = httpx.get(url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    values = {}
    for line in r.text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        assert SAMPLE.match(line), line
        name, value = line.rsplit(" ", 1)
        values[name] = float(value)
    return values


def test_metrics_format_and_counters(tiny_server):
    before = scrape(tiny_server.url)
    body = {"prompt": "metrics are counted here", "max_tokens": 5, "temperature": 0, "ignore_eos": True}
    for _ in range(2):
        assert httpx.post(tiny_server.url + "/v1/completions", json=body, timeout=60).status_code == 200
    after = scrape(tiny_server.url)
    assert after['strata_requests_total{status="ok"}'] == before.get('strata_requests_total{status="ok"}', 0) + 2
    assert after["strata_generated_tokens_total"] == before["strata_generated_tokens_total"] + 10
    n_prompt = after["strata_prompt_tokens_total"] - before["strata_prompt_tokens_total"]
    read = after["strata_prompt_tokens_read_total"] - before["strata_prompt_tokens_read_total"]
    reused = sum(v for k, v in after.items() if k.startswith("strata_prompt_tokens_reused_total")) - sum(
        v for k, v in before.items() if k.startswith("strata_prompt_tokens_reused_total"))
    assert n_prompt == read + reused and reused >= n_prompt / 2 - 1     # the second request reused the first
    assert after["strata_decode_steps_total"] > before["strata_decode_steps_total"]
    assert after["strata_queue_depth"] == 0 and after["strata_slots_total"] == 4
