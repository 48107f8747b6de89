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


def families(text: str) -> tuple[dict[str, str], list[str]]:
    """(TYPE by family, the family of each line in order), checking the exposition rules a scraper and
    `promtool check metrics` hold a server to: each family has its HELP and TYPE before its samples, a
    summary's _sum / _count belong to it, and a family's lines come as one group."""
    kinds: dict[str, str] = {}
    helped: set[str] = set()
    order: list[str] = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name not in kinds, f"a second TYPE line for {name}"
            assert name in helped, f"{name}: TYPE without HELP before it"
            kinds[name] = kind
            order.append(name)
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        base = re.sub(r"_(sum|count)$", "", name)
        family = name if name in kinds else base if kinds.get(base) == "summary" else None
        assert family is not None, f"{name}: a sample with no HELP / TYPE of its family"
        order.append(family)
    groups = [f for i, f in enumerate(order) if i == 0 or order[i - 1] != f]
    split = sorted({f for f in groups if groups.count(f) > 1})
    assert not split, f"families whose lines are not one group: {split}"
    return kinds, order


def test_every_family_is_declared_once_and_grouped_with_a_disk_level_and_a_restore(tiny_model, tmp_path):
    """The conversation cache's 17 families (strata_cache_*) came with no HELP or TYPE, each level's lines
    interleaved (level_bytes, level_entries, level_bytes, ...; degradations / evictions per level), so they
    read as untyped and broke the one-group rule: promtool flags every one. Here with a cold level (its
    write / remove failures), a foreign file it skips, and a restore from it after a restart (the restore
    seconds: a summary's _sum / _count, and the last one's gauge)."""
    from tests.server.live import LiveServer

    (tmp_path / "strata-conv-0123456789abcdef0123456789abcdef.json").write_text('{"model_id": "another"}')
    flags = dict(model=str(tiny_model), ctx=2048, batch=1, slot_ctx=1024, threads=1, conversation_cache_mib=64,
                 conversation_cache_cold_dir=str(tmp_path), conversation_cache_cold_mib=64)
    body = {"prompt": "a history to keep for the next start " * 20, "max_tokens": 4, "temperature": 0}
    with LiveServer(**flags) as s:
        assert httpx.post(s.url + "/v1/completions", json=body, timeout=60).status_code == 200
    with LiveServer(**flags) as s:     # the stop parked it to the cold level; this start restores it
        r = httpx.post(s.url + "/v1/completions", json=body, timeout=60).json()
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, r["usage"]
        text = httpx.get(s.url + "/metrics").text
    kinds, order = families(text)
    cache = {f: k for f, k in kinds.items() if f.startswith("strata_cache_")}
    assert cache["strata_cache_hits_total"] == "counter" and cache["strata_cache_level_bytes"] == "gauge"
    assert cache["strata_cache_restore_seconds"] == "summary" and "strata_cache_restore_seconds" in order
    assert "strata_cache_skipped_files_total" in order and "strata_cache_write_failures_total" in order
    for line in text.splitlines():
        if not line.startswith("#"):
            assert SAMPLE.match(line), line


def test_a_counter_past_a_million_keeps_every_digit(tiny_server):
    """Samples were written with '{:g}', 6 significant digits: past 1,000,000 prompt tokens (one agent
    session of long turns) strata_prompt_tokens_total read 1.00278e+06 for 1,002,785 and moved in steps of
    10, then 100 past 10M, so rate() and increase() over it were wrong. 245 requests of 4,093 tokens
    (each reuses the one before it, so the server reads almost nothing)."""
    before = scrape(tiny_server.url)
    body = {"prompt": [(i * 7) % 500 + 3 for i in range(4093)], "max_tokens": 1, "temperature": 0}
    with httpx.Client(timeout=60) as client:
        sent = sum(client.post(tiny_server.url + "/v1/completions", json=body).json()["usage"]["prompt_tokens"]
                   for _ in range(245))
    assert sent == 1_002_785
    r = httpx.get(tiny_server.url + "/metrics")
    line = next(x for x in r.text.splitlines() if x.startswith("strata_prompt_tokens_total "))
    assert line == f"strata_prompt_tokens_total {int(before['strata_prompt_tokens_total']) + sent}", line


def test_a_prompt_read_whole_makes_no_reuse_series():
    """A prompt with nothing reused (source "none") added a `strata_prompt_tokens_reused_total{source="none"}`
    series that could only ever say 0; docs/api.md lists the sources a prompt is reused from, and "none" is
    not one."""
    from strata.server.metrics import Metrics, render_prometheus

    m = Metrics()
    m.add_prompt(12, 0, "none", 12)
    m.add_prompt(12, 9, "slot", 3)
    text = render_prometheus(m.snapshot(), [], 0, 0)
    reused = [line for line in text.splitlines() if line.startswith("strata_prompt_tokens_reused_total")]
    assert reused == ['strata_prompt_tokens_reused_total{source="slot"} 9']
