"""What `strata serve` checks about the model and this machine before it listens, in one place for `serve`
and for `strata setup --show`, so that --show's "valid" means the server starts.

The checks, in order: the model file (missing, not GGUF, or something the engine cannot run:
`strata.engine.check_model`, nothing loaded) -> exit status 3 (`MODEL_NOT_LOADED`); `--backend cuda` where it cannot run (a model
only the CPU runs, such as deepseek2's; a build or machine without CUDA) -> 2;
the memory check's error (contexts no memory here holds, a KV type the engine cannot hold for the model's
heads, checked with --no-memory-check too) -> 2. Its warnings and the packed-weights verdict are returned for
serve to log and apply.
Not here: the configuration's own keys and combinations (server/config.py `validate`, `file_problems`),
the port (serve checks it right before listening).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from strata.exit_status import CONFIGURATION_REFUSED, MODEL_NOT_LOADED


@dataclass(frozen=True)
class Preflight:
    status: int = 0                    # the exit status serve stops with; 0: it goes on to listen
    error: str = ""                    # why, as serve logs it
    warnings: tuple[str, ...] = ()     # the memory check's warnings
    pack_weights: bool = True          # False: the packed weight copies do not fit beside the KV


def preflight(config) -> Preflight:
    from strata.engine import check_model
    from strata.engine.gpu import cuda_lacks_of, resolve_backend
    from strata.engine.models import damaged_file_advice
    from strata.server.app import model_path

    try:
        path = model_path(config)        # a file not found is named as it was given already
    except (FileNotFoundError, ValueError) as e:
        return Preflight(MODEL_NOT_LOADED, f"the model could not be loaded: {e}")
    try:
        check_model(path)
    except (FileNotFoundError, ValueError) as e:
        return Preflight(MODEL_NOT_LOADED,
                         f"the model could not be loaded: {refusal_as_given(config, path, e)}{damaged_file_advice(e)}")
    if config.backend == "cuda":           # before the build's own check: rebuilding with CUDA would not help
        lacks = cuda_lacks_of(path)
        if lacks:
            return Preflight(CONFIGURATION_REFUSED, f"--backend cuda: the CUDA backend has no {lacks}; this model "
                                                    "runs on the CPU (--backend cpu, or auto)")
    try:
        backend = resolve_backend(config.backend)
    except ValueError as e:              # an option this machine cannot honour, so the app does not retry
        return Preflight(CONFIGURATION_REFUSED, f"--backend {config.backend}: {e}")
    from strata.server import memory_check

    ask = memory_check.ask_for(config, path, backend)   # None: the KV is in VRAM
    if not config.memory_check:
        refusal = memory_check.kv_type_refusal(ask) if ask is not None else None
        return Preflight(CONFIGURATION_REFUSED, refusal) if refusal else Preflight()
    verdict = memory_check.judge(ask) if ask is not None else memory_check.Verdict()
    if verdict.error:
        return Preflight(CONFIGURATION_REFUSED, verdict.error)
    return Preflight(warnings=(verdict.warning,) if verdict.warning else (), pack_weights=verdict.pack_weights)


def refusal_as_given(config, path, error: Exception) -> str:
    """The engine's refusal of the model file with the model named as it was given (`--model NAME`, or
    `FILE: model = NAME`), as a missing file's message names it: the reader names the path alone, which did not
    say that the configuration file named it. Its `GGUF PATH: ` / `model PATH: ` is dropped where NAME is that
    path, however spelt (`./m.gguf`, `~/m.gguf`: the reader says `m.gguf`, `/home/...`); it stays where NAME is an
    id (it says which file the id found)."""
    from strata.server.app import model_given

    text = str(error)
    if not config.model:
        return text                  # the default model: nothing was given
    for reader in ("GGUF", "model"):
        said = f"{reader} {os.fspath(path)}: "
        if Path(config.model).expanduser() == Path(path) and text.startswith(said):
            text = text[len(said):]
    return f"{model_given(config)} {config.model}: {text}"
