"""The application factory `init_app(config) -> web.Application` and the model-loading lifecycle.

The app listens at once; the model loads in a background thread (`/health` answers 503 until it is
ready). Loading builds the engine, the conversation cache, the scheduler (its one worker thread) and
the INFO line; cleanup stops them in reverse order. Not here: command-line handling (cli.py), the
routes' handlers, the scheduling itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web
from strata.monitor.units import counted
from strata.server import body_read, jobrun, lookup, parser_fault_log, slot_policy
from strata.server.config import ServerConfig
from strata.server.keys import STATE, ServerState
from strata.server.monitor_feed import model_quant
from strata.server.routes import add_routes
from strata.server.scheduler import Scheduler
from strata.server.service import auth_middleware, error_middleware
from strata.server.stop_progress import PROGRESS_EVERY_S, StopProgress

from strata.model_names import model_description, model_id

log = logging.getLogger("strata.server")
MIB = 1024 * 1024


class LogTail(logging.Handler):
    """Keeps the last lines of the server's log for the monitor feed."""

    def __init__(self, state: ServerState) -> None:
        super().__init__(logging.INFO)
        self.state = state
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.state.log_tail.append(self.format(record))
        except Exception:
            pass


def init_app(config: ServerConfig) -> web.Application:
    app = web.Application(client_max_size=max(1024, int(config.max_body_mib * MIB)),
                          middlewares=[error_middleware, auth_middleware], handler_args=body_read.HANDLER_ARGS)
    app[body_read.BODIES_UNDECODED] = True
    state = ServerState(config=config, started=time.time())
    app[STATE] = state
    parser_fault_log.install()   # a malformed request is a warning line, not aiohttp's ERROR traceback
    add_routes(app)
    _attach_sessions(app, state)
    app.on_response_prepare.append(jobrun.name_request)
    app.on_shutdown.append(_on_shutdown)
    app.cleanup_ctx.append(_lifecycle)
    return app


def model_given(config: ServerConfig) -> str:
    """Where the model was named, as messages about it say so before its name: `--model`, or `FILE: model =`
    for the configuration file's key (a user who never typed --model would look for the flag)."""
    return f"{config.config_path}: model =" if "model" in config.keys_from_file else "--model"


def model_path(config: ServerConfig) -> Path:
    """The GGUF file to load; FileNotFoundError saying where to find one when there is none."""
    if config.model:
        from strata.engine.models import resolve_model

        # a path, or the id `strata models` shows; named as the user gave it (`strata chat` says the file's so too)
        return resolve_model(model_given(config), config.model)
    from strata.engine.models import default_model_path

    return default_model_path()


def load(state: ServerState) -> None:
    """Builds everything that needs the model (runs in a thread)."""
    from strata.engine import Engine

    cfg = state.config
    path = model_path(cfg)
    t0 = time.monotonic()
    engine = Engine(str(path), n_ctx=cfg.ctx, n_slots=cfg.batch, n_groups=cfg.batch_groups if cfg.batch else 1,
                    slot_ctx=cfg.slot_ctx_effective if cfg.batch else None, n_threads=cfg.threads,
                    kv_type=cfg.kv_type, backend=cfg.backend, max_chunk=cfg.prefill_chunk,
                    pack_weights=cfg.pack_weights)
    state.engine = engine
    state.model_name = model_id(path)
    state.model_description = model_description(getattr(engine, "metadata", None))
    state.model_quant = model_quant(engine)
    _warn_beyond_training(cfg, engine)
    _warn_unusable_template(engine)
    state.cache = _make_cache(cfg, engine)
    timeline = None
    if cfg.timeline_out:
        from strata.server.timeline_writer import TimelineWriter

        timeline = TimelineWriter(cfg.timeline_out)
    sched = Scheduler(engine, queue_limit=cfg.queue, prefill_chunk=cfg.prefill_chunk, metrics=state.metrics,
                      policy_cfg=slot_policy.PolicyConfig.from_env(cfg.env), cache=state.cache, timeline=timeline,
                      prefill_slice_ms=cfg.prefill_slice_ms, mixed_piece=cfg.mixed_piece,
                      lookup_cfg=lookup.LookupConfig(max_draft=lookup_draft(cfg, engine), max_rows=cfg.lookup_rows),
                      cache_reuse=cfg.cache_reuse, prompt_order_name=cfg.prompt_order,
                      solo_slice_ms=cfg.solo_slice_ms, decode_share_of_time=cfg.decode_share)
    sched.start()
    state.scheduler = sched
    state.info_line = info_line(state)
    state.ready = True                  # before the INFO line: a client that waits for it is served at once
    if state.stopping:                  # stopped while loading: "listening on" would read as if it serves
        log.info("model loaded in %.1f s; not serving it: the server is stopping", time.monotonic() - t0)
        return
    log.info("%s (loaded in %.1f s)", state.info_line, time.monotonic() - t0)


