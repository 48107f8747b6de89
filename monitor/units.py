"""Text for numbers the monitor shows, each with its unit ("1,234 tok", "85.2 tok/s", "1.5 GiB", "3 s ago").

Qt-free and pure. `None` (a field the feed left out: not applicable) is shown as an en dash, never as 0.
"""

from __future__ import annotations

import math

NA = "\u2013"   # shown for an absent value
NBSP = "\u00a0"  # a space a wrapped line does not break at


def _absent(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def tokens(n: float | None) -> str:
    return NA if _absent(n) else f"{int(n):,} tok"


def count(n: float | None) -> str:
    return NA if _absent(n) else f"{int(n):,}"


def counted(n: float | None, noun: str) -> str:
    """A count with its noun, singular for one ("1 request", "2 requests", "1,234 threads")."""
    return f"{count(n)} {noun}" + ("" if not _absent(n) and int(n) == 1 else "s")


def article(n: int) -> str:
    """`a` or `an` before the number `n` as English reads it: "an 8192-token history" (eight thousand ...), "an
    11-..." and "an 18-...", "an 80..." to "an 89...", "an 800..." to "an 899..." (read by their first group of
    three digits); "a 40000-token", "a 1-". A plan's reason said "a 8192-token history" (a new-user trial)."""
    lead = abs(int(n))
    while lead >= 1000:
        lead //= 1000
    return "an" if lead in (8, 11, 18) or 80 <= lead <= 89 or 800 <= lead <= 899 else "a"


def rate(x: float | None) -> str:
    """A speed without its unit (for a column whose header has it): one decimal below 100, none up
    to 10,000, thousands ("16.5k") above."""
    if _absent(x):
        return NA
    if x >= 10_000:
        return f"{x / 1000:,.1f}k"
    return f"{x:,.1f}" if x < 100 else f"{x:,.0f}"


def tps(x: float | None) -> str:
    """Tokens per second."""
    return NA if _absent(x) else f"{rate(x)} tok/s"


def mib(x: float | None) -> str:
    """A size given in MiB, shown in MiB or GiB."""
    if _absent(x):
        return NA
    if x >= 1024:
        return f"{x / 1024:,.1f} GiB"
    return f"{x:,.1f} MiB" if x < 100 else f"{x:,.0f} MiB"


def per_token(n_bytes: float | None) -> str:
    """KV bytes a token takes: "22.5 KiB/token" (the monitor's header and the setup plan's reasons say it alike;
    the plan said "23040 bytes per token"), "640 B/token" below 1 KiB, MiB from 1 MiB."""
    if _absent(n_bytes):
        return NA
    if n_bytes >= 1024 * 1024:
        return f"{n_bytes / 2**20:,.1f} MiB/token"
    return f"{n_bytes / 1024:,.1f} KiB/token" if n_bytes >= 1024 else f"{int(n_bytes)} B/token"


def seconds(x: float | None) -> str:
    """A duration in ms, s, min or h: each unit from where the one below would round up to it (0.9996 s is
    "1.0 s", not "1000 ms"; 59.96 s "1 min 00 s", not "60.0 s")."""
    if _absent(x):
        return NA
    if x < 0.9995:
        return f"{x * 1000:.0f} ms"
    if x < 59.95:
        return f"{x:.1f} s"
    if x < 3600:
        whole = max(60, int(x))        # whole seconds, as a count up shows them
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{int(x // 3600)} h {int(x % 3600 // 60):02d} min"


def elapsed(x: float | None) -> str:
    """A time that counts up as it is watched (a model's load): whole seconds, then minutes and seconds ('42 s',
    '3 min 05 s'), so the figure moves once a second, not at every redraw."""
    if _absent(x):
        return NA
    return f"{int(max(0.0, x))} s" if x < 60 else seconds(x)


def ms(x: float | None) -> str:
    """A duration given in ms (a request's TTFT): "4.2 ms", "185 ms", then as `seconds` says it from 1 s ("12.3 s",
    "1 min 30 s"): a long prompt's read `90933 ms` beside `2.4 s ago`."""
    if _absent(x):
        return NA
    return f"{x:.1f} ms" if x < 10 else seconds(x / 1000)


def ago(x: float | None) -> str:
    return NA if _absent(x) else f"{seconds(max(0.0, x))} ago"


def score(x: float | None) -> str:
    """A unitless score (the slot policy's value of a history: ~0.002 for 500 tokens, ~1 for 50K): three
    significant digits, so the small values a short history has are told apart instead of all reading
    0.0000; an exact zero is "0"."""
    if _absent(x):
        return NA
    if x == 0:
        return "0"
    return f"{x:.3g}" if abs(x) >= 1e-4 else f"{x:.2e}"


def share(x: float | None) -> str:
    """A share (0..1) in whole percent, but never "100 %" for less than all nor "0 %" for more than none: there one
    decimal, rounded towards the middle ("99.8 %", "0.1 %"), and never onto the whole percent it is short of or
    past: 0.1 to 0.9 % below 1 % (0.96 % read "1.0 %"), 99.0 to 99.9 % above 99 % (99.96 %: "99.9 %"). A new-user
    trial read "reused 100 %" in the header for 5,535 of 5,553 prompt tokens, and "646 (100 %)" for 646 of 647,
    where one token a request was read."""
    if _absent(x):
        return NA
    p = 100.0 * x
    tenths = round(p * 10, 6)   # 7 of 1,000 is 7.000000000000001 tenths: its ceiling read "0.8 %"
    if 0 < p < 1:
        return f"{min(max(math.ceil(tenths), 1), 9) / 10:.1f} %"
    if 99 < p < 100:
        return f"{min(math.floor(tenths), 999) / 10:.1f} %"
    return f"{p:.0f} %"


def phrase(text: str) -> str:
    """`text` kept on one line where a label wraps: its spaces made no-break spaces. For a count and what it counts
    ("reused 74 %", "disk 0"): a new-user trial's 640-px window read "reused 74" with "%" on the next line, and "disk"
    with its "0" below. Lines still break between phrases (after ", " or around a bullet)."""
    return text.replace(" ", NBSP)


def percent(part: float | None, whole: float | None) -> str:
    if _absent(part) or _absent(whole) or not whole:
        return NA
    return share(part / whole)
