"""Writes the replay timeline of real traffic for `strata replay` (`--timeline-out PATH`): one JSON line per
finished request in the policy teammate's Strata format (server/replay/timeline.py):

    {"conversation": "a1", "time": 12.5, "prompt_tokens": 40000, "shared_tokens": 38000, "output_tokens": 500}

Ids, times and token counts only: never text or token ids. `shared_tokens` is measured against the
same conversation's previous turn (its prompt followed by its output), kept for the most recent
conversations only. Called from the scheduler's worker thread.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from array import array
from typing import Any

from strata.server.slots import common_prefix

KEEP_CONVERSATIONS = 64   # histories kept to measure shared_tokens: at most 64 x 4 bytes x their length


class TimelineWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")
        self._t0 = time.monotonic()
        self._last: collections.OrderedDict[str, array] = collections.OrderedDict()
        self._lock = threading.Lock()

    def record(self, job: Any, reused: int, n_output: int, output_tokens: list[int] | None = None) -> None:
        key = job.conversation or f"r{job.id}"
        prompt = array("i", job.prompt)
        prev = self._last.pop(key, None)
        shared = common_prefix(prev, prompt) if prev else 0   # type: ignore[arg-type]
        prompt.extend(output_tokens or [])
        self._last[key] = prompt
        while len(self._last) > KEEP_CONVERSATIONS:
            self._last.popitem(last=False)
        line = {"conversation": key, "time": round(job.submitted - self._t0, 3),
                "prompt_tokens": len(job.prompt), "shared_tokens": shared, "output_tokens": n_output}
        with self._lock:
            self._fh.write(json.dumps(line) + "\n")
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()
