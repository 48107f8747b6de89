"""The server supervisor: runs `strata serve --config PATH` as a child process, waits for `/health`,
restarts it when it dies (as `restart_policy.decide` says, with the reason kept for the UI), and
stops it on request. Before each start it looks for the model file (`model_probe`), and while that is
not there (restart_policy.wait_for_model) it waits in the state "waiting", looking again every
`model_poll_s`, instead of starting a server that would stop with status 3. Its output goes to `server.log` in the app's log folder.

Qt-free (subprocess and threads): the app polls `status()` from a timer. Not here: the decision
itself (restart_policy.py) or any window.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from strata.app.left_behind import look_at_holder
from strata.app.restart_policy import (
    DEFAULT_HEALTH_TIMEOUT_S,
    DEFAULT_STOP_CAP_S,
    HOLDER_WAIT,
    LOADING,
    Exit,
    FolderHolder,
    ModelFile,
    RestartConfig,
    decide,
    folder_holder,
    wait_for_health,
    wait_for_holder,
    wait_for_model,
    wait_for_stop,
)
from strata.app.state_order import Shown, ask_stop, begin, takes
from strata.app.stop_wording import StopOutlook, read_outlook, stopping_detail
from strata.monitor.client import fetch_snapshot

from strata.child_lifetime import popen_tied
from strata.exit_status import MODEL_NOT_LOADED

HEALTH_TIMEOUT_S = DEFAULT_HEALTH_TIMEOUT_S   # silent this long (no answer on /health): killed, counts as failed
HEALTH_POLL_S = 0.2
STOP_GRACE_S = 15.0          # standard input closed first (a clean stop); SIGTERM once it is quiet this long
STOP_PROGRESS = "stopping: "  # how the server's lines about its stop begin (server/stop_progress.py and others)
STOP_POLL_S = 0.2
END_WAIT_S = 5.0             # how long SIGTERM, then SIGKILL, is given to end the server
STOP_FAILED = "the stop failed"   # how a stop's detail begins when the server did not end even when killed
LISTENING = re.compile(r"listening on (https?://[^\s()|]+)")
# the server's log format (server/cli.py log_format): the time and logger name say nothing in a status bar
LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ [\w.]+: ")
FREE_PORT_FLAGS = ("--port", "0")   # after the configuration's flags: the last --port wins
LAST_LINE_CHARS = 600   # the server's refusals end with what to do (a memory check's is up to ~400 characters)
FEED_LOOK_S = 2.0       # the stop's one look at the server's feed (what it keeps): a hung server's stop waits no longer
LOOK_WAIT_POLL_S = 0.2  # how often a start waiting for an earlier, unfinished look at the files sees whether it ended
SLOW_LOOK_S = 2.0       # a look at a file not ended this long: the state says what the start waits for (a hung drive)
HOLDER_POLL_S = 0.5     # how often a start refused by a stopping server's folders looks whether it has ended


@dataclass(frozen=True)
class ServerStatus:
    state: str                 # "waiting" (for the model file) | "starting" | "running" | "restarting" | "failed" |
                               # "stopping" | "stopped"
    detail: str                # why, in words
    endpoint: str | None       # where clients connect (from the server's own "listening on" line)
    pid: int | None
    restarts: int              # automatic restarts since the app started
    last_restart_reason: str   # "" until the first restart
    offer: str = ""            # failed: a way out the app can take (restart_policy.FREE_PORT), or ""
    in_a_row: int = 0          # of `restarts`, how many came in a row without a stable run (a crash loop's count)
    run: int = 0               # servers spawned so far: which server this status is about (a pid may come back)
    loading_s: float | None = None   # starting: how long it has answered /health that its model loads (None: not)
    life: int = 0              # which start of the supervision (state_order): a state said once per life


def server_command(config_path: Path | None, extra: tuple[str, ...] = ()) -> list[str]:
    """How to run `strata serve` here: `python -m strata serve`, or the frozen app itself (PyInstaller)
    with `--strata-cli`, which `strata.app.main` hands to the `strata` command."""
    args = ["serve", "--stop-on-stdin-eof"] + (["--config", str(config_path)] if config_path else []) + list(extra)
    if getattr(sys, "frozen", False):
        return [sys.executable, "--strata-cli", *args]
    return [sys.executable, "-m", "strata", *args]


HELP_POINTER = re.compile(r"^`[^`]+ --help` lists every option$")   # strata/cli.py's last line of a flag error


WINDOWS = os.name == "nt"


def stop_failed(pid: int, windows: bool = WINDOWS) -> str:
    """A stop's detail when the server outlived its kill (in an uninterruptible wait: a hung disk or network drive)."""
    return (f"{STOP_FAILED}: the server (pid {pid}) did not end even when killed (a hung disk or network drive?) and "
            f"may still hold its port and memory; {end_it_yourself(pid, windows)}")


