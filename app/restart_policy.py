"""When the app starts and restarts its server process: pure decisions with a reason.

Frozen inputs, a decision out; no I/O, no clock reads (`ran_s` is passed in). `decide`: whether a server
that ended is started again; the only threshold is `max_retries` (`STRATA_START_RETRIES`, default 5):
that many restarts in a row without the server staying up for `stable_s` seconds, then the app gives up
and says why; what a restart cannot help (a refused configuration, a model that cannot load, an address it
cannot listen on, a cache folder another server of the model holds) is not retried. `wait_for_model`: whether to start it at all yet, when the model file the
configuration names by its path is not there (a removable or network drive mounted a little after login): the app
looks again every `model_poll_s` seconds instead of starting a server that stops with status 3, and
waits again when the server stopped so while the file changed under it (a copy that paused). `setup_restarts`:
whether "Set up again…"'s Finish restarts the server, which it need not when the file says what the running server
was started on.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from strata.exit_status import (
    CANNOT_LISTEN,
    CONFIGURATION_REFUSED,
    FOLDER_IN_USE,
    MODEL_NOT_LOADED,
    STOPPING_SINCE,
)

try:
    import tomllib
except ModuleNotFoundError:        # Python 3.10
    import tomli as tomllib

DEFAULT_START_RETRIES = 5
DEFAULT_STABLE_S = 60.0     # a server up this long counts as started; the retry count starts again
DEFAULT_MODEL_POLL_S = 5.0  # a drive mounted after login: found within 5 s, at one stat() per 5 s meanwhile


@dataclass(frozen=True)
class RestartConfig:
    max_retries: int = DEFAULT_START_RETRIES
    stable_s: float = DEFAULT_STABLE_S
    model_poll_s: float = DEFAULT_MODEL_POLL_S   # how often a missing model file is looked for

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"STRATA_START_RETRIES must be >= 0, got {self.max_retries!r}")
        if not self.stable_s > 0:
            raise ValueError(f"stable_s must be > 0, got {self.stable_s!r}")
        if not self.model_poll_s > 0:
            raise ValueError(f"model_poll_s must be > 0, got {self.model_poll_s!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RestartConfig:
        env = os.environ if environ is None else environ
        raw = env.get("STRATA_START_RETRIES", "").strip()
        if not raw:
            return cls()
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"STRATA_START_RETRIES must be a whole number, got {raw!r}") from None
        return cls(max_retries=n)


@dataclass(frozen=True)
class Exit:
    """How the server process ended."""

    returncode: int          # negative: killed by that signal (POSIX)
    ran_s: float             # seconds it ran: since it first answered /health "ok", for one that did (not its load)
    was_healthy: bool        # it answered /health at least once
    requested: bool          # the app (or the user through it) asked it to stop
    last_line: str = ""      # the last line it wrote, for the reason
    model_missing: bool = False   # the model file the configuration names by its path is not there now
    model_changed: bool = False   # that file's size or time is not what it was when the server started
    on_free_port: bool = False    # the app had started it on any free port (`--port 0`) already
    config: str = ""              # the configuration file it read ("": none), named where the reason says to edit it
    options: str = ""             # the app's extra `strata serve` flags (`./run --batch 4`): a refusal may be theirs
    silent: str = ""              # the app ended it for answering nothing on /health (wait_for_health's reason)


GAVE_UP = "gave up after"    # how a give-up's reason begins (it counts the restarts itself)
SETUP_AGAIN = "run the setup again"   # a reason's advice the app offers as an action: "Set up again…"
FREE_PORT = "free_port"      # RestartDecision.offer: the app offers to start the server on any free port
MODEL_LOAD_FAILED = "the model could not be loaded: "   # how the server's line on a failed load begins (preflight)
# how the server's line on an address it cannot bind reads (server/cli.py: "cannot listen on HOST:PORT: why (hint)");
# its hint ends with advice for a terminal ("--port chooses another"), which an app user has no terminal to give
LISTEN_LINE = re.compile(r"^(cannot listen on \S+: [^(]*?) \((.*)\)$")
FLAG_ADVICE = re.compile(r":? ?--(port|host)( and --port)? chooses? another( address)?(, e\.g\. \d+)?$")
NOT_THIS_MACHINE = "--host takes an address of this machine"   # server/cli.py HOST_HINT: the host is not one of its
# the refusal of a disk level's, segment tier's or system-prompt cache's folder another server of the model holds
# (server/cache/server_lock.py): its flag, folder and holder; what follows is advice for a terminal (flags), which
# the app's reason says its own way
IN_USE_LINE = re.compile(rf"^(--conversation-cache-([\w-]+)-dir .*?: {re.escape(FOLDER_IN_USE)} \([^)]*\))")
IN_USE_ADVICE = "another Strata server of this model uses the folder: stop it, or give this one another folder"
# server_lock's holder text, a process of this machine only; its stop begun where it says so (say_stopping)
HOLDER_PID = re.compile(rf"\(pid (\d+), running since [^,)]*(, {STOPPING_SINCE} )?")


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    attempts: int            # restarts in a row after this decision
    reason: str
    offer: str = ""          # a way out the app offers besides the reason's advice: FREE_PORT, or none


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with status {returncode}"


def listen_failure(last_line: str) -> tuple[str, bool]:
    """The server's cannot-listen line without its terminal advice (the app says what to do in the app), and
    whether the host is not an address of this machine (no port, free or not, helps then)."""
    m = LISTEN_LINE.match(last_line)
    if m is None:
        return last_line, False
    line, hint = m.group(1), m.group(2)
    if hint.startswith(NOT_THIS_MACHINE):
        return line, True
    hint = FLAG_ADVICE.sub("", hint).strip()
    return line + (f" ({hint})" if hint else ""), False


def decide(exit: Exit, attempts: int, cfg: RestartConfig) -> RestartDecision:
    """`attempts`: restarts in a row so far (without a stable run in between)."""
    what = describe_exit(exit.returncode)
    last_line, not_this_machine = exit.last_line, False
    if exit.returncode == CANNOT_LISTEN:
        last_line, not_this_machine = listen_failure(last_line)
    in_use = IN_USE_LINE.match(last_line) if exit.returncode == CONFIGURATION_REFUSED else None
    if in_use:
        last_line = in_use.group(1)
    if exit.returncode == MODEL_NOT_LOADED and last_line.startswith(MODEL_LOAD_FAILED):
        what = last_line.removeprefix(MODEL_LOAD_FAILED)   # its line says what the reason says: once, not twice
    elif last_line and exit.returncode > 0:   # a signal's victim has nothing to say about it
        what += f" ({last_line})"
    if exit.silent:            # the app's own kill: "killed by SIGKILL" alone read as something else's (the OOM killer)
        what = f"{exit.silent} (the app ended it)"
    if exit.requested:
        return RestartDecision(False, 0, f"stopped on request ({what})")
    if exit.was_healthy and exit.ran_s >= cfg.stable_s:
        attempts = 0          # it had been running fine: this is a new failure, not a crash loop
    where = f"the configuration file {exit.config}" if exit.config else "the configuration file"
    if in_use and not exit.was_healthy:
        # the file holds nothing wrong: the same start is refused until the other server stops
        return RestartDecision(False, attempts, f"the server cannot use its conversation folder: {what}; {IN_USE_ADVICE} "
                                                f"(`conversation_cache_{in_use.group(2).replace('-', '_')}_dir` in {where}), then restart "
                                                "the server")
    if exit.returncode == CONFIGURATION_REFUSED and not exit.was_healthy:
        # a flag given to the app (`./run --port x` on a desktop) is refused the same way as a key of the file
        fix = (f"fix the options given to the app ({exit.options}) or the configuration file" if exit.options
               else "fix the configuration file")
        return RestartDecision(False, attempts, f"the server refused its configuration: {what}; {fix} (or {SETUP_AGAIN})")
    if exit.returncode == CANNOT_LISTEN and not exit.was_healthy:
        # a port another program holds (an old `strata serve`), a reserved or privileged one, or a host that is not
        # this machine's: the same address fails the same way again (it was retried 5 times, 18 s, then given up)
        if exit.on_free_port:
            return RestartDecision(False, attempts, f"the server cannot listen even on a free port: {what}; "
                                                    f"fix `host` in {where}, then restart the server")
        if not_this_machine:   # a port of its own would fail the same way: no free port offered
            return RestartDecision(False, attempts, f"the server cannot listen on its address: {what}; `host` is not "
                                                    f"an address of this machine: set it in {where} to 127.0.0.1 "
                                                    "(this machine only) or 0.0.0.0 (every interface), then restart "
                                                    "the server")
        return RestartDecision(False, attempts, f"the server cannot listen on its address: {what}; end the program "
                                                f"that holds it, or set another `port` in {where} (0: any free port) "
                                                "and restart the server, or start it on a free port now",
                               offer=FREE_PORT)
    if exit.returncode == MODEL_NOT_LOADED and exit.model_missing:
        # its drive went away between the app's look and the load: wait for the file again (no retry counted:
        # the app starts nothing until the file is there)
        return RestartDecision(True, attempts, f"the server could not load its model: {what}; its file is not "
                                               "there now: waiting for it")
    if exit.returncode == MODEL_NOT_LOADED and exit.model_changed and not exit.was_healthy:
        # still being copied (a copy that paused longer than two looks apart): half a file reads as damaged;
        # wait until it stops changing, then try it whole (no retry counted: the file, not the server, failed)
        return RestartDecision(True, attempts, f"the server could not load its model: {what}; its file changed "
                                               "while the server read it (still being copied?): waiting for it "
                                               "to be whole")
    if exit.returncode == MODEL_NOT_LOADED and not exit.was_healthy:   # the same file fails the same way again
        return RestartDecision(False, attempts, f"the server could not load its model: {what}; "
                                                f"fix what it says, or choose another model ({SETUP_AGAIN})")
    if attempts >= cfg.max_retries:
        restarts = "1 restart" if attempts == 1 else f"{attempts} restarts"
        return RestartDecision(False, attempts, f"{GAVE_UP} {restarts} in a row: server {what} "
                                                f"(STRATA_START_RETRIES={cfg.max_retries})")
    return RestartDecision(True, attempts + 1, f"server {what}; restart {attempts + 1} of {cfg.max_retries}")


@dataclass(frozen=True)
class ModelFile:
    """What the app found where the configuration says the model is, before starting the server."""

    path: str | None         # the model named by its path (None: the default model or an id the server resolves)
    kind: str = "missing"    # "file" | "folder" | "missing"
    folder_exists: bool = False   # the folder the path names the file in
    # a file's (size, mtime_ns, inode): the same at two looks = not being written, nor replaced (a copy moved over it
    # keeping its time, as `cp -p` or rsync leave it, has another inode)
    stamp: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ModelWait:
    wait: bool
    reason: str


def names_a_path(model: str) -> bool:
    """Whether `model` (the configuration's `model`) is a path rather than an id: `strata serve` takes either,
    and an id (`SmolLM2-135M-Instruct.Q4_1`, `x.gguf`) has no folder in it. A bare name the server resolves
    (or explains) itself: it is never on a drive that is not mounted yet."""
    return model.startswith("~") or "/" in model or "\\" in model


def wait_for_model(found: ModelFile, before: ModelFile | None = None) -> ModelWait:
    """Wait only for a file that is not there at all: a folder, or a file that is there but damaged, goes to
    the server, which says what is wrong with it (exit status 3, not retried). `before`: the previous look of
    this wait, or the file as the last server left it (None: the first look). A file that appeared during the
    wait starts the server once two looks find it the same size and time: `cp` writes under the final name,
    and a server started on half a file stops as "damaged" (retried only when the file changed meanwhile)."""
    if found.path is None:
        return ModelWait(False, "the model is the default one or an id: the server finds it")
    if found.kind == "file" and before is not None and found.stamp != before.stamp:
        size = f"{found.stamp[0]:,} bytes" if found.stamp else "its size unknown"
        how = f"it appeared ({size})" if before.kind == "missing" else f"it is still changing ({size} now)"
        return ModelWait(True, f"for the model file {found.path} to be whole: {how} and is looked at "
                               "again before the server starts")
    if found.kind != "missing":
        return ModelWait(False, f"the model path is a {found.kind}")
    why = "its folder is there, the file is not (still being copied, or moved?)" if found.folder_exists else \
        "its folder is not there (is its drive mounted?)"
    return ModelWait(True, f"for the model file {found.path}: {why}; the server starts by itself when the file "
                           f"appears, or choose another model ({SETUP_AGAIN})")


def offers_setup_again(state: str, detail: str) -> bool:
    """Whether the app offers "Set up again…" beside this state: a failure or a wait whose reason advises it (a
    refused configuration, a model that cannot load, a model file that does not appear). A packaged app's
    user has no terminal for `strata setup`."""
    return state in ("failed", "waiting") and SETUP_AGAIN in detail


DEFAULT_STOP_CAP_S = 600.0   # the longest a stop may take however it progresses (~200 GB at 339 MiB/s)


@dataclass(frozen=True)
class StopWait:
    wait: bool
    reason: str


def wait_for_stop(waited_s: float, quiet_s: float, grace_s: float, cap_s: float = DEFAULT_STOP_CAP_S,
                  loading: bool = False) -> StopWait:
    """Whether to keep waiting for a server asked to stop cleanly (its standard input closed) to end by itself.
    `waited_s`: since it was asked; `quiet_s`: since it last said how its stop progresses ("stopping: ..." lines,
    at most ~2 s apart while it writes its conversations), or since it was asked when it has said nothing.
    It is ended (SIGTERM, then SIGKILL) once quiet for `grace_s` (stalled: a hung disk, a stuck call) or past
    `cap_s` however it progresses; ended early, the conversations not yet written are lost. One `loading` its
    model (it said so on /health, and has not served) has none to write: it is ended at once, where its clean
    stop waits for the load to end (it cannot be interrupted), and a Quit or Restart during a long load waited
    `grace_s` for it."""
    if loading:
        return StopWait(False, "the server was still loading its model (nothing served, nothing to keep): ending it")
    if waited_s >= cap_s:
        return StopWait(False, f"the server was still stopping after {cap_s:.0f} s (the longest wait): ending it")
    if quiet_s >= grace_s:
        return StopWait(False, f"the server said nothing of its stop for {grace_s:.0f} s (stalled?): ending it")
    return StopWait(True, "the server is stopping")


DEFAULT_HEALTH_TIMEOUT_S = 180.0   # a starting server silent this long (no answer on /health at all) is killed
LOADING = "loading the model"        # the detail of a server that answers /health "loading" (its 503)


@dataclass(frozen=True)
class HealthWait:
    state: str       # "up" (it serves) | "loading" (it said so) | "wait" (no answer yet) | "hung" (end it)
    reason: str


def wait_for_health(answer: str | None, silent_s: float, timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S) -> HealthWait:
    """What the app does with a starting server after one look at its `/health`. `answer`: "ok" (200), "loading"
    (its 503 while its model loads) or None (no answer: not listening yet, or not answering); `silent_s`: since the server was started or last answered.
    A server that answers is waited for however long its load takes: a 65 GB model's first read from a slow disk
    (gpt-oss-120b, at ~150 MB/s) passes 180 s, and the app killed such a server at 180 s from its start, loading
    or not, and started it again (each start reading the model anew) until it gave up. Only one silent for
    `timeout_s` (never listening, or a hung process) is ended."""
    if timeout_s <= 0:
        raise ValueError(f"health timeout {timeout_s!r}: expected seconds > 0")
    if answer == "ok":
        return HealthWait("up", "serving")
    if answer == "loading":
        return HealthWait("loading", LOADING)
    if answer is not None:
        raise ValueError(f"health answer {answer!r}: expected 'ok', 'loading' or None")
    if silent_s >= timeout_s:
        return HealthWait("hung", f"answered nothing on /health for {timeout_s:.0f} s")
    return HealthWait("wait", "starting the server")


def notify_restarts(new_restarts: int, in_a_row: int) -> bool:
    """Whether the app raises a tray notification for the `new_restarts` restarts since it last looked, `in_a_row`
    being the latest one's place in its run of restarts without a stable run: only for a run's first. A crash loop
    raised one per restart (5 in ~18 s, then the give-up's); now one when it begins, and the give-up's."""
    return new_restarts > 0 and in_a_row <= new_restarts


UNCHANGED = "the configuration is the one the server runs on: not restarted"


@dataclass(frozen=True)
class SetupRestart:
    restart: bool
    reason: str


def setup_restarts(serving: bool, running_text: str | None, written_text: str | None,
                   model_then: ModelFile | None = None, model_now: ModelFile | None = None) -> SetupRestart:
    """Whether "Set up again…"'s Finish restarts the server. `running_text`: the configuration file as the running
    server was started on it (None: not known); `written_text`: as Finish wrote it. A re-run then Finish changes
    nothing (docs/install.md), yet it restarted the server, its slots and the feed starting again (a new-user
    trial): now the file's values are compared (its comments, the time it was written in them, are not read by the
    server) and an equal file leaves a serving server as it is. A server not serving (failed, waiting, stopped)
    is started as before. `model_then` / `model_now`: the model file the configuration names by its path, as the
    server was started on it and as it is now (None: not known). An equal configuration naming a file replaced
    under the same path (another size, time or inode) restarts it: the server still runs the old file's model."""
    if not serving:
        return SetupRestart(True, "the server is not running: starting it on the configuration")
    if running_text is None or written_text is None:
        return SetupRestart(True, "restarting the server on the configuration")
    try:
        same = tomllib.loads(running_text) == tomllib.loads(written_text)
    except (tomllib.TOMLDecodeError, RecursionError):
        same = False
    if not same:
        return SetupRestart(True, "restarting the server on the new configuration")
    if model_then is not None and model_now is not None and model_then.path is not None \
            and model_then.path == model_now.path and (model_then.kind, model_then.stamp) != (model_now.kind,
                                                                                           model_now.stamp):
        return SetupRestart(True, f"the model file {model_now.path} changed since the server started on it: "
                                  "restarting the server on it")
    return SetupRestart(False, UNCHANGED)


def setup_needs_look(serving: bool, running_text: str | None, written_text: str | None,
                     model_then: ModelFile | None) -> bool:
    """Whether Finish's decision waits for a look at the model file: only where the configuration alone leaves the
    server as it is and the running server's model file is known by its path can a look change it. Every other
    decision is made without touching the file's drive (a network share that does not answer holds a look)."""
    return (not setup_restarts(serving, running_text, written_text).restart and model_then is not None
            and model_then.path is not None)


# -- a start refused by a server still stopping (the one an earlier app left behind) -----------------------------


@dataclass(frozen=True)
class FolderHolder:
    pid: int
    stopping: bool   # its lock file says its stop has begun (server_lock.say_stopping): the holder's own word


def folder_holder(returncode: int, last_line: str) -> FolderHolder | None:
    """The process of this machine holding a folder the server was refused for (FOLDER_IN_USE, exit status 2), or
    None: another refusal, or a holder on another host (its pid means nothing here)."""
    if returncode != CONFIGURATION_REFUSED or not IN_USE_LINE.match(last_line):
        return None
    m = HOLDER_PID.search(last_line)
    return FolderHolder(int(m.group(1)), m.group(2) is not None) if m else None


NOTED_PROGRESS = re.compile(r" \([^()]* written\)$")   # a stop's "(1.2 of 4.7 GiB written)", server/stop_progress.py
HOLDER_WAIT = re.compile(r"^for the previous server \(pid (\d+)\) to finish saving")   # wait_for_holder's "wait"


@dataclass(frozen=True)
class HolderLook:
    pid: int
    alive: bool              # that very process (its start time unchanged since the first look: a pid is reused)
    stopping: bool           # its lock file said its stop had begun, in the refusal (FolderHolder.stopping)
    said: str = ""           # what the app that left it behind last showed of its stop ("" none: no note of it)
    created: float | None = None   # its start time, as the first look saw it (the mechanism's, to know it again)


@dataclass(frozen=True)
class HolderWait:
    action: str      # "start" (it has ended), "wait", "refuse" (waiting cannot help: decided as before), "give_up"
    reason: str


def wait_for_holder(holder: HolderLook, waited_s: float, bound_s: float, end_how: str) -> HolderWait:
    """Whether a start refused for a folder `holder` holds waits for it. A server an earlier app left behind goes on
    with its stop on its own (writing its conversations: minutes for a big model) and holds its folders until it
    ends; the start was refused and not retried. Waited for while it lives and its lock file says it is stopping, or
    it is the one the earlier app noted as it left it stopping, up to `bound_s`; any other holder (a live server, one
    that has just claimed its folders and does not listen yet) is refused as before: waiting would not help.
    `end_how`: how to end it on this platform (supervisor.end_it_yourself's words)."""
    if not holder.alive:
        return HolderWait("start", f"the previous server (pid {holder.pid}) has ended: starting the server")
    if not (holder.stopping or holder.said):
        return HolderWait("refuse", f"the server (pid {holder.pid}) holding the folder is not stopping")
    if waited_s >= bound_s:
        return HolderWait("give_up", f"the previous server (pid {holder.pid}) is still stopping {bound_s:g} s later and "
                                     f"holds this model's conversation folders (it writes its conversations to disk "
                                     f"for the next start): wait for it to end, then restart the server; or {end_how} "
                                     f"(the conversations it has not written yet are lost)")
    # what its stop last said, when noted, without how far it was then: that count ("0 of 1 written") stayed on the
    # status bar through the whole wait, read as a stop that had not moved
    noted = NOTED_PROGRESS.sub("", holder.said)
    said = f" ({noted})" if noted else " its conversations"
    return HolderWait("wait", f"for the previous server (pid {holder.pid}) to finish saving{said}; then this one "
                              f"starts")
