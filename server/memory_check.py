"""Whether the contexts `strata serve` is asked for fit this machine's memory, decided before the engine
allocates them.

Why: the engine backs every context's KV with memory when it loads (no request pays first-touch page
faults), so contexts larger than the free memory do not fail later: the load itself drives the machine
into swap or the OOM killer, with no word said. A 30B model with `--ctx 131072 --batch 4` asks for 64 GiB
of KV. Policy here (`judge`, pure: numbers in, a verdict out); `ask_for` below gathers the numbers (the
GGUF's metadata, psutil) and `strata serve` (server/cli.py) applies the verdict before listening: an error
stops start-up (status 2) with the flags to change, a warning is logged. A `--kv-type q8_0` the engine cannot
hold for the model's head size (deepseek2's 576-wide latent head) is refused here too: the head size is read
here before loading, and the engine's own refusal came only after "listening on" (status 1, which the app retries).

Held with the KV: the engine's packed copies of the Q8_0 / Q4_1 / IQ4_NL / Q4_K / Q5_K / Q6_K / Q3_K / Q2_K /
IQ4_XS matrices on an AVX-512 VNNI build, of the Q8_0 / Q4_1 / IQ4_NL / Q4_K / Q5_K / Q6_K ones on an AVX2 build (made at load,
anonymous memory about their size in the file; the GGUF pages they came from are then left to the page cache). When the KV fits and the packed copies do not fit beside it, the verdict is to read the
weights in place (`pack_weights` False, a warning): slower prompt reading, but the model runs as it
would from the file alone. The other weights stay mapped from the file and are only a warning's business.

Not here: the CUDA backend (its KV lives in VRAM; the backend checks that itself; but a model with
experts, mistral3's attention temperature or deepseek2's latent attention under `--backend auto` runs on the CPU
and is checked), or the conversation cache's RAM level
(its own budget, `--conversation-cache-mib`).
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.model_shape import (
    Q8_0_HEAD_MULTIPLE,
    Q8_0_MAX_HEAD,
    cpu_only,
    kv_bytes_per_token,
    q8_0_kv_takes,
    trunk_layers,
    values_in_keys,
)

GIB = 1 << 30
KV_SHARE_OF_AVAILABLE = 0.9   # the KV may take at most this share of the memory available at start


@dataclass(frozen=True)
class MemoryAsk:
    ctx: int                # --ctx
    slots: int              # --batch
    slot_ctx: int           # --slot-ctx (as the engine uses it)
    kv_type: str            # --kv-type
    kv_bytes_per_token: int
    model_bytes: int        # the GGUF file: its weights are read from it as they are used
    available_bytes: int    # psutil's available memory now (less under a cgroup memory limit: what it leaves)
    total_bytes: int
    packed_bytes: int = 0   # the engine's packed copies of the PACKED_TYPES matrices: held like the KV
    q8_0_allowed: bool = True   # the engine takes --kv-type q8_0 for this model's head size
    q8_0_smaller: bool = True   # q8_0 KV takes fewer bytes than f16 (not deepseek2's: its f16 holds K alone)
    head_dim: int = 0           # the KV head's width (deepseek2: its latent head, kv_lora_rank + RoPE); 0: unknown
    n_ctx_train: int = 0        # the model's trained context (the refusal's example stays within it); 0: unknown
    pack_weights: bool = True   # --pack-weights: the packed copies are asked for
    limit_bytes: int = 0        # this process's cgroup memory limit (a container, a slice); 0: none


@dataclass(frozen=True)
class Verdict:
    error: str | None = None
    warning: str | None = None
    pack_weights: bool = True   # False: load with the weights read in place (the packed copies do not fit)


def kv_type_refusal(ask: MemoryAsk) -> str | None:
    """--kv-type q8_0 on heads the engine's q8_0 KV cannot hold (the engine would refuse it after "listening on");
    checked with --no-memory-check too: it is no matter of memory."""
    if ask.kv_type == "q8_0" and not ask.q8_0_allowed:
        return (f"--kv-type q8_0 cannot hold this model's KV: its heads are {ask.head_dim} wide, and the engine's q8_0 "
                f"KV takes heads of up to {Q8_0_MAX_HEAD} in whole blocks of {Q8_0_HEAD_MULTIPLE}: use --kv-type f16 "
                f"(kv_type = \"f16\" in the configuration file)")
    return None


def judge(ask: MemoryAsk) -> Verdict:
    refusal = kv_type_refusal(ask)
    if refusal:
        return Verdict(error=refusal)
    tokens = ask.ctx + ask.slots * ask.slot_ctx
    kv = tokens * ask.kv_bytes_per_token
    shape = f"--ctx {ask.ctx}" + (f" + --batch {ask.slots} x --slot-ctx {ask.slot_ctx}" if ask.slots else "")
    limit = KV_SHARE_OF_AVAILABLE * ask.available_bytes
    if kv > limit:
        cheaper = " or --kv-type q8_0 (about half the bytes)" if q8_0_would_help(ask) else ""
        return Verdict(error=(
            f"the contexts asked for need {kv / GIB:.1f} GiB of KV ({shape} = {tokens} tokens x "
            f"{ask.kv_bytes_per_token} bytes, KV {ask.kv_type}), more than "
            f"{KV_SHARE_OF_AVAILABLE * 100:.0f} percent ({limit / GIB:.1f} GiB) of the "
            f"{available_text(ask)}: lower --ctx, --slot-ctx or --batch{cheaper} "
            f"({what_fits(ask, int(limit // ask.kv_bytes_per_token))}; `strata setup` sizes them for this machine)"))
    packed = ask.packed_bytes if ask.pack_weights else 0
    if kv + packed > limit:
        return Verdict(pack_weights=False, warning=(
            f"the packed copy of the model's {PACKED_TYPES} weights ({packed / GIB:.1f} GiB) does not fit beside "
            f"the KV ({kv / GIB:.1f} GiB, {shape}) in {KV_SHARE_OF_AVAILABLE * 100:.0f} percent of the "
            f"{available_text(ask)}: the weights are read in place from the file "
            f"(prompts read more slowly); a smaller context leaves room for the copy"))
    if kv + ask.model_bytes > ask.available_bytes:
        return Verdict(warning=(
            f"the model ({ask.model_bytes / GIB:.1f} GiB) and the KV ({kv / GIB:.1f} GiB, {shape}) are more than the "
            f"{available_text(ask)}: weights will be read from disk again as they "
            f"are used, slowly; a smaller context{' or --kv-type q8_0' if q8_0_would_help(ask) else ''} leaves "
            f"them room"))
    return Verdict()


def available_text(ask: MemoryAsk) -> str:
    """'N GiB of memory available', saying the memory limit when one applies (the host's figure is then not it)."""
    under = (f" under this process's memory limit of {ask.limit_bytes / GIB:.1f} GiB (a container or a slice)"
             if ask.limit_bytes else "")
    return f"{ask.available_bytes / GIB:.1f} GiB of memory available{under}"


def what_fits(ask: MemoryAsk, fit_tokens: int) -> str:
    """The refusal's example: the tokens of KV that fit, and the largest power-of-two contexts holding them with
    the same slots (none past the trained context), or one context alone when a slot would get less than 2048."""
    def size_within(tokens: int) -> int:
        size = 1 << (tokens.bit_length() - 1) if tokens > 0 else 0
        return min(size, ask.n_ctx_train) if ask.n_ctx_train else size

    each = fit_tokens // (1 + ask.slots)
    if ask.slots and each >= 2048:
        size = size_within(each)
        return f"{fit_tokens} tokens fit, e.g. --ctx {size} --slot-ctx {size}"
    size = size_within(fit_tokens)
    return f"{fit_tokens} tokens fit, e.g. --ctx {size}" + (" --batch 0" if ask.slots else "")


def q8_0_would_help(ask: MemoryAsk) -> bool:
    """--kv-type q8_0 is advice only from f16, only where the engine takes it for this head size and only
    where it takes fewer bytes."""
    return ask.kv_type == "f16" and ask.q8_0_allowed and ask.q8_0_smaller


# ---------------------------------------------------------------------------------------------
# Mechanism: the numbers of a configuration on this machine


# the types an AVX-512 VNNI build packs (an AVX2 build: the first six; engine_native/src/quants-packed.h)
PACKED_TYPES = "Q8_0 / Q4_1 / IQ4_NL / Q4_K / Q5_K / Q6_K / Q3_K / Q2_K / IQ4_XS"
PACKED_ROLES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_inp",
                "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp",
                "attn_q_a", "attn_q_b", "attn_kv_a_mqa")   # deepseek2's (its per-head attn_k_b / attn_v_b are not packed)


