"""The request fields a Responses API `response` object echoes: OpenAI's object carries every setting of its
request (sampling, limits, tools, text, reasoning, the client's own labels), each as sent or, left out, as its
default; clients read them back from `response.created` and the final object alike (the openai SDK's Response
type has them all).

Three say what this server did rather than what was asked: `store` is false (no response is kept, whatever the
request said: `previous_response_id` is refused), `background` false (refused when true) and `service_tier`
"default" (OpenAI names the tier that served the request; there is one here). The fields read
only to be echoed are checked here, a 400 naming the field for a value of the wrong type.
Not here: what the fields do (responses_api.py), the output and usage.
"""

from __future__ import annotations

from typing import Any

from strata.server import fields as f
from strata.server.errors import APIError

TRUNCATIONS = ("auto", "disabled")   # "auto" drops nothing here: an input too long is the 400 it is on "disabled"


def echoed_fields(body: dict) -> dict[str, Any]:
    """The request's settings as the response object writes them; 400 for one of the wrong type."""
    reasoning = _object(body, "reasoning", '{"effort": "low"}')
    text = _object(body, "text", '{"format": {"type": "text"}}')
    truncation = body.get("truncation")
    if truncation is not None and truncation not in TRUNCATIONS:
        raise APIError(400, f"'truncation' must be 'auto' or 'disabled', got {f.shown(truncation)}",
                       param="truncation")
    f.get_str(body, "service_tier")      # checked as the other labels are; never echoed (below)
    return {
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": f.get_int(body, "max_tool_calls", None, 0, 1 << 31),
        "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
        "previous_response_id": None,
        "reasoning": {"effort": f.field(reasoning, "reasoning", "effort", str, "a string"),
                      "summary": f.field(reasoning, "reasoning", "summary", str, "a string")},
        "store": False,
        "background": False,
        "temperature": _or(body.get("temperature"), 1.0),
        "top_p": _or(body.get("top_p"), 1.0),
        "top_logprobs": _or(body.get("top_logprobs"), 0),
        "text": {"format": text["format"] if isinstance(text.get("format"), dict) else {"type": "text"},
                 "verbosity": _or(f.field(text, "text", "verbosity", str, "a string"), "medium")},
        "tool_choice": _or(body.get("tool_choice"), "auto"),
        "tools": body.get("tools") or [],
        "truncation": truncation or "disabled",
        "metadata": _object(body, "metadata", '{"key": "value"}'),
        "user": f.get_str(body, "user"),
        "safety_identifier": f.get_str(body, "safety_identifier"),
        "prompt_cache_key": f.get_str(body, "prompt_cache_key"),
        "prompt_cache_retention": f.get_str(body, "prompt_cache_retention"),
        "service_tier": "default",       # the tier that answered, whichever was asked for
    }


def _object(body: dict, name: str, example: str) -> dict:
    value = body.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise APIError(400, f"'{name}' must be an object like {example}, got {f.shown(value)}", param=name)
    return value


def _or(value: Any, default: Any) -> Any:
    """`value`, or `default` where it was left out or null (OpenAI's object writes the default then)."""
    return default if value is None else value
