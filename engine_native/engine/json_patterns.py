"""String patterns held while an answer writes them (JSON Schema's `pattern` and the common `format`s):
`compile_pattern(regex)` turns a regular expression into a `Pattern`, a character automaton that
json_grammar.py's string frame advances one character at a time.

What it takes: literals, `.`, classes (`[a-z_]`, `[^"]`, `\\d \\w \\s` and their capitals), groups `( )` and
`(?: )`, `|`, the quantifiers `* + ? {n} {n,} {n,m}` (lazy forms too: the same strings match), `^` at
the start and `$` at the end. A pattern without `^` may begin anywhere and one without `$` may end anywhere,
as JSON Schema searches rather than matches. Anything else (back-references, look-arounds, `\\b`, anchors
inside) is a `PatternError` naming it.

No dead ends: states from which no writable string reaches the end are dropped when the pattern is built
(a character below U+0020 that JSON writes only as `\\u` is not writable here), so every prefix the
automaton allows can still be finished.

Not here: the string's bytes, escapes and UTF-8 (json_grammar.py).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_REPEAT = 256           # {n,m}: copies of a piece at most (the automaton grows with them)
MAX_STATES = 20_000
MAX_CHAR = 0x10FFFF
# characters an answer may write inside a pattern-held string: printable ones directly, five controls as
# short escapes; no surrogates
WRITABLE = ((0x08, 0x0A), (0x0C, 0x0D), (0x20, 0xD7FF), (0xE000, MAX_CHAR))

# RFC 3339's full-date: the days each month has, February's 29th in leap years only (2000, not 1900)
_DATE = (r"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])|\d{4}-(0[13-9]|1[0-2])-(29|30)|\d{4}-(0[13578]|1[02])-31"
         r"|(\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)")
FORMATS = {
    "date": rf"^{_DATE}$",
    "time": r"^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$",
    "date-time": rf"^{_DATE}T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{{1,9}})?"
                 r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$",
    "uuid": r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
    "email": r"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63}){1,8}$",
    "ipv4": r"^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$",
    "hostname": r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,16}$",
    "duration": r"^P((\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?)$",
    "uri": r"^[A-Za-z][A-Za-z0-9+.-]*:[^\s\"<>\\^`{|}]*$",
}

Ranges = tuple[tuple[int, int], ...]      # sorted, disjoint, inclusive code point ranges

DIGIT: Ranges = ((0x30, 0x39),)
WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
# ECMA-262 \s: WhiteSpace and LineTerminator (the Unicode Zs spaces among them)
SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
                 (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))


class PatternError(ValueError):
    """A regular expression this module cannot hold an answer to; the message says what and where."""


def _normal(ranges) -> Ranges:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def _invert(r: Ranges) -> Ranges:
    out, at = [], 0
    for lo, hi in r:
        if lo > at:
            out.append((at, lo - 1))
        at = hi + 1
    if at <= MAX_CHAR:
        out.append((at, MAX_CHAR))
    return tuple(out)


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    for lo, hi in a:
        for lo2, hi2 in b:
            if max(lo, lo2) <= min(hi, hi2):
                out.append((max(lo, lo2), min(hi, hi2)))
    return _normal(out)


def _contains(r: Ranges, c: int) -> bool:
    return any(lo <= c <= hi for lo, hi in r)


# ----- parsing: a small tree of ("lit", ranges), ("cat", [...]), ("alt", [...]), ("rep", node, lo, hi) -----

class _Parser:
    def __init__(self, text: str):
        self.s, self.i = text, 0

    def fail(self, what: str) -> PatternError:
        return PatternError(f"{what} at character {self.i} of {self.s!r}")

    def peek(self) -> str | None:
        return self.s[self.i] if self.i < len(self.s) else None

    def alternation(self) -> tuple:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self) -> tuple:
        items = []
        while self.peek() not in (None, "|", ")"):
            items.append(self.quantified(self.atom()))
        return ("cat", items)

    def quantified(self, node: tuple) -> tuple:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        elif c == "{" and self._brace_follows():
            lo, hi = self._braces()
        else:
            return node
        if self.peek() == "?":            # lazy: matches the same strings
            self.i += 1
        if self.peek() in ("*", "+", "?", "{") and not (self.peek() == "{" and not self._brace_follows()):
            raise self.fail("a quantifier after a quantifier")
        return ("rep", node, lo, hi)

    def _brace_follows(self) -> bool:
        j = self.s.find("}", self.i)
        inner = self.s[self.i + 1:j] if j > 0 else ""
        return bool(inner) and all(ch.isdigit() or ch == "," for ch in inner) and inner[0].isdigit()

    def _braces(self) -> tuple[int, int | None]:
        j = self.s.index("}", self.i)
        lo_s, comma, hi_s = self.s[self.i + 1:j].partition(",")
        self.i = j + 1
        lo = int(lo_s)
        hi = lo if not comma else int(hi_s) if hi_s else None
        if (hi is not None and hi < lo) or lo > MAX_REPEAT or (hi or 0) > MAX_REPEAT:
            raise self.fail(f"a repeat of {{{lo_s}{comma}{hi_s}}} (at most {MAX_REPEAT}, and min <= max)")
        return lo, hi

    def atom(self) -> tuple:
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise self.fail("a look-around or named group")
            inner = self.alternation()
            if self.peek() != ")":
                raise self.fail("an unclosed group")
            self.i += 1
            return inner
        if c == "[":
            return ("lit", self.char_class())
        if c == ".":
            self.i += 1
            return ("lit", _invert(((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))))
        if c == "\\":
            return ("lit", self.escape(in_class=False))
        if c in ("^", "$"):
            raise self.fail(f"{c!r} inside the pattern (only at its start / end)")
        if c in ("*", "+", "?") or c == "{" and self._brace_follows():
            raise self.fail("a quantifier with nothing to repeat")
        self.i += 1
        return ("lit", ((ord(c), ord(c)),))

    def escape(self, in_class: bool) -> Ranges:
        self.i += 1
        c = self.peek()
        if c is None:
            raise self.fail("a trailing backslash")
        self.i += 1
        classes = {"d": DIGIT, "w": WORD, "s": SPACE}
        if c.lower() in classes:
            r = classes[c.lower()]
            return _invert(r) if c.isupper() else r
        simple = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
        if c in simple:
            return ((simple[c], simple[c]),)
        if c in ("x", "u"):
            n = 2 if c == "x" else 4
            if self.s.startswith("{", self.i) and c == "u":
                j = self.s.find("}", self.i)
                digits, self.i = self.s[self.i + 1:j], j + 1
            else:
                digits, self.i = self.s[self.i:self.i + n], self.i + n
            try:
                cp = int(digits, 16)
            except ValueError:
                raise self.fail(f"a bad \\{c} escape") from None
            return ((cp, cp),)
        if c == "b" and in_class:
            return ((0x08, 0x08),)
        if c.isalnum():
            raise self.fail(f"the escape \\{c} (back-references, \\b, \\p and the like are not supported)")
        return ((ord(c), ord(c)),)

    def char_class(self) -> Ranges:
        self.i += 1
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        parts: list[tuple[int, int]] = []
        first = True
        while True:
            c = self.peek()
            if c is None:
                raise self.fail("an unclosed [")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "\\":
                r = self.escape(in_class=True)
            else:
                self.i += 1
                r = ((ord(c), ord(c)),)
            if len(r) == 1 and r[0][0] == r[0][1] and self.peek() == "-" and self.s[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1                  # a range: its end is the next character or escape
                if self.peek() == "\\":
                    end = self.escape(in_class=True)
                else:
                    end = ((ord(self.s[self.i]), ord(self.s[self.i])),)
                    self.i += 1
                if len(end) != 1 or end[0][0] != end[0][1] or end[0][0] < r[0][0]:
                    raise self.fail("a bad range in [...]")
                r = ((r[0][0], end[0][0]),)
            parts.extend(r)
        out = _normal(parts)
        return _invert(out) if negate else out


# ----- the automaton (Thompson's construction, then epsilon closures and dead states removed) -----

@dataclass
class Pattern:
    """A character automaton: `start` the state set before the first character; `advance`, `accepts`,
    `may_take` work on frozensets of state numbers."""

    moves: list[list[tuple[Ranges, int]]]     # per state: (characters, next state) after closure
    final: frozenset[int]
    start: frozenset[int]

    def advance(self, states: frozenset[int], c: int) -> frozenset[int]:
        return frozenset(t for s in states for r, t in self.moves[s] if _contains(r, c))

    def accepts(self, states: frozenset[int]) -> bool:
        return bool(states & self.final)

    def may_take(self, states: frozenset[int], lo: int, hi: int) -> bool:
        """Some character in [lo, hi] moves on (for a UTF-8 character not yet whole)."""
        return any(a <= hi and lo <= b for s in states for r, _ in self.moves[s] for a, b in r)


class _Builder:
    def __init__(self):
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[Ranges, int]]] = []

    def state(self) -> int:
        if len(self.eps) >= MAX_STATES:
            raise PatternError(f"the pattern needs more than {MAX_STATES} states")
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node: tuple, a: int) -> int:
        """Adds node's states after state a; returns its end state."""
        kind = node[0]
        if kind == "lit":
            r = _intersect(node[1], WRITABLE)
            b = self.state()
            if r:
                self.edges[a].append((r, b))
            return b
        if kind == "cat":
            for item in node[1]:
                a = self.build(item, a)
            return a
        if kind == "alt":
            end = self.state()
            for br in node[1]:
                s = self.state()
                self.eps[a].append(s)
                self.eps[self.build(br, s)].append(end)
            return end
        _, inner, lo, hi = node
        for _ in range(lo):
            a = self.build(inner, a)
        if hi is None:
            loop = self.state()
            self.eps[a].append(loop)
            self.eps[self.build(inner, loop)].append(loop)
            return loop
        end = self.state()
        self.eps[a].append(end)
        for _ in range(hi - lo):
            a = self.build(inner, a)
            self.eps[a].append(end)
        return end

    def closure(self, s: int) -> frozenset[int]:
        seen, todo = {s}, [s]
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)