def packed_bytes(tensors, supported=None, size=None, n_layer: int | None = None) -> int:
    """Bytes of the engine's packed copies (model.cpp product_weights: the layers' matrices and the output,
    which is token_embd when the file has no output.weight) of the types this build packs. `supported(type_id)`
    and `size(type_id, n_rows, n_cols)` default to the engine's own (quants-packed.cpp: the PACKED_TYPES on an AVX-512
    VNNI build, Q8_0 / Q4_1 / IQ4_NL / Q4_K / Q5_K / Q6_K on an AVX2 one, none in a scalar build). With `n_layer`, layers from
    n_layer on (glm4moe's and deepseek2's multi-token-prediction layers, which the engine does not load) are
    left out."""
    if supported is None or size is None:
        from strata import _engine

        kernels = getattr(_engine, "kernels", None)
        if kernels is None or not hasattr(kernels, "packed_supported"):
            return 0
        supported, size = kernels.packed_supported, kernels.packed_bytes
    names = {t.name for t in tensors}
    output = "output.weight" if "output.weight" in names else "token_embd.weight"

    def product(t) -> bool:
        parts = t.name.split(".")
        role = parts[2] if t.name.startswith("blk.") and len(parts) >= 4 else ""
        if role and n_layer is not None and parts[1].isdigit() and int(parts[1]) >= n_layer:
            return False
        return len(t.shape) == 2 and (t.name == output or (role in PACKED_ROLES and t.name.endswith(".weight")))

    return sum(int(size(t.type_id, t.shape[1], t.shape[0])) for t in tensors if product(t) and supported(t.type_id))


