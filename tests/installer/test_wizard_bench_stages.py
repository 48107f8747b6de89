"""The wizard's bench page while the engine's bench runs, offscreen: each stage of `strata bench` is shown as it
begins, with the bar moving through the engine's share (it said 'loading MODEL and measuring prefill and decode'
over a busy bar until the end: minutes on a big model)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from tests.installer.test_wizard_bench_stop import (  # noqa: E402
    ANSWERS_WITHIN_S,
    _benches,
    _into_the_engine_bench,
    slow_wizard,  # noqa: F401 - the fixture
)

STAGE_WITHIN_MS = 120_000


def test_the_page_shows_each_stage_of_the_engine_bench_as_it_begins(qtbot, slow_wizard):  # noqa: F811
    bench = _into_the_engine_bench(qtbot, slow_wizard)       # the whole bench: 2 prefills, so 5 stages
    # 8 s of bench quiet; CI's dry run under a load of 5 took over 30 s to reach the second prefill
    qtbot.waitUntil(lambda: bench.status.text() == "engine: reading a prompt of 2048 tokens", timeout=STAGE_WITHIN_MS)
    assert (bench.bar.minimum(), bench.bar.maximum(), bench.bar.value()) == (0, 100, 24)   # 2 of 5 of 60 %
    qtbot.waitUntil(lambda: bench.status.text() == "engine: generating 128 tokens in each of 4 requests at once",
                    timeout=STAGE_WITHIN_MS)
    assert bench.bar.value() == 48
    bench.skip_button.click()
    qtbot.waitUntil(bench.isComplete, timeout=int(ANSWERS_WITHIN_S * 1000) + 3000)
    assert _benches() == []
