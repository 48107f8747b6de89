"""A server an earlier app left behind, still in its stop: the note that app leaves in its log folder as it ends
past NO_LOOP_STOP_WAIT_S, and a look at the process holding a folder the next start was refused for.

Why: that server goes on with its stop on its own (writing its conversations for the next start) and holds its
model's conversation folders until it ends; the next app's server was refused for them and not retried. Its output
is a pipe nobody reads any more, so what its stop last said is what the earlier app saw of it: the note keeps that.
Mechanism only (files, psutil); whether to wait is restart_policy.wait_for_holder's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
from strata.app.restart_policy import FolderHolder, HolderLook

NOTE = "left-behind.json"    # in the app's log folder, beside app.log and server.log


def _created(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def write_note(log_dir: Path, pid: int, detail: str) -> None:
    """Noted as the app ends without its server's stop having ended: its pid (with its start time: a pid is reused)
    and what its stop last said, `detail` being the app's state then: only the server's own words of its stop
    ("stopping: keeping 3 conversations ..."), not the app's ("stopping the server (it writes ...)", "pid 123"),
    which read as nonsense after "finish saving". Best effort: the app is ending, and a note not written only loses
    those words."""
    from strata.app.supervisor import STOP_PROGRESS  # here: the supervisor imports this module

    said = detail.removeprefix(STOP_PROGRESS) if detail.startswith(STOP_PROGRESS) else ""
    text = json.dumps({"pid": pid, "created": _created(pid), "said": said, "at": time.time()})
    try:
        (Path(log_dir) / NOTE).write_text(text, encoding="utf-8")
    except OSError:
        pass


def noted(log_dir: Path, pid: int, created: float | None) -> str:
    """What the note says the stop of `pid` (started at `created`) last said, when the note is that very process's
    (its pid and start time: another process under a reused pid is not it); else ""."""
    try:
        d = json.loads((Path(log_dir) / NOTE).read_text(encoding="utf-8"))
        same = int(d["pid"]) == pid and d["created"] is not None and d["created"] == created
        return str(d["said"]) if same else ""
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def look_at_holder(holder: FolderHolder, log_dir: Path, created_then: float | None = None) -> HolderLook:
    """The process holding a folder, as the refusal named it: alive while it is that very process (not a zombie, its
    start time the first look's, `created_then`: a pid the holder left is reused), and what the earlier app noted
    of its stop. Whether it is stopping is its lock file's word (holder.stopping), not guessed from here: a closed
    port is also a server that has just claimed its folders and does not listen yet."""
    try:
        proc = psutil.Process(holder.pid)
        created = proc.create_time()
        alive = proc.status() != psutil.STATUS_ZOMBIE and created_then in (None, created)
    except (psutil.Error, OSError):
        return HolderLook(holder.pid, False, holder.stopping)
    said = noted(log_dir, holder.pid, created) if alive else ""
    return HolderLook(holder.pid, alive, holder.stopping, said, created)
