"""The run of tool calls a model writes one after another, each opened by its format's marker: the loop
Mistral's `[TOOL_CALLS]NAME[ARGS]`, GLM's `<tool_call>NAME<arg_key>` and Seed-OSS's `<seed:tool_call>`
readers share, and the whitespace skip they read calls with. Not here: reading one call's markup (each format's module passes its own reader).
"""

from __future__ import annotations

from collections.abc import Callable

Call = dict[str, str]


def skip_space(text: str, pos: int) -> int:
    """The first position from `pos` that is not whitespace (len(text) when none is)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def read_call_run(text: str, first: int, opener: str,
                  read: Callable[[str, int], tuple[Call, int] | None]) -> tuple[str, list[Call]]:
    """(content, calls) of `text` whose first call opens at `first`: `read(text, pos)` gives a call and
    where it ends, or None where the markup is cut or malformed (text from there on). Calls continue while
    the next opener follows with nothing but whitespace between; the content is the text before the first
    call and what follows the last (a call after text stays text). No call read: the text unchanged."""
    calls: list[Call] = []
    pos = first
    while True:
        got = read(text, pos)
        if got is None:
            break                      # cut or malformed: text from here on
        call, pos = got
        calls.append(call)
        nxt = text.find(opener, pos)
        if nxt < 0 or text[pos:nxt].strip():
            break                      # what follows the last call: text after it, or a call after text
        pos = nxt
    if not calls:
        return text, []
    return "\n".join(p for p in (text[:first].strip(), text[pos:].strip()) if p), calls
