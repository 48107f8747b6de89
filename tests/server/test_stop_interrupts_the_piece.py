"""A stop does not wait for the prompt piece under way: the engine's forward is interrupted at its next layer
(Engine.interrupt), none of the piece's tokens are added, and the history read before the piece is kept as at any
stop. It waited for the whole piece before (a 512-token piece at a 14K-token history held a stop 10.5 s on two
loaded cores: benchmarks/stop_phases.py), then kept the history with the piece in it. Real server (in-process,
tiny model) and real engine calls; the piece starts only once the stop has begun, so no race decides the test."""

from __future__ import annotations

import logging
import threading
import time

import openai
from strata.engine import EngineInterrupted

from tests.server.live import LiveServer

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def _ask(client) -> None:
    try:
        client.chat.completions.create(model="m", max_tokens=4, temperature=0, messages=[
            {"role": "user", "content": " ".join(WORDS * 10)}])
    except openai.APIError:
        pass                 # the stop ends it


def test_a_stop_keeps_the_history_before_the_piece_under_way_without_reading_it(tiny_model, tmp_path, caplog):
    flags = {"conversation_cache_warm_dir": str(tmp_path / "warm"), "conversation_cache_warm_mib": 64}
    with caplog.at_level(logging.INFO, logger="strata.server"):
        with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, prefill_chunk=64, **flags) as server:
            sched, engine = server.state.scheduler, server.state.scheduler.engine
            real_prefill = engine.prefill
            seen: dict = {}
            stopper = threading.Thread(target=sched.stop, kwargs={"every_s": 0.2})

            def prefill(ctx, part, **kwargs):
                seen["pieces"] = seen.get("pieces", 0) + 1
                if seen["pieces"] == 3:                          # two pieces read as usual, then the stop comes
                    seen["before"], seen["ctx"] = list(engine.context_tokens(ctx)), ctx
                    stopper.start()                              # the stop begins, then this piece is read
                    deadline = time.monotonic() + 10
                    while not engine.interrupted and time.monotonic() < deadline:
                        time.sleep(0.01)
                try:
                    return real_prefill(ctx, part, **kwargs)
                except EngineInterrupted as e:
                    seen["interrupted"] = str(e)
                    raise
            engine.prefill = prefill
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)
            asking = threading.Thread(target=_ask, args=(client,), daemon=True)
            asking.start()
            deadline = time.monotonic() + 60
            while "before" not in seen and time.monotonic() < deadline:
                time.sleep(0.01)
            assert "before" in seen, seen                        # the prompt reached its third piece
            stopper.join(60)
            asking.join(60)
            before, ctx = seen["before"], seen["ctx"]
            assert len(before) >= 128, len(before)                # two pieces were read before the stop
            # before: the piece was read whole (its tokens in the context, then in the entry kept)
            assert "interrupted at layer 0" in seen.get("interrupted", ""), seen
            assert list(engine.context_tokens(ctx)) == before
            assert sched.table[ctx].tokens == before
            held = [(n_matched, n_entry) for _, _, n_matched, n_entry in server.state.cache.history_holders(before)]
            assert (len(before), len(before)) in held, held      # kept for the next start: that history, whole
            assert not engine.interrupted                         # on only while the worker ran
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], errors                               # not a failed step: the rows ended as at any stop
