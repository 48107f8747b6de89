"""`strata serve`: flags, configuration, start-up checks, the listening loop, signals and the status line.

An invalid option or variable stops start-up with a message naming it (exit status 2); a model that
cannot be loaded stops the server (exit status 3), an address it cannot listen on too (4; strata/exit_status.py).
SIGINT / SIGTERM / SIGHUP (a closed terminal; not under `nohup`), on Windows Ctrl-Break and a closed console
window, a log-off or a shutdown (held for the stop up to the 5 s Windows allows: console_close.py) and, with
--stop-on-stdin-eof, the end of standard input stop it cleanly: running requests are cancelled, the engine thread joins, the histories in the
engine's contexts are parked, the cache closes. Not here: the app itself (app.py).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import ipaddress
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from strata.server import console_close
from strata.server.config import ConfigError, ServerConfig, all_options, config_from_args, validate
from strata.server.options import FLAG_REASONS, FLAG_SYNONYMS, OPTIONS, add_flags
from strata.server.stop_progress import SHUTDOWN_TIMEOUT_S

from strata.exit_status import CANNOT_LISTEN, CONFIGURATION_REFUSED, MODEL_NOT_LOADED

log = logging.getLogger("strata.server")

# what a second stop signal says while the stop keeps the conversations: it does not cut the stop short (the
# histories not yet written would be lost), and it said nothing, so the stop looked hung to a user pressing Ctrl-C
ALREADY_STOPPING = ("already stopping: the conversations are being kept for the next start (the 'stopping: keeping' "
                    "lines say how far); another Ctrl-C or stop signal does not cut that short (ending the process "
                    "now, kill, loses the histories not yet written)")

__all__ = ["FLAG_REASONS", "FLAG_SYNONYMS", "add_arguments", "run", "serve"]   # FLAG_*: strata/cli.py's hints


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH", default=None,
                        help="TOML configuration file (default: $STRATA_CONFIG, else the one `strata setup` wrote, when "
                             "it exists); flags override it")
    parser.add_argument("--no-config", action="store_true", help="ignore the default configuration file ($STRATA_CONFIG, else the one `strata setup` "
                        "wrote); not with --config")
    add_flags(parser, OPTIONS, "server and engine")
    cache_options = tuple(o for o in all_options() if o not in OPTIONS)
    if cache_options:
        add_flags(parser, cache_options, "conversation cache")


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
        validate(config)
        check_output_paths(config)
        check_test_hooks()
    except ConfigError as e:
        print(f"strata serve: {e}", file=sys.stderr)
        return CONFIGURATION_REFUSED
    logging.basicConfig(level=config.log_level.upper(), stream=sys.stderr,
                        format=log_format(status_line_shown(config)))
    if config.stop_on_stdin_eof and logging.getLogger().getEffectiveLevel() > logging.INFO:
        # under the app, which reads the server's own INFO lines (where it listens, how far its stop is): a quieter
        # log_level left it without the address (killed at its health timeout) and ended every slow stop
        log.setLevel(logging.INFO)
    try:
        status = asyncio.run(serve(config))
    except KeyboardInterrupt:           # before serve() set its handlers: asyncio.run was still building its loop
        from strata.cli import drop_half_built_quietly
        drop_half_built_quietly()
        return 0
    return end_past_a_stuck_step(status)


def end_past_a_stuck_step(status: int) -> int:
    """`status`, or the process ended here with it when an engine call the stop gave up as stuck is still running
    (the engine's thread alive): the interpreter is not torn down under it. Such a call that returned while the
    interpreter finalized aborted the process ('terminate called without an active exception': Python sends a
    thread that wants the GIL then out with pthread_exit, whose unwinding cannot pass the binding's GIL guard),
    so a server that had stopped cleanly died of SIGABRT at its very end. Everything is closed by then (the
    cache, the timeline; the log is flushed here), and the engine's memory is the process's to give back."""
    from strata.server.scheduler import ENGINE_THREAD

    if not any(t.name == ENGINE_THREAD and t.is_alive() for t in threading.enumerate()):
        return status
    log.warning("stopping: the engine call given up as stuck is still running; the process ends without waiting "
                "for it")
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):    # a closed or broken stream: nothing more to say there
            pass
    os._exit(status)


async def serve(config: ServerConfig, *, ready_file: Any = None) -> int:
    from strata.server.preflight import preflight

    checked = preflight(config)         # before "listening on": the model, --backend, the memory check
    if checked.status:
        log.error("%s", checked.error)
        return checked.status
    claimed = claim_cache_folders(config)   # before the model loads: a second server of it on a level's folder
    if isinstance(claimed, str):
        log.error("%s", claimed)
        return CONFIGURATION_REFUSED
    try:
        return await _serve_checked(config, checked, claimed)
    finally:
        from strata.server.cache import server_lock

        for key in claimed:               # after the cache's close: its stop has written what it keeps
            server_lock.release(key)


def claim_cache_folders(config: ServerConfig) -> list[str | None] | str:
    """Hold the disk levels', segment tier's and system-prompt cache's folders for this model for the server's life
    (server/cache/server_lock.py): the claims to release, or the message that refuses the start where another
    server of the model holds one."""
    try:
        from strata.server.cache import CacheConfig, server_lock
    except ImportError:                 # no cache in this build: nothing is kept on disk
        return []
    from strata.engine import GGUFFile, model_identity
    from strata.server.app import model_path

    levels = CacheConfig.from_values(config.values, environ=config.env)
    if not server_lock.held_folders(levels):
        return []
    path = model_path(config)
    try:
        return server_lock.claim_folders(levels, model_identity(path, GGUFFile(path).data_offset))
    except server_lock.FolderInUse as e:
        return str(e)


async def _serve_checked(config: ServerConfig, checked: Any, claimed: list[str | None]) -> int:
    """`serve` once the model, the machine and the cache's folders (`claimed`: their locks) are checked."""
    from strata.server.app import init_app
    from strata.server.keys import STATE

    for warning in checked.warnings:
        log.warning("%s", warning)
    if not checked.pack_weights:
        config = config.replace(pack_weights=False)
    empty_variable = empty_key_variable_warning(config)
    if empty_variable:
        log.warning("%s", empty_variable)
    too_many = threads_warning(config.threads, os.cpu_count())
    if too_many:
        log.warning("%s", too_many)
    if config.config_path:
        from strata.installer.config_file import earlier_setup_note

        older = earlier_setup_note(config.config_path)   # it starts on it; the line says what it is missing
        if older:
            log.info("%s", older)
    busy = port_taken(config.host, config.port)
    if busy:                            # before the app starts loading the model in the background
        log.error("cannot listen on %s:%s: %s", config.host, config.port, busy)
        return CANNOT_LISTEN
    app = init_app(config)
    state = app[STATE]
    stop = asyncio.Event()
    failed = False
    loop = asyncio.get_running_loop()

    def on_load_error() -> None:
        nonlocal failed
        failed = True
        loop.call_soon_threadsafe(stop.set)

    state.on_load_error = on_load_error
    if config.stop_on_stdin_eof:
        watch_stdin(lambda: loop.call_soon_threadsafe(stop.set))
    said_already = False

    def on_stop_signal() -> None:
        nonlocal said_already
        if not (state.ready or state.load_error):
            if stop.is_set():            # a second Ctrl-C while loading: nothing served yet, nothing to keep
                log.warning("stopped while loading the model")
                os._exit(130)
            log.info("stopping once the model has loaded (it cannot be interrupted; a second Ctrl-C or stop signal "
                     "quits now, nothing is lost: no conversation has been served yet)")
        elif stop.is_set() and not said_already:
            # a second Ctrl-C while the stop writes the conversations (a big model's: minutes) went unanswered
            said_already = True
            log.info("%s", ALREADY_STOPPING)
        stop.set()

    restore_signals = on_stop_signals(loop, on_stop_signal)
    close_hold = console_close.ConsoleCloseHold(lambda: loop.call_soon_threadsafe(on_stop_signal))
    unregister_hold = console_close.register(close_hold)

    def stop_ended() -> None:
        unregister_hold()
        close_hold.stopped()        # a closed console window waiting for the stop lets Windows end the process
        restore_signals()
    # keepalive_timeout: aiohttp's AppRunner kept a connection that sends no request for 3,630 s (run_app's is 75 s);
    # a thousand held a desktop's whole soft file limit for an hour, to any client that can connect, key or not
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S,
                           keepalive_timeout=config.idle_connection_s)
    await runner.setup()
    site = listen_site(runner, config.host, config.port)
    try:
        await site.start()
    except OSError as e:
        log.error("cannot listen on %s:%s: %s (%s)", config.host, config.port, e.strerror or e,
                  bind_hint(e.errno, config.port))
        await runner.cleanup()
        stop_ended()
        return CANNOT_LISTEN
    port = runner.addresses[0][1] if runner.addresses else config.port
    if config.port == 0:
        from strata.server.app import info_line

        state.config = config.replace(port=port)
        if state.ready:
            state.info_line = info_line(state)
    open_door = open_network_warning(config.host, config.api_key)   # once it listens there
    if open_door:
        log.warning("%s", open_door)
    log.info("listening on %s (loading the model)", config.url(port))
    status_task = asyncio.create_task(status_line(state, stop)) if status_line_shown(config) else None
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        if claimed:                     # its locks say so: a start refused for them meanwhile waits for this one
            from strata.server.cache import server_lock

            server_lock.say_stopping(claimed)
        if status_task is not None:
            status_task.cancel()
        try:
            await runner.cleanup()
        finally:
            stop_ended()
    return MODEL_NOT_LOADED if failed else 0


def on_stop_signals(loop: asyncio.AbstractEventLoop, on_stop: Callable[[], None]) -> Callable[[], None]:
    """`on_stop` called on the loop at each of `stop_signals()`; returns what puts back the handlers it replaced.
    The loop's own handlers where it has them (POSIX); Windows' event loops have none (NotImplementedError), so
    there the process's handler hands the call to the loop, which a signal wakes (the proactor loop's wakeup
    fd). Before, Windows had no handler at all: Ctrl-C took asyncio.run's way (the server task cancelled, its
    second Ctrl-C while loading not the quick quit it is elsewhere), and Ctrl-Break (SIGBREAK) ended the process
    at once, nothing parked. A closed console window is held until the stop ends (server/console_close.py)."""
    replaced: dict[int, Any] = {}
    for sig in stop_signals():
        try:
            loop.add_signal_handler(sig, on_stop)
        except (NotImplementedError, RuntimeError):
            try:
                replaced[sig] = signal.signal(sig, lambda _sig, _frame: loop.call_soon_threadsafe(on_stop))
            except (OSError, ValueError):   # not the main thread (a test's server): nothing to catch it with
                pass

    def restore() -> None:
        for sig, handler in replaced.items():
            signal.signal(sig, handler)
    return restore


def stop_signals() -> list[signal.Signals]:
    """The signals that stop the server cleanly: SIGINT, SIGTERM and SIGHUP (the terminal `./run` runs in
    was closed; its default action killed the server with no histories parked), unless SIGHUP is ignored,
    as `nohup` leaves it: then the server is meant to outlive its terminal. On Windows SIGBREAK: Ctrl-Break.
    A closed console window (CTRL_CLOSE_EVENT), a log-off or a shutdown is not caught so: the C runtime reports
    a close as SIGBREAK too, but its console handler only sets Python's flag and returns, and Windows ends the
    process as soon as a handler returns (it waits up to 5 s only for one that has not), before the stop has
    begun. serve() puts a console handler of its own first (server/console_close.py) that starts the stop and
    holds the event until the stop has ended or CLOSE_HOLD_S has passed."""
    signals = [signal.SIGINT, signal.SIGTERM]
    for name in ("SIGHUP", "SIGBREAK"):     # SIGHUP not on Windows, SIGBREAK only there
        other = getattr(signal, name, None)
        if other is not None and signal.getsignal(other) is not signal.SIG_IGN:
            signals.append(other)
    return signals


def check_output_paths(config: ServerConfig) -> None:
    """Files the server will write, opened once now so that a bad path stops start-up naming the flag
    (it stopped the model load later, reported as "the model could not be loaded"). Creates the
    --timeline-out file when missing, as the server would at once anyway."""
    if config.timeline_out:
        try:
            with open(config.timeline_out, "a", encoding="utf-8"):
                pass
        except OSError as e:
            hint = " (its folder must exist)" if e.errno == errno.ENOENT else ""
            raise ConfigError(f"--timeline-out {config.timeline_out}: cannot write there: "
                              f"{e.strerror or e}{hint}") from None


def check_test_hooks() -> None:
    """The tests' own variables, read before the model loads so that a bad one stops start-up as a setting
    (it was reported after the load, as the cache was built)."""
    from strata.server.cache.fileio import file_io_from_env
    try:
        file_io_from_env()
    except ValueError as e:
        raise ConfigError(str(e)) from None


def threads_warning(threads: int | None, n_cpus: int | None) -> str | None:
    """What to say when --threads asks for more threads than the machine has logical cores, or None: they
    take turns on the cores and every step waits for the slowest (on 2 cores, 4 threads decoded the default
    model at 300 tok/s against 2 threads' 419, `strata bench --quick`)."""
    if threads is None or not n_cpus or threads <= n_cpus:
        return None
    return (f"--threads {threads} is more than this machine's {n_cpus} logical cores: the threads take turns "
            f"and run slower; leave --threads unset for the engine's choice (one per physical core)")


def empty_key_variable_warning(config: ServerConfig) -> str | None:
    """What to say when STRATA_API_KEY is set but empty, or None. It counts as unset (an environment that
    clears a variable by emptying it), but a user who wrote STRATA_API_KEY=$KEY with KEY unset believed the
    server protected: the line says which key, if any, the server asks for instead."""
    if config.env.get("STRATA_API_KEY") != "":
        return None
    said = "STRATA_API_KEY is set but empty: taken as unset, so "
    if config.api_key is None:
        return said + ("the server asks for no API key (every endpoint is open); set STRATA_API_KEY to the key, "
                       "or unset it")
    if "api_key" in config.keys_from_file:
        return said + f"the key is the api_key of {config.config_path}"
    return None                         # --api-key gave the key: the variable was never going to count


def open_network_warning(host: str, api_key: str | None) -> str | None:
    """What to say when the server listens beyond this machine with no API key, or None: anyone who can
    reach the port runs the model and reads the prompts' excerpts in /v1/monitor."""
    if api_key or host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:              # a host name, or "": may be any interface
        pass
    return (f"--host {host} listens beyond this machine with no --api-key: anyone who can reach it can use the "
            f"model and read prompt excerpts in /v1/monitor; set --api-key (or STRATA_API_KEY), or keep --host "
            f"127.0.0.1")


def reuse_address() -> bool:
    """Whether the listening socket (and port_taken's probe) set SO_REUSEADDR: on POSIX, as asyncio does by
    default (a restarted server rebinds a port in TIME_WAIT); never on Windows, where SO_REUSEADDR lets a
    second socket bind a port that another server is listening on, so a second `strata serve` on the same
    port started without an error and the two shared the connections."""
    return os.name == "posix"


def listen_site(runner: web.AppRunner, host: str, port: int) -> web.TCPSite:
    return web.TCPSite(runner, host, port, reuse_address=reuse_address())


def port_taken(host: str, port: int) -> str | None:
    """Why (host, port) cannot be bound now, with what to do about it, or None. Checked before the model
    loads, so a busy port stops start-up at once; binding can still fail later (a race), which the
    listening code handles. Port 0 (any free port) is bound too: that checks the host."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        return f"{e.strerror or e} ({HOST_HINT})"
    except UnicodeError:                # a name the resolver cannot even encode, e.g. "a..b"
        return f"{host!r} is not a valid host name ({HOST_HINT})"
    for family, kind, proto, _, address in infos:
        try:
            s = socket.socket(family, kind, proto)
        except OSError:                 # a family this machine lacks: asyncio skips it too
            continue
        with s:
            if reuse_address():         # as the server's own socket (listen_site)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(address)
            except OSError as e:
                return f"{e.strerror or e} ({bind_hint(e.errno, port)})"
    return None


WSAEACCES = 10013                   # Windows: a port in an excluded range, or one held exclusively
HOST_HINT = "--host takes an address of this machine: 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"


def bind_hint(errno_value: int | None, port: int) -> str:
    """What to do when binding failed with this errno."""
    if errno_value == errno.EADDRINUSE:
        return "is another server running there? --port chooses another"
    if errno_value == errno.EACCES and 0 < port < 1024:
        return "ports below 1024 need administrator rights: --port chooses another, e.g. 8080"
    if errno_value == errno.EADDRNOTAVAIL:
        return HOST_HINT
    if errno_value == WSAEACCES:
        return ("Windows reserves some port ranges (Hyper-V, WSL, Docker; `netsh interface ipv4 show "
                "excludedportrange protocol=tcp` lists them): --port chooses another")
    return "--host and --port choose another address"


def watch_stdin(on_eof: Callable[[], object]) -> None:
    """Calls on_eof when standard input reaches its end (the parent closed the pipe, or exited): a clean
    stop that works where signals do not (Windows)."""
    if sys.stdin is None:              # a windowed process without one: nothing to watch, keep running
        log.warning("--stop-on-stdin-eof: this process has no standard input; stop it with a signal")
        return
    try:
        fd = sys.stdin.fileno()
    except (OSError, ValueError):      # replaced by an object without a descriptor: nothing to watch
        log.warning("--stop-on-stdin-eof: standard input has no file descriptor; stop the server with a signal")
        return

    def read_to_eof() -> None:
        # os.read, not sys.stdin.buffer.read: a read blocked in the buffered reader holds its lock, and a
        # stop by a signal then ended in "Fatal Python error: could not acquire lock for <stdin> at
        # interpreter shutdown" (SIGABRT, exit status 134) when the interpreter closed stdin
        try:
            while _read_some(fd):
                pass
        except (OSError, ValueError):
            pass
        log.info("standard input closed: stopping")
        on_eof()

    threading.Thread(target=read_to_eof, name="strata-stdin", daemon=True).start()


def _read_some(fd: int) -> bytes:
    """Up to 4 KiB of `fd`, blocking until some come or the input ends (b""). A descriptor left non-blocking
    (O_NONBLOCK belongs to the open pipe or terminal, shared with whoever else holds it) raised
    BlockingIOError at once, taken for the end: the server stopped as it started."""
    while True:
        try:
            return os.read(fd, 4096)
        except BlockingIOError:
            if os.name == "nt":          # select takes only sockets there
                raise
            select.select([fd], [], [])


def status_line_shown(config: ServerConfig) -> bool:
    """--status-line on a terminal that shows its erase-line escapes (a Windows console once its virtual-terminal
    mode is on: strata/terminal_escapes.py); elsewhere the log lines alone, without the escapes."""
    if not (config.status_line and sys.stderr.isatty()):
        return False
    from strata.terminal_escapes import escapes_shown
    try:
        return escapes_shown(sys.stderr.fileno())
    except (OSError, ValueError):    # a stream without a descriptor
        return False


def log_format(clear_status_line: bool) -> str:
    """The log line format; under a live status line each log line first erases it (carriage return,
    erase line), so that a log line never starts in the middle of the status text."""
    return ("\r\x1b[2K" if clear_status_line else "") + "%(asctime)s %(levelname)s %(name)s: %(message)s"


def terminal_columns() -> int:
    """stderr's width now (read each time: a resized window). A status line wider than the terminal wraps, and
    the next update's erase-line clears only its last row: the rest stays behind, a line a second."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        return 80
    return max(columns, 20) if columns else 80   # 0: a terminal that has no size set


async def status_line(state: Any, stop: asyncio.Event) -> None:
    """A live one-line status on stderr, about once a second (only when stderr is a terminal)."""
    last_gen, last_t = 0, time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(1.0)
        sched = state.scheduler
        if not state.ready or sched is None:
            line = "strata: loading the model..." if not state.load_error else f"strata: {state.load_error}"
        else:
            m = state.metrics.snapshot()
            now = time.monotonic()
            gen = m["generated_tokens_total"]   # counted as each token is made
            rate = (gen - last_gen) / max(now - last_t, 1e-6)
            last_gen, last_t = gen, now
            busy = sum(1 for s in sched.slots_view() if s["state"] in ("prefill", "decode"))
            total_prompt = m["prompt_tokens_total"]
            hit = 100.0 * m["prompt_tokens_reused"] / total_prompt if total_prompt else 0.0
            done = sum(m["requests_total"].values())   # finished ones ("1 running ... 0 requests" misled)
            line = (f"strata: {busy} running, {sched.queue_depth} queued, {done} done | {rate:.1f} tok/s | "
                    f"prompt reuse {hit:.0f}%")
        sys.stderr.write("\r\x1b[2K" + line[:terminal_columns() - 1])
        sys.stderr.flush()
    sys.stderr.write("\n")
