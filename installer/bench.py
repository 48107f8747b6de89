"""The installer's machine bench: the model's speeds here, RAM, and the cold folder's disk speeds.

Mechanism: runs the engine's bench (`strata bench --json --stages`, in a process of its own that a skip kills,
its stages passed on as they begin) for prefill/decode tokens/s and load time, reads RAM with psutil, and times real file I/O in the folder proposed for the cold
level (write with fsync, then read back). Progress goes to a callback `(stage, fraction, message)`;
a `threading.Event` skips what is left. It decides nothing: the plan (`plan.py`) uses the numbers.

Page cache caveat: without root the cache cannot be dropped and O_DIRECT is not portable. After the
fsync the file's pages are clean, and on Linux `posix_fadvise(DONTNEED)` then evicts them, so the
read-back comes from the disk; where that call does not exist (Windows, macOS) the read speed may be
the cache's, and the report says so (`read_uncached=False`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
from strata.engine.bench import STAGE_PREFIX, stage_count
from strata.installer.plan_types import MIB, BenchFacts, DiskFacts
from strata.installer.profile import disk_facts

from strata import folders
from strata.child_lifetime import popen_tied

Progress = Callable[[str, float, str], None]
CHUNK_MIB = 8


def _quiet(stage: str, fraction: float, message: str) -> None:
    pass


@dataclass(frozen=True)
class DiskSpeed:
    write_mib_s: float
    read_mib_s: float
    size_mib: int
    read_uncached: bool  # True when the pages were evicted before the read-back


@dataclass(frozen=True)
class BenchReport:
    bench: BenchFacts | None  # None: the engine's bench was skipped or is not available
    disk: DiskFacts  # the cold folder with its speeds when measured
    ram_total_mib: int
    ram_available_mib: int
    notes: tuple[str, ...] = ()


class BenchSkipped(Exception):
    """Raised inside a measurement when the skip event is set."""


def disk_speed(folder: str | Path, size_mib: int = 256, progress: Progress = _quiet,
               skip: threading.Event | None = None) -> DiskSpeed:
    """Write `size_mib` MiB to a temporary file in `folder` (fsync), evict it, read it back; then delete it."""
    if size_mib < CHUNK_MIB:
        raise ValueError(f"disk bench size_mib must be >= {CHUNK_MIB}, got {size_mib}")
    folder = Path(folder).expanduser()
    folder.mkdir(folders.PRIVATE_FOLDER_MODE, parents=True, exist_ok=True)   # the cold folder: conversations go there
    remove_abandoned_bench_files(folder)
    path = folder / f"{BENCH_PREFIX}{uuid.uuid4().hex}.tmp"
    block = os.urandom(CHUNK_MIB * MIB)  # incompressible, so a compressing filesystem is not flattered
    n_chunks = size_mib // CHUNK_MIB
    try:
        t0 = time.perf_counter()
        with open(path, "wb", buffering=0) as f:
            for i in range(n_chunks):
                _check(skip)
                f.write(block)
                progress("disk", 0.5 * (i + 1) / n_chunks, f"writing {(i + 1) * CHUNK_MIB} of {size_mib} MiB")
            os.fsync(f.fileno())
        write_s = time.perf_counter() - t0
        uncached = _evict(path)
        t0 = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            for i in range(n_chunks):
                _check(skip)
                if len(f.read(CHUNK_MIB * MIB)) != CHUNK_MIB * MIB:
                    raise OSError(f"{path}: short read during the disk bench")
                progress("disk", 0.5 + 0.5 * (i + 1) / n_chunks, f"reading {(i + 1) * CHUNK_MIB} of {size_mib} MiB")
        read_s = time.perf_counter() - t0
    finally:
        path.unlink(missing_ok=True)
    total = n_chunks * CHUNK_MIB
    return DiskSpeed(total / max(write_s, 1e-9), total / max(read_s, 1e-9), total, uncached)


BENCH_PREFIX = ".strata-bench-"
ABANDONED_AFTER_S = 3600.0   # no bench writes one file this long (16 GiB at 5 MiB/s is under an hour)


def remove_abandoned_bench_files(folder: Path, now: float | None = None) -> list[str]:
    """Remove the disk bench's files a setup left when it was killed mid-bench (the `finally` never ran: the
    app's wizard closed hard, a power cut): hidden, up to --disk-bench-mib each, in the folder conversations
    go to, for good. Only one untouched for an hour: a setup running now is still writing its own. Returns
    the names removed."""
    now = time.time() if now is None else now
    removed = []
    for path in folder.glob(f"{BENCH_PREFIX}*.tmp"):
        try:
            if path.is_file() and now - path.stat().st_mtime > ABANDONED_AFTER_S:
                path.unlink()
                removed.append(path.name)
        except OSError:    # gone since the listing, or not ours to remove: the bench goes on
            continue
    return removed


def _evict(path: Path) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _check(skip: threading.Event | None) -> None:
    if skip is not None and skip.is_set():
        raise BenchSkipped()


ENGINE_POLL_S = 0.1   # how soon a skip ends the engine's bench (its process is killed)


CONSOLE_NAME = "strata"   # the packaged app's console executable (resources/packaging/strata.spec's CLI_NAME)


def bench_command(model_path: str, threads: int, quick: bool = True, frozen: bool | None = None,
                  executable: str | None = None) -> list[str]:
    """`strata bench --json --stages` for `model_path` in a process of its own: `python -m strata`, or in the
    packaged app (PyInstaller: frozen) the executable running: its console `strata` runs the command itself
    (`strata setup` typed in a terminal: it refused `--strata-cli`, and the bench failed), the windowed
    `strata-app` with `--strata-cli` (its wizard, as its supervisor runs `strata serve`)."""
    frozen = bool(getattr(sys, "frozen", False)) if frozen is None else frozen
    executable = sys.executable if executable is None else executable
    args = (["bench", "--json", "--stages", "--model", str(model_path), "--threads", str(threads)]
            + (["--quick"] if quick else []))
    if not frozen:
        return [executable, "-m", "strata", *args]
    if Path(executable).stem == CONSOLE_NAME:
        return [executable, *args]
    return [executable, "--strata-cli", *args]


def _read_stages(stream, kept: list[str], progress: Progress, n_stages: int) -> None:
    """The bench's standard error to its end: each stage line to `progress` as it comes (the k-th at k / n_stages
    of the engine's part), any other line kept (its refusal)."""
    k = 0
    for line in stream:
        said = line.rstrip()
        if said.startswith(STAGE_PREFIX) and said.endswith("..."):
            progress("engine", k / n_stages, said[len(STAGE_PREFIX):-3])
            k += 1
        else:
            kept.append(line)


