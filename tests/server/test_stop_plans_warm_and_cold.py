"""With a warm and a cold level below RAM a clean stop writes each history straight to the level that keeps it, and
only those (session 42, item C). The cascade's hand-downs decided there: RAM's were written oldest first, each
arrival in warm pushing warm's oldest down to cold and cold's out within the stop.

A real `strata serve` in a subprocess (the tiny model; RAM 64 MiB, parks to RAM, warm 1 MiB and cold 1 MiB):
six conversations of 1,500 tokens (0.37 MiB each), then SIGTERM. Warm keeps the two used last, cold the two before
them; the two oldest are not written; the lines and the feed's outlook say 4 (before: all six written, two
evicted, the outlook 6)."""

from __future__ import annotations

from tests.server.stop_plans import complete_then_stop, keeping_lines, kept_seeds, parked_in_ram, prompt
from tests.server.test_stop_plans_what_cold_keeps import N_TOKENS


def test_warm_keeps_the_newest_and_cold_the_next(tiny_model, tmp_path):
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    prompts = [prompt(seed, N_TOKENS) for seed in range(6)]
    outlook, text = complete_then_stop(parked_in_ram(tiny_model, 64, warm=(warm, 1), cold=(cold, 1)), tmp_path, prompts)

    def kept(folder):
        return kept_seeds(folder, N_TOKENS, 6)
    assert (kept(warm), kept(cold)) == ({4, 5}, {2, 3}), text
    assert "made room for newer ones" not in text and " let go (" not in text, text   # nothing evicted in the stop
    keeping = keeping_lines(text)
    assert keeping and {int(m.group(1)) for m in keeping} == {4} and not any(m.group(4) for m in keeping), text
    assert outlook == {"keeps_on_disk": True, "conversations": 4}
