"""Fenced code blocks in an answer's text, for the tool-call readers: a call's marker written inside a code
block that opened after some prose is the answer's text (a model documenting or explaining tool use, whose
example an agent must not run), never a call.

- `in_code_block(before)`: whether text written right after `before` (the answer's content up to a call
  marker, without the calls read before it) is inside such a block. A fence is a line of three or more
  backticks or tildes (indented or not; a backtick fence's info string holds no backtick); the block ends at
  a line of the same character, at least as many, and nothing else. A marker on the opening fence's own
  line (its info string) is inside. A block that opens the content (nothing but whitespace before its
  fence) does not count: a model that wraps its call in a fence and writes nothing else is calling.
- `first_outside_code(text, marker)`: where `marker` first occurs in `text` outside such a block, -1 when
  it does not.

Not here: the calls' reading (chat_template.py, mistral.py, glm.py, seed.py).
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")


def _opening(line: str) -> tuple[str, int] | None:
    """(the fence's character, its length) when `line` opens a code block, else None."""
    m = _FENCE.match(line)
    if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):
        return None
    return m.group(1)[0], len(m.group(1))


def _closes(line: str, fence: tuple[str, int]) -> bool:
    m = _FENCE.match(line)
    return m is not None and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and not m.group(2).strip()


def in_code_block(before: str) -> bool:
    """Whether what follows `before` is inside a fenced code block opened after prose (module docstring)."""
    *lines, last = before.split("\n")
    fence: tuple[str, int] | None = None     # the open block's fence
    counts = False                           # whether the open block opened after prose
    prose = False                            # something other than whitespace came before this line
    for line in lines:
        if fence is None:
            fence = _opening(line)
            counts = prose
        elif _closes(line, fence):
            fence = None
        prose = prose or bool(line.strip())
    if fence is None:          # the marker's own line may be an opening fence (its info string)
        return prose and _opening(last) is not None
    return counts


def first_outside_code(text: str, marker: str, start: int = 0) -> int:
    """The first position of `marker` in `text` from `start` that is not inside a code block, -1 when none."""
    at = text.find(marker, start)
    while at >= 0 and in_code_block(text[:at]):
        at = text.find(marker, at + len(marker))
    return at
