"""A stop while a named session's save is still being written on a slow disk. The save runs on the worker thread and
holds the cache's lock while it writes; the stop waits for that call (the "finishing the session save under way"
lines) up to its allowance (stop_progress.CALL_WAIT_S), then the cache's close waited for the lock saying nothing,
as long as the save took (the app ends a stop quiet for 15 s: the save was cut, the conversations not kept). Now
close says what it waits for and how far the save is, at the stop's cadence, and the lines follow the save's
writes (a hung write says nothing). A real server on the tiny model, every disk write slowed
(STRATA_TEST_DISK_WRITE_DELAY_S), the allowance and the cadence scaled down."""

from __future__ import annotations

import logging
import re
import threading
import time

import httpx2 as httpx
import openai
from strata.server import app, stop_progress
from strata.server.cache.sessions import SaveUnderWay

from tests.server.live import LiveServer
from tests.server.test_cancelled_counts import wait_for

PROMPT = [(i * 7) % 400 + 50 for i in range(1500)]   # six 256-token chunks: eight writes with the header and sidecar
WRITE_DELAY_S = 0.4
EVERY_S = 0.3


def test_the_cache_s_close_says_how_far_the_session_save_it_waits_for_is(tiny_model, tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("STRATA_TEST_DISK_WRITE_DELAY_S", str(WRITE_DELAY_S))   # read when the cache is made
    monkeypatch.setattr(stop_progress, "CALL_WAIT_S", 0.5)
    saved: dict[str, int] = {}
    with caplog.at_level(logging.INFO):
        with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1,
                        conversation_cache_sessions_dir=str(tmp_path / "sessions")) as server:
            sched, cache = server.state.scheduler, server.state.cache
            openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60).completions.create(
                model="m", prompt=PROMPT, max_tokens=1)

            def save() -> None:
                saved["status"] = httpx.post(server.url + "/v1/sessions/work/save", json={"slot": "main"},
                                             timeout=60).status_code
            saving = threading.Thread(target=save, daemon=True)
            saving.start()
            wait_for(lambda: cache.saving is not None)
            sched.stop(every_s=0.2)              # gives the save up as a stuck call after CALL_WAIT_S
            assert cache.saving is not None, "the save ended before the stop gave it up: slow the disk more"
            began = time.monotonic()
            app.close_cache(cache, every_s=EVERY_S)
            closed_s = time.monotonic() - began
            saving.join(60)
            images = list((tmp_path / "sessions").glob("*.img"))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: ")]
    assert any("has not ended after" in line for line in said), said            # the stop gave the save up
    finishing = [line for line in said if line.startswith("stopping: finishing the session save under way ('work': ")]
    assert finishing, said                                                      # the stop's own wait says how far
    waits = [line for line in said if line.startswith("stopping: waiting for the session save under way")]
    assert len(waits) >= 3, (closed_s, said)     # about a line every EVERY_S while its last writes are made
    written = [float(re.search(r"'work': ([0-9.]+) of", line).group(1)) for line in waits]
    assert written == sorted(written) and written[-1] > written[0], waits
    assert closed_s > 2 * EVERY_S and images and saved["status"] == 200, (closed_s, images, saved)
    assert not any(r.getMessage().startswith("closing the conversation cache failed") for r in caplog.records)


def test_the_lines_words():
    save = SaveUnderWay("work", 3 << 20, 1 << 20)
    assert stop_progress.save_wait_line(save, 4.2) == ("stopping: waiting for the session save under way ('work': "
                                                       "1.0 of 3.0 MiB written) before closing the conversation "
                                                       "cache (4 s)")
    assert stop_progress.step_line(0, 7.0, True, save) == ("stopping: finishing the session save under way ('work': "
                                                           "1.0 of 3.0 MiB written) before keeping the conversations "
                                                           "(7 s)")
    assert stop_progress.step_line(0, 7.0, True) == ("stopping: finishing the session save or restore under way "
                                                     "before keeping the conversations (7 s)")


def test_waiting_lines_come_at_most_every_interval():
    now = [0.0]
    lines: list[str] = []

    class Log:
        def info(self, fmt: str, line: str) -> None:
            lines.append(line)

    progress = stop_progress.StopProgress(Log(), every_s=2.0, clock=lambda: now[0])
    for t in (0.0, 0.5, 1.9, 2.0, 3.0, 4.1):
        now[0] = t
        progress.waiting(SaveUnderWay("work", 10 << 20, int(t) << 20), t)
    assert [line.split("(")[1].split(")")[0] for line in lines] == [
        "'work': 0.0 of 10.0 MiB written", "'work': 2.0 of 10.0 MiB written", "'work': 4.0 of 10.0 MiB written"]
