"""Numbers held to a range while they are written (json_grammar.py's number frame, json_schema.py's
`minimum` / `maximum`): `reachable(prefix, ...)` says whether some number in the range begins with the
digits written so far and still fits the length limit, so the answer is never led into a dead end.

How: without an exponent, the numbers a prefix can become are, for each count of integer digits still to
come, one evenly spaced grid of decimals (spacing 10**-k for k fraction digits that fit); a grid meets
the range when its first point at or above the range's low end is not past either high end. Exact
(fractions), no floats.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

MAX_NUMBER = 24        # bytes of one number an answer may write (so a model cannot stall in one)


@dataclass(frozen=True)
class Bounds:
    """A number's allowed range: lo / hi None when open-ended; *_open: the end itself is excluded."""

    lo: Fraction | None = None
    lo_open: bool = False
    hi: Fraction | None = None
    hi_open: bool = False

    def holds(self, v: Fraction) -> bool:
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return False
        return self.hi is None or not (v > self.hi or (self.hi_open and v == self.hi))


def writable(bounds: Bounds, integer: bool, max_len: int) -> bool:
    """Some number in `bounds` can be written in max_len bytes without an exponent."""
    return any(reachable(bytes([c]), "-" if c == ord("-") else "0" if c == ord("0") else "int", bounds, integer,
                         max_len) for c in b"-0123456789")


def reachable(text: bytes, part: str, bounds: Bounds, integer: bool, max_len: int) -> bool:
    """Some number within `bounds` begins with `text` (no exponent; `part` as json_grammar's number frame:
    - 0 int . frac) and fits in max_len bytes; an integer when `integer`."""
    neg = text.startswith(b"-")
    body = (text[1:] if neg else text).decode()
    whole, dot, frac = body.partition(".")
    left = max_len - len(text)
    bounds = _magnitude_bounds(bounds, neg)
    if bounds is None:
        return False
    if not whole:                                    # "-": its first digit still to come
        return left > 0 and any(_digits_reach(d, left - 1, integer, bounds) for d in "0123456789")
    if not dot:
        return _digits_reach(whole, left, integer, bounds)
    return _grid_reaches(Fraction(whole + "." + (frac or "0")), len(frac), len(frac) + left, part == ".", bounds)


def _magnitude_bounds(b: Bounds, neg: bool) -> Bounds | None:
    """The bounds of |value| for a number of that sign, or None when no magnitude fits."""
    lo, lo_open, hi, hi_open = (b.lo, b.lo_open, b.hi, b.hi_open) if not neg else (
        None if b.hi is None else -b.hi, b.hi_open, None if b.lo is None else -b.lo, b.lo_open)
    if lo is None or lo < 0:
        lo, lo_open = Fraction(0), False
    if hi is not None and (hi < lo or (hi == lo and (hi_open or lo_open))):
        return None
    return Bounds(lo, lo_open, hi, hi_open)


def _digits_reach(whole: str, left: int, integer: bool, bounds: Bounds) -> bool:
    """Integer digits `whole` so far, `left` bytes to come: more digits (not after a lone 0), then for a
    number a "." and a fraction."""
    extra = range(0, left + 1) if whole != "0" else range(1)
    for j in extra:
        lo, room = int(whole) * 10 ** j, left - j
        hi = lo + 10 ** j - 1
        if integer or room < 2:
            if _grid_reaches(Fraction(lo), 0, 0, False, bounds, Fraction(hi)):
                return True
        elif _grid_reaches(Fraction(lo), 0, room - 1, False, bounds, Fraction(hi + 1)):
            return True
    return False


def _grid_reaches(base: Fraction, k0: int, kmax: int, need_digit: bool, bounds: Bounds,
                  top: Fraction | None = None) -> bool:
    """Whether a decimal of at most kmax fraction digits in [base, top) (top: base + 10**-k0 when None; for
    integers (kmax 0) [base, top] on the integer grid) lies within bounds. need_digit: a "." awaits one."""
    if need_digit and kmax < 1:
        return False
    step = Fraction(1, 10 ** kmax)
    hi_end = top if top is not None and kmax == 0 else (top if top is not None else base + Fraction(1, 10 ** k0)) - step
    p = base
    if bounds.lo > p:
        p = base + -((base - bounds.lo) // step) * step      # the first grid point at or above lo
    if bounds.lo_open and p == bounds.lo:
        p += step
    if p > hi_end:
        return False
    return bounds.hi is None or p < bounds.hi or (p == bounds.hi and not bounds.hi_open)
