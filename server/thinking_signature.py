"""A thinking block's `signature` when its text is omitted (Anthropic's `display: "omitted"`): the reasoning
itself, marked and base64-encoded. Anthropic's signature carries omitted thinking across turns; so does
this one: when the block comes back in a later request (its `thinking` empty, as clients send it back), the
template is given the reasoning the model wrote, the prompt matches the history the slot holds, and the
turn is not read again. Opaque to the client; a signature Strata did not write (Anthropic's, a damaged
one) reads as nothing.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

SEAL = "strata-thinking-v1:"


def seal(reasoning: str) -> str:
    return SEAL + base64.urlsafe_b64encode(reasoning.encode("utf-8")).decode("ascii")


def unseal(signature: Any) -> str | None:
    """The reasoning in a signature seal() wrote; None for any other."""
    if not isinstance(signature, str) or not signature.startswith(SEAL):
        return None
    try:
        return base64.urlsafe_b64decode(signature[len(SEAL):].encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        return None