def start_refused(pid: int, windows: bool = WINDOWS) -> str:
    """A start's detail while the server whose stop failed still runs: a second one would find its port taken."""
    return (f"{STOP_FAILED}: the server (pid {pid}) has still not ended, so no new one is started beside it (it may "
            f"hold the port and memory); {end_it_yourself(pid, windows)}")


LOOK_UNFINISHED = re.compile(r"^for the look at (.+?) begun at (\d\d:\d\d:\d\d) to end ")   # look_unfinished's detail


def look_unfinished(what: str, begun: float) -> str:
    """A start's detail while an earlier look at `what` (begun at wall time `begun`) has not ended: a Restart
    clicked while a drive did not answer waited the stop's bound, then started nothing and said nothing."""
    return (f"for the look at {what} begun at {time.strftime('%H:%M:%S', time.localtime(begun))} to end (its drive "
            f"is slow or not answering); the server starts once it has")


def stop_left_behind(pid: int | None, waited_s: float, windows: bool = WINDOWS) -> str:
    """What becomes of a server whose stop the app's end stopped waiting for (no event loop left to wait in):
    it said "where the system ties the server to the app, it is ended with it", but on Linux the tie is a SIGTERM
    (PR_SET_PDEATHSIG), which a stopping server answers by going on with its stop; only Windows' job ends it."""
    said = f"the server's stop had not ended {waited_s:g} s later: the app ends without waiting for it"
    if pid is None:
        return said
    if windows:
        return (f"{said}; the server (pid {pid}) is ended with the app (its job object): the conversations it had "
                f"not yet written are lost, those written are kept")
    return (f"{said}; the server (pid {pid}) goes on with its stop on its own (on Linux the app's end sends it "
            f"SIGTERM, which does not cut a stop short) and ends once it has written the conversations it keeps; "
            f"until then it holds its memory and conversation folders, so the app started again meanwhile waits "
            f"for pid {pid} to end before it starts its server")


def wait_over(detail: str) -> str:
    """app.log's words as a wait with `detail` ends (the server's state follows): a look's end says nothing of the
    model file, which said 'the model file is there now' before the look had even been made."""
    m = LOOK_UNFINISHED.match(detail)
    if m:
        return f"the look at {m.group(1)} begun at {m.group(2)} has ended"
    m = HOLDER_WAIT.match(detail)
    return f"the previous server (pid {m.group(1)}) has ended" if m else "the model file is there now"


def waiting_title(detail: str) -> str:
    """The tray notification's title for a wait with `detail`: a look that has not ended waits for a drive, and
    may be the configuration's (it said 'waiting for its model file' for both)."""
    if HOLDER_WAIT.match(detail):
        return "Strata is waiting for the previous server to finish saving"
    return "Strata is waiting for a drive to answer" if LOOK_UNFINISHED.match(detail) else \
        "Strata is waiting for its model file"


def end_it_yourself(pid: int, windows: bool = WINDOWS) -> str:
    """What to do, in the platform's own words: Windows has no `kill -9`."""
    how = f"Task Manager, or taskkill /F /PID {pid}" if windows else f"kill -9 {pid}"
    return f"end it yourself ({how}), or restart the computer, then start the server again"


def end_steps(windows: bool = WINDOWS) -> tuple[str, ...]:
    """The Popen methods that end a server whose stop was not clean, each given `end_wait_s`. Windows has no
    SIGKILL: Popen.kill is TerminateProcess there, as terminate is, and a second one waited again for nothing."""
    return ("terminate",) if windows else ("terminate", "kill")


