"""The byte automaton a JSON answer follows (OpenAI's `response_format`, held tool calls): `step(state, b)`
is the state after byte b or None when b cannot come next, `complete(state)` whether the value is whole.
A pushdown automaton over a compiled schema (json_schema.py): strings must be UTF-8 (and follow their
pattern, json_patterns.py); numbers are at most MAX_NUMBER characters with at most two exponent digits
(a finite double: the calls' readers refuse 1e999, which json.loads reads as inf) (and within their bounds,
json_numbers.py) and a gap between tokens holds at most one line break (`ws_step`), so a model cannot stall
the answer in either.

Not here: tokens (json_constraint.py follows an answer token by token), the schema compiler
(json_schema.py), the API fields (server/structured_output.py).
"""

from __future__ import annotations

import functools
import json
from fractions import Fraction

from strata.engine.json_numbers import MAX_NUMBER, reachable
from strata.engine.json_schema import ANY_ARRAY, ANY_NUMBER, ANY_OBJECT, ANY_STRING, ANY_WORD, Node
from strata.engine.json_union import start_union, union_complete, union_step

# Whitespace between two tokens: at most MAX_WS_BEFORE_BREAK spaces or tabs, then at most one line break (\n or
# \r\n) and at most MAX_INDENT spaces or tabs after it, the bounds of llama.cpp's JSON grammar (one space, or a line
# break and up to 20). Before, any 24 whitespace bytes: the default model filled its gaps with 24 line breaks (131
# tokens for {"legs": 16, "kind": "sample"}), its answer mostly blank lines.
MAX_WS_BEFORE_BREAK = 1
MAX_INDENT = 20        # pretty-printed JSON 10 levels deep at 2 a level
WS = frozenset(b" \t\n\r")
_BLANKS = frozenset(b" \t")
# a gap's state (a state's ws): 0..MAX_WS_BEFORE_BREAK the blanks before a break; _CR a \r just read (only \n may
# follow as whitespace); _BROKE + n: n blanks after the break
_CR = -1
_BROKE = 1000
DIGITS = frozenset(b"0123456789")
HEX = frozenset(b"0123456789abcdefABCDEF")


# ----- the automaton -----
# A state is (stack, ws): stack a tuple of frames, ws the gap's whitespace state (ws_step). Frames:
#   ("V", node)                           a value of `node` is expected (whitespace first)
#   ("O", node, seen, phase, key)         in an object; phase "k0" after "{", "k" after ",", ":" after a key,
#                                         "c" after a value
#   ("K", node, seen, buf, esc, utf)      in a key string (buf: its raw bytes so far)
#   ("A", node, count, phase)             in an array; phase "v0" after "[", "c" after an item
#   ("S", node, esc, chars, utf, pat, cp) in a string; esc 0, 1 after "\", 2..5 hex digits to come; utf
#                                         () or (continuation bytes to come, the next one's range); pat
#                                         the pattern's states (None: no pattern), cp the bits of a
#                                         UTF-8 character not yet whole
#   ("N", node, part, length, text)       in a number; part one of - 0 int . frac e esign exp exp2; text its
#                                         bytes so far when the node has bounds (else b"")
#   ("L", literals, pos)                  matching literals (enum, const, true / false / null)
#   ("P", data, pos)                      bytes that must come first (a tool call's opening tag)
#   ("D", literals, pos)                  a call's tool name; when whole, ("=", name) joins the call's `seen`
#   ("U", alts)                           a union whose branches began alike: each still possible as a state
#                                         of its own (json_union.py)
# Empty stack: the value is complete.

_NUMBER_END = frozenset({"0", "int", "frac", "exp", "exp2"})


def _start_value(node: Node, b: int) -> tuple | None:
    """The frame a value of `node` begins with on byte b, or None."""
    k = node.kind
    if k == "any":
        node = (ANY_OBJECT if b == ord("{") else ANY_ARRAY if b == ord("[") else ANY_STRING if b == ord('"')
                else ANY_NUMBER if b in DIGITS or b == ord("-") else ANY_WORD)
        k = node.kind
    if k == "union":
        return start_union(node.alternatives, b, _start_value)
    if k == "object":
        return ("O", node, frozenset(), "k0", None) if b == ord("{") else None
    if k == "array":
        return ("A", node, 0, "v0") if b == ord("[") else None
    if k == "string":
        return ("S", node, 0, 0, (), node.pattern.start if node.pattern else None, 0) if b == ord('"') else None
    if k in ("number", "integer"):
        part = "-" if b == ord("-") else "0" if b == ord("0") else "int" if b in DIGITS else None
        if part is None:
            return None
        if node.bounds is None:
            return ("N", node, part, 1, b"")
        text = bytes([b])
        return ("N", node, part, 1, text) if _number_reachable(text, part, node) else None
    if k == "literal":
        lits = tuple(v for v in node.literals if v[0] == b)
        return ("L", lits, 1) if lits else None
    return None