def compile_pattern(regex: str) -> Pattern:
    """The automaton of a JSON Schema `pattern` (searched, unless anchored by ^ and $)."""
    if not isinstance(regex, str):
        raise PatternError(f"a pattern must be a string, got {regex!r}")
    anchored_start, anchored_end = regex.startswith("^"), regex.endswith("$") and not regex.endswith("\\$")
    body = regex[1 if anchored_start else 0:len(regex) - 1 if anchored_end else len(regex)]
    p = _Parser(body)
    tree = p.alternation()
    if p.peek() is not None:
        raise p.fail("an unmatched )")
    anything = ("rep", ("lit", ((0, MAX_CHAR),)), 0, None)
    tree = ("cat", ([] if anchored_start else [anything]) + [tree] + ([] if anchored_end else [anything]))
    b = _Builder()
    first = b.state()
    last = b.build(tree, first)
    closures = [b.closure(s) for s in range(len(b.eps))]
    # after closure: from state s, a character moves to the closure of an edge's target
    moves_raw = [[(r, t) for u in closures[s] for r, t in b.edges[u]] for s in range(len(b.eps))]
    final_raw = {s for s in range(len(b.eps)) if last in closures[s]}
    live = set(final_raw)                      # states from which the end can be reached
    changed = True
    while changed:
        changed = False
        for s, mv in enumerate(moves_raw):
            if s not in live and any(t in live for _, t in mv):
                live.add(s)
                changed = True
    if first not in live:
        raise PatternError(f"the pattern {regex!r} matches no string an answer can write")
    moves = [[(r, t) for r, t in mv if t in live] for mv in moves_raw]
    return Pattern(moves, frozenset(final_raw), frozenset({first}))


def format_pattern(name: str) -> Pattern:
    """The automaton of a JSON Schema `format` this module knows (FORMATS); PatternError for others."""
    if name not in FORMATS:
        raise PatternError(f"the format {name!r} is not supported (supported: {', '.join(sorted(FORMATS))})")
    return compile_pattern(FORMATS[name])
