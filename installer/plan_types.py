"""The plain data the installer's plan works on: machine, model, bench facts, answers, questions, plan.

Frozen dataclasses only, no I/O (that is `profile.py`, `model_facts.py` and `bench.py`). Each
threshold of the plan is a named field of `PlanParameters` with its seed default and a validation
that names a bad value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata.model_shape import kv_bytes_per_token, values_in_keys

MIB = 1024 * 1024


class AnswerError(ValueError):
    """An answer the question cannot take; the message is the reason shown before asking again."""


class ModelRefused(AnswerError):
    """A model answer whose file cannot be used (missing, not GGUF, damaged, or one the engine cannot run)."""


@dataclass(frozen=True)
class MachineProfile:
    n_cores: int  # physical cores
    n_logical: int
    ram_total_mib: int
    ram_available_mib: int
    gpu_name: str | None = None
    gpu_vram_mib: int | None = None

    def __post_init__(self) -> None:
        for name in ("n_cores", "n_logical", "ram_total_mib"):
            if getattr(self, name) < 1:
                raise ValueError(f"MachineProfile.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class DiskFacts:
    """The folder proposed for the cold level: free space, and its speeds when the bench measured them."""

    folder: str
    free_mib: int
    write_mib_s: float | None = None
    read_mib_s: float | None = None
    # False: its file system reports a size of 0 (statvfs of /proc, /sys, cgroup and other pseudo file systems): no
    # free space to tell (free_mib 0), and no files of its own to keep conversations in
    reports_size: bool = True


@dataclass(frozen=True)
class ModelFacts:
    path: str
    name: str
    size_bytes: int
    n_layer: int
    n_head_kv: int
    head_dim: int
    n_ctx_train: int
    arch: str = "llama"
    description: str | None = None   # the metadata's general.name; `name` is the id (strata.model_names)
    n_expert: int = 0                # experts per layer (qwen3moe, Mixtral); 0: a dense model
    attn_temperature: bool = False   # mistral3's query temperature (attention.temperature_scale)
    kv_type: str = "f16"             # the KV cache type the plan sizes for ("f16" or "q8_0")
    file_type: int | None = None     # general.file_type (IQ4_NL / IQ4_XS files run on the CPU only)

    def __post_init__(self) -> None:
        for name in ("size_bytes", "n_layer", "n_head_kv", "head_dim", "n_ctx_train"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelFacts.{name} must be >= 1, got {getattr(self, name)}")
        if self.kv_type not in ("f16", "q8_0"):
            raise ValueError(f"ModelFacts.kv_type must be 'f16' or 'q8_0', got {self.kv_type!r}")

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, in `kv_type` (strata.model_shape, the engine's sizes)."""
        return kv_bytes_per_token(self.n_layer, self.n_head_kv, self.head_dim, self.kv_type,
                                  values_in_keys(self.arch, self.kv_type))


@dataclass(frozen=True)
class BenchFacts:
    """The engine's speeds for the chosen model on this machine (None: not measured)."""

    prefill_tps: float | None = None
    decode_tps: float | None = None
    load_s: float | None = None


@dataclass(frozen=True)
class PreviousAnswers:
    """What the configuration file a setup re-run replaces chose for the questions setup asks: proposed as the
    defaults instead of the recommendation (a re-run then Enter changed the user's context, slots and disk
    budget to the new plan's). None for a key the file does not set."""

    model: str | None = None       # its model's file (resolved): ctx and slots are kept only for the same model
    ctx: int | None = None
    batch: int | None = None
    slot_ctx: int | None = None
    cold_dir: str | None = None    # "": conversations not kept on disk
    cold_mib: int | None = None


