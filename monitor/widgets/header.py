"""The header of the monitor: connection state, the endpoint address (with a copy button), the model
and engine, running totals with units, and the server's start-up INFO line (labelled as such).

Presentation only.
"""

from __future__ import annotations

import html
import time

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget
from strata.monitor import units
from strata.monitor.model import MonitorView
from strata.monitor.silence import NOT_ANSWERING
from strata.monitor.widgets.common import label, set_text
from strata.monitor.widgets.theme import Theme


def totals_text(view: MonitorView) -> str:
    """The server's totals, each labelled with what it counts: requests ended ("done") apart from those
    running; the prompt tokens read or reused and the tokens generated so far, the running ones' included
    (a first answer read "0 requests • prompt 0 tok • generated 108 tok")."""
    t = view.totals
    if not t:
        return units.NA
    share = view.reuse_share
    # what runs now is known only from a feed that flows; the running totals stay as last seen
    live = view.connection == "connected"     # connecting: no snapshot of this feed yet (a restart loading)
    running, queued = (units.count(view.running), units.count(t.get("queue_depth"))) if live else (units.NA, units.NA)
    # each count with what it counts on one line where the header wraps (units.phrase); lines break between them
    items = [[f"{units.counted(t.get('requests'), 'request')} done", f"{running} running", f"{queued} queued"],
             [f"generating {units.tps(view.generated_tps)}"],
             [f"prompt {units.tokens(t.get('prompt_tokens'))}", f"reused {units.share(share)}"],
             [f"generated {units.tokens(t.get('generated_tokens'))}"]]
    return " \u2022 ".join(", ".join(units.phrase(x) for x in part) for part in items)


TOTALS_TIP = ("requests done: ended (answered, cancelled or failed); running: holding a context (reading its "
              "prompt or generating); queued: waiting for one.\nprompt: the tokens of the prompts read so far, "
              "running requests' included (counted at a request's first token, or at its end when it ended "
              "before one), and the share of them reused from a slot or the cache instead of read.\n"
              "generated: tokens made so far, counted as each is made.")


# the INFO line is written once, when the model has loaded: its cache figures ("ram 5888 MiB on (0 entries)") are
# those found at start-up, and a new-user trial read them against the levels table's current entries as two
# counts of one thing; the row's name and tooltip say which it is
INFO_ROW = "At start"
INFO_TIP = ("The server's INFO line, written once when it started: its settings, and the conversation cache's "
            "levels with the entries found then. The panels below show the current figures.")


def model_text(snap: dict) -> str:
    m, e = snap.get("model") or {}, snap.get("engine") or {}
    if not m:
        return units.NA
    parts = [f"<b>{m.get('name') or m.get('path') or units.NA}</b>"
             + (f" ({m['description']})" if m.get("description") and m.get("description") != m.get("name") else "")]
    facts = [str(m[key]) for key in ("arch", "quant") if m.get(key)]
    if m.get("n_ctx_train"):
        facts.append(f"trained context {units.tokens(m['n_ctx_train'])}")
    if m.get("n_expert"):
        facts.append(f"{m['n_expert']} experts, {m.get('n_expert_used', units.NA)} a token")
    if e.get("backend"):
        facts.append(f"{e['backend']}, {units.counted(e.get('threads'), 'thread')}")
    if e.get("kv_type"):
        bpt = e.get("bytes_per_token")
        facts.append(f"KV {e['kv_type']}" + (f" ({units.per_token(bpt)})" if bpt else ""))
    # the name wraps as words do (a long one must fit somewhere); each fact after it stays on one line
    return " \u2022 ".join(parts + [units.phrase(f) for f in facts])


def silence_text(view: MonitorView) -> str:
    """What follows "not answering": for how long and since when, on the monitor's clocks (the server's wall clock may
    be another machine's, or the very one that stepped): "for 12 s (last answer 11:02:13)"."""
    parts = [f"for {units.elapsed(view.silent_s)}"] if view.silent_s is not None else []
    if view.last_answer is not None:
        parts.append(f"(last answer {time.strftime('%H:%M:%S', time.localtime(view.last_answer))})")
    return " ".join(parts)


