"""Tool calls whose arguments are JSON after a header of markup, held: after the call's marker (written
outside the reasoning), one of the offered tools' names, the header's rest as the model writes it up to
its end marker, then the arguments as that tool's parameters allow them (the JSON automaton,
json_grammar.py); then the answer is free again.

    gpt-oss (Harmony):  <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}
                        <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{...}
    Mistral:            [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}
                        [TOOL_CALLS]get_weather[CALL_ID]abcDEF123[ARGS]{"city": "Paris"}

Harmony's header between the name and <|message|> is free (64 bytes at most); Mistral's is [ARGS] alone or
[CALL_ID], letters and digits, [ARGS], all its reader (mistral.py) takes.

What it is: `JsonArgsCall(header, tools, vocabulary, eos_ids)`, a held_call.HeldCall over this byte
automaton; `CallHeader` says where a format's call starts and its header ends (HARMONY, MISTRAL).
Not here: reading the calls (harmony.py, mistral.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strata.engine.held_call import DONE, HeldCall
from strata.engine.json_grammar import WS, step, ws_bytes, ws_step
from strata.engine.json_next_bytes import next_bytes, walk_first
from strata.engine.json_schema import Node
from strata.engine.token_bytes import Vocabulary, live_suffix


@dataclass(frozen=True)
class CallHeader:
    marker: bytes                  # what opens a call, up to the tool's name
    end: bytes                     # what ends the header (the arguments follow)
    after_name: frozenset[int]     # the bytes that may follow a whole name
    max_len: int                   # header bytes between the name and `end`; past them only `end` goes on
    id_marker: bytes | None = None   # set: the header is `end` alone or id_marker, an id (letters and digits,
                                     # max_len at most), `end` (Mistral's reader takes nothing else)
    forbid: tuple[bytes, ...] = ()   # texts the arguments may not write (where the reader ends a message)
    ends_answer: bool = False        # the arguments are the message's whole body: then only whitespace and
                                     # the answer's end token (Harmony's <|call|>)
    in_text: bool = True             # calls are written in the answer's text (a marker in a code block is
                                     # text: not held); Harmony's are messages of their own


HARMONY = CallHeader(b"to=functions.", b"<|message|>", frozenset(b" <"), 64,
                     forbid=(b"<|end|>", b"<|call|>", b"<|return|>", b"<|start|>", b"<|channel|>"), ends_answer=True,
                     in_text=False)
HARMONY_ANALYSIS = (b"<|channel|>analysis<|message|>", b"<|end|>")   # a marker in there is thought
MISTRAL = CallHeader(b"[TOOL_CALLS]", b"[ARGS]", frozenset(b"["), 48, id_marker=b"[CALL_ID]")
ID_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")

# States: ("lits", alternatives, pos) the tool's name (held_call), or Mistral's header markup;
# ("header", tool, tail, n) a free header up to its end; ("id", tool, n) a call id; ("json", tool, json state,
# its last bytes); ("end", ws) after Harmony's arguments, a gap (json_grammar.ws_step's state) until the end
# token; DONE.


def _toward(tail: bytes, end: bytes) -> int:
    """How much of `end` the header's last bytes have written."""
    return max((k for k in range(1, len(end) + 1) if tail.endswith(end[:k])), default=0)


class JsonArgsCall(HeldCall):
    def __init__(self, header: CallHeader, tools: Sequence[tuple[str, Node]], vocabulary: Vocabulary,
                 eos_ids: Sequence[int] = (), demanded: bool = False, reasoning: tuple[bytes, bytes] | None = None,
                 opened: bool = False, after: bytes | None = None):
        """`tools`: (name, its arguments' compiled schema: json_schema.tool_arguments). `demanded`: the
        answer is one call, its marker first (after `after`); else each call the model opens is held."""
        super().__init__(vocabulary, eos_ids, trigger=None if demanded else header.marker, reasoning=reasoning,
                         opened=opened, after=after, code_blocks=header.in_text)
        self.header = header
        self.args = tuple(node for _, node in tools)
        lead = header.marker if demanded else b""
        self._begin(("lits", tuple((lead + name.encode(), ("named", i)) for i, (name, _) in enumerate(tools)), 0))

    def _markup(self, state: tuple) -> bool:
        return state[0] in ("lits", "header", "id")   # a demanded call's marker, the header's markup

    def _may_end(self, state: tuple) -> bool:
        return state[0] == "end"

    def _expand(self, then: tuple) -> tuple:
        kind, h = then[0], self.header
        if kind == "named" and h.id_marker is not None:
            return ("lits", ((h.end, ("args", then[1])), (h.id_marker, ("id", then[1], 0))), 0)
        if kind == "named":
            return ("header", then[1], b"", 0)
        if kind == "args":
            return ("json", then[1], ((("V", self.args[then[1]]),), 0), b"")
        return then

    def _own_next_bytes(self, state: tuple) -> frozenset[int] | None:
        """The header's first byte after the name, its end marker's bytes once it is long; an id's characters
        or the end marker; the arguments' (json_next_bytes.py); whitespace after Harmony's arguments."""
        kind, h = state[0], self.header
        if kind == "header":
            return h.after_name if state[3] == 0 else frozenset(h.end) if state[3] >= h.max_len else None
        if kind == "id":
            return ID_BYTES | frozenset(h.end[:1])
        if kind == "json":
            return next_bytes(state[2])
        return ws_bytes(state[1]) if kind == "end" else None

    def _walk_first(self, state: tuple) -> bool:
        return state != DONE and (state[0] == "lits" or state[0] == "json" and walk_first(state[2]))

    def _step_uncached(self, state: tuple, b: int) -> tuple | None:
        kind = state[0]
        if kind == "lits":
            return self._lits_step(state, b)
        if kind == "header":
            _, t, tail, n = state
            end = self.header.end
            grown = (tail + bytes([b]))[-len(end):]
            if (n == 0 and b not in self.header.after_name) or \
                    (n >= self.header.max_len and _toward(grown, end) <= _toward(tail, end)):
                return None             # past max_len only the end marker's next byte: the header must end
            if grown == end:
                return ("json", t, ((("V", self.args[t]),), 0), b"")
            return ("header", t, grown, n + 1)
        if kind == "id":
            _, t, n = state
            if b in ID_BYTES and n < self.header.max_len:
                return ("id", t, n + 1)
            return self._step(("lits", ((self.header.end, ("args", t)),), 0), b) if n else None
        if kind == "json":
            _, t, js, tail = state
            js = step(js, b)
            if js is None:
                return None
            if self.header.forbid:           # the value's last bytes: none may end a forbidden text
                tail = tail + bytes([b])
                if any(tail.endswith(f) for f in self.header.forbid):
                    return None
                tail = live_suffix(tail, self.header.forbid)
            if not js[0]:
                return ("end", 0) if self.header.ends_answer else DONE
            return ("json", t, js, tail)
        if kind == "end":
            # before the answer's end token, a gap bounded as one between JSON tokens (json_grammar.ws_step: one
            # blank, one line break, 20 blanks after it). Harmony's reader takes any whitespace around the arguments
            # (harmony.py: json.loads of the body), where OpenAI's Harmony examples write none; any 24 bytes let a
            # model write 24 line breaks there, as the default model did in JSON gaps (json_grammar.py)
            nxt = ws_step(state[1], b) if b in WS else None
            return None if nxt is None else ("end", nxt)
        return None
