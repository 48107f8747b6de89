"""The agent soak's record log (benchmarks/soak_agents.py): one JSON line a record, written as it happens, kept in
memory for the summary (benchmarks/soak_summary.py), and how a session call's answer is recorded."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx2 as httpx


class Log:
    def __init__(self, path: Path) -> None:
        self.f = open(path, "a")
        self.lock = threading.Lock()
        self.records: list[dict] = []

    def write(self, rec: dict) -> None:
        rec = {"t": round(time.time(), 2), **rec}
        with self.lock:
            self.records.append(rec)
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()


def failure(r: httpx.Response, prefix: str = "") -> dict:
    """A session call's answer for the log: its status and, when it failed, the message of its error body (why a
    restore was a 503: session 31's soak logged one with no reason), the text itself when that is not JSON.
    `prefix` names the fields for a record holding several calls' (`restore_`: restore_status, restore_message)."""
    out: dict = {f"{prefix}status": r.status_code}
    if r.status_code != 200:
        try:
            err = r.json().get("error")
            message = err.get("message") if isinstance(err, dict) else err
        except (ValueError, AttributeError):
            message = None
        out[f"{prefix}message"] = (message if isinstance(message, str) else r.text)[:500]
    return out
