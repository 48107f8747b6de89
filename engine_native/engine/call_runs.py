"""The run of tool calls a model writes one after another, each opened by its format's marker: the loop
Mistral's `[TOOL_CALLS]NAME[ARGS]`, GLM's `<tool_call>NAME<arg_key>` and Seed-OSS's `<seed:tool_call>`
readers share (the whole calls, and where a call the length limit cut can be: `unread_call`), and the
whitespace skip they read calls with. Not here: reading one call's markup (each format's module passes its
own reader).
"""

from __future__ import annotations

from collections.abc import Callable

Call = dict[str, str]
Reader = Callable[[str, int], tuple[Call, int] | None]


def skip_space(text: str, pos: int) -> int:
    """The first position from `pos` that is not whitespace (len(text) when none is)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _run(text: str, first: int, opener: str, read: Reader) -> tuple[list[Call], int, bool]:
    """(calls, pos, unread): the calls read one after another from `first`; where the run ends (after its
    last call, or at the opener of the call that did not read); whether it ends at such a call (`unread`)
    rather than at text after a call or the text's end."""
    calls: list[Call] = []
    pos = first
    while True:
        got = read(text, pos)
        if got is None:
            return calls, pos, True    # cut or malformed: text from here on
        call, pos = got
        calls.append(call)
        nxt = text.find(opener, pos)
        if nxt < 0 or text[pos:nxt].strip():
            return calls, pos, False   # what follows the last call: text after it, or a call after text
        pos = nxt


def read_call_run(text: str, first: int, opener: str, read: Reader) -> tuple[str, list[Call]]:
    """(content, calls) of `text` whose first call opens at `first`: `read(text, pos)` gives a call and
    where it ends, or None where the markup is cut or malformed (text from there on). Calls continue while
    the next opener follows with nothing but whitespace between; the content is the text before the first
    call and what follows the last (a call after text stays text). No call read: the text unchanged."""
    calls, pos, _ = _run(text, first, opener, read)
    if not calls:
        return text, []
    return "\n".join(p for p in (text[:first].strip(), text[pos:].strip()) if p), calls


def unread_call(text: str, first: int, opener: str, read: Reader) -> tuple[str, int] | None:
    """(the content before the run, where its call that did not read opens) when the run from `first`, as
    read_call_run reads it, ends at a call that does not read: the one place a call the length limit cut
    can be, as the whole reader reads the answer (a call after text that follows the run stays text, cut
    or not). None when the run ends otherwise. The content as read_call_run gives it (stripped once a call
    was read; the run's first call cut: the text before it, its trailing whitespace off)."""
    calls, pos, unread = _run(text, first, opener, read)
    if not unread:
        return None
    return (text[:first].strip() if calls else text[:first].rstrip()), pos
