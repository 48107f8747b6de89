"""The engine backs every context's KV with memory at load (arena::populate), so the first request
into a slot does not stop to fault in its pages (~120 ms for one 4K-token context of the default
model, measured before the change). Shown by the resident set: it grows by the whole KV during
construction, before any token is read.

Not here: KV contents (test_logits_reference.py, test_snapshot.py).
"""

from __future__ import annotations

import os
import sys

import pytest
from strata.engine import Engine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_kv_of_every_context_is_resident_after_load(tiny_model_factory):
    path = tiny_model_factory(dtype="Q4_0", seed=3)
    probe = Engine(path, n_ctx=16, n_threads=1)
    n_ctx, n_slots = 32768, 3
    kv = probe.bytes_per_token * n_ctx * (1 + n_slots)
    del probe
    assert kv >= 32 << 20, "the test needs a KV large enough to see in the resident set"
    before = resident_bytes()
    engine = Engine(path, n_ctx=n_ctx, n_slots=n_slots, n_threads=2)
    grown = resident_bytes() - before
    assert grown >= 0.9 * kv, f"resident set grew {grown} bytes during load, the KV is {kv}"
    assert engine._native.arena_bytes >= kv
