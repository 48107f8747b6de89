"""`strata-app`: what the user double-clicks. First run: the setup wizard; then the server starts in the
background (restarted when it dies, stopped on quit), the monitor window opens, and a tray icon
offers the address, the monitor, restart and quit. A second launch brings the running one forward.

Also `strata-app --strata-cli ARGS...` runs the `strata` command itself: the packaged app has no
Python of its own to run `strata serve` with, so the supervisor starts the app's own executable so.
Not here: the supervisor (supervisor.py), the window (strata.monitor.window).
"""

from __future__ import annotations

import argparse
import functools
import logging
import logging.handlers
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from strata import folders


def log_dir() -> Path:
    return folders.log_dir()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="strata-app", description="Strata: the local model server and its monitor.",
        epilog="Any other option goes to `strata serve` (e.g. `strata-app --batch 4`; `--` separates them "
               "explicitly). `strata-app --strata-cli ARGS...` runs the `strata` command itself (the packaged "
               "app's way to reach it).")
    p.add_argument("--config", metavar="PATH", default=None,
                   help="configuration file (default: $STRATA_CONFIG, else the one `strata setup` writes); "
                        "the setup wizard opens when it does not exist")
    p.add_argument("--theme", choices=("system", "light", "dark"), default="system",
                   help="colours (default: follow the system's light/dark setting)")
    p.add_argument("--log-dir", metavar="PATH", default=None, help=f"log folder (default: {log_dir()})")
    p.add_argument("--hidden", action="store_true", help="start in the tray without opening the monitor")
    return p


