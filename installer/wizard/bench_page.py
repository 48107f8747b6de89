"""The wizard's bench page: the machine bench on a QThread worker, a progress bar, a Skip button.

The worker runs `bench.run_machine_bench` and reports progress by signal; the page folds the report
into the wizard's `Situation` (`flow.with_bench`). Skipping sets the bench's event; what was not
measured is left out and the plan's defaults do without it. Back and Cancel set it too and never wait
on the GUI thread: the engine's bench is a process the event kills, the worker ends on its own soon
after, and a run left behind is ignored (each run has its number); `stopped` says when none is left.
"""

from __future__ import annotations

import threading
from html import escape

from PySide6.QtCore import QObject, Qt, QThread, Signal
from PySide6.QtWidgets import QLabel, QProgressBar, QPushButton, QVBoxLayout, QWizard, QWizardPage
from strata.installer import flow
from strata.installer.bench import BenchReport, run_machine_bench
from strata.monitor.units import rate

# each stage's share of the bar: it went 0 -> 100 % for the engine, then back to 0 for the disk
STAGE_SPANS = {"engine": (0, 60), "disk": (60, 100), "done": (100, 100)}


def overall_percent(stage: str, fraction: float) -> int:
    low, high = STAGE_SPANS.get(stage, (0, 100))
    return int(low + (high - low) * min(max(fraction, 0.0), 1.0))


class BenchWorker(QObject):
    progress = Signal(int, str, float, str)   # run, stage, fraction, message
    finished = Signal(int, object)            # run, and a BenchReport or an Exception

    def __init__(self, run: int, model_path: str | None, folder: str, threads: int, disk_mib: int,
                 skip: threading.Event, quick: bool = True):
        super().__init__()
        self.run_id = run
        self.args = (model_path, folder, threads)
        self.disk_mib = disk_mib
        self.skip = skip
        self.quick = quick

    def run(self) -> None:
        try:
            report = run_machine_bench(*self.args, progress=self._progress, skip=self.skip,
                                       disk_mib=self.disk_mib, quick=self.quick)
        except Exception as e:  # shown on the page; the wizard goes on without the numbers
            report = e
        self.finished.emit(self.run_id, report)

    def _progress(self, stage: str, fraction: float, message: str) -> None:
        self.progress.emit(self.run_id, stage, fraction, message)


