"""How Strata names a model: the ONE rule, used by `strata serve` (its model id in the APIs and the
monitor feed), the monitor, `strata setup` and `strata models`.

The id is the GGUF file's name without `.gguf` (what the user picked, unique in a folder, stable when
the metadata is vague); the metadata's `general.name` is only a description shown beside it.
Pure: no file access beyond the path text.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def model_id(path: str | os.PathLike[str]) -> str:
    """`/models/SmolLM2-135M-Instruct.Q4_1.gguf` -> `SmolLM2-135M-Instruct.Q4_1`."""
    p = Path(path)
    return p.stem if p.suffix.lower() == ".gguf" else p.name


def model_description(metadata: dict[str, Any] | None) -> str | None:
    """The metadata's `general.name`, trimmed; None when absent, empty or not text."""
    name = (metadata or {}).get("general.name")
    return name.strip() or None if isinstance(name, str) else None