def split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The app's own options, and the rest, which go to `strata serve` (`./run --batch 4` with a display);
    a `--` separates them explicitly."""
    if "--" in argv:
        i = argv.index("--")
        return build_parser().parse_args(argv[:i]), argv[i + 1:]
    return build_parser().parse_known_args(argv)


class AppLogHandler(logging.handlers.RotatingFileHandler):
    """app.log, rotated at its size; a rotation the system refuses leaves the lines in app.log (tried again at the
    next line) instead of losing them. Windows refuses to rename a file another process has open, and two apps
    write app.log while a second launch waits for a quitting one (up to 15 minutes): each line past the size
    then failed its rotation and was dropped ('--- Logging error ---' on a standard error a windowed app lacks).
    app.log is moved aside before the backups shift: the base class shifts them first, so each refused try lost
    the oldest backup."""

    def doRollover(self) -> None:
        if self.backupCount <= 0:
            return super().doRollover()
        if self.stream:
            self.stream.close()
            self.stream = None
        aside = self.baseFilename + ".rotating"
        try:
            if os.path.exists(aside):            # left by a backup held open at an earlier rotation (rare)
                os.remove(aside)
            self.rotate(self.baseFilename, aside)    # the one rename another app's open app.log makes Windows refuse
        except OSError:
            self.stream = self._open()           # the line goes on at the end of the same file; tried at the next
            return
        try:
            for i in range(self.backupCount - 1, 0, -1):
                older = self.rotation_filename(f"{self.baseFilename}.{i}")
                if os.path.exists(older):
                    os.replace(older, self.rotation_filename(f"{self.baseFilename}.{i + 1}"))
            os.replace(aside, self.rotation_filename(self.baseFilename + ".1"))
        except OSError:
            pass                                 # a backup held open: app.log.rotating keeps those lines
        self.stream = self._open()


def setup_logging(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "app.log"
    handler = AppLogHandler(path, maxBytes=2 * 1024 * 1024, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("strata.app")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    return path


def say(text: str) -> None:
    """A message for a terminal when there is one (a GUI launch on Windows has no stdout)."""
    if sys.stderr is not None:
        try:
            print(text, file=sys.stderr)
        except OSError:
            pass


def server_alone(strata: str, frozen: bool, windows: bool | None = None) -> str:
    """How to run the server without the window, in this user's own command: the packaged app has no
    `strata` on PATH (it said `strata serve`, 'command not found') and no checkout with ./run. On Windows
    a quoted program is given in PowerShell's form too (`installer.cli.powershell_form`)."""
    from strata.installer.cli import powershell_form

    line = f"{strata} serve"
    powershell = powershell_form(line, windows)
    return (f"run the server alone with `{line}`" + (f" (in PowerShell: `{powershell}`)" if powershell else "")
            + ("" if frozen else " (`./run` does so where there is no display)"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--strata-cli"]:
        from strata.cli import main as strata_main

        return strata_main(argv[1:])
    args, serve_args = split_args(argv)
    folder = Path(args.log_dir) if args.log_dir else log_dir()
    setup_logging(folder)
    log = logging.getLogger("strata.app")
    try:
        from strata.app.restart_policy import RestartConfig

        restart = RestartConfig.from_env()
    except ValueError as e:
        say(f"strata-app: {e}")
        log.error("%s", e)
        return 2

    from strata.cli import HEADLESS, headless

    if headless(os.environ, sys.platform):   # Qt would abort (SIGABRT) advising a reinstall
        from strata.installer.cli import strata_command

        say(f"strata-app: {HEADLESS}: start it on a desktop, or "
            + server_alone(strata_command(), bool(getattr(sys, "frozen", False))))
        log.error("no display: not started")
        return 2

    from PySide6.QtWidgets import QApplication
    from strata.monitor.gui_thread_gc import GuiThreadCollector

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Strata")
    app.setDesktopFileName("strata")   # resources/strata.desktop: Wayland's app id, so the window takes its icon
    from PySide6.QtGui import QIcon

    # every window's, the first-run wizard's and the quit-wait window's too: they have no parent to take it from (on
    # X11 and Windows they showed the generic icon; only the monitor window set its own)
    icon = Path(__file__).resolve().parents[1] / "resources" / "strata.png"
    if icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    app.setQuitOnLastWindowClosed(False)
    collector = GuiThreadCollector(app)    # Qt objects in reference cycles are freed on this thread only
    try:
        return run_app(app, args, serve_args, folder, restart, log)
    finally:
        collector.stop()


def polite_stop(controller, log: logging.Logger) -> Callable[..., None]:
    """SIGINT / SIGTERM: the first quits as the tray's Quit does (the server's stop off the GUI thread, so the
    app still draws the stop's progress and tells a second launch it is quitting: the loop ended at once before
    and, with a tray, the stop ran with nothing answering, so a launch meanwhile was told 'brought forward' by an
    app about to go); a second hides the window and the tray at once, the loop running on until the stop ends
    it. (The second ended the loop: the stop then ran in main's `finally` with nothing answering again, the
    window left drawn but dead; the process could not end sooner either way, the server being its child.)"""
    signals: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        signals.append(signum)
        controller.quit()             # once: a later call finds the stop under way
        if len(signals) == 2:
            log.info("a second signal: the window and the tray go now; the server's stop goes on")
            controller.window.hide()
            if controller.tray is not None:
                controller.tray.hide()
    return handler


def run_app(app, args: argparse.Namespace, serve_args: list[str], folder: Path, restart, log: logging.Logger) -> int:
    """From a running QApplication to the app's exit status: one instance, the wizard on a first run, then
    the controller until quit."""
    from strata.app.quit_wait import wait_for_quitting_app
    from strata.app.single_instance import SingleInstance, ask_running_instance, instance_name

    name = instance_name()
    answer = ask_running_instance(name)
    if answer == "quitting":
        say("strata-app: the running app is quitting; this one starts when it has ended")
        log.info("second launch: the running app is quitting; waiting for it to end")
        answer = wait_for_quitting_app(name)
        if answer == "cancelled":
            log.info("second launch: the wait for the quitting app was cancelled; not started")
            return 1
        if answer == "quitting":
            say("strata-app: the running app is still quitting; try again when it has ended")
            log.warning("second launch: the running app was still quitting after the wait; not started")
            return 1
    if answer is not None:
        say("strata-app: already running; it has been brought forward")
        log.info("second launch: asked the running app to come forward")
        return 0

    # listening from the start, the first-run wizard included: a second launch during the wizard opened a wizard
    # of its own (a second bench loading the model beside the first's), and both then started a server on one port
    come_forward: list[Callable[[], bool]] = [lambda: True]
    try:
        single = SingleInstance(name, lambda: come_forward[0]())
    except OSError as e:
        log.warning("%s; a second launch will start a second app", e)
        single = None
    try:
        return run_configured(app, args, serve_args, folder, restart, log, come_forward)
    finally:
        if single is not None:
            single.close()


def run_configured(app, args: argparse.Namespace, serve_args: list[str], folder: Path, restart, log: logging.Logger,
                   come_forward: list[Callable[[], bool]]) -> int:
    """The wizard on a first run, then the controller until quit; `come_forward[0]` is what a second launch's
    knock does meanwhile (the wizard's window, then the controller's)."""
    from strata.installer.config_file import configured_path

    config_path = Path(args.config).expanduser() if args.config else configured_path()
    if not config_path.is_file():
        log.info("no configuration at %s: first run, showing the setup wizard", config_path)
        from strata.app.controller import bring_forward
        from strata.installer.wizard import run_wizard

        def opened(wizard) -> None:
            come_forward[0] = functools.partial(bring_forward, wizard)

        written = run_wizard(None, config_path, on_open=opened)
        come_forward[0] = lambda: True          # the wizard is gone; the window is not there yet
        if written is None:
            log.info("setup cancelled")
            return 1
        config_path = Path(written)

    from strata.app.controller import AppController

    if serve_args:
        log.info("options for the server: %s", " ".join(serve_args))
    controller = AppController(config_path, folder, theme=args.theme, restart=restart,
                               serve_args=serve_args)
    come_forward[0] = controller.activate
    if controller.tray is None:
        # no tray here (e.g. some Linux desktops): closing the window quits the app, the window staying (with the
        # stop's progress) until the server has stopped
        app.setQuitOnLastWindowClosed(True)
        app.lastWindowClosed.connect(controller.shutdown)
        controller.window.may_close = controller.may_close
    else:
        controller.keep_in_tray()               # the tray keeps the app alive (the first close says so)
    # a polite stop (logout, kill, Ctrl-C) stops the server too; the process's own handlers come back at the end
    # (they stayed: a Ctrl-C after main returned, e.g. in a test run, only asked a finished Qt loop to quit)
    handler = polite_stop(controller, log)
    before = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    # a session's end (Windows: WM_ENDSESSION emits it, the process killed once it returns) or any other end of the
    # loop than Quit: the server's stop off the GUI thread, the window drawn meanwhile (shutdown's own loop)
    app.aboutToQuit.connect(controller.shutdown)
    controller.start(show=not args.hidden or controller.tray is None)
    try:
        code = app.exec()
    except KeyboardInterrupt:
        code = 0
    finally:
        controller.shutdown()
        app.aboutToQuit.disconnect(controller.shutdown)     # a later run's app (tests) holds no ended controller
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
