"""strata.engine: the Python façade over the native engine strata._engine.

Not here: tokenizer, chat template and sampling (their own modules), snapshots' image format
(`snapshot.py`). This module re-exports the native types with Python-friendly attributes.
"""

from __future__ import annotations

from strata import _engine

build_info = _engine.build_info
GGUFError = _engine.GGUFError
GGUFTensor = _engine.GGUFTensor


class GGUFFile:
    """A memory-mapped GGUF file: `.metadata` (dict, arrays as lists) and `.tensors` (table).

    Raises GGUFError (a ValueError) naming the problem for a malformed file.
    """

    def __init__(self, path) -> None:
        self._native = _engine.GGUFFile(str(path))
        self.path = str(path)
        self.version: int = self._native.version
        self.alignment: int = self._native.alignment
        self.data_offset: int = self._native.data_offset
        self.file_size: int = self._native.file_size
        self.metadata: dict = self._native.metadata_dict()
        self.tensors: list[GGUFTensor] = self._native.tensor_list()

    def metadata_types(self) -> dict:
        """key -> (gguf value type,) or (ARRAY, element type)."""
        return self._native.metadata_types()

    def tensor(self, name: str) -> GGUFTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"no tensor named {name!r} in {self.path}")

    def __repr__(self) -> str:
        return f"GGUFFile({self.path!r}, {len(self.metadata)} keys, {len(self.tensors)} tensors)"


__all__ = ["GGUFError", "GGUFFile", "GGUFTensor", "build_info"]
