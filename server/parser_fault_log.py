"""One WARNING line for a request whose HTTP aiohttp's parser refuses, instead of aiohttp's ERROR traceback.

aiohttp answers such a request itself (a plain-text 400: a bad request line or header, a chunked body's
framing broken in the packet of its headers; docs/api.md, "Malformed requests")
and logs it on `aiohttp.server` at ERROR with the traceback of its own parser, which reads as a crash of
the server in a user's terminal. It is the client's fault, answered, and the server goes on: a warning
naming the fault says so. Any other error aiohttp logs is left as it is.
"""

from __future__ import annotations

import logging
import re

from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.web_protocol import RequestPayloadError

_STATUS_PREFIX = re.compile(r"^\d{3}, message: ")   # how aiohttp's str() of its HTTP errors begins


def client_fault(exc: BaseException | None) -> str:
    """The parser's complaint when `exc` is a fault of the client's request, on one line, else ""."""
    if isinstance(exc, BadHttpMessage):
        return " ".join(str(exc.message).split())
    if isinstance(exc, RequestPayloadError):      # the body's encoding failed while aiohttp read it
        return client_fault(exc.__cause__) or _STATUS_PREFIX.sub("", " ".join(str(exc).split()))
    return ""


class ParserFaultsAsWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        fault = client_fault(record.exc_info[1] if record.exc_info else None)
        if fault:
            record.msg = "a malformed request was refused (400 or 415) and its connection closed: %s"
            record.args = (fault,)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


def install() -> None:
    """Adds the filter to aiohttp's server logger, once per process."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, ParserFaultsAsWarnings) for f in logger.filters):
        logger.addFilter(ParserFaultsAsWarnings())
