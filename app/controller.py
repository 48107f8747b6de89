"""The app's controller: ties the server supervisor, the monitor (model, feed client, window) and the
tray together, and shows the server's state and restarts in the window's status bar.

Qt glue only: the supervisor and the feed client do their work on their own threads; a timer here
reads their state. Not here: the first-run wizard and the command line (main.py).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from pathlib import Path

from PySide6.QtCore import QEventLoop, QObject, Qt, QThread, QTimer, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QGuiApplication, QIcon, QKeySequence
from PySide6.QtWidgets import QApplication, QDialog, QLabel, QPushButton, QSystemTrayIcon
from strata.app import left_behind, model_file
from strata.app.background_look import BackgroundLook
from strata.app.restart_policy import (
    FREE_PORT,
    GAVE_UP,
    RestartConfig,
    notify_restarts,
    offers_setup_again,
    setup_needs_look,
    setup_restarts,
)
from strata.app.supervisor import (
    STOP_FAILED,
    ServerStatus,
    ServerSupervisor,
    look_unfinished,
    server_command,
    stop_left_behind,
    wait_over,
    waiting_title,
)
from strata.app.tray import Tray
from strata.monitor import units
from strata.monitor.client import FeedClient
from strata.monitor.model import MonitorModel
from strata.monitor.window import MonitorWindow

POLL_MS = 300
SERVING_STATES = ("starting", "running", "restarting", "stopping")
SETUP_MESSAGE_MS = 15_000    # how long the status bar says that a Finish changed nothing (as the logs' folder line)
NO_BENCH_WHILE_SERVING = ("bench not run: the server is running, and the bench would load the model a second time "
                          "beside it and measure a busy machine; the configuration's own answers are proposed")
# where no event loop can run any more (the app's own loop told to end meanwhile): how long the app's end waits for
# its server's stop on the GUI thread, the window not redrawn; past it the app ends (supervisor.stop_left_behind)
NO_LOOP_STOP_WAIT_S = 30.0
ICON = Path(__file__).resolve().parents[1] / "resources" / "strata.png"
log = logging.getLogger("strata.app")


class AppController(QObject):
    def __init__(self, config_path: Path | None, log_dir: Path, *, theme: str = "system",
                 restart: RestartConfig | None = None, command: list[str] | None = None,
                 api_key: str | None = None, serve_args: list[str] | None = None) -> None:
        super().__init__()
        if command is None:
            command = server_command(config_path, tuple(serve_args or ()))
        # the probe holds no reference to this controller: a lambda over `self` made the controller, its window
        # and its widgets a reference cycle, freed by the cyclic collector in whichever thread it runs (the
        # supervisor's, the feed's): Qt objects destroyed off the GUI thread crash or hang the process
        self.supervisor = ServerSupervisor(config_path, log_dir, restart=restart, command=command,
                                           options=tuple(serve_args or ()), api_key=api_key,
                                           model_probe=functools.partial(model_file.look_for_configured_model,
                                                                         config_path, tuple(serve_args or ())),
                                           key_probe=functools.partial(model_file.configured_key,
                                                                       config_path, tuple(serve_args or ())))
        self.model = MonitorModel()
        self.client: FeedClient | None = None
        self.window = MonitorWindow(self.model, theme=theme, title="Strata")
        self.status_label = QLabel("Server: starting")
        # one line (a wrapped label made the status bar, and the window, taller than a 768-px screen); a
        # failure's whole reason is in the header, which wraps it to the window's width, and in the tooltip
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.window.statusBar().addWidget(self.status_label, 1)
        # the way out of an address the server cannot listen on (another server holds the port)
        self.free_port_button = QPushButton("Start on a free port")
        self.free_port_button.setToolTip("Start the server on any free port until the app quits (Copy address gives "
                                         "clients the new one); `port` in the configuration file sets it for good")
        self.free_port_button.clicked.connect(self.restart_on_free_port)
        self.free_port_button.setVisible(False)
        self.window.statusBar().addPermanentWidget(self.free_port_button)
        # where a reason says "run the setup again": the wizard, from the app (a packaged app has no terminal)
        self.config_path = config_path
        self.setup_wizard = None
        self.setup_button = QPushButton("Set up again\u2026")
        self.setup_button.setToolTip("The setup wizard on the configuration file, its answers proposed; Finish "
                                     "writes it and restarts the server on it")
        self.setup_button.clicked.connect(self.setup_again)
        self.setup_button.setVisible(False)
        self.window.statusBar().addPermanentWidget(self.setup_button)
        # the window's own menu: the tray's actions where there is no tray (some Linux desktops)
        server_menu = self.window.menuBar().addMenu("&Server")
        self.restart_action = QAction("Restart server", self.window)
        self.restart_action.triggered.connect(self.restart_server)
        self.setup_action = QAction("Set up again\u2026", self.window)
        self.setup_action.triggered.connect(self.setup_again)
        server_menu.addAction(self.restart_action)
        server_menu.addAction(self.setup_action)
        # where app.log and server.log are: a failure's reason shows the server's last line, the log all of them
        self.logs_action = QAction("Open log folder", self.window)
        self.logs_action.setToolTip(f"app.log and server.log, in {self.supervisor.log_dir}")
        self.logs_action.triggered.connect(self.open_log_folder)
        server_menu.addAction(self.logs_action)
        server_menu.addSeparator()
        # the tray's Quit; without a tray closing the window does the same, with one it only hides the window
        self.quit_action = QAction("Quit Strata", self.window)
        self.quit_action.setShortcut(QKeySequence("Ctrl+Q"))   # Cmd+Q on macOS; the standard key has none on Windows
        self.quit_action.triggered.connect(self.quit)
        server_menu.addAction(self.quit_action)
        icon = QIcon(str(ICON)) if ICON.is_file() else QIcon()
        self.tray: Tray | None = None
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.tray = Tray(icon, on_open=self.open_monitor, on_copy=self.copy_endpoint,
                             on_restart=self.restart_server, on_quit=self.quit, on_setup=self.setup_again)
        self._shown_restarts = 0
        self._restart_thread: threading.Thread | None = None
        self._unfollowed_run: int | None = None    # the server the app is stopping (ServerStatus.run): not followed
        self._last_state = ""
        self._waited_for = ""      # the detail of the last "waiting" polled: what app.log says has ended
        # the (life, state) last polled: a state's notification is raised as it begins, once in its life. Not
        # _last_state, which a stop sets to "stopping" ahead of the supervisor: a Restart while "failed" (nothing to
        # stop, so no "stopping" shown) found "failed" again, and said the server was down a second time
        self._seen = (0, "")
        self._said_stop_failed = 0        # the life whose failed stop was said (a Quit after it does not say it again)
        self._shut = False
        self._shutting = False               # shutdown under way (it waits for the stop in a loop of its own)
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        self._quit_thread: threading.Thread | None = None
        self._said_quitting = False          # "a second launch is waiting" said once, not at each of its polls
        self._said_in_tray = False           # the first close into the tray says the app runs on; later ones not
        # Set up again's Finish waiting for its look at the model file (a drive that does not answer: for ever): the
        # look, and the file Finish wrote with its text, decided on by `poll` once the look has ended
        self._setup_look: BackgroundLook | None = None
        self._setup_written: tuple[Path, str | None] | None = None
        self._said_setup_slow = False
        self._quit_timer = QTimer(self)
        self._quit_timer.setInterval(POLL_MS)
        self._quit_timer.timeout.connect(self._quit_when_stopped)

    def keep_in_tray(self) -> None:
        """Closing the window hides it, the tray keeping the app (and its server) running; the first close says so.
        Nothing did: a new user closed the window, took Strata for quit, and its server went on holding the port and
        the memory (a new-user trial, session 39)."""
        self.window.hide_on_close = True
        self.window.on_hidden = self._hidden_to_tray

    def _hidden_to_tray(self) -> None:
        if self.tray is None or self._said_in_tray or self._quit_thread is not None or self._shut:
            return
        self._said_in_tray = True
        self.tray.notify("Strata is still running", in_tray_text(self.supervisor.status()), warning=False)

    # -- actions ------------------------------------------------------------------------------

    def start(self, show: bool = True) -> None:
        log.info("starting the server: %s", " ".join(self.supervisor.command))
        self.supervisor.start()
        # what the window shows first, before the first poll (300 ms): a bare "connecting" otherwise
        self.model.set_connection("connecting", "starting the server")
        self.timer.start()
        if show:
            self.open_monitor()

    def activate(self) -> bool:
        """A second launch knocked: the window comes forward, or, once Quit began, False (the launch waits for
        this app to end and then starts, single_instance.py)."""
        if self._quit_thread is not None or self._shut:
            if not self._said_quitting:
                self._said_quitting = True
                log.info("a second launch is waiting for this app to end")
            return False
        self.open_monitor()
        return True

    def open_monitor(self) -> None:
        bring_forward(self.window)

    def copy_endpoint(self) -> None:
        endpoint = self.supervisor.status().endpoint
        if endpoint:
            QGuiApplication.clipboard().setText(endpoint)

    def open_log_folder(self) -> None:
        """The log folder in the desktop's file manager; where there is none, the status bar names the folder."""
        folder = self.supervisor.log_dir
        folder.mkdir(parents=True, exist_ok=True)
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            log.warning("could not open the log folder %s", folder)
            self.window.statusBar().showMessage(f"The logs are in {folder} (app.log, server.log)", 15_000)

    def restart_server(self) -> None:
        log.info("restart requested by the user")
        self._in_background(self.supervisor.restart)

    def restart_on_free_port(self) -> None:
        log.info("restart on a free port requested by the user")
        self.free_port_button.setVisible(False)
        self._in_background(self.supervisor.restart_on_free_port)

    def setup_again(self) -> None:
        """"Set up again…": the setup wizard on the configuration file, its answers proposed (a re-run then Finish
        changes nothing); Finish writes it, keeping the keys setup does not decide, and the server restarts on it
        off the GUI thread, as Restart does; Cancel changes nothing and the server keeps running. Not modal to the
        app's loop: the status keeps being polled meanwhile."""
        if self._quit_thread is not None or self._shut:
            return
        if self.setup_wizard is not None:        # one at a time: the open one comes forward
            self.setup_wizard.raise_()
            self.setup_wizard.activateWindow()
            return
        from strata.installer import config_file
        from strata.installer.wizard.setup_wizard import SetupWizard

        log.info("setup again requested by the user")
        self.setup_button.setVisible(False)
        # the bench would load the model a second time beside the server's (twice its size in memory: a big
        # model's may not fit) and measure a machine busy serving: not run while a server is up
        serving = self.supervisor.status().state in SERVING_STATES
        self.setup_wizard = SetupWizard(self.window, self.config_path or config_file.configured_path(),
                                        run_bench=not serving, no_bench_reason=NO_BENCH_WHILE_SERVING)
        self.setup_wizard.setWindowModality(Qt.WindowModality.WindowModal)
        self.setup_wizard.finished.connect(self._setup_done)
        self.setup_wizard.open()

    def _setup_done(self, result: int) -> None:
        wizard, self.setup_wizard = self.setup_wizard, None
        if wizard is None:
            return
        wizard.deleteLater()
        if result != QDialog.DialogCode.Accepted.value or wizard.written is None:
            log.info("setup again cancelled: nothing changed")
            return
        try:
            written = wizard.written.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError):
            written = None
        self._setup_written = (wizard.written, written)
        serving = self.supervisor.status().state in ("starting", "running")
        # the model file looked at too (one replaced under the same path is not in the configuration's text), off
        # this thread: a model file on a drive that does not answer froze the window for as long as its stat() did
        if setup_needs_look(serving, self.supervisor.started_on(), written, self.supervisor.started_model()):
            if self._setup_look is not None:     # an earlier Finish's look has not ended: it decides for this file
                log.info("setup again wrote %s: decided once the look at the model file under way has ended",
                         wizard.written)
            else:
                self._setup_look = BackgroundLook(self.supervisor.look_at_model, name="strata-setup-look")
                self._said_setup_slow = False
            self._say_setup_look()
            return
        if self._setup_look is not None:
            # this file's configuration decides alone (it restarts, or the server is not serving): an earlier
            # Finish's look still under way (a drive not answering, perhaps for ever) held it back until it ended
            log.info("setup again wrote %s: decided without the look at the model file under way", wizard.written)
            self._setup_look = None              # its daemon thread runs out on its own; its answer is not needed
        self._apply_setup(None)

    def _say_setup_look(self) -> None:
        """The status bar while Finish's decision waits for its look at the model file: that it is checked, then,
        past the supervisor's slow_look_s, what it waits for and that the new settings are saved meanwhile."""
        look, (path, _) = self._setup_look, self._setup_written
        if look.waited_s() < self.supervisor.slow_look_s:
            text = "Set up again: checking the model file (has it changed since the server started on it?)"
        else:
            if not self._said_setup_slow:
                self._said_setup_slow = True
                waits = look_unfinished("the model file", look.begun).removesuffix("; the server starts once it has")
                log.warning("setup again: waiting %s; the new settings are saved in %s, and the server is restarted on "
                            "them once it has, if they or the model file changed", waits, path)
            # its most needed words first: the status bar's one line is cut at the window's width
            text = (f"Set up again: the model file's drive is not answering (looked at since "
                    f"{time.strftime('%H:%M:%S', time.localtime(look.begun))}); the new settings are saved, and the "
                    f"server restarts on them once it answers if needed (or now: Restart server)")
        if self.window.statusBar().currentMessage() != text:
            self.window.statusBar().showMessage(text)

    def _apply_setup(self, model_now) -> None:
        """Finish's decision on the file it wrote (the latest Finish's), `model_now` the look at the model file
        (None: not looked at), made with the running server as it is now, and applied."""
        path, written = self._setup_written
        self._setup_written = None
        serving = self.supervisor.status().state in ("starting", "running")
        decision = setup_restarts(serving, self.supervisor.started_on(), written, self.supervisor.started_model(),
                                  model_now)
        log.info("setup again wrote %s: %s", path, decision.reason)
        if not decision.restart:
            self.window.statusBar().showMessage(f"Set up again: {decision.reason}", SETUP_MESSAGE_MS)
            return
        self.window.statusBar().clearMessage()
        self.setup_button.setVisible(False)
        self._in_background(self.supervisor.restart)

    def _setup_look_polled(self) -> None:
        """Each poll while Finish waits for its look: said, or decided once the look has ended."""
        look = self._setup_look
        if look is None:
            return
        if not look.done():
            self._say_setup_look()
            return
        self._setup_look = None
        try:
            model_now = look.result()
        except Exception as e:            # a probe's fault: decided as without a look (the configuration alone)
            log.warning("setup again: the look at the model file failed: %s", e)
            model_now = None
        self._apply_setup(model_now)

    def _in_background(self, restart) -> None:
        """A restart off the GUI thread: stopping waits for the server to park its conversations (as long as
        it says how far it is, up to 10 minutes), and the window froze meanwhile. One at a time; Qt-free (the supervisor).
        None once Quit began: the server it started would load its model only to be stopped again."""
        if self._quit_thread is not None or self._shut:
            log.info("quitting: the restart is not made")
            return
        if self._restart_thread is not None and self._restart_thread.is_alive():
            log.info("a restart is already under way")
            return
        self._stop_following()
        self._restart_thread = threading.Thread(target=restart, name="strata-server-restart", daemon=True)
        self._restart_thread.start()

    def _stop_following(self) -> None:
        """Before the app stops its server (Restart, Quit): the feed client stops first and the header says what
        the app waits for. Left to the next poll, the client could find the server's address closed before the
        supervisor's state said "stopping", and the header read "disconnected - cannot reach ..." for a moment.
        No client follows this server again: `poll` follows a later start's (by its run, not its pid, which is
        gone before the new server is spawned and could come back as the new one's), at the address it gives.
        The supervisor is told at once too (ask_stop): left to the stopping thread, a poll in between showed the
        load going on ("starting: loading the model") under the header's "waiting for the server to stop"."""
        self.supervisor.ask_stop()
        self._unfollowed_run = self.supervisor.status().run
        if self.client is not None:
            self.client.stop()
            self.client = None
        self.model.set_connection("waiting", "for the server to stop")
        # as a poll would have seen it: the next poll's "starting" then says so, even when the stop ended between
        # two polls (the header said "waiting for the server to stop" while the new server started)
        self._last_state = "stopping"

    def quit(self) -> None:
        """Quit (the tray's menu): the server's stop runs off the GUI thread, so the window and the tray keep
        showing how far it is ("stopping: keeping 3 conversations ... written": a big model's take a minute or
        more); the app ends when it has. Everything else is then stopped as `shutdown` does."""
        if self._quit_thread is not None:
            return
        self._begin_stop("quitting")
        self._quit_timer.start()

    def _begin_stop(self, why: str) -> None:
        """The server's stop on a thread of its own (Quit's, and any other end of the app's)."""
        log.info("%s: stopping the server", why)
        # at once, not on the stopping thread: a restart under way (its stop shown) would start its server first
        self.supervisor.no_more_starts()
        self._stop_following()
        self._quit_thread = threading.Thread(target=self._stop_server, name="strata-server-stop", daemon=True)
        self._quit_thread.start()

    def may_close(self) -> bool:
        """The window's close without a tray: a Quit, the window kept (showing how far the stop is) until the
        server has stopped; then `_quit_when_stopped` quits the app, which closes it. A logout or SIGTERM (Qt's
        quit closes the windows first) takes the same way: its quit is refused once, the app's own follows."""
        if self._shut:
            return True
        self.quit()
        return False

    def _stop_server(self) -> None:
        self.supervisor.no_more_starts()         # a restart under way finishes its stop, not its start
        if self._restart_thread is not None:
            self._restart_thread.join()
        self.supervisor.stop()

    def _quit_when_stopped(self) -> None:
        if self._quit_thread is not None and not self._quit_thread.is_alive():
            self._quit_timer.stop()
            self.shutdown()
            QApplication.quit()

    def shutdown(self, no_loop_wait_s: float = NO_LOOP_STOP_WAIT_S) -> None:
        """Stops the server and the feed; the app's last step, whichever way it ends: after Quit's stop, at main's
        end once the Qt loop has returned, at aboutToQuit (a session's end on Windows), at the last window's close
        without a tray. Idempotent (several of those call it; app.log said "stopped" twice). A stop not yet under
        way runs as Quit's does, off the GUI thread, and is waited for in an event loop of this call's: the window
        drew nothing, its GUI thread in the stop, for as long as the stop took (up to 10 minutes). Where no loop
        can run (the app's loop was told to end meanwhile, or this is not the GUI thread) the wait is at most
        `no_loop_wait_s`, said in app.log."""
        if not no_loop_wait_s > 0:
            raise ValueError(f"no_loop_wait_s must be > 0, got {no_loop_wait_s!r}")
        if self._shutting or self._shut:
            return
        self._shutting = True
        self._quit_timer.stop()                  # its QApplication.quit() would end this call's loop
        if self.setup_wizard is not None:        # its bench is stopped and its thread joined, its file not written
            self.setup_wizard.end_now()
        if self._setup_look is not None and not self._setup_look.done():
            log.warning("the app ends during Set up again's look at the model file: the new settings are saved in "
                        "%s and read at the server's next start", self._setup_written[0])
        if self._quit_thread is None:            # a restart under way finishes its stop, not its start (there)
            self._begin_stop("the app ends")
        self._wait_for_the_stop(no_loop_wait_s)
        self._shut = True
        self.timer.stop()
        if self.client is not None:
            self.client.stop()
            self.client = None
        self._say_stop_failed(self.supervisor.status())    # a Quit's: the app ends before its next poll
        if self.tray is not None:
            self.tray.hide()
        log.info("stopped")

    def _wait_for_the_stop(self, no_loop_wait_s: float) -> None:
        """Until the stopping thread has ended: in an event loop of its own on the GUI thread (the window drawn,
        the status polled), else, with no loop to run, on this thread for at most `no_loop_wait_s`."""
        thread = self._quit_thread
        if thread is None or not thread.is_alive():
            return
        app = QApplication.instance()
        if app is not None and QThread.currentThread() == app.thread():
            loop = QEventLoop()
            check = QTimer()
            check.setInterval(POLL_MS // 3)
            check.timeout.connect(lambda: None if thread.is_alive() else loop.quit())
            check.start()
            loop.exec()                          # returns at once where the app's loop was told to end
            check.stop()
            self.poll()                          # the stop's end shown
        if thread.is_alive():
            log.warning("no event loop to keep the window drawn (the app's loop was told to end, or this is not its "
                        "thread): waiting up to %g s for the server's stop", no_loop_wait_s)
            thread.join(no_loop_wait_s)
            if thread.is_alive():
                status = self.supervisor.status()
                log.error("%s", stop_left_behind(status.pid, no_loop_wait_s))
                if status.pid is not None:    # what the next app's start, refused for its folders, says it waits for
                    left_behind.write_note(self.supervisor.log_dir, status.pid, status.detail)

    def _say_stop_failed(self, status: ServerStatus) -> None:
        """A server that outlived its kill, said once: it may still hold its port and memory (the detail says what
        to do)."""
        if status.state != "stopped" or not status.detail.startswith(STOP_FAILED) or \
                self._said_stop_failed == status.life:
            return
        self._said_stop_failed = status.life
        log.error("the server did not stop: %s", status.detail)
        self.model.set_connection("disconnected", status.detail)
        if self.tray is not None:
            self.tray.notify("Strata: the server did not stop", status.detail)

    # -- state --------------------------------------------------------------------------------

    def poll(self) -> None:
        self._setup_look_polled()
        status = self.supervisor.status()
        down = status.state == "failed"
        following = status.run != self._unfollowed_run      # not the server the app is stopping
        if following and status.endpoint and not down and (self.client is None or self.client.base != status.endpoint):
            if self.client is not None:
                self.client.stop()
            # no advice to start a server by hand (`strata serve`, which the packaged app does not even have)
            self.client = FeedClient(status.endpoint, self.model, api_key=self.supervisor.api_key,
                                     refused_hint="").start()
        text = status_text(status)
        if self.status_label.text() != text:
            self.status_label.setText(text)
            self.status_label.setToolTip(text)
            bad = status.state in ("failed", "restarting") or status.detail.startswith(STOP_FAILED)
            color = self.window.theme.bad if bad else self.window.theme.warn if status.state == "waiting" else ""
            self.status_label.setStyleSheet(f"color: {color};" if color else "")
        if status.state == "waiting":
            # no server yet, so no feed: the header says what is awaited (its detail may change: folder mounted)
            if self.client is not None:
                self.client.stop()
                self.client = None
            self.model.set_connection("waiting", status.detail)
        elif status.state == "stopping":
            # the app stops its server (Quit, Restart): no feed to follow, and the header says what it waits for;
            # it said "disconnected: cannot reach ... start one with `strata serve`" for the whole stop
            if self.client is not None:
                self.client.stop()
                self.client = None
            progress = status.detail.removeprefix("stopping: ") if status.detail.startswith("stopping: ") else ""
            self.model.set_connection("waiting", "for the server to stop" + (f": {progress}" if progress else ""))
        elif status.state == "stopped" and status.detail.startswith(STOP_FAILED):
            # the server outlived its kill: said until it is ended (a Restart's "waiting for the server to stop" was
            # left for ever when that Restart was not made)
            self.model.set_connection("disconnected", status.detail)
        # the first start too ("" before it): the header said a bare "connecting" until the server listened
        elif status.state == "starting" and self.client is None and self._last_state in ("", "waiting", "failed",
                                                                                         "stopping", "stopped"):
            self.model.set_connection("connecting", "starting the server")
        if status.state != self._last_state and self._last_state == "waiting":
            # app.log said what it waited for; now that the wait is over
            log.info("%s; server %s: %s", wait_over(self._waited_for), status.state, status.detail)
        self._last_state = status.state
        if status.state == "waiting":
            self._waited_for = status.detail
        if (status.life, status.state) != self._seen:
            self._seen = (status.life, status.state)
            self._say_stop_failed(status)
            if status.state == "waiting":
                log.warning("waiting %s", status.detail)
                if self.tray is not None:
                    self.tray.notify(waiting_title(status.detail), status.detail)
            if status.state == "failed":
                log.error("the server is down: %s", status.detail)
                # no server to reach: the header says so with the whole reason, wrapped (it said "connecting"
                # to no address, or kept retrying the old one with advice to start a server by hand, and the
                # status bar's one line cut the reason's end, what to do, off)
                if self.client is not None:
                    self.client.stop()
                    self.client = None
                self.model.set_connection("disconnected", f"server failed: {status.detail}")
                if self.tray is not None:
                    self.tray.notify("Strata: the server is down", status.detail)
        if status.restarts > self._shown_restarts:
            new, self._shown_restarts = status.restarts - self._shown_restarts, status.restarts
            log.warning("server restarted: %s", status.last_restart_reason)
            if self.tray is not None and notify_restarts(new, status.in_a_row):   # a crash loop's first only
                self.tray.notify("Strata restarted the server", status.last_restart_reason)
        offered = status.offer == FREE_PORT
        if self.free_port_button.isHidden() == offered:     # not isVisible(): false while the window is in the tray
            self.free_port_button.setVisible(offered)
        setup = offers_setup_again(status.state, status.detail) and self.setup_wizard is None
        if self.setup_button.isHidden() == setup:
            self.setup_button.setVisible(setup)
        if self.tray is not None:
            self.tray.show_status(status)


def bring_forward(widget) -> bool:
    """Shown, no longer minimized (a second launch left a minimized window minimized: show() and raise_() do
    not restore it), on top and active; True (came forward)."""
    if widget.isMinimized():
        widget.setWindowState(widget.windowState() & ~Qt.WindowState.WindowMinimized)
    widget.show()
    widget.raise_()
    widget.activateWindow()
    return True


def in_tray_text(status: ServerStatus) -> str:
    """The first close into the tray's notice: what the server goes on doing. A server still loading its model (it
    says where it will listen before the load) serves nothing yet: it said "goes on serving URL" all the same."""
    endpoint = status.endpoint
    if status.state == "starting":
        doing = f"goes on loading its model, then serves {endpoint}" if endpoint else "goes on starting"
    else:
        doing = f"goes on serving {endpoint}" if endpoint else "goes on"
    return f"The server {doing} in the background. Quit Strata in this icon's menu stops it."


def status_text(status: ServerStatus) -> str:
    if status.state == "running":
        text = f"Server running ({status.detail})"
    elif status.state == "waiting":      # its detail says what for: "for the model file ..."
        text = f"Server waiting {status.detail}"
    elif status.state == "stopping" and status.detail.startswith("stopping: "):   # the server's progress line
        text = f"Server {status.detail}"
    elif status.state == "starting" and status.loading_s is not None:   # minutes for a big model: the time moves
        text = f"Server starting: {status.detail} ({units.elapsed(status.loading_s)} so far)"
    else:
        text = f"Server {status.state}: {status.detail}"
    # while restarting, the state's detail is that restart's reason, and a give-up's counts the restarts and says
    # the last one's reason: not said twice
    said = (status.state == "restarting" and status.detail == status.last_restart_reason) or \
        (status.state == "failed" and status.detail.startswith(GAVE_UP))
    if status.restarts and not said:
        times = "once" if status.restarts == 1 else f"{status.restarts} times"
        text += f"  \u2022  restarted {times} (last: {status.last_restart_reason})"
    return text