class Header(QWidget):
    def __init__(self, theme: Theme) -> None:
        super().__init__()
        self.theme = theme
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 2, 4, 2)
        outer.setSpacing(2)
        top = QHBoxLayout()
        self._top = top
        # wrapped: a long disconnection reason (the address and what to do) widened the window past the screen
        self.state = label(wrap=True)
        self.endpoint = label(selectable=True)
        self.copy = QPushButton("Copy address")
        self.copy.setToolTip("Copy the endpoint address for a client (OpenAI or Anthropic base URL)")
        self.copy.clicked.connect(self._copy)
        top.addWidget(self.state)
        top.addSpacing(12)
        top.addWidget(self.endpoint)
        top.addWidget(self.copy)
        top.addStretch(1)
        self.version = label(muted=True)
        top.addWidget(self.version)
        outer.addLayout(top)
        grid = QGridLayout()
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(1)
        # wrapped: a long model line (name, description, experts, backend) set the window's least width
        self.model = label(selectable=True, wrap=True)
        self.totals = label(selectable=True, wrap=True)
        self.totals.setToolTip(TOTALS_TIP)
        self.info = label(selectable=True, wrap=True, muted=True)
        self.info.setToolTip(INFO_TIP)
        self.row_names: dict[str, QLabel] = {}
        for row, (name, widget) in enumerate((("Model", self.model), ("Now", self.totals),
                                              (INFO_ROW, self.info))):
            self.row_names[name] = name_label = label(f"<b>{name}</b>")
            if widget is self.info:
                name_label.setToolTip(INFO_TIP)
            grid.addWidget(name_label, row, 0)
            grid.addWidget(widget, row, 1)
        grid.setColumnStretch(1, 1)
        outer.addLayout(grid)
        self._endpoint = ""

    def _copy(self) -> None:
        if self._endpoint:
            QGuiApplication.clipboard().setText(self._endpoint)

    def refresh(self, view: MonitorView) -> None:
        snap = view.snapshot
        colors = {"connected": self.theme.good, "connecting": self.theme.warn, "disconnected": self.theme.bad,
                  "waiting": self.theme.warn, NOT_ANSWERING: self.theme.warn}
        state = view.connection
        if state == "connected" and snap and not view.ready:
            text, color = ("loading the model" if not snap.get("error")
                           else f"failed: {html.escape(str(snap['error']), quote=False)}"), self.theme.warn
        else:
            text, color = state, colors[state]
        # escaped: the reason may quote a server line with "<" in it, which rich text would take for a tag
        # "waiting" reads on as one sentence ("waiting for the model file ...: is its drive mounted?")
        dash = " " if state == "waiting" else " \u2014 "
        detail = "" if state == "connected" else \
            f"{dash}{html.escape(view.connection_detail, quote=False)}" if view.connection_detail else ""
        if state == NOT_ANSWERING:      # the client's reason ("no answer in 10 s") says less than how long
            detail = f" {silence_text(view)}"
        if state == "connected" and snap and not view.ready and not snap.get("error") and view.loading_s is not None:
            detail = f"{dash}{units.elapsed(view.loading_s)} so far"    # minutes for a big model: the figure moves
        # a reason takes the row's free space and wraps there; "connected" leaves it to the stretch after the button
        long = bool(detail)
        self._top.setStretch(0, 1 if long else 0)
        self._top.setStretch(self._top.count() - 2, 0 if long else 1)
        set_text(self.state, f"<span style='color:{color}; font-size:14pt'>\u25cf</span> <b>{text}</b>{detail}")
        # connected: the server's own address; otherwise the address being tried (the reason is in the state)
        live = state == "connected" and snap.get("endpoint")
        self._endpoint = (snap.get("endpoint") if live else view.target) or ""
        set_text(self.endpoint, f"{'endpoint' if live else 'trying'} <b>{self._endpoint or units.NA}</b>")
        self.copy.setEnabled(bool(self._endpoint))
        # waiting, or the app's server failed before it said its address: nothing to try or copy ("trying -")
        for part in (self.endpoint, self.copy):
            part.setVisible(state != "waiting" and bool(self._endpoint))
        set_text(self.version, f"strata {snap.get('version', '')}" if snap else "")
        set_text(self.model, model_text(snap))
        set_text(self.totals, totals_text(view))
        set_text(self.info, snap.get("info_line") or units.NA)