def server_message(line: str) -> str:
    """A server log line as the app shows it: the message without the time, level and logger name."""
    return LOG_PREFIX.sub("", line, count=1)


def connect_address(url: str) -> str:
    """A listening address as a client reaches it from this machine (0.0.0.0 / :: -> 127.0.0.1)."""
    return re.sub(r"//(0\.0\.0\.0|\[::\]|::)(:|/|$)", r"//127.0.0.1\2", url.rstrip("/"))


class ServerSupervisor:
    def __init__(self, config_path: Path | None, log_dir: Path, *, restart: RestartConfig | None = None,
                 command: list[str] | None = None, health_timeout_s: float = HEALTH_TIMEOUT_S,
                 env: dict[str, str] | None = None, model_probe: Callable[[Mapping[str, str]], ModelFile] | None = None,
                 stop_grace_s: float = STOP_GRACE_S, stop_cap_s: float = DEFAULT_STOP_CAP_S,
                 options: tuple[str, ...] = (), api_key: str | None = None,
                 key_probe: Callable[[Mapping[str, str]], str | None] | None = None,
                 end_wait_s: float = END_WAIT_S, slow_look_s: float = SLOW_LOOK_S,
                 left_behind_wait_s: float = DEFAULT_STOP_CAP_S) -> None:
        if not left_behind_wait_s > 0:
            raise ValueError(f"left_behind_wait_s must be > 0, got {left_behind_wait_s!r}")
        # how long a start refused for a folder a stopping server holds waits for it (as long as the app's own stop)
        self.left_behind_wait_s = left_behind_wait_s
        if not end_wait_s > 0:
            raise ValueError(f"end_wait_s must be > 0, got {end_wait_s!r}")
        if not slow_look_s > 0:
            raise ValueError(f"slow_look_s must be > 0, got {slow_look_s!r}")
        self.slow_look_s = slow_look_s
        self.config_path = Path(config_path) if config_path else None
        self.options = tuple(options)      # the app's own extra `strata serve` flags (`./run --batch 4`), for reasons
        self.log_dir = Path(log_dir)
        self.log_path = self.log_dir / "server.log"
        self.restart_cfg = restart or RestartConfig.from_env()
        self.command = command or server_command(self.config_path)
        self.health_timeout_s = health_timeout_s
        self.stop_grace_s = stop_grace_s   # a stopping server quiet this long is ended (restart_policy.wait_for_stop)
        self.stop_cap_s = stop_cap_s
        self.end_wait_s = end_wait_s
        self.model_probe = model_probe   # called with the server's environment; None: no look before a start
        self.api_key = api_key           # the server's, for its monitor feed (the window's, the stop's wording)
        # called with the server's environment before each start: the key as that server reads it (a key        # changed in the file, then Restart; a configuration refused at the app's start, then mended)
        self.key_probe = key_probe
        # the server writes UTF-8 to a pipe whatever this machine's code page, as `_pump` reads it: it sees to that
        # itself (strata/standard_streams.py), since the packaged app's server ignores PYTHON* variables
        self.env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
        self.events: deque[tuple[float, str]] = deque(maxlen=200)   # (wall time, what happened)
        self._lock = threading.Lock()
        # held by a spawn and by stop's look for the server, never by the GUI thread (status, ask_stop): process
        # creation can take seconds on Windows (an antivirus scanning the executable), and the window froze
        self._spawn_gate = threading.Lock()
        self._shown = Shown(0, "stopped", "not started")   # state_order: what status() says, in one order
        self._endpoint: str | None = None
        self._proc: subprocess.Popen | None = None
        self._started_on: str | None = None      # the configuration's text at _proc's start (started_on)
        self._started_model: ModelFile | None = None   # the model file's look before _proc's start (started_model)
        self._restarts = 0
        self._runs = 0
        self._in_a_row = 0
        self._last_reason = ""
        self._offer = ""
        self._stop = threading.Event()   # this life's: a new one at each start (a stopped life's worker may linger)
        # (thread, what, wall time) of the worker's look at a file under way; a hung drive holds it for as long as it
        # does, and the next start's worker waits for it (two would hang alike, a thread more at each Restart)
        self._looking: tuple[threading.Thread, str, float] | None = None
        self._requested = False
        self._quitting = False      # `no_more_starts`: the app quits; a restart under way does not start again
        self._thread: threading.Thread | None = None
        self._last_line = ""
        self._silent = ""           # why _wait_healthy killed the current server ("": it did not)
        self._served = False        # the current server has answered /health "ok" (a stop may have something to keep)
        self._served_at_ask = False  # _served as the stop was asked (ask_stop): what its wording says
        self._loading_since: float | None = None   # monotonic time of the current server's first "loading" answer
        self._progress_at = 0.0     # monotonic time of the server's last "stopping: ..." line

    # -- control (any thread) -----------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._quitting:
                self._event("start not made: the app is quitting")
                return
            # a worker whose stop was asked may still be in a look at a file (a hung drive): it starts nothing now
            # (_spawn checks its life), so the new life goes on; it was a start refused without a word
            if self._thread is not None and self._thread.is_alive() and not self._shown.stop_asked:
                return
            # no worker, yet a server: one that outlived its kill (stop returned False), still holding its port
            left = self._proc.pid if self._proc is not None and self._proc.poll() is None else None
            if left is not None:
                self._shown = replace(self._shown, state="stopped", detail=start_refused(left))
                self._event(f"start not made: the server (pid {left}) has not ended")
                return
            self._stop.set()                   # the last life's worker, if it lingers, ends at its next step
            self._stop = threading.Event()
            # said at once: the thread's look for the model file comes first (a slow or hung drive: as long as it
            # takes), and until then the state was "stopped: not started", which the app's status bar showed under a
            # header saying "starting the server" (a new-user trial)
            said = (self._shown.state, self._shown.detail) == ("starting", "starting the server")
            self._shown = begin(self._shown, "starting the server")    # a new life: the last one's events are refused
            if not said:
                self._event("starting: starting the server")
            self._thread = threading.Thread(target=self._run, args=(self._shown.life, self._stop),
                                            name="strata-server-supervisor", daemon=True)
            self._thread.start()

    def ask_stop(self) -> None:
        """The stop's first step, at once and from any thread (the app's GUI thread as the user asks): from here
        this life shows nothing but its stop ("stopping" while a server runs), whatever the worker's health check
        or a restart under way finds after it (state_order). `stop` does the rest (it asks too): the worker and
        the server are told there, after its look at the server's feed (the worker closes the server's input)."""
        with self._lock:
            if self._shown.stop_asked:
                return
            self._shown = ask_stop(self._shown)
            life = self._shown.life
            running = self._proc is not None and self._proc.poll() is None
            self._served_at_ask = self._served      # it answered /health ok: its model is loaded
        if running:
            self._set("stopping", stopping_detail(self._served_at_ask, None), life)

    def stop(self, timeout: float | None = None) -> bool:
        """Stops the server (standard input closed; SIGTERM once it has said nothing of its stop for `timeout`,
        default `stop_grace_s`, or after `stop_cap_s`; SIGKILL `end_wait_s` later) and the supervision; returns
        once both have ended, True, or False when the server outlived its kill: "stopped", the detail saying the
        stop failed, its pid and what to do (`stop_failed`). The state is "stopping" meanwhile, its detail what the
        stop does (the server's feed says, before its stop is asked), then the server's last line about its stop."""
        timeout = self.stop_grace_s if timeout is None else timeout
        self.ask_stop()
        with self._spawn_gate, self._lock:     # a spawn under way ends first: its server is then this stop's
            life, endpoint, proc = self._shown.life, self._endpoint, self._proc
            running = proc is not None and proc.poll() is None
            # this life's stop failed already (a Quit after a Restart's): its waits again would end nothing
            if running and self._shown.state == "stopped" and self._shown.detail.startswith(STOP_FAILED):
                return False
        if running:     # ask_stop said it already unless the server was spawned since
            outlook = self._stop_outlook(endpoint) if self._served_at_ask and endpoint else None
            self._set("stopping", stopping_detail(self._served_at_ask, outlook), life)
        self._stop.set()
        self._terminate(timeout)
        if self._thread is not None:
            self._join_worker(self._thread)
        # the worker ends the server too (on its thread): whichever did, it is ended only if its process is gone
        if proc is not None and proc.poll() is None:
            self._set("stopped", stop_failed(proc.pid), life)
            return False
        self._set("stopped", "stopped", life)
        return True

    def _join_worker(self, thread: threading.Thread) -> None:
        """Until the supervision's worker has ended, up to the stop's bound; not while it looks at a file: a look
        on a drive that does not answer held a Quit or Restart for the whole bound (10 minutes), and that thread
        starts nothing once its stop is asked (the next start's worker waits for its look)."""
        deadline = time.monotonic() + self.stop_cap_s + 10
        while thread.is_alive() and time.monotonic() < deadline:
            with self._lock:
                looking = self._looking if self._looking is not None and self._looking[0] is thread else None
            if looking is not None:
                self._event(f"the stop does not wait for the look at {looking[1]} under way: it starts nothing now")
                return
            thread.join(STOP_POLL_S)

    def _stop_outlook(self, endpoint: str) -> StopOutlook | None:
        """What the server's monitor feed says its stop will do; None (and an event saying why) when it does not
        answer, or answers something else."""
        try:
            return read_outlook(fetch_snapshot(endpoint, self.api_key, FEED_LOOK_S))
        except (OSError, ValueError, http.client.HTTPException) as e:
            self._event(f"the stop's wording without the server's feed: {e}")
            return None

    def no_more_starts(self) -> None:
        """The app quits: from now on `start` (a restart's, under way on another thread) starts nothing; its
        new server would load its model only to be stopped at once."""
        with self._lock:
            self._quitting = True

    def restart(self) -> None:
        """A restart the user asked for: stop, then start with the retry count at zero."""
        self._event("restart requested")
        self.stop()
        self.start()      # made only once the server has ended: a second one would find its port and memory taken

    def restart_on_free_port(self) -> None:
        """The way out of an address the server cannot listen on: this app's servers take any free port from now
        on (`--port 0` after the configuration; the monitor reads the address the server says it listens on)."""
        if not self.on_free_port:
            self.command = [*self.command, *FREE_PORT_FLAGS]
        self._event("restart on a free port requested")
        self.restart()

    @property
    def on_free_port(self) -> bool:
        return self.command[-2:] == list(FREE_PORT_FLAGS)

    def started_on(self) -> str | None:
        """The configuration file's text as the server now running was started on it; None when none runs or the
        file could not be read then."""
        with self._lock:
            running = self._proc is not None and self._proc.poll() is None
            return self._started_on if running else None

    def started_model(self) -> ModelFile | None:
        """The model file the configuration names by its path as the server now running was started on it (the
        look just before its start); None when none runs or no probe looks."""
        with self._lock:
            running = self._proc is not None and self._proc.poll() is None
            return self._started_model if running and self.model_probe is not None else None

    def look_at_model(self) -> ModelFile | None:
        """The model file as it is now (one stat(), the configuration read again); None when no probe looks."""
        return None if self.model_probe is None else self._look()

    def _configuration_text(self) -> str | None:
        if self.config_path is None:
            return None
        try:
            return self.config_path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError):
            return None

    def status(self) -> ServerStatus:
        with self._lock:
            pid = self._proc.pid if self._proc is not None and self._proc.poll() is None else None
            shown = self._shown
            loading = self._loading_since is not None and (shown.state, shown.detail) == ("starting", LOADING)
            return ServerStatus(shown.state, shown.detail, self._endpoint, pid, self._restarts, self._last_reason,
                                self._offer if shown.state == "failed" else "", self._in_a_row, self._runs,
                                time.monotonic() - self._loading_since if loading else None, shown.life)

    # -- worker -------------------------------------------------------------------------------

    def _run(self, life: int, stop: threading.Event) -> None:
        """The supervision's worker for `life` (start's count), until `stop` (that life's): its states are taken
        only while they are this life's and no stop was asked (state_order)."""
        attempts = 0
        at_exit: ModelFile | None = None      # the model file as the last server left it (None: first start)
        while not stop.is_set():
            at_start = self._wait_for_model(life, stop, at_exit)
            if at_start is None or stop.is_set():
                return
            self._set("starting", "starting the server", life)
            try:
                proc, started = self._spawn(life, stop, at_start), time.monotonic()
            except OSError as e:
                self._set("failed", f"cannot start the server: {e}", life)
                return
            if proc is None:
                return
            healthy = self._wait_healthy(proc, life, stop)
            # a stable run is one of serving: a load of minutes (waited for however long it takes) is not one, and a
            # crash just after it counted as a new failure, not a crash loop: restarted (the model read anew) for ever
            up_since = time.monotonic() if healthy else started
            if healthy:
                with self._lock:
                    self._served = True
                self._set("running", f"pid {proc.pid}", life)
            while proc.poll() is None and not stop.wait(0.2):
                pass
            if stop.is_set():
                # this thread ends once the server has: on Linux its end is the server's PR_SET_PDEATHSIG, a SIGTERM
                # before the grace time stop() gives it (its standard input closed first); and a server spawned as
                # the stop began, after stop() looked for one, is stopped here the same way
                self._terminate(self.stop_grace_s)
                return
            rc = proc.wait()
            holder = folder_holder(rc, self._last_line) if not healthy else None
            if holder is not None:
                waited = self._wait_for_holder(holder, life, stop)
                if waited is None:           # stopped meanwhile
                    return
                if waited.action == "start":
                    self._event(waited.reason)
                    continue
                if waited.action == "give_up":
                    self._event(waited.reason)
                    self._set("failed", waited.reason, life)
                    return
            at_exit = self._look_when_free(life, stop) if rc == MODEL_NOT_LOADED else None
            if stop.is_set():       # stopped during that look: this life decides nothing more
                return
            missing = at_exit is not None and wait_for_model(at_exit).wait
            changed = at_exit is not None and at_exit.kind == "file" and at_exit.stamp != at_start.stamp
            exit_ = Exit(rc, time.monotonic() - up_since, healthy, self._requested, self._last_line[:LAST_LINE_CHARS],
                         model_missing=missing, model_changed=changed, on_free_port=self.on_free_port,
                         config=str(self.config_path or ""), options=" ".join(self.options), silent=self._silent)
            decision = decide(exit_, attempts, self.restart_cfg)
            attempts = decision.attempts
            self._event(decision.reason)
            if not decision.restart:
                with self._lock:
                    self._offer = decision.offer
                self._set("failed", decision.reason, life)
                return
            with self._lock:
                self._restarts += 1
                self._in_a_row = decision.attempts
                self._last_reason = decision.reason
            self._set("restarting", decision.reason, life)
            if stop.wait(min(0.5 * 2 ** (attempts - 1), 5.0)):
                return

    def _wait_for_holder(self, holder: FolderHolder, life: int, stop: threading.Event):
        """After a refusal for a folder `holder` holds: while it is stopping (its lock file says so, or the earlier app
        noted it: a server that app left behind writing its conversations), "waiting", saying so, until it ends or
        left_behind_wait_s passes (restart_policy.wait_for_holder). Its HolderWait ("refuse": decided as before), or
        None when stopped."""
        begun = time.monotonic()
        created = None           # its start time at the first look: the same pid started anew later is not it
        while True:
            look = look_at_holder(holder, self.log_dir, created)
            created = created if created is not None else look.created
            waited = wait_for_holder(look, time.monotonic() - begun, self.left_behind_wait_s,
                                     end_it_yourself(holder.pid))
            if waited.action != "wait":
                return waited
            self._set("waiting", waited.reason, life)
            if stop.wait(HOLDER_POLL_S):
                return None

    def _look(self) -> ModelFile:
        return ModelFile(None) if self.model_probe is None else self.model_probe(self.env)

    def _looking_at(self, what: str, life: int, stop: threading.Event, read: Callable[[], object]):
        """`read()`, a look at a file by the worker of `life`, once no earlier look is under way (a stopped life's
        worker may still be in one, on a drive that does not answer: the state says so meanwhile); registered
        while it runs, so that a stop does not wait for it. `stop` set before it could begin: None."""
        waited = False
        while True:
            with self._lock:
                earlier = self._looking
                if earlier is None or not earlier[0].is_alive():
                    begun = time.time()
                    self._looking = (threading.current_thread(), what, begun)
                    break
            waited = self._set("waiting", look_unfinished(earlier[1], earlier[2]), life) or waited
            if stop.wait(LOOK_WAIT_POLL_S):
                return None
        if waited:       # what it waited for is over: the start goes on (its own look may say it waits again)
            self._set("starting", "starting the server", life)
        # its own look, slow past slow_look_s, is said the same way: the first start showed "starting the server"
        # for as long as a drive did not answer (a Restart then said what it waited for)
        said: list[bool] = []
        slow = threading.Timer(self.slow_look_s, lambda: said.append(
            self._set("waiting", look_unfinished(what, begun), life)))
        slow.daemon = True
        slow.start()
        try:
            return read()
        finally:
            slow.cancel()
            slow.join()      # a "waiting" it set is then followed by the "starting" below, never after it
            with self._lock:
                self._looking = None
            if any(said):
                self._set("starting", "starting the server", life)

    def _look_when_free(self, life: int, stop: threading.Event) -> ModelFile | None:
        return self._looking_at("the model file", life, stop, self._look)

    def _wait_for_model(self, life: int, stop: threading.Event, before: ModelFile | None = None) -> ModelFile | None:
        """The look that found the model file there (and unchanged since `before`: the last server's exit),
        or None when stopped meanwhile. One look per `model_poll_s`; the state's detail says what is awaited,
        and changes only when that does."""
        while True:
            found = self._look_when_free(life, stop)
            if found is None:
                return None
            decision = wait_for_model(found, before)
            if not decision.wait:
                return found
            before = found
            self._set("waiting", decision.reason, life)
            if stop.wait(self.restart_cfg.model_poll_s):
                return None

    def _spawn(self, life: int, stop: threading.Event, model: ModelFile | None = None) -> subprocess.Popen | None:
        """The server started for `life`; None when that life's stop was asked meanwhile (the look for the model
        file before it can take as long as a slow drive does)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # it ends with the app even when the app is killed (strata/child_lifetime.py); on Linux its "parent" is
        # this supervisor thread, which lives as long as the server does
        # read before the server reads it (what it runs on), and looked at as the model file is: its drive may hang
        read = self._looking_at("the configuration file", life, stop, lambda: (
            self._configuration_text(), self.key_probe(self.env) if self.key_probe is not None else self.api_key))
        started_on, key = read if read is not None else (None, self.api_key)
        # checked and spawned in one hold of the spawn gate, which stop takes before it looks for the server: a stop
        # asked before finds no server started for it, and one asked after finds this one in _proc and stops it
        with self._spawn_gate:
            with self._lock:
                made = life == self._shown.life and not self._shown.stop_asked
            if not made:
                proc = None
            else:
                self._requested = False      # here, not before the gate: a stopped life's worker resets nothing
                self._last_line = ""
                proc, untied = popen_tied(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, env=self.env)
                with self._lock:
                    self._proc = proc
                    self._started_on = started_on
                    self.api_key = key
                    self._started_model = model
                    self._runs += 1
                    self._served = False
                    self._loading_since = None   # this server's load, not the last one's
                    self._endpoint = None   # its own "listening on" line says where (port 0: a new one each time)
        if proc is None:
            self._event("start not made: its stop was asked during the look for the model file")
            return None
        self._event(f"server started (pid {proc.pid}): {' '.join(self.command)}")
        if untied:
            self._event(f"the server may outlive a crashed app: {untied}")
        threading.Thread(target=self._pump, args=(proc, life), name="strata-server-log", daemon=True).start()
        return proc

    def _pump(self, proc: subprocess.Popen, life: int) -> None:
        """Copies the server's output into server.log and picks its address out of it."""
        assert proc.stdout is not None
        with open(self.log_path, "ab") as log:
            log.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} server pid {proc.pid}\n".encode())
            for raw in iter(proc.stdout.readline, b""):
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", errors="replace").strip()
                if line and HELP_POINTER.match(line):
                    pass     # argparse's last line: the one before it says what is wrong (it showed this alone)
                elif line and raw[:2] == b"  " and ": error: " in self._last_line:
                    self._last_line += "; " + line            # the error's hint: "--prot: did you mean --port?"
                elif line:
                    self._last_line = server_message(line)
                    if self._last_line.startswith(STOP_PROGRESS):
                        self._progress_at = time.monotonic()
                        # the status bar shows how far the stop is ("... 1.2 of 4.7 GiB written"): while this
                        # server's stop is shown, never over the next server's start
                        self._set("stopping", self._last_line, life, progress=True)
                m = LISTENING.search(line)
                if m:
                    with self._lock:
                        self._endpoint = connect_address(m.group(1))

    def _wait_healthy(self, proc: subprocess.Popen, life: int, stop: threading.Event) -> bool:
        """Until the server serves (True), or ends, or is stopped, or is silent too long (killed; False); while it
        answers "loading" the state's detail says so (restart_policy.wait_for_health)."""
        answered = time.monotonic()
        self._silent = ""
        with self._lock:
            self._loading_since = None
        while proc.poll() is None and not stop.is_set():
            endpoint = self.status().endpoint
            answer = _health(endpoint) if endpoint else None
            now = time.monotonic()
            if answer is not None:
                answered = now
            verdict = wait_for_health(answer, now - answered, self.health_timeout_s)
            if verdict.state == "up":
                return True
            if verdict.state == "hung":
                self._event(f"{verdict.reason}; killing the server")
                self._last_line = self._silent = verdict.reason
                proc.kill()
                return False
            if verdict.state == "loading" and self._set("starting", verdict.reason, life):
                with self._lock:
                    if self._loading_since is None:   # a big model's load takes minutes: its time is shown
                        self._loading_since = now
            time.sleep(HEALTH_POLL_S)
        return False

    def _terminate(self, grace: float) -> None:
        with self._lock:
            proc, loading = self._proc, not self._served and self._loading_since is not None
        if proc is None or proc.poll() is not None:
            return
        self._requested = True
        # closing its standard input asks for a clean stop on every platform (`--stop-on-stdin-eof`: the
        # server parks its conversations to disk, saying how far it is every ~2 s); SIGTERM (TerminateProcess
        # on Windows) once it has been quiet for the grace time or past the cap (wait_for_stop), then SIGKILL
        asked = time.monotonic()
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        while True:
            try:
                proc.wait(STOP_POLL_S)
                return
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            decision = wait_for_stop(now - asked, now - max(asked, self._progress_at), grace, self.stop_cap_s,
                                     loading)
            if not decision.wait:
                self._event(decision.reason)
                break
        for step in end_steps():
            getattr(proc, step)()
            try:
                proc.wait(self.end_wait_s)
                return
            except subprocess.TimeoutExpired:
                pass
        # left to `stop`, which says so: raised here, it ended the stopping thread and "stopping" was shown for ever
        self._event(f"the server (pid {proc.pid}) did not end {self.end_wait_s:g} s after it was killed")

    def _set(self, state: str, detail: str, life: int, progress: bool = False) -> bool:
        """`state` shown, when state_order takes it (checked and set in one hold of the lock: checked apart, a stop
        asked in between was overwritten); whether it was."""
        with self._lock:
            if not takes(self._shown, life, state, progress=progress):
                return False
            changed = (state, detail) != (self._shown.state, self._shown.detail)
            self._shown = replace(self._shown, state=state, detail=detail)
        if changed:
            self._event(f"{state}: {detail}")
        return True

    def _event(self, text: str) -> None:
        self.events.append((time.time(), text))


def _health(endpoint: str) -> str | None:
    """One look at the server's /health: "ok" (200), "loading" (its 503 saying so: server/service.py health), None
    (no answer, or any other: a failed load's 503 "error" precedes the server's own exit with the reason, and is
    not waited for as a load would be)."""
    try:
        with urllib.request.urlopen(endpoint + "/health", timeout=2) as r:
            return "ok" if r.status == 200 else None
    except urllib.error.HTTPError as e:
        try:
            said = json.loads(e.read().decode("utf-8", "replace") or "{}")
        except (OSError, ValueError):
            return None
        return "loading" if isinstance(said, dict) and said.get("status") == "loading" else None
    except (urllib.error.URLError, OSError, ValueError):
        return None