def _read_all(stream, kept: list[str]) -> None:
    kept.append(stream.read())


def ended_by_signal(signum: int) -> str:
    """How a bench process a signal ended is said: SIGKILL is most often the system's out-of-memory killer."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if signum == getattr(signal, "SIGKILL", None):
        return f"the bench process was killed ({name}): the system may have run out of memory"
    return f"the bench process ended on {name}"


def engine_speed(model_path: str, threads: int, progress: Progress = _quiet,
                 skip: threading.Event | None = None, quick: bool = True) -> BenchFacts:
    """The engine's bench of `model_path` (quick: the short one). It runs in a process of its own so that a
    skip (the wizard's Skip, Back or Cancel) ends it at once: the engine's calls cannot be cut short in this
    process, and a big model held the window for up to two minutes. Raises BenchSkipped when skipped,
    RuntimeError with the bench's own message when it fails."""
    progress("engine", 0.0, f"loading {Path(model_path).name} and measuring prefill and decode")
    # it ends with this process even when this one is killed (strata/child_lifetime.py): on Linux its "parent"
    # is this thread, which waits for it below
    proc, _ = popen_tied(bench_command(model_path, threads, quick), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace")
    n_stages = stage_count(quick)
    outs: list[str] = []
    errs: list[str] = []
    readers = [threading.Thread(target=_read_all, args=(proc.stdout, outs), daemon=True),
               threading.Thread(target=_read_stages, args=(proc.stderr, errs, progress, n_stages), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        while True:
            try:
                proc.wait(ENGINE_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if skip is not None and skip.is_set():
                    raise BenchSkipped() from None
    finally:
        if proc.poll() is None:   # skipped, or this thread interrupted: the bench's process ends with it
            proc.kill()
            proc.wait()
        for reader in readers:    # at the pipes' end: no stage is told after this returns
            reader.join()
        proc.stdout.close()
        proc.stderr.close()
    out, err = "".join(outs), "".join(errs)
    if proc.returncode < 0:   # POSIX: a signal ended it; what it wrote, if anything, is a crash's frames
        raise RuntimeError(ended_by_signal(-proc.returncode))
    if proc.returncode != 0:
        said = err.strip()
        if said.startswith("strata bench: "):   # its own refusal, with advice on the lines after
            raise RuntimeError(" ".join(said.removeprefix("strata bench: ").split()))
        raise RuntimeError(said.splitlines()[-1] if said else f"exited with status {proc.returncode}")
    try:
        result = json.loads(out.strip().splitlines()[-1])   # its one line of JSON, last
    except (IndexError, ValueError):
        raise RuntimeError(f"no result from `strata bench` (its output: {out.strip()[-200:]!r})") from None
    progress("engine", 1.0, "engine bench done")

    def number(*keys: str) -> float | None:
        for key in keys:
            value = result.get(key)
            if isinstance(value, (int, float)) and value > 0:
                return float(value)
        return None

    return BenchFacts(prefill_tps=number("prefill_tps", "prefill_tok_s", "pp_tps"),
                      decode_tps=number("decode_tps", "decode_tok_s", "tg_tps"),
                      load_s=number("load_s", "load_seconds", "load_ms") if "load_ms" not in result
                      else result["load_ms"] / 1000.0)


def run_machine_bench(model_path: str | None, cold_folder: str | Path, threads: int,
                      progress: Progress = _quiet, skip: threading.Event | None = None,
                      engine: bool = True, disk_mib: int = 256, quick: bool = True) -> BenchReport:
    """Everything the plan can use; a skipped or failed part is left out and said in `notes`."""
    notes: list[str] = []
    facts: BenchFacts | None = None
    if engine and model_path and not (skip and skip.is_set()):
        try:
            facts = engine_speed(model_path, threads, progress, skip, quick)
        except BenchSkipped:
            pass   # said below with the rest of the skip
        except Exception as e:  # a model the engine refuses: report, plan without speeds
            notes.append(f"the engine's bench failed: {e}")
    disk = disk_facts(cold_folder)
    if skip is None or not skip.is_set():
        try:
            speed = disk_speed(cold_folder, disk_mib, progress, skip)
            disk = replace(disk, write_mib_s=round(speed.write_mib_s, 1), read_mib_s=round(speed.read_mib_s, 1))
            if not speed.read_uncached:
                notes.append("the read speed may be the page cache's (no posix_fadvise here)")
        except BenchSkipped:
            notes.append("disk bench skipped")
        except OSError as e:
            notes.append(f"cannot measure {cold_folder}: {e.strerror or e}")
    if skip is not None and skip.is_set():
        notes.append("bench skipped: the plan uses the defaults that need no measurement")
    from strata.server.cache.cgroup_memory import within_limit

    vm = psutil.virtual_memory()
    total, available, _ = within_limit(int(vm.total), int(vm.available))   # a container's, where it has a limit
    progress("done", 1.0, "bench done")
    return BenchReport(facts, disk, total // MIB, available // MIB, tuple(notes))
