"""GET /v1/models before a model is loaded (no alias names one): an empty list, as both SDKs read it. Seen in session
39's soak's JSON probe: a client polling /v1/models while `strata serve` loaded its model got 500s (IndexError: the
Anthropic page's first_id / last_id read data[0] of an empty list, 8b0b725), an ERROR line and a traceback each."""

from __future__ import annotations

import httpx2 as httpx

from tests.server.live import LiveServer


def test_the_models_list_is_empty_not_an_error_without_a_model(tmp_path):
    s = LiveServer(model=str(tmp_path / "missing.gguf"), ctx=256, batch=0)   # never loads: no name is served
    s.start(wait_ready=False)
    try:
        r = httpx.get(s.url + "/v1/models")
        assert r.status_code == 200, r.text
        assert r.json() == {"object": "list", "data": [], "has_more": False, "first_id": None, "last_id": None}
    finally:
        s.stop()
