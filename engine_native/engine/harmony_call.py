"""Tool calls gpt-oss opens in its Harmony headers, held: after `to=functions.` (written outside the analysis
channel), one of the offered tools' names, the rest of the header as the model writes it (its channel,
`<|constrain|>json`) up to `<|message|>`, then the arguments as that tool's parameters allow them (the JSON
automaton, json_grammar.py); then the answer is free again (it ends the call with `<|call|>`).

    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}<|call|>

What it is: `HarmonyCall(tools, vocabulary, eos_ids)`, a held_call.HeldCall over this byte automaton.
Not here: reading the calls (harmony.py), a demanded call (not held: a Harmony answer opens with its
analysis, and a call is a message of its own).
"""

from __future__ import annotations

from collections.abc import Sequence

from strata.engine.held_call import DONE, HeldCall
from strata.engine.json_grammar import step
from strata.engine.json_schema import Node
from strata.engine.token_bytes import Vocabulary

TRIGGER = b"to=functions."
MESSAGE = b"<|message|>"
ANALYSIS = (b"<|channel|>analysis<|message|>", b"<|end|>")   # a trigger in there is thought, not written
MAX_HEADER = 64            # header bytes between the name and <|message|>
AFTER_NAME = frozenset(b" <")   # what may follow a whole name (a space, or <|channel|> / <|constrain|> / <|message|>)

# States: ("lits", alternatives, pos) the tool's name (held_call); ("header", tool, tail, n) up to <|message|>;
# ("json", tool, json state); DONE.


def _toward(tail: bytes) -> int:
    """How much of <|message|> the header's last bytes have written."""
    return max((k for k in range(1, len(MESSAGE) + 1) if tail.endswith(MESSAGE[:k])), default=0)


class HarmonyCall(HeldCall):
    def __init__(self, tools: Sequence[tuple[str, Node]], vocabulary: Vocabulary, eos_ids: Sequence[int] = ()):
        """`tools`: (name, its arguments' compiled schema: json_schema.tool_arguments)."""
        super().__init__(vocabulary, eos_ids, trigger=TRIGGER, reasoning=ANALYSIS)
        self.args = tuple(node for _, node in tools)
        self._begin(("lits", tuple((name.encode(), ("named", i)) for i, (name, _) in enumerate(tools)), 0))

    def _markup(self, state: tuple) -> bool:
        return state[0] == "header"

    def _expand(self, then: tuple) -> tuple:
        return ("header", then[1], b"", 0) if then[0] == "named" else then

    def _step_uncached(self, state: tuple, b: int) -> tuple | None:
        kind = state[0]
        if kind == "lits":
            return self._lits_step(state, b)
        if kind == "header":
            _, t, tail, n = state
            grown = (tail + bytes([b]))[-len(MESSAGE):]
            if (n == 0 and b not in AFTER_NAME) or (n >= MAX_HEADER and _toward(grown) <= _toward(tail)):
                return None             # past MAX_HEADER only <|message|>'s next byte: the header must end
            if grown == MESSAGE:
                return ("json", t, ((("V", self.args[t]),), 0))
            return ("header", t, grown, n + 1)
        if kind == "json":
            _, t, js = state
            js = step(js, b)
            if js is None:
                return None
            return DONE if not js[0] else ("json", t, js)
        return None
