"""What a model's tool calls look like, read off its chat template: one probe conversation with a call of
PROBE_TOOL rendered (per arguments, once per template), and from it the call's marker, its opening up to the
tool's name, whether it is JSON (`<tool_call>` + {"name", "arguments"}), and for key-value markup (Qwen3-Coder's
XML, GLM's) the text around its keys and values (`keyed_markup`).

Not here: what an answer is held to (structured_output.py), the constraints themselves (strata.engine).
"""

from __future__ import annotations

import json
import re
from typing import Any

from strata.engine.keyed_call import KeyedMarkup

PROBE_TOOL = "strata_probe_tool"
PROBE_KEYS = (("strata_probe_k1", "strata_probe_v1"), ("strata_probe_k2", "strata_probe_v2"))


def call_marker(answer: Any) -> bytes | None:
    """The text a model's tool calls open with (prompting.AnswerFormat), None for Harmony."""
    if getattr(answer, "harmony", False):
        return None
    if getattr(answer, "mistral_calls", False):
        return b"[TOOL_CALLS]"
    if getattr(answer, "seed_calls", False):
        return b"<seed:tool_call>"
    return b"<tool_call>"


PROBE_TOOL = "strata_probe_tool"


def probe_call(engine: Any, arguments: str = '{"k": 1}') -> str:
    """How the model's template writes an assistant's call of PROBE_TOOL with `arguments` (its tools and the
    call's result around it), rendered once per template and arguments; "" when it cannot."""
    template = getattr(engine, "chat_template", None)
    known = getattr(template, "_strata_probe_calls", {})
    if arguments in known:
        return known[arguments]
    tool = {"type": "function", "function": {"name": PROBE_TOOL, "parameters": {"type": "object", "properties": {}}}}
    call = {"id": "call_probe", "type": "function", "function": {"name": PROBE_TOOL, "arguments": arguments}}
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_probe", "content": "y"}]
    try:
        text = engine.apply_chat_template(messages, tools=[tool], add_generation_prompt=True)
    except Exception:       # a template that cannot render the probe: nothing learned from it
        text = ""
    if template is not None:
        try:
            template._strata_probe_calls = {**known, arguments: text}
        except AttributeError:
            pass
    return text


def writes_json_calls(engine: Any) -> bool:
    """Whether the template writes a call as `<tool_call>` and a JSON object {"name": ..., "arguments": ...}
    (Hermes, Qwen2.5 / Qwen3, SmolLM, and templates without tools, whose calls Strata writes so)."""
    pattern = r'<tool_call>\s*\{\s*"name"\s*:\s*"' + PROBE_TOOL + r'"\s*,\s*"arguments"\s*:'
    return re.search(pattern, probe_call(engine)) is not None


def json_call_spacing(engine: Any) -> tuple[bytes, bytes] | None:
    """(after a comma, after a colon) as the template writes a JSON call back (`, ` and `: ` for json.dumps'
    separators, `,` and `:` compact), or None when the probe shows neither on one line (a call written
    indented): what held JSON calls are written with, so that the next turn reads none of them again."""
    found = re.search(r'\{"name"(\s*):( *)"' + PROBE_TOOL + r'"(\s*),( *)"arguments"(\s*):( *)\{"k"(\s*):( *)1',
                      probe_call(engine))
    if found is None or any(found.group(i) for i in (1, 3, 5, 7)) or len({found.group(i) for i in (2, 6, 8)}) > 1:
        return None
    return ("," + found.group(4)).encode(), (":" + found.group(2)).encode()


def json_call_frame(engine: Any) -> tuple[bytes, bytes]:
    """(the whitespace between `<tool_call>` and its JSON, the call's closing) as the template writes a JSON
    call back (`\n`, `\n</tool_call>`): a held call is opened and closed so, and the next turn reads none of it
    again."""
    text = probe_call(engine)
    opening = re.findall(r"<tool_call>(\s*)\{\"name\"", text)      # the last: the assistant's call
    ending = re.search(r"\}(\s*)</tool_call>", text)
    return ((opening[-1] if opening else "\n").encode(),
            (ending.group(1) if ending else "\n").encode() + b"</tool_call>")


def call_opening(engine: Any, marker: bytes) -> str | None:
    """The template's call from its marker through the tool's name, with PROBE_TOOL for the name
    (`<tool_call>\n<function=PROBE_TOOL`, `[TOOL_CALLS]PROBE_TOOL`), or None when the probe shows none."""
    mark = re.escape(marker.decode())
    found = re.findall(mark + r"(?:(?!" + mark + r").){0,40}?" + PROBE_TOOL, probe_call(engine), re.DOTALL)
    return found[-1] if found else None     # the last: the assistant's call, after any in the tools' text


def keyed_markup(engine: Any, marker: bytes) -> KeyedMarkup | None:
    """The text around a key-value call's name, keys and values, from probe calls with two arguments and
    with none (Qwen3-Coder: `<function=NAME>` then `<parameter=KEY>` / value / `</parameter>`); None when
    the template's calls are not written so (JSON calls, or a probe that does not show two plain keys)."""
    mark = marker.decode()
    close = "</" + mark[1:] if mark.startswith("<") else None
    two = probe_call(engine, json.dumps(dict(PROBE_KEYS)))
    none = probe_call(engine, "{}")
    at2, at0 = two.rfind(mark), none.rfind(mark)
    if close is None or at2 < 0 or at0 < 0:
        return None
    pieces = [PROBE_TOOL, PROBE_KEYS[0][0], PROBE_KEYS[0][1], PROBE_KEYS[1][0], PROBE_KEYS[1][1]]
    ends, pos = [], at2 + len(mark)
    for piece in pieces:                               # the call's name, then key, value, key, value in order
        found = two.find(piece, pos)
        if found < 0:
            return None
        ends.append((found, found + len(piece)))
        pos = found + len(piece)
    (n0, n1), (k1, k1e), (v1, v1e), (k2, k2e), (v2, v2e) = ends
    tail2, name0 = two[v2e:], none.find(PROBE_TOOL, at0)
    if name0 < 0 or close not in tail2 or close not in none[name0:]:
        return None
    opening, mid = two[at2 + len(mark):n0], two[k1e:v1]
    if mid != two[k2e:v2] or opening != none[at0 + len(mark):name0] or not mid:
        return None
    sep, last = two[v1e:k2], tail2[:tail2.index(close) + len(close)]
    empty_tail = none[name0 + len(PROBE_TOOL):]
    empty = empty_tail[:empty_tail.index(close) + len(close)]
    cut = 0                                            # what ends a value: what the next key and the end share
    while cut < min(len(sep), len(last)) and sep[cut] == last[cut]:
        cut += 1
    first = two[n1:k1]
    if not cut or cut == len(sep) or cut == len(last) or mid[0] in "".join(k for k, _ in PROBE_KEYS):
        return None
    return KeyedMarkup(opening=opening.encode(), first=first.encode(), empty=empty.encode(), mid=mid.encode(),
                       value_end=sep[:cut].encode(), next_key=sep[cut:].encode(), end=last[cut:].encode())