def _warn_beyond_training(cfg: ServerConfig, engine: Any) -> None:
    """A context larger than the model's trained one works, but the model's answers past the trained
    length are unreliable; say so once at start (`strata setup` refuses such a size)."""
    trained = int(getattr(engine, "n_ctx_train", 0) or 0)
    largest = max(cfg.ctx, cfg.slot_ctx_effective if cfg.batch else 0)
    if trained and largest > trained:
        log.warning("the context (%d tokens) is larger than the %d tokens the model was trained on: "
                    "answers past %d tokens are unreliable (--ctx, --slot-ctx)", largest, trained, trained)


def _warn_unusable_template(engine: Any) -> None:
    """A chat template that cannot be used is found at load, not at the first chat request: the model
    still serves /v1/completions, and the chat endpoints answer with this problem."""
    problem = getattr(engine, "chat_template_problem", None)
    if problem:
        log.warning("the model's chat template is unusable (%s): chat requests (/v1/chat/completions, /v1/messages, "
                    "/v1/responses) are refused with this error; /v1/completions works", problem)


def _make_cache(cfg: ServerConfig, engine: Any) -> Any:
    try:
        from strata.server.cache import CacheConfig, ConversationCache
        from strata.server.cache.fileio import file_io_from_env
        from strata.server.cache.options import folders_without_budget
    except ImportError:
        return None
    cache_cfg = CacheConfig.from_values(cfg.values, environ=cfg.env)
    for warning in folders_without_budget(cfg.values):
        log.warning("%s", warning)
    try:
        return ConversationCache(cache_cfg, engine, io=file_io_from_env())   # the process environment: a test hook
    except ImportError as e:          # the engine's snapshot module is missing: run without the cache
        log.warning("conversation cache off: %s", e)
        return None


def _attach_sessions(app: web.Application, state: ServerState) -> None:
    try:
        from strata.server.cache.http import SESSION_BACKEND
    except ImportError:
        return
    from strata.server.sessions_backend import SessionBackend

    app[SESSION_BACKEND] = SessionBackend(state)


def _gpu_part(engine) -> list[str]:
    """The GPU and its VRAM for the INFO line, or nothing on the CPU backend."""
    from strata.engine.gpu import describe_gpu

    gpu = engine.gpu() if callable(getattr(engine, "gpu", None)) else None
    return [f"GPU {describe_gpu(gpu)}"] if gpu else []


def lookup_draft(cfg: Any, engine: Any) -> int:
    """`--lookup-draft` as given, else its default for this model (off for a model with experts)."""
    if cfg.lookup_draft is not None:
        return int(cfg.lookup_draft)
    return lookup.default_max_draft(int(getattr(engine, "n_expert", 0) or 0))


def _lookup_part(cfg: Any, engine: Any) -> str:
    draft = lookup_draft(cfg, engine)
    if draft:
        return f"lookup decoding {draft} tokens"
    return "lookup decoding off" + (" (a model with experts)" if cfg.lookup_draft is None else "")


def _packing_part(engine: Any) -> list[str]:
    """The CPU backend's packed weight copies (memory the user may wonder about), or that there are none."""
    if not str(getattr(engine, "backend", "")).startswith("cpu"):
        return []
    packed = int(getattr(engine, "packed_bytes", 0))
    if not packed:
        return ["weights read in place"]
    # a small model's copies in KiB: "packed 0 MiB" read as if nothing were packed
    return [f"weights packed {packed / 2**20:.0f} MiB" if packed >= 2**20 else f"weights packed {packed / 1024:.0f} KiB"]


