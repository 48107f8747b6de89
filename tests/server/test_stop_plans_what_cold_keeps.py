"""A clean stop hands down from RAM only the histories the disk level below keeps (a soak's probe: RAM's histories
were written oldest first past cold's budget, each later one evicting one the stop had just written: "4 of the 6
conversations written made room for newer ones", the first "keeping 6" line counting them, and the monitor feed's
`stop.conversations` said 6).

A real `strata serve` in a subprocess (the tiny model, 256 bytes of KV a token; RAM level 64 MiB, parks to RAM,
cold alone below it at 1 MiB): six conversations of 1,500 tokens (0.37 MiB each), one after the other, then
SIGTERM. Cold holds two: the stop writes those two, says the four others not written, and every "keeping N" line,
the feed's outlook and the folder agree.

The two kept are the two USED last (seeds 4 and 5), not the two parked last (a reviewer's find: cold kept seeds 1
and 5). The contexts' histories are parked at the stop itself, so an idle slot's history from the first minutes
looked newest and pushed out RAM's, used since; now a park carries its context's last use (slots.idle_s,
RamEntry.used_at) and the stop's plan (stop_writes.hand_down_picks) and the feed's outlook order by it."""

from __future__ import annotations

import re

from tests.server.stop_plans import complete_then_stop, keeping_lines, kept_seeds, parked_in_ram, prompt

NOT_WRITTEN = re.compile(r"stopping: conversation (\w+) \([\d.]+ MiB\) not written to the cold level: its budget")


N_TOKENS = 1500


def test_the_stop_writes_only_what_cold_keeps_and_says_so_alike(tiny_model, tmp_path):
    cold = tmp_path / "cold"
    prompts = [prompt(seed, N_TOKENS) for seed in range(6)]   # used in this order: 5 last, then 4
    outlook, text = complete_then_stop(parked_in_ram(tiny_model, 64, cold=(cold, 1)), tmp_path, prompts)
    images = sorted(cold.glob("strata-conv-*.img"))
    assert len(images) == 2, text                       # what cold's 1 MiB holds of six 0.37 MiB histories
    assert kept_seeds(cold, N_TOKENS, 6) == {4, 5}, text   # before: {1, 5}, slot-held 1 parked last
    keeping = keeping_lines(text)
    assert keeping, text
    # every line counts what is kept (before: the first said 6), none evicted (before: "4 of them evicted")
    assert {int(m.group(1)) for m in keeping} == {2} and not any(m.group(4) for m in keeping), text
    assert keeping[-1].group(2) == keeping[-1].group(3), text
    assert "made room for newer ones" not in text, text   # no history written to be let go within the stop
    unwritten = NOT_WRITTEN.findall(text)
    assert len(unwritten) == 4, text
    assert not {f"strata-conv-{k}.img" for k in unwritten} & {p.name for p in images}
    assert outlook == {"keeps_on_disk": True, "conversations": 2}   # the app's "it writes 2 conversations" (before: 6)
