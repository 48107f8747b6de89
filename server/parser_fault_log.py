"""One WARNING line for a request whose HTTP aiohttp's parser refuses, instead of aiohttp's ERROR traceback.

aiohttp answers such a request itself (a plain-text 400: a bad request line or header, a chunked body's
framing broken in the packet of its headers; docs/api.md, "Malformed requests")
and logs it on `aiohttp.server` at ERROR with the traceback of its own parser, which reads as a crash of
the server in a user's terminal. It is the client's fault, answered, and the server goes on: a warning
naming the fault says so. Any other error aiohttp logs is left as it is.
"""

from __future__ import annotations

import ast
import logging
import re

from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.web_protocol import RequestPayloadError

_STATUS_PREFIX = re.compile(r"^\d{3}, message: ")   # how aiohttp's str() of its HTTP errors begins


# aiohttp's complaint quotes the line it refused as a bytes literal (b'...' or bytearray(b'...'))
_QUOTED = re.compile(r"""(?:bytearray\()?b(?:'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")\)?""")
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):")
_REQUEST_LINE = re.compile(rb"/|[A-Z]+ /")                  # a request's target, or its whole first line
_NOT_A_HEADER = ("Invalid method", "Bad status line", "Invalid character in chunk")   # complaints quoting no header
SECRET_HEADERS = frozenset({b"authorization", b"proxy-authorization", b"x-api-key", b"api-key", b"cookie"})


def without_secrets(message: str) -> str:
    """aiohttp's complaint with no key in it: a quoted request line or chunk stays, a quoted header line keeps its
    name and, but for the headers that carry a key, its value; a value alone (an overlong or folded line, whose
    header cannot be told) is not shown. The refused line may be the API key's, and the log is kept."""
    def shown(m: re.Match) -> str:
        text = m.group(0)
        try:
            raw = ast.literal_eval(text[len("bytearray("):-1] if text.startswith("bytearray(") else text)
        except (ValueError, SyntaxError):
            raw = b""
        header = _HEADER_LINE.match(raw)
        if header:
            name = header.group(1)
            return text if name.lower() not in SECRET_HEADERS else f"<{name.decode('ascii')}: its value, not shown>"
        if _REQUEST_LINE.match(raw) or message.startswith(_NOT_A_HEADER):
            return text
        return "<a header's value, not shown>"

    said = _QUOTED.sub(shown, message)
    if said != message:   # the caret under the quoted line points into what is no longer there
        said = "\n".join(ln for ln in said.splitlines() if set(ln.strip()) != {"^"})
    return said


def client_fault(exc: BaseException | None) -> str:
    """The parser's complaint when `exc` is a fault of the client's request, on one line, no header's value in it
    (without_secrets), else ""."""
    if isinstance(exc, BadHttpMessage):
        return " ".join(without_secrets(str(exc.message)).split())
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
