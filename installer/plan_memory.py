"""The installer plan's memory arithmetic (MiB): where the machine's RAM (or the GPU's memory) goes, how
large a context and how many slots fit beside the model, which KV type holds them, and where a park goes.

Pure, as plan.py (which asks the questions and builds the plan from these figures): frozen dataclasses
in, numbers and one-line reasons out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from strata.installer.plan_types import MIB, ModelFacts, PlanParameters, Situation
from strata.monitor.units import counted, per_token
from strata.monitor.units import mib as mib_text

from strata.model_shape import Q8_0_HEAD_MULTIPLE, Q8_0_MAX_HEAD, cuda_lacks, q8_0_kv_takes


def gib(mib: float) -> str:
    """A size in MiB as the plan's reasons say it: in GiB from 1 GiB, in MiB below (units.mib): a small model's
    "2048 tokens = 0.0 GiB of KV" read as none."""
    return mib_text(mib)


def round_down(value: float, step: int) -> int:
    return max(0, int(value // step) * step)


@dataclass(frozen=True)
class Budget:
    """Where the machine's RAM goes, in MiB: model weights, RAM cache level, floor, scratch, KV."""

    model_mib: int
    ram_cache_mib: int
    kv_mib: int  # what is left for the KV of main + slots; may be <= 0 on a machine too small


def on_gpu(s: Situation) -> bool:
    """Whether the plan puts the model on the GPU: one found, a CUDA build, and a model the CUDA backend
    runs (it has no expert kernels and no query temperature: such models run on the CPU)."""
    gpu = bool(s.machine.gpu_name and s.machine.gpu_vram_mib and s.cuda_built)
    return gpu and not (s.model is not None and cuda_lacks_of(s.model))


def cuda_lacks_of(model: ModelFacts) -> str:
    """What the CUDA backend lacks to run `model`, as the plan says it ("" when it runs it)."""
    return cuda_lacks(model.arch, model.n_expert, model.attn_temperature, model.file_type)


