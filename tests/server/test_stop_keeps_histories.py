"""A clean stop hands the histories still in the engine's contexts to the conversation cache's disk level,
so that after a restart a continued conversation restores its history instead of reading it again; with
no disk level nothing is parked at the stop (RAM does not outlive the process)."""

from __future__ import annotations

import re

import openai
from strata.server.cache.options import CacheConfig

from tests.server.live import LiveServer

SYSTEM = "You are a terse coding agent. " + "Keep every answer short. " * 30


def _server(tiny_model, **cache_flags) -> LiveServer:
    return LiveServer(model=str(tiny_model), ctx=2048, batch=2, slot_ctx=1024, threads=1, **cache_flags)


def _turn(server: LiveServer, messages: list[dict]):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    return client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True})


def test_a_restart_restores_the_conversation_that_was_running(tiny_model, tmp_path):
    flags = {"conversation_cache_warm_dir": str(tmp_path / "warm"), "conversation_cache_warm_mib": 256}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does git bisect do?"}]
    with _server(tiny_model, **flags) as first:
        answer = _turn(first, messages)
        parked_before_stop = first.state.cache.parks.copy()
    assert list((tmp_path / "warm").glob("*.img")), "the running conversation was not written at the stop"
    messages += [{"role": "assistant", "content": answer.choices[0].message.content},
                 {"role": "user", "content": "And git blame?"}]
    with _server(tiny_model, **flags) as second:
        again = _turn(second, messages)
    history = answer.usage.prompt_tokens + answer.usage.completion_tokens - 1
    assert again.usage.prompt_tokens_details.cached_tokens >= history - 8, (again.usage, history)
    assert sum(parked_before_stop.values()) == 0      # nothing was parked while it ran: the stop did it


def test_without_a_disk_level_the_stop_parks_nothing(tiny_model):
    with _server(tiny_model, conversation_cache_mib=64) as server:
        _turn(server, [{"role": "user", "content": "hello"}])
        cache = server.state.cache
        server.state.scheduler.stop()
        assert sum(cache.parks.values()) == 0 and not cache.ram.entries


def test_the_stop_says_what_was_kept_for_the_next_start(tiny_model, tmp_path, caplog):
    flags = {"conversation_cache_warm_dir": str(tmp_path / "warm"), "conversation_cache_warm_mib": 256}
    with caplog.at_level("INFO", logger="strata.server"):
        with _server(tiny_model, **flags) as server:
            _turn(server, [{"role": "user", "content": "hello there"}])
        with _server(tiny_model, conversation_cache_mib=64) as server:
            _turn(server, [{"role": "user", "content": "hello"}])
    stopped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopped;")]
    assert len(stopped) == 2, stopped
    assert "kept for the next start" in stopped[0] and f"warm {tmp_path / 'warm'} 256 MiB on (1 entry" in stopped[0]
    assert "not kept: no disk level is on" in stopped[1]
    # and how to keep them: `./run` without a configuration has no disk level (a new-user trial's first stop).
    # Following the advice alone keeps them: it named --conversation-cache-cold-dir DIR, and a folder without a
    # budget leaves the cold level off (its folder has a default; its budget, 0, is what turns it on)
    assert "`strata setup`" in stopped[1], stopped[1]
    flag, value = re.search(r"(--conversation-cache-[\w-]+) ([A-Z]+)", stopped[1]).groups()
    advised = CacheConfig.from_values({flag[2:].replace("-", "_"): 20480 if value == "MIB" else str(tmp_path / "c")})
    assert [level.name for level in advised.levels if level.on and level.name != "ram"], stopped[1]


def test_a_folder_without_a_budget_is_a_warning_at_start_up(tiny_model, tmp_path, caplog):
    """`--conversation-cache-cold-dir DIR` alone (what the stop's advice said before 9edb54c) started with
    'cold off' in the INFO line and no word, and the stop then said no disk level was on: a budget turns a
    level on. Now the start says which folder has no budget and the flag that gives it one."""
    with caplog.at_level("WARNING", logger="strata.server"):
        with _server(tiny_model, conversation_cache_cold_dir=str(tmp_path / "cold"),
                     conversation_cache_warm_dir=str(tmp_path / "warm"), conversation_cache_warm_mib=64) as server:
            assert server.state.cache.keeps_across_restarts()                  # warm is on
    said = [r.getMessage() for r in caplog.records if "but not its budget" in r.getMessage()]
    assert len(said) == 1, said                                          # the cold level's, not warm's
    assert str(tmp_path / "cold") in said[0] and "--conversation-cache-cold-mib is 0" in said[0], said
