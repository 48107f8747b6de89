"""The memory this process may still take under its cgroup's limit (Docker, Podman, systemd slices, Flatpak, WSL):
there the host's MemAvailable counts RAM the process can never have.

What this is: `CgroupMemory`, located once (which of this process's cgroup folders, itself and its ancestors,
carry a memory limit, and what that limit is), then asked per check: the least over those folders of
limit - usage + reclaimable (inactive file cache, which the kernel drops before it kills), two small files per
limited folder, read through descriptors opened once. cgroup v2 (memory.max, memory.high, memory.current, memory.stat's inactive_file) and v1
(memory.limit_in_bytes, memory.usage_in_bytes, memory.stat's total_inactive_file). "max", a huge figure
(v1's no-limit is 2**63 rounded to a page) or a file that cannot be read is "no limit known", never an error.
The roots are arguments, so tests lay out a folder as /sys/fs/cgroup and /proc/self/cgroup are.
What this is not: the admission rule (policy.py) or the host's figure (memory.py takes the least of both).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PROC_SELF_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
NO_LIMIT_FROM = 1 << 60    # v1 writes "no limit" as 9223372036854771712; no real limit is near 1 EiB


@dataclass(frozen=True)
class LimitedGroup:
    """One cgroup folder with a memory limit, and the files a check reads there."""

    folder: str
    version: int
    limit_bytes: int
    usage_file: str
    stat_file: str
    reclaimable_field: bytes   # the memory.stat line counted as reclaimable


def cgroup_paths(text: str) -> tuple[str | None, str | None]:
    """(the v2 path, the v1 memory controller's path) from /proc/self/cgroup's text; None where absent."""
    v2 = v1 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v2, v1


def limit_of(text: str) -> int | None:
    """A limit file's figure in bytes; None for "max", a no-limit figure or text that is no number."""
    value = text.strip()
    if not value.isdigit():
        return None
    n = int(value)
    return n if n < NO_LIMIT_FROM else None


def field_of(stat_text: bytes, field: bytes) -> int:
    """A memory.stat line's figure (0 where the line is missing or odd: nothing counted as reclaimable)."""
    key = field + b" "
    if stat_text.startswith(key):
        at = 0
    else:
        at = stat_text.find(b"\n" + key)
        if at < 0:
            return 0
        at += 1
    end = stat_text.find(b"\n", at)
    value = stat_text[at + len(field) + 1: end if end >= 0 else len(stat_text)].strip()
    return int(value) if value.isdigit() else 0


def headroom_bytes(group: LimitedGroup, usage_text: bytes, stat_text: bytes) -> int | None:
    """limit - usage + reclaimable, at least 0; None when the usage is no number."""
    usage = usage_text.strip()
    if not usage.isdigit():
        return None
    return max(0, group.limit_bytes - int(usage) + field_of(stat_text, group.reclaimable_field))


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:   # as os.fsdecode reads a name
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _own_folder(mount: str, path: str) -> str:
    """The folder of `path` under `mount`. Without a cgroup namespace a container sees its host-side path in
    /proc/self/cgroup while its mount shows only its own group: then the longest tail of the path that exists,
    else the mount itself."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    for start in range(len(parts) + 1):
        folder = os.path.join(mount, *parts[start:])
        if os.path.isdir(folder):
            return folder
    return mount


def _folders_up(mount: str, folder: str) -> list[str]:
    """`folder` and each ancestor up to `mount`, nearest first."""
    out = [folder]
    mount = os.path.normpath(mount)
    while os.path.normpath(folder) != mount:
        parent = os.path.dirname(os.path.normpath(folder))
        if parent == folder or not parent.startswith(mount):
            break
        folder = parent
        out.append(folder)
    return out


def _v2_groups(mount: str, path: str) -> list[LimitedGroup]:
    groups = []
    for folder in _folders_up(mount, _own_folder(mount, path)):
        limits = [limit_of(t) for name in ("memory.max", "memory.high")
                  if (t := _read_text(os.path.join(folder, name))) is not None]
        limits = [n for n in limits if n is not None]
        if limits:
            groups.append(LimitedGroup(folder, 2, min(limits), os.path.join(folder, "memory.current"),
                                       os.path.join(folder, "memory.stat"), b"inactive_file"))
    return groups


def _v1_groups(mount: str, path: str) -> list[LimitedGroup]:
    groups = []
    for folder in _folders_up(mount, _own_folder(mount, path)):
        text = _read_text(os.path.join(folder, "memory.limit_in_bytes"))
        limit = limit_of(text) if text is not None else None
        if limit is not None:
            groups.append(LimitedGroup(folder, 1, limit, os.path.join(folder, "memory.usage_in_bytes"),
                                       os.path.join(folder, "memory.stat"), b"total_inactive_file"))
    return groups


def locate(proc_self_cgroup: str = PROC_SELF_CGROUP, root: str = CGROUP_ROOT) -> list[LimitedGroup]:
    """This process's limited cgroup folders (none where it has no limit, or none can be read). v2 where the
    memory controller is there (root or root/unified), v1's root/memory where it is not."""
    text = _read_text(proc_self_cgroup)
    if text is None:
        return []
    v2, v1 = cgroup_paths(text)
    if v2 is not None:
        for mount in (root, os.path.join(root, "unified")):
            controllers = _read_text(os.path.join(mount, "cgroup.controllers"))
            if controllers is not None and "memory" in controllers.split():
                return _v2_groups(mount, v2)
    if v1 is not None and os.path.isdir(os.path.join(root, "memory")):
        return _v1_groups(os.path.join(root, "memory"), v1)
    return []


STAT_READ_BYTES = 1 << 16   # memory.stat is ~1-2 KB (v2 has ~40 lines); one read takes it whole


class CgroupMemory:
    """Located once (start-up), its files opened once; each `available_bytes()` is one pread of each of two
    small files per limited folder (~13 us for both here against ~42 us opening them each time: cgroup files are
    made anew on every read from offset 0, so a held descriptor reads current figures)."""

    def __init__(self, proc_self_cgroup: str = PROC_SELF_CGROUP, root: str = CGROUP_ROOT) -> None:
        self.groups: list[LimitedGroup] = []
        self._fds: list[tuple[LimitedGroup, int, int]] = []
        for g in locate(proc_self_cgroup, root):
            try:
                usage = os.open(g.usage_file, os.O_RDONLY)
            except OSError:
                continue
            try:
                stat = os.open(g.stat_file, os.O_RDONLY)
            except OSError:
                os.close(usage)
                continue
            self.groups.append(g)
            self._fds.append((g, usage, stat))

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for _, usage, stat in fds:
            os.close(usage)
            os.close(stat)

    def __del__(self) -> None:
        self.close()

    def tightest(self) -> LimitedGroup | None:
        """The folder with the least limit (what the start-up line names), None without one."""
        return min(self.groups, key=lambda g: g.limit_bytes, default=None)

    def limit_bytes(self) -> int | None:
        g = self.tightest()
        return g.limit_bytes if g is not None else None

    def available_bytes(self) -> int | None:
        """The least headroom over the limited folders; None when no limit is known (or none could be read)."""
        best = None
        for g, usage_fd, stat_fd in self._fds:
            try:
                usage = os.pread(usage_fd, 64, 0)
                stat = os.pread(stat_fd, STAT_READ_BYTES, 0)
            except OSError:   # the group was removed (ENODEV), or a file is no file
                continue
            room = headroom_bytes(g, usage, stat)
            if room is not None and (best is None or room < best):
                best = room
        return best


def within_limit(total_bytes: int, available_bytes: int, cgroup: CgroupMemory | None = None) -> tuple[int, int, int]:
    """(total, available, limit) as this process may use them: the host's figures lowered to its cgroup memory limit
    and what the limit leaves (limit 0 without one, or when its figures cannot be read). The start-up memory check
    and `strata setup`'s machine profile read these, as cache admission does."""
    cgroup = cgroup if cgroup is not None else CgroupMemory()
    room = cgroup.available_bytes()
    limit = cgroup.limit_bytes() if room is not None else None
    if room is None or limit is None:
        return total_bytes, available_bytes, 0
    return min(total_bytes, limit), min(available_bytes, room), limit