class BenchPage(QWizardPage):
    stopped = Signal()   # the last bench thread ended after `stop` (the wizard closes then)

    def __init__(self) -> None:
        super().__init__()
        self.setTitle("Measuring this machine")
        self.setSubTitle("The model's prefill and decode speed here, the RAM, and the disk speed of the "
                         "folder proposed for conversations kept on disk.")
        self.bar = QProgressBar()
        self.bar.setRange(0, 100)
        self.status = QLabel("")
        self.status.setTextFormat(Qt.TextFormat.PlainText)   # a model's name or the bench's words, never markup
        self.status.setWordWrap(True)
        self.results = QLabel("")
        self.results.setWordWrap(True)
        self.results.setObjectName("results")
        self.skip_button = QPushButton("Skip the bench")
        self.skip_button.clicked.connect(self.skip)
        layout = QVBoxLayout(self)
        for widget in (self.bar, self.status, self.skip_button, self.results):
            layout.addWidget(widget)
        layout.addStretch(1)
        self.done = False
        self.report: BenchReport | None = None
        self._skip = threading.Event()
        self._run = 0                                   # the run whose results count; older ones are ignored
        self._running: dict[QThread, BenchWorker] = {}  # threads not ended yet, this run's and stopped ones

    def initializePage(self) -> None:
        w = self.wizard()
        self.done, self.report = False, None
        self.bar.setRange(0, 100)
        self.bar.setValue(0)
        self.results.setText("")
        self._skip = threading.Event()
        # no bench (the app's Set up again while its server runs): no bar at 100 % and no Skip for what never ran
        for widget in (self.bar, self.skip_button):
            widget.setVisible(w.run_bench)
        if not w.run_bench:
            self._finish(None)
            return
        self.skip_button.setEnabled(True)
        s = w.situation
        self._run += 1
        thread = QThread(self)
        worker = BenchWorker(self._run, s.model.path if s.model else None, s.cold_disk.folder, s.machine.n_cores,
                             w.disk_bench_mib, self._skip, w.quick_bench)
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        worker.progress.connect(self._on_progress)
        worker.finished.connect(self._on_finished)
        worker.finished.connect(thread.quit)
        thread.finished.connect(lambda: self._ended(thread))
        self._running[thread] = worker
        thread.start()

    def skip(self) -> None:
        self._skip.set()
        self.status.setText("skipping…")

    def _on_finished(self, run: int, report) -> None:
        if run == self._run:   # not a run stopped by Back (a later Next started another)
            self._finish(report)

    def _ended(self, thread: QThread) -> None:
        if self._running.pop(thread, None) is None:   # joined already (join)
            return
        thread.wait()   # it emitted `finished` as it ended: at most a moment
        thread.deleteLater()
        if not self._running:
            self.stopped.emit()

    def _on_progress(self, run: int, stage: str, fraction: float, message: str) -> None:
        if run != self._run:
            return
        if stage == "engine" and fraction <= 0:
            self.bar.setRange(0, 0)    # busy: the engine's first stage, loading the model
        else:
            self.bar.setRange(0, 100)
            self.bar.setValue(overall_percent(stage, fraction))
        self.status.setText(f"{stage}: {message}")

    def _finish(self, report) -> None:
        w = self.wizard()
        had_focus = self.skip_button.hasFocus()
        self.skip_button.setEnabled(False)   # Qt hands its focus on to the next in the chain: Back
        self.bar.setRange(0, 100)
        self.bar.setValue(100)
        if isinstance(report, BenchReport):
            self.report = report
            w.situation = flow.with_bench(w.situation, report)
            self.results.setText("<br>".join(_describe(report)))
            self.status.setText(finished_line(report))
        elif report is None:
            self.status.setText(w.no_bench_reason)
        else:
            self.status.setText(f"the bench failed: {report}")
        self.done = True
        self.completeChanged.emit()
        if had_focus:   # Next, enabled now, takes the focus the Skip button had: Enter went Back (a new-user trial)
            w.button(QWizard.WizardButton.NextButton).setFocus()

    def isComplete(self) -> bool:
        return self.done

    def cleanupPage(self) -> None:  # Back: stop a bench still running; its result, if one comes, is ignored
        self.stop()
        self._run += 1

    def stop(self) -> bool:
        """Tell a running bench to stop (its engine process is killed) without waiting for it. True when no
        bench thread is left; else `stopped` is emitted when the last one has ended (a moment: the disk bench
        stops between 8-MiB chunks)."""
        self._skip.set()
        if not self._running:
            return True
        if not self.done:
            self.status.setText("stopping the bench…")
        return False

    def join(self) -> None:
        """Stop the bench and wait here for its threads: for the app's last step, when no event loop is left to
        wait on (a QThread still running when the wizard is destroyed aborts the process). A moment: the engine's
        process is killed, the disk bench stops between chunks."""
        self.stop()
        for thread in list(self._running):
            thread.quit()   # here, not by the worker's `finished`: that call is queued to this thread, blocked below
            thread.wait()
            self._ended(thread)


def finished_line(report: BenchReport) -> str:
    """The status line once the bench has ended: what it measured (a bare "done" left a new-user trial asking what
    was done), or that nothing was, so the plan goes by its defaults."""
    measured = []
    if report.bench is not None:
        measured.append("the model's prompt and generation speeds")
    if report.disk.write_mib_s:
        measured.append("the disk's write and read speeds")
    if not measured:
        return "bench ended: nothing measured; the plan goes by its defaults"
    return "bench done: measured " + " and ".join(measured) + " (above); the plan's choices use them"


def _describe(report: BenchReport) -> list[str]:
    lines = []
    b, d = report.bench, report.disk
    if b is not None:
        lines.append(f"Model: prefill <b>{rate(b.prefill_tps or 0)}</b> tok/s, decode <b>{rate(b.decode_tps or 0)}</b> tok/s"
                     + (f", load {b.load_s:.2f} s" if b.load_s else ""))
    lines.append(f"RAM: {report.ram_total_mib / 1024:.1f} GiB, {report.ram_available_mib / 1024:.1f} GiB available")
    if d.write_mib_s:
        lines.append(f"Disk {escape(str(d.folder))}: write <b>{rate(d.write_mib_s)}</b> MiB/s, "
                     f"read <b>{rate(d.read_mib_s)}</b> MiB/s")
    # rich text: a path or the bench's own words as they are (`<new>` in a folder's name was dropped as a tag)
    lines.extend(f"<i>{escape(note)}</i>" for note in report.notes)
    return lines
