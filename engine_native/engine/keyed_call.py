"""Tool calls held in a template's own key-value markup (Qwen3-Coder's `<function=NAME>` /
`<parameter=KEY>` XML, GLM's `<arg_key>` / `<arg_value>`): the call opens with one of the offered tools'
names, and then each argument's key is one of that tool's parameters not written yet, the required ones all
come before the call closes, and the values are the model's own text, less the markup's tags (where the
answer's reader would end the value; the value's own end, once begun with its tag, is written whole).

What it is: `KeyedCall(markup, tools, vocabulary, ...)`, a sampler constraint (sampling.py's protocol, as
json_constraint.JsonConstraint): a byte automaton per answer. With `trigger`, the answer is free until it
writes the call marker (outside its reasoning), the call is held, then free again until the next marker;
without, the answer begins with the call (a demanded call). `KeyedMarkup` is the template's markup read off
rendered probe calls (server/structured_output.py).

What it is not: the values' types (the answer's parser types them by the schema), the call's parsing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from strata.engine.held_call import DONE, HeldCall
from strata.engine.token_bytes import Vocabulary, live_suffix


@dataclass(frozen=True)
class KeyedMarkup:
    """A template's call markup around the name, keys and values (Qwen3-Coder's in the comments)."""

    opening: bytes       # after the marker, up to the name: b"\n<function="
    first: bytes         # after the name, up to the first key: b">\n<parameter="
    empty: bytes         # after the name of a call without arguments, through its end: b">\n</function>\n</tool_call>"
    mid: bytes           # between a key and its value: b">\n"
    value_end: bytes     # what ends a value (what the next key and the call's end begin with): b"\n</parameter>\n<"
    next_key: bytes      # then up to the next key: b"parameter="
    end: bytes           # or the call's end: b"/function>\n</tool_call>"

    def tags(self) -> tuple[bytes, ...]:
        """The markup's tags (`</parameter>`, `<parameter=`, `<function=`, `</function>`, GLM's `<arg_key>`...):
        where the answer's reader ends a value or a function, so a value may not write one. Not the call's
        closing tag (`</tool_call>`, the last of its end): the readers take it as a value's text, as they end
        a call only at the one after the function's or the last value's end tag (chat_template.py, glm.py,
        seed.py), which a value cannot write; code about tool calls holds it."""
        text = b"\0".join((self.opening, self.first, self.empty, self.mid, self.value_end + self.next_key,
                           self.value_end + self.end))
        closing = re.findall(rb"</?[\w:.-]+[>=]", self.value_end + self.end)[-1:]
        return tuple(t for t in dict.fromkeys(re.findall(rb"</?[\w:.-]+[>=]", text)) if t not in closing)


@dataclass(frozen=True)
class Tool:
    name: bytes
    keys: tuple[bytes, ...] | None       # None: any keys (a tool whose schema lists no properties)
    required: frozenset[bytes]

    def more_keys(self, seen: frozenset[bytes]) -> bool:
        return self.keys is None or any(k not in seen for k in self.keys)


# States: ("lits", alternatives, pos): one of the byte strings must be written, each (data, then-state);
# ("key", tool, seen, buf); ("value", tool, seen, tail); DONE: the call is whole.


class KeyedCall(HeldCall):
    def __init__(self, markup: KeyedMarkup, tools: Sequence[tuple[str, Sequence[str] | None, Sequence[str]]],
                 vocabulary: Vocabulary, eos_ids: Sequence[int] = (), trigger: bytes | None = None,
                 reasoning: tuple[bytes, bytes] | None = None, opened: bool = False, after: bytes | None = None,
                 lead: bytes = b""):
        """`tools`: (name, parameter names or None for any, required names). `trigger`: the call marker; each call the
        model opens is held. Without it the answer is the call, `lead` (its marker) first (after `after`, a
        thinking model's closing tag when the prompt opened its reasoning). After the call the answer is
        free."""
        super().__init__(vocabulary, eos_ids, trigger=trigger, reasoning=reasoning, opened=opened, after=after)
        self.m = markup
        self._tags = markup.tags()
        self._watch = (markup.value_end, *self._tags)   # what a value's last bytes may be beginning
        self.tools = tuple(Tool(n.encode(), None if keys is None else tuple(k.encode() for k in keys),
                                frozenset(r.encode() for r in req)) for n, keys, req in tools)
        self._begin(("lits", tuple((lead + markup.opening + t.name, ("named", i)) for i, t in enumerate(self.tools)), 0))

    def _markup(self, state: tuple) -> bool:
        return state[0] == "lits"

    # ----- the automaton -----

    def _expand(self, then: tuple) -> tuple:
        """A state named by a `lits` alternative, made concrete."""
        kind = then[0]
        if kind == "named":                          # after the tool's name: its first key, or no arguments
            tool = self.tools[then[1]]
            alts = []
            if tool.more_keys(frozenset()):
                alts.append((self.m.first, ("key", then[1], frozenset(), b"")))
            if not tool.required:
                alts.append((self.m.empty, DONE))
            return ("lits", tuple(alts), 0)
        if kind == "after_value":
            _, t, seen = then
            tool = self.tools[t]
            alts = []
            if tool.more_keys(seen):
                alts.append((self.m.next_key, ("key", t, seen, b"")))
            if tool.required <= seen:
                alts.append((self.m.end, DONE))
            return ("lits", tuple(alts), 0)
        return then

    def _own_next_bytes(self, state: tuple) -> frozenset[int] | None:
        """In a key of a tool that lists its keys: the next byte of the keys still possible, or the markup
        after a whole one; a value is the model's text (None)."""
        if state[0] != "key" or self.tools[state[1]].keys is None:
            return None
        _, t, seen, buf = state
        n = len(buf)
        keys = self.tools[t].keys or ()
        return frozenset(k[n] for k in keys if k not in seen and len(k) > n and k.startswith(buf)) | frozenset(self.m.mid[:1])

    def _walk_first(self, state: tuple) -> bool:
        return state != DONE and state[0] in ("lits", "key") and self._next_bytes(state) is not None

    def _step_uncached(self, state: tuple, b: int) -> tuple | None:
        kind = state[0]
        if kind == "lits":
            return self._lits_step(state, b)
        if kind == "key":
            _, t, seen, buf = state
            tool = self.tools[t]
            nbuf = buf + bytes([b])
            if tool.keys is None:                    # any key: up to the markup after it, each once
                if self.m.mid[:1] != bytes([b]):
                    return ("key", t, seen, nbuf) if b >= 0x20 and len(nbuf) <= 256 else None
                known = buf and buf not in seen
            else:
                if any(k.startswith(nbuf) for k in tool.keys if k not in seen):
                    return ("key", t, seen, nbuf)
                known = buf in tool.keys and buf not in seen
            if known and self.m.mid[:1] == bytes([b]):
                nxt = ("value", t, seen | {buf}, b"")
                return ("lits", ((self.m.mid, nxt),), 1) if len(self.m.mid) > 1 else nxt
            return None
        if kind == "value":
            _, t, seen, tail = state
            end = self.m.value_end
            tail = tail + bytes([b])
            if tail.endswith(end):
                return self._expand(("after_value", t, seen))
            for tag in self._tags:            # a tag ends the value for the reader: only as the value's end
                if tail.endswith(tag):
                    at = next((k for k in range(len(tag), len(end)) if end[:k].endswith(tag) and tail.endswith(end[:k])),
                              None)
                    return None if at is None else ("lits", ((end, ("after_value", t, seen)),), at)
            return ("value", t, seen, live_suffix(tail, self._watch))
        return None                                  # done: nothing more of the call
