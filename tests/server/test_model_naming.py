"""One naming rule for a model (strata.model_names): the file name without .gguf is its id in the
APIs, the monitor feed, the monitor's header and `strata setup`; the GGUF's general.name is only a
description beside it."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from strata.model_names import model_description, model_id
from tests.server.live import LiveServer


@pytest.mark.parametrize("path,expected", [
    ("/m/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1"),
    ("C:/models/Qwen2.5-Coder-7B.GGUF", "Qwen2.5-Coder-7B"),
    ("/m/weights.bin", "weights.bin"),
])
def test_the_id_is_the_file_name_without_gguf(path, expected):
    assert model_id(path) == expected


@pytest.mark.parametrize("metadata,expected", [
    ({"general.name": " Smollm2 135M 8k "}, "Smollm2 135M 8k"), ({"general.name": ""}, None),
    ({"general.name": 7}, None), ({}, None), (None, None),
])
def test_the_description_is_the_metadata_name(metadata, expected):
    assert model_description(metadata) == expected


def test_server_monitor_and_setup_name_the_model_alike(default_model_path):
    from strata.installer.model_facts import read_model_facts
    from strata.monitor.widgets.header import model_text

    expected = model_id(default_model_path)
    assert expected == "SmolLM2-135M-Instruct.Q4_1"
    with LiveServer(model=str(default_model_path), ctx=256, batch=0, threads=1, conversation_cache_mib=0) as server:
        snap = httpx.get(server.url + "/v1/monitor", timeout=30).json()
        ids = [m["id"] for m in httpx.get(server.url + "/v1/models", timeout=30).json()["data"]]
    assert snap["model"]["name"] == expected and ids[0] == expected
    assert snap["model"]["description"] == "Smollm2 135M 8k Lc100K Mix1 Ep2"
    shown = model_text(snap)
    assert f"<b>{expected}</b> (Smollm2 135M 8k Lc100K Mix1 Ep2)" in shown
    facts = read_model_facts(default_model_path)
    assert facts.name == expected and facts.description == "Smollm2 135M 8k Lc100K Mix1 Ep2"
