"""The typed `web.AppKey`s of the application, and the one mutable state object they point at.

Handlers read `app[STATE]`; server/app.py fills it while the model loads (so /health can answer 503
until `ready`). Nothing here starts or stops anything.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from strata.server.config import ServerConfig
from strata.server.metrics import Metrics
from strata.server.options import OPTIONS


@dataclass
class ServerState:
    config: ServerConfig
    metrics: Metrics = field(default_factory=Metrics)
    engine: Any = None              # strata.engine.Engine once loaded
    scheduler: Any = None           # strata.server.scheduler.Scheduler once loaded
    cache: Any = None               # strata.server.cache.ConversationCache when configured
    ready: bool = False
    stopping: bool = False          # set at shutdown: long-lived streams (monitor events) end
    load_error: str | None = None
    info_line: str = ""
    model_name: str = ""            # strata.model_names.model_id: the file name without .gguf
    model_description: str | None = None   # the metadata's general.name (model_names.model_description)
    model_quant: str | None = None  # as `strata models` names it, read once at load (monitor_feed.model_quant)
    started: float = 0.0
    app: Any = None                 # the web.Application (to attach parts' keys once loaded)
    on_load_error: Callable[[], None] | None = None   # the CLI stops the server when loading fails
    log_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=200))
    said: set[str] = field(default_factory=set)   # what was accepted and said once per server (tool_pairing.py)

    def model_names(self) -> list[str]:
        return [self.model_name, *self.config.aliases] if self.model_name else list(self.config.aliases)


STATE: web.AppKey[ServerState] = web.AppKey("strata_state", ServerState)
# a request's job number, once its job exists (jobrun.JobEvents; the X-Strata-Request header names it); a plain
# string key on an aiohttp before RequestKey (3.13), where pyproject's aiohttp>=3.9 allows one
REQUEST_ID: Any = web.RequestKey("strata_request_id", int) if hasattr(web, "RequestKey") else "strata_request_id"


def served_option(app: web.Application, key: str) -> Any:
    """Option `key`'s value in the running server; its default in an application without the server's state
    (the session routes alone)."""
    state = app.get(STATE)
    if state is not None:
        return getattr(state.config, key)
    return next(o.default for o in OPTIONS if o.key == key)
