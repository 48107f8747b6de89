"""The monitor's model: the latest feed snapshot, history ring buffers for the plots, derived values.

Qt-free. The feed client calls `apply(snapshot)` from its worker thread; widgets call `view()` on
their redraw timer and get one consistent, immutable `MonitorView`. The model never does I/O and
never reads the clock: time comes from the snapshot or is passed in. The plots' time base is the server's
monotonic clock (`mono`) where the feed has it, so a step of its wall clock (NTP, a resume from sleep) neither
wipes their history nor draws a line across the jump; `time` (the wall clock) for every "when" shown, and the
time base of an older server's feed without `mono`.
Not here: fetching the feed (client.py) or drawing it (widgets/).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from strata.monitor.redraw_policy import headline
from strata.monitor.silence import (
    NOT_ANSWERING,
    SILENT_AFTER_S,
    check_interval,
    check_silent_after,
    feed_patience,
    shown_connection,
)

HISTORY_S = 300.0          # seconds of history kept for the plots (five minutes of live view)
MAX_POINTS = 1500          # per series; the feed sends at most 4 snapshots a second
PARK_DESTINATIONS = ("ram", "disk", "discard")
HIT_LEVELS = ("ram", "warm", "cold", "segment", "system_prompt")
BUSY_STATES = ("prefill", "decode")
# "waiting": the app has no server to connect to yet (its model file is not there); set by the app, not the client.
# "not answering": the client's, after a first snapshot, for a connection the server took but did not answer
# (silence.py; the model says it too of a feed still open whose snapshots stopped)
CONNECTION_STATES = ("connecting", "connected", "disconnected", "waiting", NOT_ANSWERING)


class FeedError(ValueError):
    """A snapshot that is not the monitor feed's shape; the message names what is wrong."""


class Series:
    """A ring buffer of (t, value) pairs, t in seconds on the plots' time base (the server's `mono`, else `time`)."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.points: deque[tuple[float, float]] = deque(maxlen=max_points)

    def add(self, t: float, value: float) -> None:
        self.points.append((t, value))

    def trim(self, oldest: float) -> None:
        while self.points and self.points[0][0] < oldest:
            self.points.popleft()

    def copy(self) -> tuple[tuple[float, float], ...]:
        return tuple(self.points)


@dataclass(frozen=True)
class SlotRow:
    key: str                       # "main" or the slot number as text
    group: int | None
    state: str
    tokens: int
    capacity: int
    conversation: str | None
    idle_s: float | None           # since its last use
    reused_tokens: int | None
    prefill_tps: float | None
    decode_tps: float | None
    protection_left_s: float | None
    value: float | None
    # a copy whose conversation went on in another context (the feed's `superseded`): the slot policy counts it
    # as worth nothing, and the next request may take it
    superseded: bool = False

    @property
    def label(self) -> str:
        return "main" if self.key == "main" else f"slot {self.key}"


@dataclass(frozen=True)
class MonitorView:
    """Everything the widgets draw, copied under the model's lock."""

    version: int                          # grows with every applied snapshot or connection change
    connection: str                       # one of CONNECTION_STATES, as said (silence.shown_connection)
    connection_detail: str
    target: str                           # the address the client connects to ("" when none was set)
    snapshot: dict[str, Any]              # the raw latest snapshot ({} before the first)
    now: float                            # the latest snapshot's time (wall clock: for "when" columns)
    slots: tuple[SlotRow, ...]
    prefill_history: dict[str, tuple]     # slot key -> ((t, tok/s), ...)
    decode_history: dict[str, tuple]
    parks_history: dict[str, tuple]       # destination -> ((t, cumulative parks), ...)
    available_history: tuple              # ((t, available MiB), ...)
    generated_rate_history: tuple         # ((t, generated tok/s over all slots), ...)
    generated_tps: float | None           # the latest of the above
    requests: tuple[dict, ...] = field(default_factory=tuple)   # newest first
    history_start: float | None = None    # time of the oldest snapshot the history holds
    # the time of the last snapshot before each loss of the feed: a curve is not drawn on across one (it drew a
    # straight line over a stopped server's 13 s, as if it had decoded all along)
    gaps: tuple[float, ...] = ()
    loading_s: float | None = None        # the server's snapshots have said "not ready" (its model loading) this long
    # the plots' time base now (the latest snapshot's `mono`, else its `time`): history, gaps and history_start
    # are on it; None: `now`
    plot_now: float | None = None
    silent_s: float | None = None         # seconds since the last snapshot came (the monitor's clock), once one has
    last_answer: float | None = None      # when it came, on the monitor's wall clock (None before the first)

    @property
    def history_span(self) -> float:
        """Seconds of history held (0 before two snapshots)."""
        return max(0.0, self.x_now - self.history_start) if self.history_start is not None else 0.0

    @property
    def x_now(self) -> float:
        """The plots' "now" (their x axis ends there): plot_now where set, else the wall clock's `now`."""
        return self.plot_now if self.plot_now is not None else self.now

    @property
    def ready(self) -> bool:
        return bool(self.snapshot.get("ready", bool(self.snapshot)))

    @property
    def feed_lost(self) -> bool:
        """The feed flowed and is not flowing now: what is shown is as it was at the loss. Not before the first
        snapshot (a monitor started before its server, the app waiting for its model file): nothing was lost."""
        return self.connection != "connected" and bool(self.snapshot)

    @property
    def cache(self) -> dict:
        c = self.snapshot.get("cache")
        return c if isinstance(c, dict) else {}

    @property
    def totals(self) -> dict:
        return self.snapshot.get("totals") or {}

    @property
    def reuse_share(self) -> float | None:
        """Share of all prompt tokens that were reused instead of read, 0..1; None before any prompt."""
        total = self.totals.get("prompt_tokens")
        reused = self.totals.get("prompt_tokens_reused")
        return reused / total if total and reused is not None else None

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self.slots if s.state in BUSY_STATES)

    @property
    def running(self) -> int:
        """Requests holding a context, as the server counts them (its requests_in_flight); the contexts
        reading or generating for a feed without that total."""
        n = self.totals.get("in_flight")
        return n if isinstance(n, int) else self.busy_slots