def info_line(state: ServerState) -> str:
    cfg, e = state.config, state.engine
    n_slots = int(getattr(e, "n_slots", 0))
    contexts = f"main {e.context_capacity(0)}"
    if n_slots:
        contexts += f" + {n_slots} slots x {e.context_capacity(1)} in {counted(getattr(e, 'n_groups', 1), 'group')}"
    parts = [
        f"model {state.model_name} ({getattr(e, 'arch', '?')}"
        + (f", {e.n_expert_used} of {e.n_expert} experts a token" if getattr(e, "n_expert", 0) else "") + ")",
        f"backend {getattr(e, 'backend', cfg.backend)}, {counted(getattr(e, 'n_threads', None), 'thread')}",
        *_gpu_part(e),
        f"contexts {contexts}, KV {getattr(e, 'kv_type', cfg.kv_type)}",
        f"large pages {getattr(e, 'large_pages', 'unknown')}",
        *_packing_part(e),
        _lookup_part(cfg, e),
    ]
    if state.cache is not None and hasattr(state.cache, "describe"):
        parts.append(state.cache.describe())
    else:
        parts.append("conversation cache off")
    parts.append(f"listening on {cfg.url()}")
    return "strata: " + " | ".join(parts)


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    state.app = app
    tail = LogTail(state)
    logging.getLogger("strata").addHandler(tail)
    task = asyncio.get_running_loop().run_in_executor(None, _load_logged, state)
    yield
    try:
        await asyncio.wait_for(asyncio.shield(task), 120)
    except Exception:
        pass
    if state.scheduler is not None:
        await asyncio.get_running_loop().run_in_executor(None, state.scheduler.stop)
        if state.scheduler.timeline is not None:
            state.scheduler.timeline.close()
    if state.cache is not None:
        try:
            # off the event loop, as the scheduler's stop: its writes take minutes for a big model, and a loop held
            # by them took a second Ctrl-C only once they had ended (cli.ALREADY_STOPPING came after "stopped")
            await asyncio.get_running_loop().run_in_executor(None, close_cache, state.cache)
        except Exception:
            log.exception("closing the conversation cache failed")
    logging.getLogger("strata").removeHandler(tail)


def close_cache(cache: Any, every_s: float = PROGRESS_EVERY_S) -> None:
    """The stop's last step: the conversation cache closed (a session save still writing waited for, RAM handed to
    disk), saying how far at most every `every_s`, then what it kept."""
    progress = StopProgress(log, every_s)
    cache.close(progress=progress, waiting=progress.waiting)
    log.info("%s", stopped_line(cache))


def stopped_line(cache: Any) -> str:
    """What the conversation cache kept for the next start, said at the stop (the INFO line's fragment,
    after the stop parked the contexts' histories and handed RAM to the first disk level)."""
    given = [lc for lc in cache.level_configs if lc.name in cache.unavailable]
    if given and not cache.keeps_across_restarts():
        # the user turned a level on: advising the flag they gave would not help; the folder is what to change
        return "stopped; conversation histories not kept: " + "; ".join(
            f"the {lc.name} level {lc.folder} was unavailable ({cache.unavailable[lc.name]}): give "
            f"--conversation-cache-{lc.name}-dir a folder this user can write" for lc in given)
    if not cache.keeps_across_restarts():
        return ("stopped; conversation histories not kept: no disk level is on (RAM does not outlive the process; "
                "`strata setup`, or --conversation-cache-cold-mib MIB (a budget: its folder is the platform cache "
                "folder's unless --conversation-cache-cold-dir says), keeps them on disk for the next start)")
    line = "stopped; kept for the next start: " + cache.describe(kept=True)
    ram = getattr(cache, "ram", None)
    left = len(ram.entries) if ram is not None else 0
    if left:  # the disk refused them (full, read-only, budget): a warning above says why
        line += f"; the {left} RAM entries could not be written to disk and are lost"
    return line


async def _on_shutdown(app: web.Application) -> None:
    """Before aiohttp waits for open handlers: end the monitor streams and cancel running requests, so a
    stop takes a moment, not the handlers' full length."""
    state = app[STATE]
    state.stopping = True
    if state.scheduler is not None:
        await asyncio.get_running_loop().run_in_executor(None, state.scheduler.stop)


def _load_logged(state: ServerState) -> None:
    try:
        load(state)
    except Exception as e:
        state.load_error = f"the model could not be loaded: {e}{_memory_hint(e, state.config)}"
        log.error("%s", state.load_error)
        if state.on_load_error is not None:
            state.on_load_error()


def _memory_hint(error: BaseException, cfg: ServerConfig) -> str:
    """What to change when the contexts' KV did not fit in memory (the engine backs all of it at start);
    empty for any other load error."""
    if not (isinstance(error, MemoryError) or "Cannot allocate memory" in str(error)
            or "bad_alloc" in str(error)):
        return ""
    slots = f"{counted(cfg.batch, 'slot')} of {cfg.slot_ctx_effective} tokens" if cfg.batch else "no slots"
    return (f" (not enough memory for the KV cache of the main context of {cfg.ctx} tokens and {slots}: "
            f"lower --ctx, --batch or --slot-ctx, or use --kv-type q8_0; `strata setup` picks sizes that "
            f"fit this machine)")
