"""What a GGUF model's metadata says about its KV cache and experts: the ONE place for the KV bytes a
token takes in each KV type, the head sizes the engine's q8_0 KV takes, the expert count and whether
only the CPU backend runs the model, used by
`strata setup` (installer/), `strata serve`'s memory check (server/memory_check.py) and the engine's
backend choice (strata.engine).

Pure: metadata dicts and numbers in, numbers out; no file access, no native module. The engine's own
figures (`Engine.bytes_per_token`, kv_layout_make in kv-layout.cpp) are what these must equal; tests
compare them (tests/server/test_memory_check.py).
"""

from __future__ import annotations

from typing import Any

Q8_0_HEAD_MULTIPLE = 32   # the engine's q8_0 KV quantizes whole 32-element blocks per head
Q8_0_MAX_HEAD = 256       # ... of heads up to this size (attention-internal.h k_q8_max_head_dim)


def kv_bytes_per_token(n_layer: int, n_head_kv: int, head_dim: int, kv_type: str,
                       values_in_keys: bool = False) -> int:
    """K and V of every layer for one token: f16 2 bytes an element, f32 4, q8_0 34 bytes a block of 32;
    K alone where the values are the keys (values_in_keys)."""
    kv_dim = n_head_kv * head_dim
    row = {"f16": kv_dim * 2, "f32": kv_dim * 4, "q8_0": -(-kv_dim // 32) * 34}.get(kv_type)
    if row is None:
        raise ValueError(f"unknown kv_type {kv_type!r}")
    return (1 if values_in_keys else 2) * n_layer * row


def values_in_keys(arch: str | None, kv_type: str) -> bool:
    """Whether the engine's KV cache keeps no values apart from the keys: deepseek2's multi-head latent
    attention (one latent row per token and layer, read as both; kv_layout::v_in_k), in f16 / f32 (q8_0
    keeps V rows beside its quantized K tiles)."""
    return arch == "deepseek2" and kv_type != "q8_0"


def q8_0_kv_takes(head_dim: int) -> bool:
    """Whether the engine accepts --kv-type q8_0 for heads of this size."""
    return 0 < head_dim <= Q8_0_MAX_HEAD and head_dim % Q8_0_HEAD_MULTIPLE == 0


def expert_count(metadata: dict[str, Any]) -> int:
    """Experts per layer (`<arch>.expert_count`); 0 for a dense model or a value that is not a count."""
    value = metadata.get(f"{metadata.get('general.architecture')}.expert_count", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def trunk_layers(metadata: dict[str, Any]) -> int:
    """The layers the engine runs (and keeps KV for): block_count, less glm4moe's and deepseek2's (GLM-4.7-Flash)
    trailing multi-token-prediction layers (`nextn_predict_layers`, which the engine does not load). KeyError /
    TypeError when block_count is missing or not a number."""
    arch = metadata.get("general.architecture")
    n = int(metadata[f"{arch}.block_count"])
    nextn = metadata.get(f"{arch}.nextn_predict_layers", 0) if arch in ("glm4moe", "deepseek2") else 0
    return n - nextn if isinstance(nextn, int) and 0 <= nextn < n else n


def attention_temperature(metadata: dict[str, Any]) -> float:
    """mistral3's and deepseek2's (Mistral Large 3) `attention.temperature_scale` (queries grow past the
    original context); 0.0 when off, absent or not a number."""
    arch = metadata.get("general.architecture")
    if arch not in ("mistral3", "deepseek2"):
        return 0.0
    value = metadata.get(f"{arch}.attention.temperature_scale", 0.0)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


# general.file_type of files whose weights only the CPU computes (llama.cpp's MOSTLY_Q2_K, MOSTLY_Q3_K_S /
# _M / _L, MOSTLY_Q2_K_S, MOSTLY_IQ4_NL, MOSTLY_IQ4_XS)
CPU_ONLY_FILE_TYPES = {10: "Q2_K", 11: "Q3_K", 12: "Q3_K", 13: "Q3_K", 21: "Q2_K", 25: "IQ4_NL", 30: "IQ4_XS"}


def cuda_lacks(arch: str | None, n_expert: int, attn_temperature: float, file_type: Any = None) -> str:
    """What the CUDA backend lacks to run a model of this architecture, expert count and attention
    temperature, as `strata setup`'s plan says it ("" when it runs it): the one list behind cpu_only and
    the plan (the engine's own refusal, engine.cpp, names the same parts)."""
    if arch == "deepseek2":
        return "deepseek2's multi-head latent attention"
    if n_expert:
        return f"experts ({n_expert} in this one)"
    if arch == "gemma3":
        return "gemma3's GeGLU, sandwich norms and windowed layers"
    if arch == "smollm3":
        return "SmolLM3's layers without RoPE"
    if isinstance(file_type, int) and file_type in CPU_ONLY_FILE_TYPES:   # a crafted file's may be a list
        return f"{CPU_ONLY_FILE_TYPES[file_type]} weights"
    return "an attention temperature (mistral3's attention.temperature_scale)" if attn_temperature else ""


def cpu_only(metadata: dict[str, Any]) -> bool:
    """Whether only the CPU backend runs the model (cuda_lacks: `backend auto` then picks the CPU; `cuda`
    asked outright is refused by name)."""
    return bool(cuda_lacks(metadata.get("general.architecture"), expert_count(metadata),
                           attention_temperature(metadata), metadata.get("general.file_type")))
