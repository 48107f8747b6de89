"""Recent requests (newest first): how much of each prompt was reused, from where, and when it missed,
the token position where the prompt stopped matching what was cached with a short excerpt of the
text there; plus the slot placement decisions and the server's log tail.

Presentation only; rows come from the feed's `requests`, `decisions` and `log_tail`.
"""

from __future__ import annotations

from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import QPlainTextEdit, QTabWidget
from strata.monitor import units
from strata.monitor.model import MonitorView, request_reuse
from strata.monitor.reason_texts import park_skip_tip, reason_tip
from strata.monitor.widgets.common import Table, plain, say_where_ages_count_to
from strata.monitor.widgets.theme import Theme

REQUEST_HEADERS = ("#", "context", "prompt\ntok", "reused\ntok (share)", "from", "mismatch\nat token",
                   "text\nthere", "TTFT", "prefill\ntok/s", "decode\ntok/s", "output\ntok", "when")
REQUEST_TIPS = ("request id, API, and the status when it was not ok", "the context that served it", "prompt tokens",
                "prompt tokens reused instead of read (share of the prompt)",
                "where the reused tokens came from (slot, main, ram, warm, cold, segment, system_prompt)",
                "token position where the prompt stopped matching the best cached history; a small number "
                "every turn means the client changes the top of its prompt",
                "the prompt's text at that position", "time to first token", "", "",
                "generated tokens (of them, in brackets, guesses of lookup decoding the model confirmed)",
                "when it finished")
TEXT_THERE = REQUEST_HEADERS.index("text\nthere")
DECISION_HEADERS = ("when", "request", "slot", "group", "reason", "reused", "from slot", "parked", "park skipped")
DECISION_TIPS = ("", "the request the decision was for", "the context it chose (a park: where main's conversation "
                 "went)", "", "why the slot policy chose it (each cell's tooltip says it in words)",
                 "prompt tokens the choice reused", "the context the reused tokens were copied from", "",
                 "why main's conversation was not parked into a slot (each cell's tooltip says it in words)")
REASON, PARK_SKIP = DECISION_HEADERS.index("reason"), DECISION_HEADERS.index("park skipped")


# the text-there column's least width in characters: at a 1280-px window the columns beside it leave about that much;
# a wider window shows more of the excerpt (Qt elides the rest), the cell's tooltip all of it
EXCERPT_MIN_CHARS = 10


def excerpt(text: str | None, limit: int | None = None) -> str:
    """The excerpt on one line (line breaks and tabs shown as \\n, \\t), cut to `limit` (None: whole)."""
    if not text:
        return units.NA
    flat = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "\u2026"


def excerpt_tip(req: dict) -> str | None:
    """The tooltip of the text-there cell: where the prompt stopped matching and the whole excerpt."""
    at = shown_mismatch(req)
    if at is None or not req.get("mismatch_excerpt"):
        return None
    return f"the prompt from token {at:,} on: {excerpt(req['mismatch_excerpt'], None)}"


def shown_mismatch(req: dict) -> int | None:
    """The mismatch position worth showing: none when the request reused past it anyway (the server
    compares with the live contexts; a cache restore may have matched further)."""
    at, reused = req.get("mismatch_at"), req.get("reused_tokens")
    if at is None or (isinstance(reused, int) and reused > at):
        return None
    return at


def output_cell(req: dict) -> str:
    """Generated tokens, and how many of them were lookup decoding's confirmed guesses."""
    out = units.count(req.get("output_tokens"))
    taken = req.get("lookup_taken")
    return f"{out} ({taken:,})" if isinstance(taken, int) and taken > 0 else out


def request_cells(req: dict, now: float) -> list[str]:
    share = request_reuse(req)
    reused = units.count(req.get("reused_tokens"))
    if share is not None:
        reused += f" ({units.share(share)})"
    finished = req.get("finished")
    ctx = req.get("context")
    at = shown_mismatch(req)
    status = req.get("status")
    first = f"{req.get('id', '')} {req.get('api', '')}".strip() + (f" \u2013 {status}" if status not in (None, "ok") else "")
    return [first,
            units.NA if ctx is None else ("main" if ctx == "main" else f"slot {ctx}"),
            units.count(req.get("prompt_tokens")), reused, str(req.get("source", units.NA)),
            units.NA if at is None else f"{at:,}", excerpt(req.get("mismatch_excerpt")) if at is not None else units.NA, units.ms(req.get("ttft_ms")), units.rate(req.get("prefill_tps")),
            units.rate(req.get("decode_tps")), output_cell(req),
            units.ago(now - finished) if isinstance(finished, (int, float)) else "running"]