def ram_budget(s: Situation, model: ModelFacts, p: PlanParameters) -> Budget:
    machine = s.machine
    model_mib = -(-model.size_bytes // MIB)
    after_model = machine.ram_total_mib - model_mib
    ram_cache = min(p.ram_cache_max_mib, round_down(after_model * p.ram_cache_share, 256))
    kv = after_model - ram_cache - p.min_free_mib - p.overhead_mib
    if on_gpu(s):  # weights and KV live in the GPU's memory; the RAM levels stay in RAM
        kv = min(kv, machine.gpu_vram_mib - model_mib - p.overhead_mib)
    return Budget(model_mib, max(0, ram_cache), kv)


def kv_mib_of(model: ModelFacts, n_tokens: int) -> float:
    return n_tokens * model.kv_bytes_per_token / MIB


def slots_that_fit(model: ModelFacts, budget: Budget, ctx: int, p: PlanParameters) -> int:
    """Slots of `ctx` tokens (slot_ctx = ctx) that fit beside a main context of `ctx` tokens."""
    left = budget.kv_mib - kv_mib_of(model, ctx)
    if left <= 0:
        return 0
    return max(0, min(p.target_slots, int(left // kv_mib_of(model, ctx))))


def smallest_ctx(model: ModelFacts, p: PlanParameters) -> int:
    return min(p.ctx_ladder[0], model.n_ctx_train)


def need_model(s: Situation, p: PlanParameters) -> ModelFacts:
    """The chosen model, with the KV type the plan sizes for (`choose_kv_type`)."""
    if s.model is None:
        raise ValueError("the model must be chosen (and measured) before this question")
    return replace(s.model, kv_type=choose_kv_type(s, p)[0])


def largest_ctx(model: ModelFacts, kv_mib: float, p: PlanParameters) -> int:
    """The largest ladder step within the trained context whose KV fits kv_mib (0: none)."""
    fits = [c for c in p.ctx_ladder if c <= model.n_ctx_train and kv_mib_of(model, c) <= kv_mib]
    return fits[-1] if fits else 0


def choose_kv_type(s: Situation, p: PlanParameters) -> tuple[str, str]:
    """F16 KV, unless it leaves one context of all the KV budget below p.q8_kv_below_ctx tokens and
    q8_0 (about half the bytes) allows a larger one: a big model on a small machine."""
    f16 = replace(s.model, kv_type="f16")
    b = ram_budget(s, f16, p)
    ctx16 = largest_ctx(f16, b.kv_mib, p)
    if ctx16 < p.q8_kv_below_ctx and ctx16 < min(f16.n_ctx_train, p.ctx_ladder[-1]):
        if not q8_0_kv_takes(f16.head_dim):   # the engine quantizes whole q8_0 blocks per head, and refuses others
            d = f16.head_dim   # deepseek2's latent head (576) is whole blocks but over the limit: it said "not a multiple"
            why = f"head size {d} is not a multiple of 32" if d % Q8_0_HEAD_MULTIPLE else \
                f"head size {d} is over {Q8_0_MAX_HEAD}"
            return "f16", (f"F16 KV, {per_token(f16.kv_bytes_per_token)}: the engine's q8_0 KV takes heads of "
                           f"whole 32-element blocks, up to {Q8_0_MAX_HEAD}, and {why}")
        q8 = replace(f16, kv_type="q8_0")
        ctx8 = largest_ctx(q8, b.kv_mib, p)
        if ctx8 > ctx16:
            return "q8_0", (f"q8_0 KV, {per_token(q8.kv_bytes_per_token)}: in the {gib(b.kv_mib)} left for "
                            f"KV, F16 ({per_token(f16.kv_bytes_per_token)}) would hold one context of "
                            f"{ctx16 or 'not even ' + str(p.ctx_ladder[0])} tokens at most, q8_0 {ctx8} "
                            "(tokens the main context and any slots share)")
    return "f16", (f"F16 KV, {per_token(f16.kv_bytes_per_token)}: "
                   "restored state is bit-identical to a fresh prefill")


def f16_if_it_holds(model: ModelFacts, b: Budget, ctx: int, concurrency: str | None, kv_choice: tuple[str, str],
                     p: PlanParameters) -> tuple[ModelFacts, tuple[str, str]]:
    """A context the user answered: F16 KV after all when it holds that context and as many slots as q8_0
    would (q8_0 was chosen for the largest context the budget allows, which the answer does not ask for)."""
    if model.kv_type != "q8_0":
        return model, kv_choice
    f16 = replace(model, kv_type="f16")
    slots = (lambda m: 0) if concurrency == "one" else (lambda m: slots_that_fit(m, b, ctx, p))
    if kv_mib_of(f16, ctx) > b.kv_mib or slots(f16) != slots(model):
        return model, kv_choice
    its_slots = f" and its {counted(slots(f16), 'slot')}" if slots(f16) else ""
    return f16, ("f16", f"F16 KV, {per_token(f16.kv_bytes_per_token)}: your {ctx}-token context"
                        f"{its_slots} fit in F16 too (q8_0 was for the "
                        "largest context); restored state is bit-identical to a fresh prefill")


def park_target(s: Situation, model: ModelFacts, b: Budget, ctx: int, n_slots: int,
                 keep: bool, p: PlanParameters) -> tuple[str, str, str]:
    """ram, unless RAM beside the floor cannot hold one snapshot per slot: then auto (decided at start)."""
    if not keep:
        return "conversation_cache_park", "ram", "ram: parking to disk needs the disk level"
    snapshot = kv_mib_of(model, ctx)
    in_ram = 0 if on_gpu(s) else b.model_mib + (1 + n_slots) * snapshot  # weights and live KV
    spare = s.machine.ram_total_mib - in_ram - p.min_free_mib - p.overhead_mib
    need = max(1, n_slots) * snapshot
    if spare < need:
        return ("conversation_cache_park", "auto",
                f"auto: {gib(max(0, spare))} spare cannot hold one {gib(snapshot)} snapshot per slot "
                "beside the floor; the server decides at start")
    return "conversation_cache_park", "ram", (f"ram: {gib(spare)} spare holds one snapshot per slot; "
                                               "moved to disk when the RAM level is full and at shutdown")