def _number_step(part: str, b: int, integer: bool) -> str | None:
    """The number's part after byte b; `integer`: no fraction and no exponent."""
    if part == "-":
        return "0" if b == ord("0") else "int" if b in DIGITS else None
    if part in ("0", "int") and b in DIGITS:
        return None if part == "0" else "int"
    if part in ("0", "int") and b == ord(".") and not integer:
        return "."
    if part in ("0", "int", "frac") and b in (ord("e"), ord("E")) and not integer:
        return "e"
    if part in (".", "frac") and b in DIGITS:
        return "frac"
    if part == "e" and b in (ord("+"), ord("-")):
        return "esign"
    if part in ("e", "esign") and b in DIGITS:
        return "exp"
    if part == "exp" and b in DIGITS:     # two exponent digits at most: 7E643 is no double (JSON readers say inf)
        return "exp2"
    return None


def _number_holds(node: Node, text: bytes) -> bool:
    """A whole number's value is in its node's bounds (always, without bounds)."""
    return node.bounds is None or node.bounds.holds(Fraction(text.decode()))


def _number_reachable(text: bytes, part: str, node: Node) -> bool:
    assert node.bounds is not None
    return reachable(text, part, node.bounds, node.kind == "integer", MAX_NUMBER)


@functools.lru_cache(maxsize=4096)
def _key_candidates(node: Node, seen: frozenset) -> list[bytes] | None:
    """The JSON-escaped names a key may still take, or None when any key may come (cached: asked for each
    byte of each key)."""
    if node.by_name and "name" not in seen:
        return [b"name"]                             # a call names its tool first
    if node.extra is not None:
        return None
    return [json.dumps(k, ensure_ascii=False)[1:-1].encode() for k in node.props if k not in seen]


def ws_step(ws: int, b: int) -> int | None:
    """The whitespace state after whitespace byte b in state ws (0: none read since the last token), or None where
    the gap may not take b."""
    if ws == _CR:
        return _BROKE if b == 0x0A else None
    if ws >= _BROKE:
        return ws + 1 if b in _BLANKS and ws - _BROKE < MAX_INDENT else None
    if b == 0x0A:
        return _BROKE
    if b == 0x0D:
        return _CR
    return ws + 1 if ws < MAX_WS_BEFORE_BREAK else None


def ws_bytes(ws: int) -> frozenset[int]:
    """The whitespace bytes ws_step takes in state ws."""
    if ws == _CR:
        return frozenset(b"\n")
    if ws >= _BROKE:
        return _BLANKS if ws - _BROKE < MAX_INDENT else frozenset()
    return WS if ws < MAX_WS_BEFORE_BREAK else frozenset(b"\r\n")


def _close_value(stack: tuple) -> tuple:
    """The stack after its top frame's value is complete."""
    return stack[:-1]


def _in_gap(stack: tuple, ws: int, b: int) -> tuple | None:
    nxt = ws_step(ws, b)
    return None if nxt is None else (stack, nxt)


