"""Unions whose branches begin alike, held exactly while the answer is written: `anyOf` / `oneOf` (oneOf
read as anyOf, as OpenAI reads it) or a type list such as `integer | number`, objects told apart by a
`"type": {"const": ...}` key (Pydantic's unions of models), `string | string with a pattern`.

json_grammar.py's union frame ("U", alts) keeps each branch still possible as a state of its own
(an NFA over the branches inside the deterministic stack): every byte steps each of them, those that refuse
it are dropped, and when none takes the byte but one is whole, the union's value has ended and the byte
belongs to what holds it (a number: `1` is whole for an integer branch and still open for a number branch;
`,` then ends both). When one branch is left the frame gives way to that branch's own stack, so a
discriminated union is deterministic again once its discriminator is written. Branches whose top frames
are the same (a recursive `$ref` two branches hold under one key: `{"op": "add", "l": Expr}` and
`{"op": "mul", "l": Expr}`) share them, so a recursive union keeps one copy of each level, not one per
branch. Branches that begin differently (Pydantic's Optional[X]) never reach the frame: the first byte picks
the one.

`unbounded_at`: a recursive union whose alike branches would hold, at one place, two different schemas that
can each hold it again, level after level, would keep a number of alternatives that doubles with each level
(nothing shared); json_schema.py refuses it.

Not here: the frames of one branch (json_grammar.py), the schema compiler (json_schema.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# ("U", alts): the branches still possible, each a state (stack, ws) whose stack is not empty, in the schema's
# order. A branch whose stack empties is dropped: its value closed with a quote or a bracket, which closes every
# branch that took it too (JSON's strings and brackets match alike whatever the schema), or leaves a literal
# that is whole as well (`"ab"` for a string and for the const "ab"), so a branch left may end there.


def start_union(alternatives: Sequence[Any], b: int, start_value: Callable[[Any, int], tuple | None]) -> tuple | None:
    """The frame a union's value begins with on byte b: the one branch that takes b as it is, a union frame
    when several do, None when none does."""
    frames = tuple(dict.fromkeys(f for f in (start_value(a, b) for a in alternatives) if f is not None))
    if len(frames) <= 1:
        return frames[0] if frames else None
    return ("U", tuple(((f,), 0) for f in frames))


def union_step(stack: tuple, b: int, step: Callable, complete: Callable) -> tuple | None:
    """The state after byte b with a union frame on top of `stack`, or None when b cannot come next."""
    alts = stack[-1][1]
    taken = [s for s in (step(a, b) for a in alts) if s is not None]
    if not taken:
        if any(complete(a) for a in alts):        # the value ended: b belongs to what holds it
            return step((stack[:-1], 0), b)
        return None
    live = _shared(tuple(dict.fromkeys(s for s in taken if s[0])))
    if not live:
        return (stack[:-1], 0)                     # every branch that took b is whole: so is the union
    if len(live) == 1:
        return (stack[:-1] + live[0][0], live[0][1])   # one branch left: its own frames from here on
    return (stack[:-1] + (("U", live),), 0)


def _shared(alts: tuple) -> tuple:
    """The branches whose top frames are the same (one $ref that two branches hold under the same key, begun
    at the same byte) made one: ([union of their frames below], that top), so that a recursive union keeps
    one copy of what they write in common instead of one per branch, level after level."""
    groups: dict[tuple, list] = {}
    for s in alts:
        groups.setdefault((s[0][-1], s[1]) if len(s[0]) > 1 else s, []).append(s)
    if len(groups) == len(alts):
        return alts
    out = []
    for key, members in groups.items():
        if len(members) == 1:
            out.append(members[0])
            continue
        lowers = tuple(dict.fromkeys((m[0][:-1], 0) for m in members))
        below = lowers[0][0] if len(lowers) == 1 else (("U", lowers),)
        out.append((below + (key[0],), key[1]))
    return tuple(dict.fromkeys(out))


def union_complete(frame: tuple, complete: Callable) -> bool:
    """Whether a union frame's value may end here (a branch that may end: a number, a literal)."""
    return any(complete(a) for a in frame[1])


def _pairs_below(x: Any, y: Any) -> list[tuple[Any, Any]]:
    """The schemas two branches hold at one place one level into their values, when they hold x and y here
    (the same key of two objects, the items of two arrays, a union's branches that begin alike)."""
    if x is y:
        return []                                 # the same frames from here on: shared (_shared)
    for a, c in ((x, y), (y, x)):
        if a.kind == "union":
            return [(alt, c) for alt in a.alternatives if alt.first_bytes() & c.first_bytes()]
    kinds = {x.kind, y.kind} - {"any"}     # any value: an object whose values are any, or an array; two: the same
    if kinds == {"object"}:
        keys = set(x.props) | set(y.props)
        out = [(_value_at(x, k), _value_at(y, k)) for k in keys]
        if (x.kind == "any" or x.extra is not None) and (y.kind == "any" or y.extra is not None):
            out.append((_value_at(x, None), _value_at(y, None)))
        return [(a, c) for a, c in out if a is not None and c is not None]
    if kinds == {"array"}:
        return [(x if x.kind == "any" else x.items, y if y.kind == "any" else y.items)]
    return []


def _value_at(node: Any, key: str | None) -> Any:
    """The schema of an object's value under `key` (None: a key it does not name), None when refused."""
    if node.kind == "any":
        return node
    return node.props.get(key, node.extra) if key is not None else node.extra


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


def holds_itself(union: Any) -> bool:
    """Whether `union` is one of its own branches, or of theirs (through $refs): its value would begin by
    beginning itself."""
    seen: set[int] = set()
    todo = list(union.alternatives)
    while todo:
        n = todo.pop()
        if n is union:
            return True
        if n.kind == "union" and id(n) not in seen:
            seen.add(id(n))
            todo.extend(n.alternatives)
    return False


def unbounded_at(union: Any) -> int | None:
    """A byte two of `union`'s branches begin with when, below it, they can hold two different schemas at one
    place that each hold `union` again, and again below those, without end (a cycle of such pairs): nested
    that way, their frames are never shared (_shared) and what the union frame keeps would double with each
    level. None: the schema bounds what is kept (a pair that diverges for some levels then shares or stops
    recurring keeps a bounded number of copies)."""
    alts = union.alternatives
    reaches: dict[int, bool] = {}

    def recurs(n: Any) -> bool:
        if id(n) not in reaches:
            reaches[id(n)] = _reaches(n, union)
        return reaches[id(n)]

    def below(x: Any, y: Any) -> list[tuple[Any, Any]]:
        """The pairs under (x, y) that both hold `union` again and that the two branches can both write."""
        return [(a, c) for a, c in _pairs_below(x, y)
                if a is not c and a.first_bytes() & c.first_bytes() and recurs(a) and recurs(c)]

    done: set[tuple[int, int]] = set()            # pairs whose pairs below are known to end
    for i, a in enumerate(alts):
        for c in alts[i + 1:]:
            first = a.first_bytes() & c.first_bytes()
            if not first:
                continue
            # depth-first over the pairs below, a path of pairs on the stack: a pair met again on it is a cycle
            path = {(id(a), id(c))}
            stack = [((a, c), iter(below(a, c)))]
            while stack:
                pair, rest = stack[-1]
                nxt = next(rest, None)
                if nxt is None:
                    stack.pop()
                    key = (id(pair[0]), id(pair[1]))
                    path.discard(key)
                    done.add(key)
                    continue
                key = (id(nxt[0]), id(nxt[1]))
                if key in path:
                    return min(first)
                if key not in done:
                    path.add(key)
                    stack.append((nxt, iter(below(*nxt))))
    return None
