"""The INFO line's packed-weights figure on the real engine: in MiB, and in KiB for a model whose copies
are smaller than 1 MiB (a tiny Q8_0 file read "weights packed 0 MiB", as if nothing were packed)."""

from __future__ import annotations

import pytest
from strata.engine import Engine
from strata.server.app import _packing_part


@pytest.mark.parametrize("n_embd,n_ff,unit", [(64, 128, "KiB"), (512, 1536, "MiB")])
def test_the_packed_weights_are_counted_in_a_unit_that_shows_them(tiny_model_factory, n_embd, n_ff, unit):
    path = tiny_model_factory(dtype="Q8_0", n_embd=n_embd, n_ff=n_ff, n_head=8, n_head_kv=4)
    engine = Engine(str(path), n_ctx=64, n_threads=1, pack_weights=True)
    if not engine.packed_bytes:
        pytest.skip("this build packs no weights (not AVX-512 VNNI)")
    (part,) = _packing_part(engine)
    figure = engine.packed_bytes / (1024 if unit == "KiB" else 2**20)
    assert part == f"weights packed {figure:.0f} {unit}" and round(figure) > 0, part
    in_place = Engine(str(path), n_ctx=64, n_threads=1, pack_weights=False)
    assert _packing_part(in_place) == ["weights read in place"]
