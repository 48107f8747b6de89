"""The documentation names every metric family `GET /metrics` can expose, and names none it cannot:
the server's families (rendered from an empty snapshot, a slot and a model) in docs/api.md's
"Observability", the conversation cache's (`report.CACHE_FAMILIES`) in docs/conversation-cache.md.
Not here: what the values count (tests/server/test_metrics*.py, tests/cache)."""

from __future__ import annotations

import re
from pathlib import Path

from strata.server.cache.report import CACHE_FAMILIES
from strata.server.metrics import Metrics, render_prometheus

DOCS = Path(__file__).resolve().parents[2] / "docs"
API = (DOCS / "api.md").read_text(encoding="utf-8")
CACHE = (DOCS / "conversation-cache.md").read_text(encoding="utf-8")
NAMED = re.compile(r"`(strata_[a-z0-9_]*[a-z0-9])")


def server_families() -> set[str]:
    slot = {"id": 1, "state": "idle", "tokens": 0, "capacity": 16}
    text = render_prometheus(Metrics().snapshot(), [slot], 0, 0, {"name": "m", "arch": "llama"})
    return set(re.findall(r"^# TYPE (strata_\w+) ", text, flags=re.M))


def cache_families() -> set[str]:
    return {f"strata_cache_{name}" for name in CACHE_FAMILIES}


def test_both_kinds_are_found():
    assert {"strata_requests_total", "strata_slot_tokens"} <= server_families()
    assert "strata_cache_restore_seconds" in cache_families()


def test_every_server_family_is_in_the_api_page():
    missing = sorted(f for f in server_families() if f"`{f}" not in API)
    assert missing == [], f"not in docs/api.md, 'Observability': {missing}"


def test_every_cache_family_is_in_the_cache_page():
    missing = sorted(f for f in cache_families() if f"`{f}" not in CACHE)
    assert missing == [], f"not in docs/conversation-cache.md, 'What you see': {missing}"


def test_every_family_named_in_the_docs_exists():
    exposed = server_families() | cache_families()
    named = {n for page in DOCS.glob("*.md") for n in NAMED.findall(page.read_text(encoding="utf-8"))}
    stale = sorted(n for n in named if n not in exposed and n != "strata_cache")   # 'strata_cache_*': all
    assert stale == [], f"named in docs/ but not exposed by /metrics: {stale}"
