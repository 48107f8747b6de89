"""The header's counts take their noun's singular for one: `1 thread`, `1 request`. A new-user trial's app, on the
server with `--threads 1` it proposes for a small machine, said `cpu-avx512-vnni, 1 threads`, and after its first
request `1 requests`."""

from __future__ import annotations

import pytest
from strata.monitor import units

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model


@pytest.mark.parametrize(("threads", "requests", "said"), [(1, 1, ("1 thread", "1 request ")),
                                                          (2, 24, ("2 threads", "24 requests "))])
def test_one_thread_and_one_request_are_singular(qtbot, threads, requests, said):
    def as_it_was(last: dict) -> None:                                            # a server's feed as it was
        last["engine"]["threads"], last["totals"]["requests"] = threads, requests
    window = shown_window(qtbot, recorded_model(as_it_was))
    engine, totals = said
    assert f"cpu-avx512-vnni, {engine} \u2022" in window.header.model.text().replace(units.NBSP, " ")
    assert window.header.totals.text().replace(units.NBSP, " ").startswith(f"{totals}done, ")


def test_counted():
    assert [units.counted(n, "request") for n in (0, 1, 2, 1234, None)] == [
        "0 requests", "1 request", "2 requests", "1,234 requests", "\u2013 requests"]