def step(state: tuple, b: int) -> tuple | None:
    """The state after byte b, or None when b cannot come next."""
    stack, ws = state
    if not stack:
        return None                                  # complete: nothing may follow
    top = stack[-1]
    tag = top[0]
    if tag == "V":
        if b in WS:
            return _in_gap(stack, ws, b)
        f = _start_value(top[1], b)
        return None if f is None else (stack[:-1] + (f,), 0)
    if tag == "O":
        _, node, seen, phase, key = top
        if b in WS:
            return _in_gap(stack, ws, b)
        if phase in ("k0", "k") and b == ord('"'):
            cands = _key_candidates(node, seen)
            if cands is not None and not cands:
                return None
            return (stack + (("K", node, seen, b"", 0, ()),), 0)
        if phase in ("k0", "c") and b == ord("}"):
            return (_close_value(stack), 0) if node.required <= seen else None
        if phase == ":" and b == ord(":"):
            child = node.props.get(key) or node.extra
            if node.by_name and key == "name":       # the tool's name: remembered by the object when whole
                return (stack[:-1] + (("O", node, seen | {key}, "c", None), ("D", child.literals, 0)), 0)
            if node.by_name and key == "arguments":
                chosen = next((x[1] for x in seen if isinstance(x, tuple)), None)
                child = node.by_name.get(chosen, child)
            return (stack[:-1] + (("O", node, seen | {key}, "c", None), ("V", child)), 0)
        if phase == "c" and b == ord(","):
            cands = _key_candidates(node, seen)
            return None if cands is not None and not cands else (stack[:-1] + (("O", node, seen, "k", None),), 0)
        return None
    if tag == "K":
        _, node, seen, buf, esc, utf = top
        if esc == 0 and not utf and b == ord('"'):
            try:
                name = json.loads(b'"' + buf + b'"')
            except ValueError:
                return None
            if name in seen or (node.extra is None and name not in node.props):
                return None
            return (stack[:-2] + (("O", node, seen, ":", name),), 0)
        esc2, utf2 = _string_byte(esc, utf, b)
        if esc2 is None:
            return None
        cands = _key_candidates(node, seen)
        nbuf = buf + bytes([b])
        if cands is not None and not any(c.startswith(nbuf) for c in cands):
            return None
        return (stack[:-1] + (("K", node, seen, nbuf, esc2, utf2),), 0)
    if tag == "A":
        _, node, count, phase = top
        if b in WS:
            return _in_gap(stack, ws, b)
        if b == ord("]") and (phase == "c" or count == 0):
            return (_close_value(stack), 0) if count >= node.min_n else None
        if phase == "c" and b == ord(","):
            if node.max_n is not None and count >= node.max_n:
                return None
            return (stack[:-1] + (("A", node, count + 1, "c"), ("V", node.items)), 0)
        if phase == "v0":
            if node.max_n == 0:
                return None
            return step((stack[:-1] + (("A", node, 1, "c"), ("V", node.items)), 0), b)
        return None
    if tag == "S":
        _, node, esc, chars, utf, pat, cp = top
        if esc == 0 and not utf and b == ord('"'):
            whole = chars >= node.min_n and (pat is None or node.pattern.accepts(pat))
            return (_close_value(stack), 0) if whole else None
        if pat is not None:
            frame = _pattern_string_byte(top, b)
            return None if frame is None else (stack[:-1] + (frame,), 0)
        esc2, utf2 = _string_byte(esc, utf, b)
        if esc2 is None:
            return None
        # a character is counted at its first byte (not a UTF-8 continuation, not inside an escape)
        new_char = esc == 0 and not utf
        chars2 = chars + 1 if new_char else chars
        if node.max_n is not None and chars2 > node.max_n:
            return None
        return (stack[:-1] + (("S", node, esc2, chars2, utf2, None, 0),), 0)
    if tag == "N":
        _, node, part, length, text = top
        bounds = node.bounds
        # a bounded number is written without an exponent, so its prefix says which values it can reach
        nxt = _number_step(part, b, node.kind == "integer") if bounds is None or b not in b"eE" else None
        if nxt is not None:
            if length >= MAX_NUMBER:
                return None
            if bounds is None:
                return (stack[:-1] + (("N", node, nxt, length + 1, b""),), 0)
            text += bytes([b])
            return (stack[:-1] + (("N", node, nxt, length + 1, text),), 0) if _number_reachable(text, nxt, node) else None
        if part in _NUMBER_END and _number_holds(node, text):   # the number ended: b belongs to what holds it
            return step((_close_value(stack), 0), b)
        return None
    if tag == "P":
        _, data, pos = top
        if b != data[pos]:
            return None
        return (stack[:-1] + ((("P", data, pos + 1),) if pos + 1 < len(data) else ()), 0)
    if tag == "D":                                   # a call's tool name (literals), whitespace first
        _, lits, pos = top
        if pos == 0 and b in WS:
            return _in_gap(stack, ws, b)
        cont = tuple(v for v in lits if len(v) > pos and v[pos] == b)
        if cont:
            return (stack[:-1] + (("D", cont, pos + 1),), 0)
        whole = [v for v in lits if len(v) == pos]
        if not whole:
            return None
        _, node, seen, phase, key = stack[-2]       # the call object: it keeps the name it now knows
        return step((stack[:-2] + (("O", node, seen | {("=", whole[0])}, phase, key),), 0), b)
    if tag == "U":
        return union_step(stack, b, step, complete)
    if tag == "L":
        _, lits, pos = top
        cont = tuple(v for v in lits if len(v) > pos and v[pos] == b)
        if cont:
            return (stack[:-1] + (("L", cont, pos + 1),), 0)
        if any(len(v) == pos for v in lits):         # a whole literal, then b belongs to what holds it
            return step((_close_value(stack), 0), b)
        return None
    return None


