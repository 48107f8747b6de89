"""Unions whose branches begin alike, held exactly while the answer is written: `anyOf` / `oneOf` (oneOf
read as anyOf, as OpenAI reads it) or a type list such as `integer | number`, objects told apart by a
`"type": {"const": ...}` key (Pydantic's unions of models), `string | string with a pattern`.

json_grammar.py's union frame ("U", alts, whole) keeps each branch still possible as a state of its own
(an NFA over the branches inside the deterministic stack): every byte steps each of them, those that refuse
it are dropped, and when none takes the byte but one is whole, the union's value has ended and the byte
belongs to what holds it (a number: `1` is whole for an integer branch and still open for a number branch;
`,` then ends both). When one branch is left the frame gives way to that branch's own stack, so a
discriminated union is deterministic again once its discriminator is written. Branches that begin
differently (Pydantic's Optional[X]) never reach the frame: the first byte picks the one.

`unbounded_at`: a union two of whose branches, beginning alike, can each hold that same union again (through
a `$ref`) would keep a number of alternatives that doubles with each level; json_schema.py refuses it.

Not here: the frames of one branch (json_grammar.py), the schema compiler (json_schema.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# ("U", alts, whole): alts the branches still possible, each a state (stack, ws) whose stack is not empty,
# in the schema's order; whole: a branch ended exactly at the last byte (its stack emptied).


def start_union(alternatives: Sequence[Any], b: int, start_value: Callable[[Any, int], tuple | None]) -> tuple | None:
    """The frame a union's value begins with on byte b: the one branch that takes b as it is, a union frame
    when several do, None when none does."""
    frames = tuple(dict.fromkeys(f for f in (start_value(a, b) for a in alternatives) if f is not None))
    if len(frames) <= 1:
        return frames[0] if frames else None
    return ("U", tuple(((f,), 0) for f in frames), False)


def union_step(stack: tuple, b: int, step: Callable, complete: Callable) -> tuple | None:
    """The state after byte b with a union frame on top of `stack`, or None when b cannot come next."""
    _, alts, whole = stack[-1]
    taken = [s for s in (step(a, b) for a in alts) if s is not None]
    if not taken:
        if whole or any(complete(a) for a in alts):   # the value ended: b belongs to what holds it
            return step((stack[:-1], 0), b)
        return None
    live = tuple(dict.fromkeys(s for s in taken if s[0]))
    ended = len(live) < len(taken)
    if not live:
        return (stack[:-1], 0)                     # every branch that took b is whole: so is the union
    if len(live) == 1 and (not ended or complete(live[0])):
        return (stack[:-1] + live[0][0], live[0][1])   # one branch left: its own frames from here on
    return (stack[:-1] + (("U", live, ended),), 0)


def union_complete(frame: tuple, complete: Callable) -> bool:
    """Whether a union frame's value may end here (a branch whole, or one that may end, a number)."""
    return frame[2] or any(complete(a) for a in frame[1])


def _children(node: Any) -> list:
    out = list(node.props.values()) + list(node.alternatives) + list(node.by_name.values())
    return out + [n for n in (node.extra, node.items) if n is not None]


def _reaches(start: Any, target: Any) -> bool:
    """Whether `target` is `start` or lies inside it (through properties, items, branches, $refs)."""
    seen: set[int] = set()
    todo = [start]
    while todo:
        n = todo.pop()
        if n is target:
            return True
        if id(n) not in seen:
            seen.add(id(n))
            todo.extend(_children(n))
    return False


def unbounded_at(union: Any) -> int | None:
    """A byte two of `union`'s branches begin with when each of them can hold `union` again: nested that
    way, the alternatives kept would double with each level. None: the schema bounds what is kept."""
    recurring = [a.first_bytes() for a in union.alternatives if _reaches(a, union)]
    for x, first in enumerate(recurring):
        for other in recurring[x + 1:]:
            if first & other:
                return min(first & other)
    return None
