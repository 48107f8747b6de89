"""The server supervisor: runs `strata serve --config PATH` as a child process, waits for `/health`,
restarts it when it dies (as `restart_policy.decide` says, with the reason kept for the UI), and
stops it on request. Before each start it looks for the model file (`model_probe`), and while that is
not there (restart_policy.wait_for_model) it waits in the state "waiting", looking again every
`model_poll_s`, instead of starting a server that would stop with status 3. Its output goes to `server.log` in the app's log folder.

Qt-free (subprocess and threads): the app polls `status()` from a timer. Not here: the decision
itself (restart_policy.py) or any window.
"""

from __future__ import annotations

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
from dataclasses import dataclass
from pathlib import Path

from strata.app.restart_policy import (
    DEFAULT_HEALTH_TIMEOUT_S,
    DEFAULT_STOP_CAP_S,
    LOADING,
    Exit,
    ModelFile,
    RestartConfig,
    decide,
    wait_for_health,
    wait_for_model,
    wait_for_stop,
)
from strata.app.stop_wording import keeps_on_disk, stopping_detail

from strata.child_lifetime import popen_tied
from strata.exit_status import MODEL_NOT_LOADED

HEALTH_TIMEOUT_S = DEFAULT_HEALTH_TIMEOUT_S   # silent this long (no answer on /health): killed, counts as failed
HEALTH_POLL_S = 0.2
STOP_GRACE_S = 15.0          # standard input closed first (a clean stop); SIGTERM once it is quiet this long
STOP_PROGRESS = "stopping: "  # how the server's lines about its stop begin (server/stop_progress.py and others)
STOP_POLL_S = 0.2
LISTENING = re.compile(r"listening on (https?://[^\s()|]+)")
# the server's log format (server/cli.py log_format): the time and logger name say nothing in a status bar
LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ [\w.]+: ")
FREE_PORT_FLAGS = ("--port", "0")   # after the configuration's flags: the last --port wins
LAST_LINE_CHARS = 600   # the server's refusals end with what to do (a memory check's is up to ~400 characters)


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


def server_command(config_path: Path | None, extra: tuple[str, ...] = ()) -> list[str]:
    """How to run `strata serve` here: `python -m strata serve`, or the frozen app itself (PyInstaller)
    with `--strata-cli`, which `strata.app.main` hands to the `strata` command."""
    args = ["serve", "--stop-on-stdin-eof"] + (["--config", str(config_path)] if config_path else []) + list(extra)
    if getattr(sys, "frozen", False):
        return [sys.executable, "--strata-cli", *args]
    return [sys.executable, "-m", "strata", *args]