# UTF-8 lead bytes: (continuation bytes, the first continuation's range) as the standard's table (no
# overlong forms, no surrogates, nothing past U+10FFFF)
def _utf8_lead(b: int) -> tuple | None:
    if 0xC2 <= b <= 0xDF:
        return (1, 0x80, 0xBF)
    if b == 0xE0:
        return (2, 0xA0, 0xBF)
    if b == 0xED:
        return (2, 0x80, 0x9F)
    if 0xE1 <= b <= 0xEF:
        return (2, 0x80, 0xBF)
    if b == 0xF0:
        return (3, 0x90, 0xBF)
    if 0xF1 <= b <= 0xF3:
        return (3, 0x80, 0xBF)
    if b == 0xF4:
        return (3, 0x80, 0x8F)
    return None


def _string_byte(esc: int, utf: tuple, b: int) -> tuple[int | None, tuple]:
    """(escape state, UTF-8 state) after byte b inside a string (not its closing quote); None: refused."""
    if utf:
        left, lo, hi = utf
        if not lo <= b <= hi:
            return None, ()
        return 0, ((left - 1, 0x80, 0xBF) if left > 1 else ())
    if esc == 0 and b >= 0x80:
        lead = _utf8_lead(b)
        return (None, ()) if lead is None else (0, lead)
    return _string_escape(esc, b), ()


def _string_escape(esc: int, b: int) -> int | None:
    """The escape state after byte b inside a string (not its closing quote), or None."""
    if esc == 0:
        if b < 0x20:
            return None
        return 1 if b == ord("\\") else 0
    if esc == 1:
        if b == ord("u"):
            return 5
        return 0 if b in b'"\\/bfnrt' else None
    if b not in HEX:
        return None
    return 0 if esc == 2 else esc - 1


SHORT_ESCAPES = {ord('"'): 0x22, ord("\\"): 0x5C, ord("/"): 0x2F, ord("b"): 0x08, ord("f"): 0x0C, ord("n"): 0x0A,
                 ord("r"): 0x0D, ord("t"): 0x09}


def _pattern_string_byte(frame: tuple, b: int) -> tuple | None:
    """A pattern-held string's frame after byte b (not its closing quote), or None. Each character moves
    the pattern when it is whole; a UTF-8 character's lead and continuation bytes are taken only while some
    character they may still become moves it. Only short escapes (\\n, \\", ...): a \\u escape is refused
    here, the character can be written as itself."""
    _, node, esc, chars, utf, pat, cp = frame
    pattern = node.pattern
    if utf:                                          # a continuation byte
        left, lo, hi = utf
        if not lo <= b <= hi:
            return None
        cp = (cp << 6) | (b & 0x3F)
        if left > 1:
            shift = 6 * (left - 1)
            if not pattern.may_take(pat, cp << shift, (cp << shift) | ((1 << shift) - 1)):
                return None
            return ("S", node, 0, chars, (left - 1, 0x80, 0xBF), pat, cp)
        pat = pattern.advance(pat, cp)
        return ("S", node, 0, chars, (), pat, 0) if pat else None
    if esc == 1:
        c = SHORT_ESCAPES.get(b)
        pat = pattern.advance(pat, c) if c is not None else frozenset()
        return ("S", node, 0, chars, (), pat, 0) if pat else None
    if node.max_n is not None and chars + 1 > node.max_n:
        return None
    if b == ord("\\"):
        if not any(pattern.advance(pat, c) for c in SHORT_ESCAPES.values()):
            return None
        return ("S", node, 1, chars + 1, (), pat, 0)
    if b >= 0x80:
        lead = _utf8_lead(b)
        if lead is None:
            return None
        left, lo, hi = lead
        bits = b & (0x1F, 0x0F, 0x07)[left - 1]
        shift = 6 * (left - 1)
        first = (bits << (6 * left)) | ((lo & 0x3F) << shift)
        last = (bits << (6 * left)) | ((hi & 0x3F) << shift) | ((1 << shift) - 1)
        return ("S", node, 0, chars + 1, lead, pat, bits) if pattern.may_take(pat, first, last) else None
    if b < 0x20:
        return None
    pat = pattern.advance(pat, b)
    return ("S", node, 0, chars + 1, (), pat, 0) if pat else None


def complete(state: tuple) -> bool:
    """True when the value is whole: no more bytes, or a number / literal that may end here."""
    stack, _ = state
    if not stack:
        return True
    if len(stack) == 1:
        top = stack[0]
        if top[0] == "N":
            return top[2] in _NUMBER_END and _number_holds(top[1], top[4])
        if top[0] == "L":
            return any(len(v) == top[2] for v in top[1])
        if top[0] == "U":
            return union_complete(top, complete)
    return False
