"""A number of tokens as every `strata` command reads it: a whole number, or one ending in k or m (x 1024,
x 1024 * 1024), `--ctx 32k` as models' contexts and setup's wizard say it. One parser so that `strata chat
--ctx 32k` reads what `strata serve --ctx 32k` does; each command keeps its own bounds."""

from __future__ import annotations

import argparse
from typing import Any

WANTED = "a number of tokens (8192, 32k, 1m)"
METAVAR = "TOKENS"   # marks a token-count flag: strata.cli's parser says what it takes when its value is missing
TAKES = "a token count is a positive whole number (8192, or 32k = 32768, 1m)"


def token_count(raw: Any) -> int:
    """int(raw), where a text may end in k or m; ValueError where it is no whole number."""
    if isinstance(raw, str):
        text = raw.strip().lower().replace("_", "")
        scale = {"k": 1024, "m": 1024 * 1024}.get(text[-1:], 1)
        return int(text[:-1] if scale > 1 else text) * scale
    return int(raw)


def token_count_arg(text: str) -> int:
    """An argparse `type` for a token-count flag: its error names what the flag takes."""
    try:
        return token_count(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {WANTED}, got {text!r}") from None