class MonitorModel:
    """Thread-safe: `apply` and `set_connection` from the client's thread, `view` from the GUI."""

    def __init__(self, history_s: float = HISTORY_S, max_points: int = MAX_POINTS,
                 silent_after_s: float = SILENT_AFTER_S) -> None:
        self.silent_after_s = check_silent_after(silent_after_s)
        if not history_s > 0:
            raise ValueError(f"history_s must be > 0, got {history_s!r}")
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, got {max_points!r}")
        self.history_s = history_s
        self.max_points = max_points
        self._lock = threading.Lock()
        self._version = 0
        self._connection = "connecting"
        self._detail = ""
        self._target = ""
        self._snapshot: dict[str, Any] = {}
        self._prefill: dict[str, Series] = {}
        self._decode: dict[str, Series] = {}
        self._parks = {d: Series(max_points) for d in PARK_DESTINATIONS}
        self._available = Series(max_points)
        self._gen_rate = Series(max_points)
        self._last_generated: tuple[float, float] | None = None
        self._rate_live = False       # the last rate point is of the feed now flowing (not of one lost since)
        self._last_use: dict[str, float | None] = {}
        self._wall_offset: float | None = None   # the feed's `time` - `mono`, kept steady (_steady_offset)
        self._counted: dict[str, Any] = {}      # the last snapshot with running totals
        self._last_state: dict[str, str | None] = {}      # each slot's state at the last snapshot
        self._times: deque[float] = deque(maxlen=max_points)   # snapshot times inside the history
        self._loading_since: float | None = None   # the time of the first of the latest not-ready snapshots
        self._gaps: deque[float] = deque(maxlen=max_points)   # MonitorView.gaps
        self._plot_now: float | None = None     # the latest snapshot's time on the plots' time base
        self._base = ""                         # that base: "mono" or "time"
        self._answered: tuple[float, float] | None = None   # the last snapshot's arrival: (monotonic, wall), passed in
        self._clock: float | None = None        # the monitor's monotonic clock as last told (observe)
        self._said: tuple = ("connecting",)     # what the header says of the connection, as last counted in _version
        self._silent_bound = self.silent_after_s   # silent_after_s, or longer for a feed asked to send seldom

    # -- input --------------------------------------------------------------------------------

    def set_connection(self, state: str, detail: str = "") -> None:
        if state not in CONNECTION_STATES:
            raise ValueError(f"connection state must be one of {', '.join(CONNECTION_STATES)}, got {state!r}")
        with self._lock:
            if state != "connected":
                self._mark_loss()
            before = (self._connection, self._detail, self._said)
            self._connection, self._detail = state, detail
            self._said = self._saying()
            if (state, detail, self._said) != before:
                self._version += 1

    def observe(self, clock: float) -> None:
        """The monitor's monotonic clock now (the feed client's watch, twice a second): a feed silent past
        silent_after_s reads "not answering", its count of seconds going on (a new version each second)."""
        with self._lock:
            self._clock = clock
            self._say_again()

    def expect_every(self, interval_s: float) -> None:
        """The feed client asks for a snapshot every `interval_s`: a wait that long is not a silence
        (silence.feed_patience); ValueError naming a bad interval."""
        bound = feed_patience(check_interval(interval_s), self.silent_after_s)
        with self._lock:
            self._silent_bound = bound
            self._say_again()

    def hear(self, received: tuple[float, float]) -> None:
        """Bytes of the feed came at `received` (monotonic, wall: the client's, as each piece is read): a server
        whose snapshots take long over a slow link is answering all the while, not silent until the next one."""
        with self._lock:
            self._heard(received)
            self._say_again()

    def set_target(self, url: str) -> None:
        """The address the feed client connects to, shown while it is not connected."""
        with self._lock:
            if url != self._target:
                self._target = url
                self._version += 1

    def apply(self, snap: Any, received: tuple[float, float] | None = None) -> None:
        """Takes one feed snapshot (docs/internals.md "Monitor feed"); raises FeedError on a wrong shape.
        `received`: its arrival on the monitor's clocks (monotonic, wall), for "not answering" (the client's)."""
        t, base = _check(snap)
        with self._lock:
            # compared with the last snapshot that had counters: a restarted server's snapshots while it loads
            # the model have none, and its zeros were compared with those (the old curves stayed)
            if self._snapshot and (base != self._base or (self._plot_now is not None and t < self._plot_now)
                                   or _counters_fell(self._counted, snap)):
                # a new server process (counters start again; its `mono` goes back only on another machine), a server of another
                # version behind the address (another time base), or an old one's wall clock stepped back
                self._reset_history()
            self._snapshot, self._plot_now, self._base = snap, t, base
            if received is not None:
                self._heard(received)
            self._said = self._saying()
            # since the first snapshot of this load (a big model's takes minutes: the header counts it)
            self._loading_since = (self._loading_since if self._loading_since is not None else t) \
                if snap.get("ready") is False else None
            if isinstance(snap.get("totals"), dict):
                self._counted = snap
            self._record_slots(snap, t)
            cache = snap.get("cache") if isinstance(snap.get("cache"), dict) else {}
            parks = cache.get("parks") or {}
            for d in PARK_DESTINATIONS:
                if isinstance(parks.get(d), (int, float)):
                    self._parks[d].add(t, float(parks[d]))
            available = (cache.get("admission") or {}).get("available_mib")
            if isinstance(available, (int, float)):
                self._available.add(t, float(available))
            self._record_rate(snap, t)
            self._times.append(t)
            self._trim(t - self.history_s)
            self._version += 1

    def view(self) -> MonitorView:
        with self._lock:
            snap = self._snapshot
            now = float(snap.get("time", 0.0)) if snap else 0.0
            silent = self._silent_s()
            rate = self._gen_rate.points[-1][1] if self._gen_rate.points and self._rate_live else None
            return MonitorView(
                version=self._version, connection=self._said[0], connection_detail=self._detail, target=self._target,
                snapshot=snap, now=now, slots=tuple(_slot_rows(snap, now)),
                prefill_history={k: s.copy() for k, s in self._prefill.items()},
                decode_history={k: s.copy() for k, s in self._decode.items()},
                parks_history={k: s.copy() for k, s in self._parks.items()},
                available_history=self._available.copy(), generated_rate_history=self._gen_rate.copy(),
                generated_tps=rate, requests=tuple(reversed(_dicts(snap.get("requests")))),
                history_start=self._times[0] if self._times else None, gaps=tuple(self._gaps),
                loading_s=self._plot_now - self._loading_since if self._loading_since is not None else None,
                plot_now=self._plot_now, silent_s=silent,
                last_answer=self._answered[1] if self._answered is not None else None)

    @property
    def version(self) -> int:
        with self._lock:
            return self._version

    def headline(self) -> tuple:
        """redraw_policy.headline of the latest state: cheap (a tick asks for it; view() copies the plots)."""
        with self._lock:
            return headline(self._said[0], self._snapshot)

    # -- connection ---------------------------------------------------------------------------

    def _heard(self, received: tuple[float, float]) -> None:
        self._answered = received
        self._clock = received[0] if self._clock is None else max(self._clock, received[0])

    def _silent_s(self) -> float | None:
        if self._answered is None or self._clock is None:
            return None
        return max(0.0, self._clock - self._answered[0])

    def _saying(self) -> tuple:
        """What the header says of the connection: the state, with the whole seconds of a silence it counts."""
        silent = self._silent_s()
        state = shown_connection(self._connection, silent, self._silent_bound)
        return (state, int(silent)) if state == NOT_ANSWERING and silent is not None else (state,)

    def _say_again(self) -> None:
        """What the header says, counted again after the clock, the bound or the last answer moved: a new version
        when it changed, and a silence newly said is a loss (no curve drawn across it)."""
        said = self._saying()
        if said != self._said:
            if said[0] == NOT_ANSWERING:
                self._mark_loss()
            self._said = said
            self._version += 1

    def _mark_loss(self) -> None:
        """The feed stopped flowing: a rate compares two snapshots of one feed, never across a gap; nor a load's
        count (the feed that comes back may be a new server's: the app's Restart, a restart after a crash on the
        same address, which counted on from the first one's load); and no curve is drawn across it (gaps)."""
        self._last_generated, self._rate_live = None, False
        self._loading_since = None
        if self._times and (not self._gaps or self._gaps[-1] != self._times[-1]):
            self._gaps.append(self._times[-1])

    # -- history ------------------------------------------------------------------------------

    def _steady_offset(self, wall: float | None, mono: float | None) -> float:
        """The feed's wall minus monotonic time, followed only past WALL_STEP_S, as the server's wall_of is: a
        snapshot's own difference jitters by the time between its two clock reads (milliseconds where the server's
        thread is preempted between them), which _changed took for a new use of every idle slot. 0 without both."""
        if wall is None or mono is None:
            return 0.0
        if self._wall_offset is None or abs(wall - mono - self._wall_offset) > WALL_STEP_S:
            self._wall_offset = wall - mono
        return self._wall_offset

    def _record_slots(self, snap: dict, t: float) -> None:
        """A slot's speeds are plotted while it works in that phase: prefill while it reads a prompt, decode
        while it generates (the server keeps a request's prefill speed through its decode: it was drawn flat
        for the whole decode). A phase that began and ended between two snapshots (a short prompt, a short
        request) is plotted at the first snapshot after it. An idle slot reads 0 tok/s."""
        # `last_use` is the server's monotonic time made wall time, which follows a step of its wall clock: taken
        # back to the feed's `mono` by this snapshot's own offset, a step moves no slot's `last_use` (a new use)
        offset = self._steady_offset(_num(snap.get("time")), _num(snap.get("mono")))
        for s in _dicts(snap.get("slots")):
            key = str(s.get("id"))
            last_use = s.get("last_use")
            if _num(last_use) is not None:
                last_use -= offset
            finished = key in self._last_use and _changed(last_use, self._last_use[key])
            self._last_use[key] = last_use
            state, before = s.get("state"), self._last_state.get(key)
            self._last_state[key] = state
            # a prefill not seen: decoding now after no request or another one, or a whole request in between
            unseen_prefill = (state == "decode" and (before not in BUSY_STATES or finished)) or \
                (finished and state not in BUSY_STATES and before not in BUSY_STATES)
            live = {"prefill_tps": state == "prefill" or unseen_prefill, "decode_tps": state == "decode" or finished}
            for name, store in (("prefill_tps", self._prefill), ("decode_tps", self._decode)):
                value = s.get(name)
                series = store.setdefault(key, Series(self.max_points))
                series.add(t, float(value) if live[name] and isinstance(value, (int, float)) else 0.0)

    def _record_rate(self, snap: dict, t: float) -> None:
        generated = (snap.get("totals") or {}).get("generated_tokens")
        if not isinstance(generated, (int, float)):
            return
        if self._last_generated is not None and t > self._last_generated[0]:
            dt = t - self._last_generated[0]
            self._gen_rate.add(t, max(0.0, generated - self._last_generated[1]) / dt)
            self._rate_live = True
        self._last_generated = (t, float(generated))

    def _trim(self, oldest: float) -> None:
        for store in (self._prefill, self._decode):
            for s in store.values():
                s.trim(oldest)
        for s in (*self._parks.values(), self._available, self._gen_rate):
            s.trim(oldest)
        while self._times and self._times[0] < oldest:
            self._times.popleft()
        while self._gaps and self._gaps[0] < oldest:
            self._gaps.popleft()

    def _reset_history(self) -> None:
        self._prefill.clear()
        self._decode.clear()
        for s in (*self._parks.values(), self._available, self._gen_rate):
            s.points.clear()
        self._last_generated, self._rate_live = None, False
        self._last_use.clear()
        self._wall_offset = None
        self._last_state.clear()
        self._times.clear()
        self._gaps.clear()


