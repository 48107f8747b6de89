"""How often the default model (SmolLM2-135M-Instruct) calls the right tool with the right arguments, left
free (tool_choice auto) and with a call demanded (tool_choice required: the answer held to a call of one
of the offered tools, arguments by that tool's schema; docs/api.md "Demanded calls"). Eight one-line
questions, two tools, greedy, through a live server and the real `openai` SDK. Not a test (no assertion).

    .venv/bin/python benchmarks/demanded_calls.py
"""

from __future__ import annotations

import json
import sys
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


def main() -> None:
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