@dataclass(frozen=True)
class Situation:
    """Everything measured so far: the plan's only input besides the answers."""

    machine: MachineProfile
    cold_disk: DiskFacts
    models_found: tuple[str, ...] = ()
    default_model: str | None = None
    model: ModelFacts | None = None
    bench: BenchFacts | None = None
    cuda_built: bool = False  # the engine was built with its CUDA backend
    models_folder: str | None = None  # where the user's own GGUF files are looked for (said when none is found)
    packaged_model: str | None = None  # the default model's file as installed with Strata (the app's own folder)
    default_model_reason: str | None = None  # why default_model is proposed when not as the default (a re-run)
    previous: PreviousAnswers | None = None  # the file a re-run replaces (None: a first run, or --fresh)


@dataclass(frozen=True)
class Answers:
    model: str | None = None
    concurrency: str | None = None  # "one" | "several"
    keep_on_disk: bool | None = None
    cold_dir: str | None = None
    ctx: int | None = None


@dataclass(frozen=True)
class Question:
    key: str  # the Answers field it fills
    prompt: str
    default: Any  # typed value taken by Enter and --yes; None = must be typed
    default_text: str  # how the default is shown
    reason: str  # why that default
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Choice:
    key: str  # a configuration key (the long flag with - -> _)
    value: Any
    reason: str


@dataclass(frozen=True)
class Plan:
    choices: tuple[Choice, ...]
    warnings: tuple[str, ...] = ()

    def config(self) -> dict[str, Any]:
        """The flat configuration: key -> value, in the plan's order."""
        return {c.key: c.value for c in self.choices}

    def reason(self, key: str) -> str:
        for c in self.choices:
            if c.key == key:
                return c.reason
        raise KeyError(key)


@dataclass(frozen=True)
class PlanParameters:
    """The plan's thresholds. Defaults are the seed's figures where the seed gives one."""

    min_free_mib: int = 2560  # seed 002: the parking floor --conversation-cache-min-free-mib
    park_min_free_mib: int = 512  # seed 002: the transient floor --conversation-cache-park-min-free-mib
    ram_cache_max_mib: int = 8192  # seed 002: the RAM cache's 8 GiB budget
    ram_cache_share: float = 0.25  # share of the RAM left after the model given to the RAM level
    cold_max_mib: int = 20480  # seed 002: the disk tier's 20,480 MiB budget
    cold_disk_share: float = 0.25  # share of the cold folder's free space given to the cold level
    cold_min_mib: int = 1024  # below this the cold level is not proposed
    target_slots: int = 4  # seed 002: "four parallel slots"
    overhead_mib: int = 512  # scratch and compute buffers beside weights and KV
    main_ctx_share: float = 0.5  # share of the KV budget the main context may take when slots are kept
    min_ctx: int = 512  # the smallest context accepted as an answer
    q8_kv_below_ctx: int = 32768  # F16 KV unless it leaves the main context below this (q8_0 then, when larger)
    example_history_tokens: int = 40000  # seed 001's 40K-token history, to compare disk read and prefill
    ctx_ladder: tuple[int, ...] = field(
        default=(2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144))

    def __post_init__(self) -> None:
        for name in ("min_free_mib", "park_min_free_mib", "ram_cache_max_mib", "cold_max_mib",
                     "cold_min_mib", "overhead_mib"):
            if getattr(self, name) < 0:
                raise ValueError(f"PlanParameters.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("ram_cache_share", "cold_disk_share", "main_ctx_share"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"PlanParameters.{name} must be in (0, 1], got {getattr(self, name)}")
        if self.target_slots < 1:
            raise ValueError(f"PlanParameters.target_slots must be >= 1, got {self.target_slots}")
        if self.q8_kv_below_ctx < 0:
            raise ValueError(f"PlanParameters.q8_kv_below_ctx must be >= 0, got {self.q8_kv_below_ctx}")
        if self.min_ctx < 1 or self.example_history_tokens < 1:
            raise ValueError(f"PlanParameters.min_ctx and example_history_tokens must be >= 1, got "
                             f"{self.min_ctx}, {self.example_history_tokens}")
        if not self.ctx_ladder or list(self.ctx_ladder) != sorted(set(self.ctx_ladder)) or self.ctx_ladder[0] < 1:
            raise ValueError(f"PlanParameters.ctx_ladder must be increasing positive sizes, got {self.ctx_ladder}")