# -- pure helpers ---------------------------------------------------------------------------------

def _check(snap: Any) -> tuple[float, str]:
    """The snapshot's time on the plots' time base and that base's name: `mono` where the feed has it, else `time`."""
    if not isinstance(snap, dict):
        raise FeedError(f"monitor feed: expected a JSON object, got {type(snap).__name__}")
    for key in ("time", "mono"):
        t = snap.get(key)
        if (key == "time" or key in snap) and (isinstance(t, bool) or not isinstance(t, (int, float))):
            raise FeedError(f"monitor feed: '{key}' must be a number, got {t!r}")
    for key in ("slots", "requests", "decisions", "log_tail"):
        if key in snap and not isinstance(snap[key], list):
            raise FeedError(f"monitor feed: '{key}' must be a list, got {type(snap[key]).__name__}")
    for key in ("cache", "totals", "model", "engine"):
        if key in snap and not isinstance(snap[key], dict):
            raise FeedError(f"monitor feed: '{key}' must be an object, got {type(snap[key]).__name__}")
    base = "mono" if "mono" in snap else "time"
    return float(snap[base]), base


def _counters_fell(old: dict, new: dict) -> bool:
    """True when a running total went down: the snapshots come from a new server process."""
    pairs = [((old.get("totals") or {}).get(k), (new.get("totals") or {}).get(k))
             for k in ("requests", "generated_tokens", "prompt_tokens")]
    old_parks = ((old.get("cache") or {}).get("parks") or {}) if isinstance(old.get("cache"), dict) else {}
    new_parks = ((new.get("cache") or {}).get("parks") or {}) if isinstance(new.get("cache"), dict) else {}
    pairs += [(old_parks.get(d), new_parks.get(d)) for d in PARK_DESTINATIONS]
    return any(isinstance(a, (int, float)) and isinstance(b, (int, float)) and b < a for a, b in pairs)


