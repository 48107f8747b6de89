"""A request failed alone in lookup decoding's check of its draft (row_failure.py) counts that step's draft
in /metrics as in its own monitor entry. Its entry is written as it fails, with the draft it was checking
(`lookup_drafted` is added to before the check: an answer may end among its tokens), while the step's
`strata_lookup_*_tokens_total` skipped the failed row: over the requests of one run the entries' sums were
above /metrics' (test_lookup_counts_agree.py holds the two equal for every request that ends normally).
The live tiny server; the fault (the victim's sampler raising) is test_one_row_fails_alone.py's "lookup draft"."""

from __future__ import annotations

import httpx2 as httpx

from .test_metrics import scrape
from .test_one_row_fails_alone import SCENES, serve, together_with_fault


def test_a_row_failed_in_its_draft_check_counts_its_draft_in_metrics_as_in_its_entry(tiny_model):
    flags, prompts, call, when, fault = SCENES["lookup draft"]
    with serve(tiny_model, flags) as server:
        spy, got = together_with_fault(server, prompts, call, when, fault)
        assert spy.armed and got[1].status_code == 500, got[1].text
        entries = httpx.get(server.url + "/v1/monitor", timeout=30).json()["requests"]
        counted = scrape(server.url)
    assert len(entries) == len(prompts)
    victim = next(e for e in entries if e["status"] == "error")
    assert victim.get("lookup_drafted", 0) > 0, victim       # it failed with a draft being checked
    drafted = sum(e.get("lookup_drafted", 0) for e in entries)
    taken = sum(e.get("lookup_taken", 0) for e in entries)
    assert (drafted, taken) == (counted["strata_lookup_drafted_tokens_total"],
                                counted["strata_lookup_taken_tokens_total"])   # before: drafted above /metrics'
