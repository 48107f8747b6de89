"""Lookup decoding's counts of one request are the same in its monitor entry (`requests[]`'s
`lookup_drafted` / `lookup_taken`) and in /metrics (`strata_lookup_*_tokens_total`). The entry is written
when the request ends, and the step its answer ended in was added to the request after that: 2 drafted and
2 taken in the entry where /metrics counted 3 and 3 (the last guess, taken to the token limit). Real
server on loopback, the tiny model, whose greedy answer to a repeating prompt repeats too."""

from __future__ import annotations

import httpx2 as httpx

from tests.server.live import LiveServer
from tests.server.test_metrics import scrape


def test_a_request_ending_inside_a_taken_guess_counts_it_in_its_entry_too(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        seen = []
        for n in (9, 16, 33):
            before = scrape(s.url)
            body = {"prompt": "one two three four " * 20, "max_tokens": n, "temperature": 0, "ignore_eos": True}
            assert httpx.post(s.url + "/v1/completions", json=body, timeout=60).status_code == 200
            after = scrape(s.url)
            entry = httpx.get(s.url + "/v1/monitor").json()["requests"][-1]
            counted = {k: after[f"strata_lookup_{k}_tokens_total"] - before[f"strata_lookup_{k}_tokens_total"]
                       for k in ("drafted", "taken")}
            seen.append((entry.get("lookup_drafted", 0), entry.get("lookup_taken", 0),
                         counted["drafted"], counted["taken"]))
    assert all(d == md and t == mt for d, t, md, mt in seen), seen
    assert sum(t for _, t, _, _ in seen) > 0, seen      # guesses were taken: the case is exercised