def _dicts(xs: Any) -> list[dict]:
    return [x for x in xs if isinstance(x, dict)] if isinstance(xs, list) else []


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _slot_rows(snap: dict, now: float) -> list[SlotRow]:
    rows = []
    for s in _dicts(snap.get("slots")):
        last_use = _num(s.get("last_use"))
        rows.append(SlotRow(
            key=str(s.get("id")), group=s.get("group"), state=str(s.get("state", "?")),
            tokens=int(s.get("tokens") or 0), capacity=int(s.get("capacity") or 0),
            conversation=s.get("conversation"), idle_s=(now - last_use) if last_use is not None else None,
            reused_tokens=s.get("reused_tokens"), prefill_tps=_num(s.get("prefill_tps")),
            decode_tps=_num(s.get("decode_tps")), protection_left_s=_num(s.get("protection_left_s")),
            value=_num(s.get("value")), superseded=s.get("superseded") is True))
    return rows


def request_reuse(req: dict) -> float | None:
    """Share of a request's prompt that was reused, 0..1 (None without a prompt)."""
    prompt, reused = _num(req.get("prompt_tokens")), _num(req.get("reused_tokens"))
    return reused / prompt if prompt and reused is not None else None


def admission_headroom(cache: dict) -> dict[str, float | None]:
    """Available RAM above each floor in MiB (negative: that floor does not hold)."""
    adm = cache.get("admission") or {}
    available = _num(adm.get("available_mib"))
    out: dict[str, float | None] = {}
    for floor in ("min_free_mib", "park_min_free_mib"):
        f = _num(adm.get(floor))
        out[floor] = available - f if available is not None and f is not None else None
    return out


WALL_STEP_S = 0.5   # a move of the feed's time - mono past this is a wall-clock step (server/placement.WallOffset's)


def _changed(last_use, before) -> bool:
    """Whether a slot's `last_use` moved: by more than a millisecond, since a server that turns a
    monotonic time into wall time for each snapshot jitters in the last digits (an idle slot was
    plotted at its last speed every other snapshot)."""
    if isinstance(last_use, (int, float)) and isinstance(before, (int, float)):
        return abs(last_use - before) > 1e-3
    return last_use != before