def ask_for(cfg, path, backend: str, cgroup=None) -> MemoryAsk | None:
    """The MemoryAsk of `strata serve`'s configuration for the GGUF at `path` on this machine, `backend`
    being what `--backend` resolved to; None when the KV will not be in RAM (the CUDA backend, save a
    model only the CPU runs under `--backend auto`: experts, an attention temperature, deepseek2's latent
    attention) or the metadata cannot be read (the engine's load then says what is wrong with the file).
    `cgroup`: where this process's memory limit is read (cache.cgroup_memory.CgroupMemory; tests give a folder)."""
    import os

    import psutil
    from strata.engine import GGUFFile

    try:
        gguf = GGUFFile(os.fspath(path))
        md = gguf.metadata
        arch = md["general.architecture"]
        if backend == "cuda" and not (cfg.backend == "auto" and cpu_only(md)):
            return None
        n_head = int(md[f"{arch}.attention.head_count"])
        n_head_kv = int(md.get(f"{arch}.attention.head_count_kv", n_head))
        head_dim = int(md.get(f"{arch}.attention.key_length") or int(md[f"{arch}.embedding_length"]) // n_head)
        n_layer = trunk_layers(md)
        bpt = kv_bytes_per_token(n_layer, n_head_kv, head_dim, cfg.kv_type, values_in_keys(arch, cfg.kv_type))
        packed = packed_bytes(gguf.tensors, n_layer=n_layer)
        q8_0_allowed = q8_0_kv_takes(head_dim)
        n_ctx_train = md.get(f"{arch}.context_length", 0)
        q8_0_smaller = (kv_bytes_per_token(n_layer, n_head_kv, head_dim, "q8_0", values_in_keys(arch, "q8_0")) <
                        kv_bytes_per_token(n_layer, n_head_kv, head_dim, "f16", values_in_keys(arch, "f16")))
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    from strata.server.cache.cgroup_memory import within_limit

    vm = psutil.virtual_memory()   # in a container the host's figures count memory this process can never have
    total, available, limit = within_limit(int(vm.total), int(vm.available), cgroup)
    return MemoryAsk(ctx=cfg.ctx, slots=cfg.batch, slot_ctx=cfg.slot_ctx_effective if cfg.batch else 0,
                     kv_type=cfg.kv_type, kv_bytes_per_token=bpt, model_bytes=os.path.getsize(path),
                     available_bytes=available, total_bytes=total, packed_bytes=packed, limit_bytes=limit,
                     q8_0_allowed=q8_0_allowed, q8_0_smaller=q8_0_smaller, head_dim=head_dim,
                     n_ctx_train=n_ctx_train if isinstance(n_ctx_train, int) and n_ctx_train > 0 else 0,
                     pack_weights=bool(cfg.pack_weights))
