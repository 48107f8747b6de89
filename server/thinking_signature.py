"""A thinking block's `signature` when its text is omitted (Anthropic's `display: "omitted"`): the reasoning
itself, with a checksum, base64-encoded. Anthropic's signature carries omitted thinking across turns; so does
this one: when the block comes back in a later request (its `thinking` empty, as clients send it back), the
template is given the reasoning the model wrote, the prompt matches the history the slot holds, and the
turn is not read again. Opaque to the client; a signature Strata did not write (Anthropic's) or one damaged
on the way (a character changed, cut short: its checksum no longer matches) reads as nothing, never as
other text. Not a secret: a client that writes its own signature only puts its own text in its own prompt,
as it could with `thinking`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

SEAL = "strata-thinking-v2:"
CHECK = 16          # bytes of blake2b over the reasoning, before it


def _check(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=CHECK).digest()


def seal(reasoning: str) -> str:
    data = reasoning.encode("utf-8")
    return SEAL + base64.urlsafe_b64encode(_check(data) + data).decode("ascii")


def unseal(signature: Any) -> str | None:
    """The reasoning in a signature seal() wrote; None for any other, damaged ones included."""
    if not isinstance(signature, str) or not signature.startswith(SEAL):
        return None
    try:
        raw = base64.b64decode(signature[len(SEAL):].encode("ascii"), altchars=b"-_", validate=True)
    except (binascii.Error, UnicodeError, ValueError):
        return None
    check, data = raw[:CHECK], raw[CHECK:]
    if len(check) < CHECK or not hmac.compare_digest(check, _check(data)):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeError:
        return None
