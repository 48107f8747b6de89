"""How often the default model (SmolLM2-135M-Instruct) calls the right tool with the right arguments, left
free (tool_choice auto) and with a call demanded (tool_choice required: the answer held to a call of one
of the offered tools, arguments by that tool's schema; docs/api.md "Demanded calls"). Eight one-line
questions, two tools, greedy, through a live server and the real `openai` SDK. Not a test (no assertion).

With `--split`, the demanded calls' cost three ways in one run: as served (the forced text in the tokenizer's
split and read ahead: canonical_split.py), without the read-ahead, and held as before either (the scheduler's
wrapper replaced by the bare constraint): seconds and decode steps a call, and how many of the first turn's
tokens the next turn (the tool's result) reads again.

    .venv/bin/python benchmarks/demanded_calls.py [--split]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from strata.engine.models import default_model_path  # noqa: E402

from tests.server.live import LiveServer  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "description": "Local time in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASKS = [("Is it raining in Paris?", "get_weather", "Paris"), ("What's the weather in Tokyo?", "get_weather", "Tokyo"),
        ("How hot is it in Cairo right now?", "get_weather", "Cairo"), ("Will it snow in Oslo today?", "get_weather", "Oslo"),
        ("Weather forecast for Lima please.", "get_weather", "Lima"), ("What time is it in Sydney?", "get_time", "Sydney"),
        ("Tell me the current time in Berlin.", "get_time", "Berlin"), ("What's the local time in Denver?", "get_time", "Denver")]


def counter(url: str, name: str) -> float:
    import httpx2 as httpx

    return sum(float(line.split(" ")[1]) for line in httpx.get(url + "/metrics").text.splitlines()
               if line.startswith(name + " "))


def split_costs() -> None:
    """Seconds, decode steps and next-turn re-reads of the eight demanded calls, three ways."""
    import strata.server.row_start as row_start
    from strata.server.row import Row

    served_forced, served_split = Row.forced, row_start.CanonicalSplit
    ways = {"served": (served_forced, served_split), "no read-ahead": (lambda row: [], served_split),
            "as before": (lambda row: [], lambda held, tok: held)}
    with LiveServer(model=str(default_model_path()), ctx=2048, batch=2, threads=2, conversation_cache_mib=0) as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        for way, (forced, split) in [*ways.items(), *reversed(ways.items())]:     # each twice: warm-up shows
            Row.forced, row_start.CanonicalSplit = forced, split
            seconds = steps = reread = 0.0
            for q, _, _ in ASKS:
                msgs = [{"role": "user", "content": q}]
                s0, t0 = counter(s.url, "strata_decode_steps_total"), time.perf_counter()
                r = c.chat.completions.create(model="m", temperature=0, max_tokens=80, messages=msgs, tools=TOOLS,
                                              tool_choice="required")
                seconds += time.perf_counter() - t0
                steps += counter(s.url, "strata_decode_steps_total") - s0
                m = r.choices[0].message
                msgs += [m.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": m.tool_calls[0].id,
                                                           "content": "Sunny, 21 C"}]
                r2 = c.chat.completions.create(model="m", temperature=0, max_tokens=1, messages=msgs, tools=TOOLS)
                reread += r.usage.prompt_tokens + r.usage.completion_tokens - r2.usage.prompt_tokens_details.cached_tokens
            n = len(ASKS)
            print(f"{way:14s} {1000 * seconds / n:6.1f} ms a call, {steps / n:5.1f} decode steps a call, "
                  f"{reread / n:5.1f} of its tokens read again next turn")
        Row.forced, row_start.CanonicalSplit = served_forced, served_split


def main() -> None:
    if "--split" in sys.argv:
        split_costs()
        return
    with LiveServer(model=str(default_model_path()), ctx=2048, batch=2, threads=2, conversation_cache_mib=0) as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        for choice in ["auto", "required"]:
            calls = right_tool = right_args = 0
            for q, tool, city in ASKS:
                m = c.chat.completions.create(model="m", temperature=0, max_tokens=80, messages=[{"role": "user", "content": q}],
                                              tools=TOOLS, tool_choice=choice).choices[0].message
                if m.tool_calls:
                    calls += 1
                    t = m.tool_calls[0]
                    right_tool += t.function.name == tool
                    right_args += json.loads(t.function.arguments) == {"city": city}
            print(f"{choice:9s} calls {calls}/{len(ASKS)}, right tool {right_tool}, right arguments {right_args}")


if __name__ == "__main__":
    main()
