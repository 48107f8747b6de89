"""gpt-oss's answers in OpenAI's Harmony format, read into reasoning, text and tool calls.

The prompt ends with `<|start|>assistant` (the model's chat template); the model then writes one or more
messages, each a header, `<|message|>`, a body and an end (`<|end|>`; the last one ends generation with
`<|return|>` or, for a tool call, `<|call|>`, which the server does not put in the text):

    <|channel|>analysis<|message|>...thinking...<|end|><|start|>assistant<|channel|>final<|message|>Hi
    <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}

A message's channel and recipient decide what it is:
- `analysis` without a recipient: reasoning (several are joined by a newline);
- a recipient `functions.NAME` (in the header before or after the channel): a call of NAME, its body
  the arguments (re-serialised when it reads as JSON, else as written: a call cut by the token limit);
  another recipient (gpt-oss's built-in `browser.*` / `python`) is a call named by the recipient;
- `final`, and `commentary` without a recipient (a preamble before calls): text (joined by a blank line).
An answer that does not start like a Harmony header is plain text. No markup (`<|channel|>`, ...) is
ever part of the reasoning or the text, streamed or not.

- `HarmonyStream().feed(piece) -> [("reasoning" | "text", str)]`, `.finish()`, then `.calls`
  ([{"name", "arguments"}]): a streamed answer, piece by piece (pieces may split markup anywhere).
- `parse_harmony(text) -> HarmonyAnswer(reasoning | None, content, calls)`: a whole answer, the same
  routing (it runs the stream), so the streamed pieces joined equal what it returns.
- `is_harmony_vocabulary(tokenizer)`: whether a vocabulary has Harmony's markup tokens.
- `in_header(text)`: whether an answer so far ends in a message header (where a recipient opens a call).

Not here: the prompt (the model's own template, strata.engine.chat_template), what each API does with the
parts (server/prompting.py AnswerStream and the API modules).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
END, CALL, RETURN = "<|end|>", "<|call|>", "<|return|>"
# what ends a message's body (START / CHANNEL: a next message whose end token the model left out)
BODY_ENDS = (END, CALL, RETURN, START, CHANNEL)
MARKUP_TOKENS = (CHANNEL, MESSAGE)        # a vocabulary with both speaks Harmony
HEADER_STARTS = (CHANNEL, START, " to=", "to=")
TEXT_JOIN, REASONING_JOIN = "\n\n", "\n"

_RECIPIENT = re.compile(r"(?:^|\s)to=([^\s<]+)")
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z0-9_-]*)")


def is_harmony_vocabulary(tokenizer: Any) -> bool:
    token_id = getattr(tokenizer, "token_id", None)
    return callable(token_id) and all(token_id(t) is not None for t in MARKUP_TOKENS)


def in_header(text: str) -> bool:
    """Whether an answer that begins with `text` goes on in a message header, as HarmonyStream reads it: where a
    recipient (`to=...`) makes the message a call (its body the arguments, not text). Not in a body (after
    `<|message|>`, before what ends it), nor in an answer read as plain text (not begun like a header)."""
    head = text.lstrip()
    if head and not any(head.startswith(h) or h.startswith(head) for h in HEADER_STARTS):
        return False
    return text.rfind(MESSAGE) <= max(text.rfind(end) for end in BODY_ENDS)


@dataclass(frozen=True)
class HarmonyAnswer:
    reasoning: str | None                 # None: no analysis message
    content: str
    calls: list[dict[str, str]] = field(default_factory=list)


def _header_kind(header: str, offered: Collection[str] = ()) -> tuple[str, str | None]:
    """("reasoning" | "text" | "call", the called name) of a message header (the text before <|message|>).
    The recipient ends at whitespace, unless it is the longest `offered` name there: "a b" of
    `to=functions.a b <|constrain|>json` (the template writes such a name as it is)."""
    recipient = _RECIPIENT.search(header)
    name = recipient.group(1) if recipient else None
    if name is not None and name != "assistant":
        name = name[len("functions."):] if name.startswith("functions.") else name
        after = header[recipient.end() - len(name):]
        spaced = [n for n in offered if n.startswith(name) and after.startswith(n)
                  and (len(after) == len(n) or after[len(n)].isspace() or after[len(n)] == "<")]
        return "call", max(spaced, key=len, default=name)
    # the last channel: gpt-oss-20b sometimes writes a stray `<|channel|>commentary` before the real one
    channels = _CHANNEL_NAME.findall(header)
    return ("reasoning" if channels and channels[-1] == "analysis" else "text"), None


def _arguments(body: str) -> str:
    try:
        return json.dumps(json.loads(body), ensure_ascii=False)     # as the other formats' calls
    except (ValueError, RecursionError):     # not JSON, or nested deeper than json reads: as written
        return body


def _held(text: str, markers: tuple[str, ...]) -> int:
    """How many characters at the end of `text` may be the start of one of `markers` (held back)."""
    start = text.rfind("<")
    if start < 0 or any(m in text[start:] for m in markers):
        return 0
    tail = text[start:]
    return len(tail) if any(m.startswith(tail) for m in markers) else 0


class HarmonyStream:
    """Routes a streamed Harmony answer into ("reasoning", text) and ("text", text) pieces; the tool calls
    are in `calls` after finish()."""

    def __init__(self, offered: Collection[str] = ()) -> None:
        self.offered = offered       # the tools' names (a name with a space reads whole)
        self.buf = ""
        self.mode = "first"          # first -> header <-> body; or plain (not Harmony)
        self.kind = "text"           # the open message's kind, its call name and arguments so far
        self.name: str | None = None
        self.args = ""
        self.sent: dict[str, bool] = {"reasoning": False, "text": False}
        self.joined = False          # the open message's join with the previous one of its kind is out
        self.calls: list[dict[str, str]] = []
        self.thought = False         # an analysis message was opened (reasoning "" rather than None)

    def feed(self, piece: str) -> list[tuple[str, str]]:
        self.buf += piece
        out: list[tuple[str, str]] = []
        while True:
            if self.mode == "first":
                head = self.buf.lstrip()
                if any(head.startswith(h) for h in HEADER_STARTS):
                    self.mode = "header"
                elif head and not any(h.startswith(head) for h in HEADER_STARTS):
                    self.mode = "plain"
                else:
                    return out
            if self.mode == "plain":
                out.append(("text", self.buf))
                self.sent["text"] = self.sent["text"] or bool(self.buf)
                self.buf = ""
                return [p for p in out if p[1]]
            if self.mode == "header":
                at = self.buf.find(MESSAGE)
                if at < 0:
                    return [p for p in out if p[1]]
                self.kind, self.name = _header_kind(self.buf[:at], self.offered)
                self.thought = self.thought or self.kind == "reasoning"
                self.buf, self.mode, self.args, self.joined = self.buf[at + len(MESSAGE):], "body", "", False
            ends = [(self.buf.find(m), m) for m in BODY_ENDS if m in self.buf]
            if not ends:
                keep = len(self.buf) - _held(self.buf, BODY_ENDS)
                self._body(self.buf[:keep], out)
                self.buf = self.buf[keep:]
                return [p for p in out if p[1]]
            at, marker = min(ends)
            self._body(self.buf[:at], out)
            self._close()
            skip = len(marker) if marker in (END, CALL, RETURN) else 0    # START / CHANNEL open the next header
            self.buf, self.mode = self.buf[at + skip:], "header"

    def _body(self, text: str, out: list[tuple[str, str]]) -> None:
        if self.kind == "call":
            self.args += text
            return
        if not text:
            return
        if self.sent[self.kind] and not self.joined:
            text = (REASONING_JOIN if self.kind == "reasoning" else TEXT_JOIN) + text
        self.joined = True
        self.sent[self.kind] = True
        out.append((self.kind, text))

    def _close(self) -> None:
        if self.kind == "call" and self.name:
            self.calls.append({"name": self.name, "arguments": _arguments(self.args)})
        self.kind, self.name, self.args = "text", None, ""

    def finish(self) -> list[tuple[str, str]]:
        """At the end: what was held (a body's last characters, an answer that was only whitespace), and
        the open message closed (a call cut by the token limit is still a call)."""
        out: list[tuple[str, str]] = []
        rest, self.buf = self.buf, ""
        if self.mode in ("first", "plain"):
            return [("text", rest)] if rest else []
        if self.mode == "body":
            self._body(rest, out)
            self._close()
        self.mode = "header"
        return out


def parse_harmony(text: str, offered: Collection[str] = ()) -> HarmonyAnswer:
    stream = HarmonyStream(offered)
    pieces = stream.feed(text) + stream.finish()
    reasoning = "".join(t for k, t in pieces if k == "reasoning")
    content = "".join(t for k, t in pieces if k == "text")
    return HarmonyAnswer(reasoning if stream.thought else None, content, stream.calls)
