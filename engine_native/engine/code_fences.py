"""Fenced code blocks in an answer's text, for the tool-call readers: a call's marker written inside a code
block that opened after some prose is the answer's text (a model documenting or explaining tool use, whose
example an agent must not run), never a call.

- `in_code_block(before)`: whether text written right after `before` (the answer's content up to a call
  marker, without the calls read before it) is inside such a block. A fence is a line of three or more
  backticks or tildes (indented or not; a backtick fence's info string holds no backtick); the block ends at
  a line of the same character, at least as many, and nothing else. A marker on the opening fence's own
  line (its info string) is inside. A block that opens the content (nothing but whitespace before its
  fence) does not count: a model that wraps its call in a fence and writes nothing else is calling.
  `CodeScan()`: the same question for one text's prefixes at growing lengths, each line read once.
- `first_outside_code(text, marker)`: where `marker` first occurs in `text` outside such a block, -1 when
  it does not.
- `closing_block(text)`: the fenced block the answer ends with (nothing but whitespace after its closing
  fence, or none) when its info string is empty, `json` or `xml`: the block a model that calls inside a
  fence writes (Qwen2.5-Coder's ```` ```xml ```` around its `<tool_call>`, which llama.cpp reads too). The
  readers take it as the answer's calls when it holds nothing else and they name offered tools: an example
  is followed by more of the explanation, a call ends the answer. `CallBlockHold(markers).at(text)`: where
  a stream must hold an answer that may end with such a block.

Not here: the calls' reading (chat_template.py, mistral.py, glm.py, seed.py).
"""

from __future__ import annotations

import re
from typing import Any

_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
CALL_FENCE_INFO = ("", "json", "xml")      # the info strings of a fence a model calls in


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
    return CodeScan()(before)


class CodeScan:
    """in_code_block for the prefixes of one text (fixed, or growing at its end), asked at growing lengths:
    each complete line is read once, so a search past many markers in code blocks stays linear in the text
    (in_code_block on each prefix read the text again per marker: quadratic). A prefix shorter than the
    lines read starts over."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        self._read = 0                           # where the first line not read yet begins
        self._fence: tuple[str, int] | None = None   # the open block's fence
        self._counts = False                     # whether the open block opened after prose
        self._prose = False                      # something other than whitespace came before that line

    def __call__(self, before: str) -> bool:
        if len(before) < self._read:
            self._start()
        while (nl := before.find("\n", self._read)) >= 0:
            line = before[self._read:nl]
            if self._fence is None:
                self._fence = _opening(line)
                self._counts = self._prose
            elif _closes(line, self._fence):
                self._fence = None
            self._prose = self._prose or bool(line.strip())
            self._read = nl + 1
        if self._fence is None:     # the marker's own line may be an opening fence (its info string)
            return self._prose and _opening(before[self._read:]) is not None
        return self._counts


def first_outside_code(text: str, marker: str, start: int = 0) -> int:
    """The first position of `marker` in `text` from `start` that is not inside a code block, -1 when none."""
    inside = CodeScan()
    at = text.find(marker, start)
    while at >= 0 and inside(text[:at]):
        at = text.find(marker, at + len(marker))
    return at


class _Blocks:
    """The fenced blocks of a text that grows, each complete line read once: the last block the text ends
    with so far (`block`: its opening fence's line start, its body's start and end (None while open), its
    info string, the start of the block right before it with only whitespace between, or None) and the
    fence of an open block (`fence`)."""

    def __init__(self) -> None:
        self.read = 0                           # where the first line not read yet begins
        self.fence: tuple[str, int] | None = None
        self.block: list[Any] | None = None

    def update(self, text: str) -> None:
        while (nl := text.find("\n", self.read)) >= 0:
            self._line(self.read, text[self.read:nl])
            self.read = nl + 1

    def _line(self, pos: int, line: str) -> None:
        if self.fence is None:
            if (fence := _opening(line)) is not None:
                self.fence = fence
                # the block before it when nothing but whitespace came between: a run of blocks
                prev = self.block[0] if self.block is not None else None
                self.block = [pos, pos + len(line) + 1, None, _FENCE.match(line).group(2).strip().lower(), prev]
            elif line.strip():
                self.block = None               # text after the last block
        elif _closes(line, self.fence):
            self.fence = None
            self.block[2] = max(self.block[1], pos - 1)     # less the newline before the closing fence

    def last(self, text: str) -> tuple[int, int, int, str] | None:
        """(opening line start, body start, body end, info) of the block `text` (read whole) ends with."""
        tail = text[self.read:]
        if self.block is None or (self.fence is None and tail.strip()):
            return None
        if self.fence is not None and _closes(tail, self.fence):      # its closing fence, no newline after
            return self.block[0], self.block[1], max(self.block[1], self.read - 1), self.block[3]
        end = len(text) if self.block[2] is None else self.block[2]
        return self.block[0], min(self.block[1], len(text)), end, self.block[3]


def closing_block(text: str) -> tuple[int, str] | None:
    """(where its opening fence's line starts, its body) of the block a model calls in that `text` ends with
    (module docstring), None when it ends otherwise."""
    blocks = _Blocks()
    blocks.update(text)
    block = blocks.last(text)
    if block is None or block[3] not in CALL_FENCE_INFO:
        return None
    return block[0], text[block[1]:block[2]]


class CallBlockHold:
    """Where an answer streamed so far must be held because it may end with a block of calls (closing_block,
    each call opening with one of `markers`): `at(text)` (the answer so far, grown since the last call) is
    the start of the last line while it may still become such a fence (```` `` ````, ```` ```xm ````), else
    the start of the fence of such a block whose body so far is whitespace or begins with a marker (or part
    of one); None when nothing may be such a block. Each line is read once."""

    def __init__(self, markers: tuple[str, ...]) -> None:
        self.markers = markers
        self._blocks = _Blocks()
        self._run: tuple[int, int] | None = None   # (first, last) block starts of the run of such blocks held

    def at(self, text: str) -> int | None:
        b = self._blocks
        b.update(text)
        tail = text[b.read:].lstrip(" \t")
        if b.fence is None and tail and _may_open(tail):       # a fence being written
            held = self._run is not None and b.block is not None and b.block[0] == self._run[1]
            return self._run[0] if held else b.read
        block = b.last(text)
        if block is None or block[3] not in CALL_FENCE_INFO or not self._may_be_calls(text, block):
            self._run = None
            return None
        if self._run is None or block[0] != self._run[1]:
            # a block right after the run's last one goes on with it (the readers read such a run whole)
            go_on = self._run is not None and b.block is not None and b.block[4] == self._run[1]
            self._run = (self._run[0] if go_on else block[0], block[0])
        return self._run[0]

    def _may_be_calls(self, text: str, block: tuple[int, int, int, str]) -> bool:
        body = text[block[1]:min(block[2], block[1] + 4096)].lstrip()
        return any(m.startswith(body[:len(m)]) for m in self.markers)


def _may_open(line: str) -> bool:
    """Whether a line written so far (no newline yet) may still become an opening fence a model calls in."""
    m = _FENCE.match(line)
    if m is None:
        return line[0] in "`~" and line == line[0] * len(line)     # `` or ~~: the fence itself, so far
    info = m.group(2).strip().lower()
    return any(i.startswith(info) for i in CALL_FENCE_INFO)