HELP_POINTER = re.compile(r"^`[^`]+ --help` lists every option$")   # strata/cli.py's last line of a flag error


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
                 options: tuple[str, ...] = ()) -> None:
        self.config_path = Path(config_path) if config_path else None
        self.options = tuple(options)      # the app's own extra `strata serve` flags (`./run --batch 4`), for reasons
        self.log_dir = Path(log_dir)
        self.log_path = self.log_dir / "server.log"
        self.restart_cfg = restart or RestartConfig.from_env()
        self.command = command or server_command(self.config_path)
        self.health_timeout_s = health_timeout_s
        self.stop_grace_s = stop_grace_s   # a stopping server quiet this long is ended (restart_policy.wait_for_stop)
        self.stop_cap_s = stop_cap_s
        self.model_probe = model_probe   # called with the server's environment; None: no look before a start
        # the server writes UTF-8 to a pipe whatever this machine's code page, as `_pump` reads it: it sees to that
        # itself (strata/standard_streams.py), since the packaged app's server ignores PYTHON* variables
        self.env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
        self.events: deque[tuple[float, str]] = deque(maxlen=200)   # (wall time, what happened)
        self._lock = threading.Lock()
        self._state, self._detail = "stopped", "not started"
        self._endpoint: str | None = None
        self._proc: subprocess.Popen | None = None
        self._started_on: str | None = None      # the configuration's text at _proc's start (started_on)
        self._started_model: ModelFile | None = None   # the model file's look before _proc's start (started_model)
        self._restarts = 0
        self._runs = 0
        self._in_a_row = 0
        self._last_reason = ""
        self._offer = ""
        self._stop = threading.Event()
        self._requested = False
        self._quitting = False      # `no_more_starts`: the app quits; a restart under way does not start again
        self._thread: threading.Thread | None = None
        self._last_line = ""
        self._silent = ""           # why _wait_healthy killed the current server ("": it did not)
        self._on_disk: bool | None = None   # whether this server keeps conversations on disk (its INFO line says)
        self._served = False        # the current server has answered /health "ok" (a stop may have something to keep)
        self._loading_since: float | None = None   # monotonic time of the current server's first "loading" answer
        self._progress_at = 0.0     # monotonic time of the server's last "stopping: ..." line

    # -- control (any thread) -----------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._quitting:
                self._event("start not made: the app is quitting")
                return
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            # said at once: the thread's look for the model file comes first (a slow or hung drive: as long as it
            # takes), and until then the state was "stopped: not started", which the app's status bar showed under a
            # header saying "starting the server" (a new-user trial)
            if (self._state, self._detail) != ("starting", "starting the server"):
                self._state, self._detail = "starting", "starting the server"
                self._event("starting: starting the server")
            self._thread = threading.Thread(target=self._run, name="strata-server-supervisor", daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stops the server (standard input closed; SIGTERM once it has said nothing of its stop for `timeout`,
        default `stop_grace_s`, or after `stop_cap_s`) and the supervision; returns once both have ended. The
        state is "stopping" meanwhile, its detail the server's last line about its stop."""
        timeout = self.stop_grace_s if timeout is None else timeout
        self._stop.set()
        with self._lock:
            running = self._proc is not None and self._proc.poll() is None
            loaded = self._state == "running"     # it answered /health ok: its model is loaded
        if running:
            self._set("stopping", stopping_detail(loaded, self._on_disk))
        self._terminate(timeout)
        if self._thread is not None:
            self._thread.join(self.stop_cap_s + 10)
        self._set("stopped", "stopped")

    def no_more_starts(self) -> None:
        """The app quits: from now on `start` (a restart's, under way on another thread) starts nothing; its
        new server would load its model only to be stopped at once."""
        with self._lock:
            self._quitting = True

    def restart(self) -> None:
        """A restart the user asked for: stop, then start with the retry count at zero."""
        self._event("restart requested")
        self.stop()
        self.start()

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
            loading = self._loading_since is not None and (self._state, self._detail) == ("starting", LOADING)
            return ServerStatus(self._state, self._detail, self._endpoint, pid, self._restarts, self._last_reason,
                                self._offer if self._state == "failed" else "", self._in_a_row, self._runs,
                                time.monotonic() - self._loading_since if loading else None)

    # -- worker -------------------------------------------------------------------------------

    def _run(self) -> None:
        attempts = 0
        at_exit: ModelFile | None = None      # the model file as the last server left it (None: first start)
        while not self._stop.is_set():
            at_start = self._wait_for_model(at_exit)
            if at_start is None:
                return
            self._set("starting", "starting the server")
            try:
                proc, started = self._spawn(at_start), time.monotonic()
            except OSError as e:
                self._set("failed", f"cannot start the server: {e}")
                return
            healthy = self._wait_healthy(proc)
            # a stable run is one of serving: a load of minutes (waited for however long it takes) is not one, and a
            # crash just after it counted as a new failure, not a crash loop: restarted (the model read anew) for ever
            up_since = time.monotonic() if healthy else started
            if healthy:
                with self._lock:
                    self._served = True
                self._set("running", f"pid {proc.pid}")
            while proc.poll() is None and not self._stop.wait(0.2):
                pass
            if self._stop.is_set():
                # this thread ends once the server has: on Linux its end is the server's PR_SET_PDEATHSIG, a SIGTERM
                # before the grace time stop() gives it (its standard input closed first); and a server spawned as
                # the stop began, after stop() looked for one, is stopped here the same way
                self._terminate(self.stop_grace_s)
                return
            rc = proc.wait()
            at_exit = self._look() if rc == MODEL_NOT_LOADED else None
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
                self._set("failed", decision.reason)
                return
            with self._lock:
                self._restarts += 1
                self._in_a_row = decision.attempts
                self._last_reason = decision.reason
            self._set("restarting", decision.reason)
            if self._stop.wait(min(0.5 * 2 ** (attempts - 1), 5.0)):
                return

    def _look(self) -> ModelFile:
        return ModelFile(None) if self.model_probe is None else self.model_probe(self.env)

    def _wait_for_model(self, before: ModelFile | None = None) -> ModelFile | None:
        """The look that found the model file there (and unchanged since `before`: the last server's exit),
        or None when stopped meanwhile. One look per `model_poll_s`; the state's detail says what is awaited,
        and changes only when that does."""
        while True:
            found = self._look()
            decision = wait_for_model(found, before)
            if not decision.wait:
                return found
            before = found
            self._set("waiting", decision.reason)
            if self._stop.wait(self.restart_cfg.model_poll_s):
                return None

    def _spawn(self, model: ModelFile | None = None) -> subprocess.Popen:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._requested = False
        self._last_line = ""
        self._on_disk = None
        # it ends with the app even when the app is killed (strata/child_lifetime.py); on Linux its "parent" is
        # this supervisor thread, which lives as long as the server does
        started_on = self._configuration_text()    # read before the server reads it: what it runs on
        proc, untied = popen_tied(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=self.env)
        with self._lock:
            self._proc = proc
            self._started_on = started_on
            self._started_model = model
            self._runs += 1
            self._served = False
            self._loading_since = None   # this server's load, not the last one's
            self._endpoint = None     # this server's own "listening on" line says where (port 0: a new one each time)
        self._event(f"server started (pid {proc.pid}): {' '.join(self.command)}")
        if untied:
            self._event(f"the server may outlive a crashed app: {untied}")
        threading.Thread(target=self._pump, args=(proc,), name="strata-server-log", daemon=True).start()
        return proc

    def _pump(self, proc: subprocess.Popen) -> None:
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
                        with self._lock:
                            stopping = self._state == "stopping"
                        if stopping:   # the status bar shows how far the stop is ("... 1.2 of 4.7 GiB written")
                            self._set("stopping", self._last_line)
                on_disk = keeps_on_disk(line)
                if on_disk is not None:
                    self._on_disk = on_disk
                m = LISTENING.search(line)
                if m:
                    with self._lock:
                        self._endpoint = connect_address(m.group(1))

    def _wait_healthy(self, proc: subprocess.Popen) -> bool:
        """Until the server serves (True), or ends, or is stopped, or is silent too long (killed; False); while it
        answers "loading" the state's detail says so (restart_policy.wait_for_health)."""
        answered = time.monotonic()
        self._silent = ""
        with self._lock:
            self._loading_since = None
        while proc.poll() is None and not self._stop.is_set():
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
            if verdict.state == "loading":
                with self._lock:
                    starting = self._state == "starting"
                    if starting and self._loading_since is None:   # a big model's load takes minutes: its time is shown
                        self._loading_since = now
                if starting:
                    self._set("starting", verdict.reason)
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
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _set(self, state: str, detail: str) -> None:
        with self._lock:
            changed = (state, detail) != (self._state, self._detail)
            self._state, self._detail = state, detail
        if changed:
            self._event(f"{state}: {detail}")

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
