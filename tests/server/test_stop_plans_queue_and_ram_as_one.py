"""A clean stop plans the spill queue's histories and RAM's hand-downs as one (session 42, item B): the queue's were
written first, then RAM's were picked as if the level below were empty, and their writes evicted the queue's:
a wasted write, and the most recently used history lost.

A real `strata serve` in a subprocess (an 8-layer tiny model, 1 KiB of KV a token; RAM 1 MiB, parks to RAM, cold
2 MiB alone below it): three short conversations (300 tokens, 0.29 MiB each) then a long one (1,200 tokens,
1.17 MiB: larger than RAM's budget, so its park at the stop goes to the spill queue), then SIGTERM. Cold keeps the
long one (used last) and the two newest short ones; before, the queue wrote the long one, RAM's hand-down wrote all
three short ones beside it and evicted it ("1 of the 4 conversations written made room")."""

from __future__ import annotations

import pytest

from tests.server.stop_plans import complete_then_stop, keeping_lines, kept_seeds, parked_in_ram, prompt

SHORT, LONG = 300, 1200


@pytest.fixture(scope="module")
def deep_model(tiny_model_factory):
    """The tiny model with 8 layers: 1 KiB of KV a token, so a 1,200-token history is past a 1 MiB RAM budget."""
    return tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, n_layer=8)


def test_the_queue_and_rams_hand_downs_are_one_plan(deep_model, tmp_path):
    cold = tmp_path / "cold"
    prompts = [prompt(seed, n) for seed, n in ((0, SHORT), (1, SHORT), (2, SHORT), (3, LONG))]  # the long one used last
    outlook, text = complete_then_stop(parked_in_ram(deep_model, 1, cold=(cold, 2)), tmp_path, prompts)
    kept = kept_seeds(cold, SHORT, 4)
    assert kept == {1, 2, 3}, text            # before: {0, 1, 2}, the long one written then evicted
    assert "made room for newer ones" not in text, text   # nothing the stop wrote was let go within it
    keeping = keeping_lines(text)
    assert keeping and {int(m.group(1)) for m in keeping} == {3} and not any(m.group(4) for m in keeping), text
    assert outlook == {"keeps_on_disk": True, "conversations": 3}
