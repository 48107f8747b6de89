"""What the JSON automaton (strata.engine.json_grammar) makes of a whole byte string: the tests' one helper."""

from __future__ import annotations

from strata.engine.json_grammar import complete, step


def verdict(root, text: str | bytes) -> str:
    """"whole" (a complete value), "prefix" (may still become one) or "refused", for a value of `root`."""
    state = ((("V", root),), 0)
    for b in text.encode() if isinstance(text, str) else text:
        state = step(state, b)
        if state is None:
            return "refused"
    return "whole" if complete(state) else "prefix"
