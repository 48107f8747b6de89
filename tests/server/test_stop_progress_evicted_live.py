"""A real server's stop says as many conversations kept as its disk level then holds, where that level's budget holds
fewer than the histories the stop writes (session 31's soak: "keeping 6 conversations ... (6 of 6 written)" while
the levels kept 5, a later write of the stop having evicted an earlier one).

The tiny model (256 bytes of KV a token), main 4,096 tokens and three slots of 1,024, the cold level alone (1 MiB)
with histories parked straight to disk: four conversations in flight together, ~1.5 MiB of KV, then the stop. Since
the stop writes only what cold keeps (cache.stop_writes), the ones it would have evicted are not written, each said."""

from __future__ import annotations

import logging
import re

import httpx2 as httpx

from tests.server.live import LiveServer, run_together

LINE = re.compile(r"^stopping: keeping (\d+) conversations? for the next start \((\d+) of (\d+) written"
                  r"(?:; (\d+) of them evicted by the disk budget)?")


def prompt(seed: int, n: int) -> list[int]:
    return [10 + (seed * 131 + i * 7) % 500 for i in range(n)]


def test_the_last_keeping_line_counts_what_the_cold_level_holds(tiny_model, tmp_path, caplog):
    cold = tmp_path / "cold"
    server = LiveServer(model=str(tiny_model), ctx=4096, batch=3, slot_ctx=1024, threads=1, conversation_cache_mib=0,
                        conversation_cache_park="disk", conversation_cache_cold_dir=str(cold),
                        conversation_cache_cold_mib=1)
    server.start()
    sends = [lambda s=s, n=n: httpx.post(server.url + "/v1/completions", timeout=300, json={
        "model": "m", "prompt": prompt(s, n), "max_tokens": 1, "temperature": 0}).status_code
        for s, n in ((1, 3000), (2, 900), (3, 900), (4, 900))]
    with caplog.at_level(logging.INFO, logger="strata.server"), caplog.at_level(logging.INFO, logger="strata.cache"):
        assert run_together(server, sends) == [200] * 4
        server.stop()
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: keeping")]
    assert said, [r.getMessage() for r in caplog.records]
    last = LINE.match(said[-1])
    assert last, said[-1]
    kept, done, of, evicted = (int(g or 0) for g in last.groups())
    images = sorted(cold.glob("strata-conv-*.img"))
    assert kept == len(images) and done == of, (said, images)   # before: N the histories written, more than kept
    assert evicted == done - kept, said                           # what the budget evicted: said apart
    # histories cold would have let go within the stop are not written (cache.stop_writes): before, evicted > 0
    unwritten = [r.getMessage() for r in caplog.records if re.match(r"stopping: conversation \S+ .* not written", r.getMessage())]
    assert kept + evicted + len(unwritten) == 4 and unwritten, [r.getMessage() for r in caplog.records]
