"""Damaged cache files Strata removed at start-up (strata_cache_removed_files_total{level,reason}) reach the
monitor: the feed's levels and stores carry `removed` beside `skipped`, and the window's cache view says
"(1 removed)". A real server on loopback (tiny model) with a damaged sidecar of Strata's in its cold
folder and in its system-prompt folder before it starts; the window fed by the real feed client."""

from __future__ import annotations

import json
import urllib.request

import pytest
from strata.monitor.client import FeedClient
from strata.monitor.model import MonitorModel
from strata.monitor.widgets.cache import LEVEL_HEADERS
from strata.monitor.window import MonitorWindow

from tests.server.live import LiveServer

# begins as every sidecar Strata writes (so it is Strata's own), cut short (so it is damaged)
DAMAGED_SIDECAR = b'{"format": "strata-conv-sidecar", "version": 1, "model_id": "tin'


@pytest.fixture
def server(tiny_model_factory, tmp_path):
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)
    folders = {"cold": tmp_path / "cold", "system": tmp_path / "system-prompts"}
    for folder in folders.values():
        folder.mkdir()
        (folder / f"strata-conv-{'ab' * 16}.json").write_bytes(DAMAGED_SIDECAR)
    server = LiveServer(model=str(model), ctx=4096, batch=2, threads=1,
                        conversation_cache_cold_dir=str(folders["cold"]), conversation_cache_cold_mib=64,
                        conversation_cache_system_prompt_dir=str(folders["system"]),
                        conversation_cache_system_prompt_mib=16)
    server.start()
    yield server, folders
    server.stop()


def test_files_removed_at_start_up_are_in_the_feed_and_the_window(qtbot, server, artifacts):
    live, folders = server
    assert all(list(folder.iterdir()) == [] for folder in folders.values())     # removed from disk
    with urllib.request.urlopen(live.url + "/v1/monitor", timeout=30) as r:
        cache = json.loads(r.read())["cache"]
    (cold,) = [lv for lv in cache["levels"] if lv["name"] == "cold"]
    assert cold["skipped"] == {"damaged": 1} and cold["removed"] == {"damaged": 1}, cold
    store = cache["system_prompt_cache"]
    assert store["skipped"] == {"damaged": 1} and store["removed"] == {"damaged": 1}, store
    with urllib.request.urlopen(live.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert 'strata_cache_removed_files_total{level="cold",reason="damaged"} 1' in metrics

    model = MonitorModel()
    window = MonitorWindow(model, theme="light")
    qtbot.addWidget(window)
    window.resize(1280, 728)          # a 1366x768 screen's free area less the title bar
    window.show()
    client = FeedClient(live.url, model).start()
    try:
        qtbot.waitUntil(lambda: model.view().connection == "connected" and bool(model.view().cache), timeout=60_000)
        qtbot.waitUntil(lambda: window.cache.levels.rowCount() > 0, timeout=10_000)
        table = window.cache.levels
        rows = {table.item(r, 0).text(): r for r in range(table.rowCount())}
        assert table.item(rows["cold"], LEVEL_HEADERS.index("entries")).text() == "0 (1 removed)"
        assert not table.horizontalScrollBar().isVisible()     # every column shows at 1280x728
        assert "0 entries (1 removed)" in window.cache.system_prompt.text()
        assert "(0 entries, 1 removed)" in window.header.info.text()     # the INFO line says it too
        qtbot.wait(600)              # a redraw or two after the first snapshot: the layout settles
        window.save_png(artifacts / "monitor-removed-files.png")
    finally:
        client.stop()
