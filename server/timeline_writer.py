"""Writes the replay timeline of real traffic for `strata replay` (`--timeline-out PATH`): one JSON line per
finished request in the policy teammate's Strata format (server/replay/timeline.py):

    {"conversation": "a1", "time": 12.5, "prompt_tokens": 40000, "shared_tokens": 38000, "output_tokens": 500}

Ids, times and token counts only: never text or token ids. `shared_tokens` is measured when a request
arrives (`arrived`, from the scheduler's submit), against the same conversation's previous arrival (the
turn `strata replay` makes its parent): that turn's prompt followed by its output when it has finished, its
prompt alone while it still runs (nothing more of it exists to reuse). Measured at the finish instead, a
side request finishing before an earlier one in its conversation took a share of a LATER request's
history. Histories are kept for the most recent conversations only. Lines are written at the finish
(`record`, from the worker thread), so not in time order: the reader sorts them.
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
        # per conversation, the latest arrival's history (its prompt, then its output once it finished)
        self._last: collections.OrderedDict[str, array] = collections.OrderedDict()
        self._arrivals: dict[Any, tuple[array, int]] = {}   # job id -> (its history, its shared_tokens)
        self._lock = threading.Lock()

    @staticmethod
    def _key(job: Any) -> str:
        return job.conversation or f"r{job.id}"

    def arrived(self, job: Any) -> None:
        with self._lock:
            self._arrive(job)

    def _arrive(self, job: Any) -> None:   # with the lock held
        key, prompt = self._key(job), array("i", job.prompt)
        prev = self._last.pop(key, None)
        shared = common_prefix(prev, prompt) if prev else 0   # type: ignore[arg-type]
        self._last[key] = prompt
        while len(self._last) > KEEP_CONVERSATIONS:
            self._last.popitem(last=False)
        self._arrivals[job.id] = (prompt, shared)

    def record(self, job: Any, reused: int, n_output: int, output_tokens: list[int] | None = None) -> None:
        with self._lock:
            if job.id not in self._arrivals:   # a job the writer did not see arrive: measured now
                self._arrive(job)
            history, shared = self._arrivals.pop(job.id)
            history.extend(output_tokens or [])   # the next arrival of its conversation continues it
            line = {"conversation": self._key(job), "time": round(job.submitted - self._t0, 3),
                    "prompt_tokens": len(job.prompt), "shared_tokens": shared, "output_tokens": n_output}
            self._fh.write(json.dumps(line) + "\n")
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            self._fh.close()
