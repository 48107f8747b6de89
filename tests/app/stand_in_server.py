"""A stand-in for `strata serve` as a child script: a real HTTP server on a free port that says where it listens
as the real one does and ends at the end of its input, for the app's supervisor tests. Each test gives only what
differs: what its GET answers, lines before the handler, what it does after its input ends."""

from __future__ import annotations

import textwrap


def stand_in_server(answer: str, *, head: str = "", says: str = "", tail: str = "") -> str:
    """The script. `answer`: the body of do_GET, leaving `status` and `body` (bytes) set; `head`: lines run first
    (after the imports: http.server, json, os, signal, sys, threading, time); `says`: words after the listening
    address; `tail`: lines run once the input has ended (the real server's stop)."""
    return (
        "import http.server, json, os, signal, sys, threading, time\n"
        + textwrap.dedent(head).strip("\n") + "\n"
        + "class H(http.server.BaseHTTPRequestHandler):\n"
        + "    def do_GET(self):\n"
        + textwrap.indent(textwrap.dedent(answer).strip("\n"), " " * 8) + "\n"
        + "        self.send_response(status)\n"
        + "        self.send_header(\"Content-Length\", str(len(body)))\n"
        + "        self.end_headers()\n"
        + "        self.wfile.write(body)\n"
        + "    def log_message(self, *a):\n"
        + "        pass\n"
        + "server = http.server.ThreadingHTTPServer((\"127.0.0.1\", 0), H)\n"
        + f"print(f\"listening on http://127.0.0.1:{{server.server_address[1]}}{says}\", flush=True)\n"
        + "threading.Thread(target=server.serve_forever, daemon=True).start()\n"
        + "sys.stdin.read()\n"
        + textwrap.dedent(tail).strip("\n") + "\n"
    )
