"""Which bytes json_grammar.py's automaton may take next in a state, read off the state's frames without
stepping: `next_bytes(state)` is a small superset of the bytes `step(state, b)` takes (the punctuation an
object or array expects, the next byte of a key the schema names, of a literal, of a call's markup), or
None where the frame does not say cheaply (a free string, a key of any name, a pattern's wide class: the
caller tries every byte). `walk_first(state)`: where a sampler replacing a refused token walks at once.

Why: token_bytes.forced_run finds the text a held answer must write by asking which single byte may come
next; with this it tries a handful of bytes, not 256 (each a step of the automaton the first time). Exact
by construction as a superset: a byte left out here must be one `step` refuses (tests/text/
test_next_bytes.py checks it against the full scan over random schemas and walks).

Not here: the steps themselves (json_grammar.py), the forced text (token_bytes.forced_run).
"""

from __future__ import annotations

from strata.engine.json_grammar import _NUMBER_END, DIGITS, WS, _key_candidates, complete, ws_bytes

_WS = bytes(sorted(WS))
_NUMBER_BYTES = frozenset(DIGITS | set(b".eE+-"))
_STRING_LEADS = frozenset(range(0xC2, 0xF5))          # UTF-8 lead bytes json_grammar._utf8_lead takes
_ESCAPES = frozenset(b'"\\/bfnrtu')
_HEX = frozenset(b"0123456789abcdefABCDEF")
_MANY = 48           # a pattern's character class wider than this: no hint (the scan finds two at once)


def next_bytes(state: tuple) -> frozenset[int] | None:
    """A superset of the bytes json_grammar.step takes in `state` ((stack, ws)), or None (any may)."""
    stack, ws = state
    if not stack:
        return frozenset()                           # complete: nothing may follow
    top = stack[-1]
    tag = top[0]
    space = ws_bytes(ws)
    if tag == "V":
        return space | top[1].first_bytes()
    if tag == "O":
        phase = top[3]
        if phase == "k0":
            return space | frozenset(b'"}')
        if phase == "k":
            return space | frozenset(b'"')
        if phase == ":":
            return space | frozenset(b":")
        return space | frozenset(b",}")
    if tag == "K":
        return _key_bytes(top)
    if tag == "A":
        _, node, _, phase = top
        if phase == "v0":
            return space | frozenset(b"]") | (node.items.first_bytes() if node.max_n != 0 else frozenset())
        return space | frozenset(b",]")
    if tag == "S":
        return _string_bytes(top)
    if tag == "N":
        if top[2] not in _NUMBER_END:
            return _NUMBER_BYTES
        after = next_bytes((stack[:-1], 0))           # the number may end: the byte then belongs to its holder
        return None if after is None else _NUMBER_BYTES | after
    if tag == "P":
        return frozenset((top[1][top[2]],))
    if tag in ("L", "D"):
        lits, pos = top[1], top[2]
        out = frozenset(v[pos] for v in lits if len(v) > pos)
        if tag == "D" and pos == 0:
            out |= space
        if any(len(v) == pos for v in lits):          # a whole literal or name: then its holder's bytes
            after = next_bytes((stack[:-1], 0))       # (a call's object: its bytes do not hang on the name)
            return None if after is None else out | after
        return out
    if tag == "U":
        out = frozenset()
        for alt in top[1]:
            more = next_bytes(alt)
            if more is None:
                return None
            out |= more
        if any(complete(alt) for alt in top[1]):      # the union's value may end: then its holder's bytes
            after = next_bytes((stack[:-1], 0))
            return None if after is None else out | after
        return out
    return None


def walk_first(state: tuple) -> bool:
    """Whether a sampler that must replace a refused token should walk the vocabulary for the allowed ones at
    once rather than check the 64 best first: where a key or a value begins (not a number), the model's best
    tokens are mostly words the automaton refuses, while the walk over the few bytes named is short; after a
    value (`,` `}`), in a number or a literal the 64 best mostly hold the answer and the walk is the longer.
    Measured (session 16, benchmarks/structured_output.py's 189 replacements, cold, two runs): 48 and 75 ms in
    all by this rule, 51 and 79 ms checking the 64 best first everywhere, 103 and 101 ms walking at once
    wherever a hint names the bytes."""
    stack = state[0]
    if not stack:
        return False
    if stack[-1][0] not in ("K", "V"):
        return False
    named = next_bytes(state)            # None: any key (a free string), any value
    return named is not None and len(named) <= 8


def _key_bytes(frame: tuple) -> frozenset[int] | None:
    """In a key string: the next byte of the names still possible, or its closing quote."""
    _, node, seen, buf, esc, utf = frame
    cands = _key_candidates(node, seen)
    if cands is None:
        return None                                  # any key may come
    n = len(buf)
    return frozenset(c[n] for c in cands if len(c) > n and c.startswith(buf)) | frozenset(b'"')


def _string_bytes(frame: tuple) -> frozenset[int] | None:
    """In a string: its closing quote when its length is reached; an escape's or a UTF-8 character's next
    byte; the characters a pattern may take next (when few); else None."""
    _, node, esc, chars, utf, pat, _ = frame
    if utf:
        return frozenset(range(utf[1], utf[2] + 1))
    if esc == 1:
        return _ESCAPES
    if esc >= 2:
        return _HEX
    if node.max_n is not None and chars >= node.max_n:
        return frozenset(b'"')
    if pat is None:
        return None
    out = set(b'"\\')
    for s in pat:
        for ranges, _ in node.pattern.moves[s]:
            for lo, hi in ranges:
                if hi >= 0x80:
                    out |= _STRING_LEADS
                lo, hi = max(lo, 0x20), min(hi, 0x7F)
                if hi - lo >= _MANY:
                    return None
                out.update(range(lo, hi + 1))
    return frozenset(out)