def decision_tips(d: dict) -> list[str | None]:
    """The reason and park-skipped cells' tooltips in plain words (a new-user trial read `own_prefix`,
    `main_low_value` and `least_loss` with nothing to say what they meant); the other cells' their text."""
    tips: list[str | None] = [None] * len(DECISION_HEADERS)
    tips[REASON], tips[PARK_SKIP] = reason_tip(d.get("reason")), park_skip_tip(d.get("park_skip"))
    return tips


def decision_cells(d: dict, now: float) -> list[str]:
    """A placement or park decision's cells; a field that is null or absent reads as an en dash (a park the policy
    skipped has no slot: its row said `None`)."""
    t = d.get("time")

    def text(key: str) -> str:
        return units.NA if d.get(key) is None else str(d[key])

    return [units.ago(now - t) if isinstance(t, (int, float)) else units.NA, text("request"), text("slot"),
            text("group"), str(d.get("reason", "")), units.tokens(d.get("reused")), text("source_slot"),
            "yes" if d.get("park") else "no", d.get("park_skip") or ""]


class ActivityTabs(QTabWidget):
    """Tabs: recent requests, slot decisions, log."""

    def __init__(self, theme: Theme) -> None:
        super().__init__()
        plain(self)
        self.theme = theme
        self.requests = Table(REQUEST_HEADERS, stretch=TEXT_THERE, tooltips=REQUEST_TIPS,
                              stretch_min_chars=EXCERPT_MIN_CHARS)
        # no stretched column: stretched, the reason (the column that matters) took what the others left, `s…` at 800 px
        self.decisions = Table(DECISION_HEADERS, tooltips=DECISION_TIPS)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(400)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        mono.setPointSizeF(max(8.0, QFont().pointSizeF() - 1))
        self.log.setFont(mono)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.addTab(self.requests, "Recent requests")
        self.addTab(self.decisions, "Slot decisions")
        self.addTab(self.log, "Log")
        self._log_lines: tuple[str, ...] = ()

    def refresh(self, view: MonitorView) -> None:
        reqs = view.requests
        colors = []
        for r in reqs:
            share = request_reuse(r)
            bad = r.get("status") not in (None, "ok")
            low = share is not None and share < 0.5 and (r.get("prompt_tokens") or 0) > 64
            c = self.theme.bad if bad else (self.theme.warn if low else None)
            colors.append([self.theme.bad if bad else None, None, None, c, None, c, c] + [None] * 6)
        tips = [[None] * TEXT_THERE + [excerpt_tip(r)] + [None] * (len(REQUEST_HEADERS) - TEXT_THERE - 1) for r in reqs]
        self.requests.show_rows([request_cells(r, view.now) for r in reqs], colors,
                                align_right=(2, 3, 5, 7, 8, 9, 10, 11), tips=tips)
        say_where_ages_count_to(self.requests, len(REQUEST_HEADERS) - 1, view.feed_lost)
        say_where_ages_count_to(self.decisions, 0, view.feed_lost)
        title = f"Recent requests ({len(reqs)})"
        if self.tabText(0) != title:       # setTabText lays the tab bar out and repaints it even when the same
            self.setTabText(0, title)
        decisions = [d for d in view.snapshot.get("decisions") or [] if isinstance(d, dict)]
        shown = list(reversed(decisions))
        self.decisions.show_rows([decision_cells(d, view.now) for d in shown], align_right=(0, 1, 5),
                                 tips=[decision_tips(d) for d in shown])
        lines = tuple(str(x) for x in view.snapshot.get("log_tail") or ())
        if lines != self._log_lines:
            bar = self.log.verticalScrollBar()
            at_end, where = bar.value() >= bar.maximum() - 2, bar.value()
            self.log.setPlainText("\n".join(lines))
            bar.setValue(bar.maximum() if at_end else where)   # follow the end, or stay where the user is
            self._log_lines = lines
