"""The monitor feed's model facts come from the load, not from reading the model file again at each snapshot.

`GET /v1/monitor` (and each event of `/v1/monitor/events`, four a second while a monitor window is open) parsed
the GGUF file's whole header and ran the engine's can-it-run check to name the quantization: 0.2 s of the
event loop a snapshot on the default model (a snapshot took 80 ms against 1.5 ms for /v1/slots on a live
server), more on a model with a larger vocabulary or more tensors. Seen here by what the feed says once the
file has moved away: the quantization read at load stays."""

from __future__ import annotations

import shutil

import httpx2 as httpx

from tests.server.live import LiveServer


def test_the_feed_names_the_quantization_read_at_load(tiny_model, tmp_path):
    from strata.engine.models import describe_model

    path = tmp_path / "moving.gguf"
    shutil.copyfile(tiny_model, path)
    quant = describe_model(path).quant
    assert quant
    with LiveServer(model=str(path), ctx=256, batch=0, threads=1) as server:
        first = httpx.get(server.url + "/v1/monitor", timeout=60).json()["model"]
        path.rename(tmp_path / "moved.gguf")     # the engine keeps its mapping; the path no longer reads
        later = httpx.get(server.url + "/v1/monitor", timeout=60).json()["model"]
    assert first["quant"] == quant
    assert later["quant"] == quant, later
