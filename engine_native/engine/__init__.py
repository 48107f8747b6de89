"""strata.engine: the Python façade over the native engine strata._engine.

What it is: `GGUFFile` (the native GGUF reader) and `Engine` (a model, its contexts, compute,
snapshots, text). The contract is docs/internals.md ("Engine"); the typed surface is __init__.pyi.
What it is not: the tokenizer, chat template or sampler (text teammate's modules, imported lazily
here), the snapshot image format (`snapshot.py`), or any scheduling (the server's).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from strata import _engine
from strata.model_shape import cpu_only

build_info = _engine.build_info
GGUFError = _engine.GGUFError
GGUFTensor = _engine.GGUFTensor
EngineError = _engine.EngineError
EngineInterrupted = _engine.EngineInterrupted   # an EngineError: a forward given up by Engine.interrupt
ModelError = _engine.ModelError

KV_TYPES = ("f16", "q8_0", "f32")  # f32: a precision reference for tests
BACKENDS = ("cpu", "cuda", "auto")  # auto: cuda when the build has it and a GPU is present (gpu.py)


class GGUFFile:
    """A memory-mapped GGUF file: `.metadata` (dict, arrays as lists) and `.tensors` (table).

    Raises GGUFError (a ValueError) naming the problem for a malformed file.
    """

    def __init__(self, path) -> None:
        self._native = _engine.GGUFFile(os.fspath(path))
        self.path = os.fspath(path)
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


def model_identity(path, data_offset: int) -> str:
    """Hex SHA-256 of the file's header (metadata + tensor table), not of the weights."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = data_offset
        while left > 0:
            block = f.read(min(left, 1 << 20))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return h.hexdigest()


def _positive_int(name: str, value, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return int(value)


class Engine:
    """A llama-family model on the CPU with a main context (id 0) and `n_slots` slot contexts.

    Every compute call releases the GIL; calls are serialized inside the engine. Bad arguments raise
    ValueError (EngineError / ModelError / GGUFError are ValueErrors) naming the problem.
    """

    def __init__(self, model_path, *, n_ctx: int = 4096, n_slots: int = 0, n_groups: int = 1,
                 slot_ctx: int | None = None, n_threads: int | None = None, kv_type: str = "f16",
                 backend: str = "cpu", max_chunk: int = 512, pack_weights: bool = True) -> None:
        """`pack_weights`: on the CPU, keep row-interleaved copies of the weights this build packs (faster
        products; anonymous memory about those weights' size). False reads every weight in place from the
        mapped file (what a model that only just fits the memory needs)."""
        n_ctx = _positive_int("n_ctx", n_ctx)
        if not isinstance(pack_weights, bool):
            raise ValueError(f"pack_weights must be True or False, got {pack_weights!r}")
        n_slots = _positive_int("n_slots", n_slots, allow_zero=True)
        n_groups = _positive_int("n_groups", n_groups)
        slot_ctx = n_ctx if slot_ctx is None else _positive_int("slot_ctx", slot_ctx)
        n_threads = 0 if n_threads is None else _positive_int("n_threads", n_threads)
        if kv_type not in KV_TYPES:
            raise ValueError(f"kv_type must be one of {KV_TYPES}, got {kv_type!r}")
        from strata.engine.gpu import resolve_backend

        requested, backend = backend, resolve_backend(backend)  # "cpu" or "cuda"; ValueError naming why cuda cannot run
        self.model_path = os.fspath(model_path)
        self._gguf = GGUFFile(self.model_path)
        if backend == "cuda" and requested == "auto" and cpu_only(self._gguf.metadata):
            backend = "cpu"   # no expert kernels or query temperature there; "cuda" asked outright is refused by name
        self._native = _engine.Engine(self.model_path, n_ctx=n_ctx, n_slots=n_slots, n_groups=n_groups,
                                      slot_ctx=slot_ctx, n_threads=n_threads, kv_type=kv_type,
                                      max_chunk=_positive_int("max_chunk", max_chunk), pack_weights=pack_weights,
                                      **({"backend": backend} if backend != "cpu" else {}))
        hp = self._native.hparams()
        _check_vocabulary_fits(self._gguf, self.model_path)
        self.arch: str = hp["arch"]
        self.n_vocab: int = hp["n_vocab"]
        self.n_ctx_train: int = hp["n_ctx_train"]
        self.n_layer: int = hp["n_layer"]
        self.n_embd: int = hp["n_embd"]
        self.n_head: int = hp["n_head"]
        self.n_head_kv: int = hp["n_head_kv"]
        self.head_dim: int = hp["head_dim"]
        self.n_expert: int = hp["n_expert"]            # 0: a dense model
        self.n_expert_used: int = hp["n_expert_used"]
        self.n_ctx = n_ctx
        self.n_contexts: int = self._native.n_contexts
        self.n_slots = n_slots
        self.n_groups = n_groups
        self.kv_type = kv_type
        self.bytes_per_token: int = self._native.bytes_per_token
        gpu = self.gpu()
        self.backend = f"cpu-{self._native.simd}" if gpu is None else f"cuda-sm{gpu['compute_capability'].replace('.', '')}"
        self.n_threads: int = self._native.n_threads
        self.large_pages: str = self._native.large_pages
        # bytes of the packed weight copies the CPU backend made (0: every weight read in place)
        self.packed_bytes: int = sum(self._native.packed_bytes.values())
        self.metadata: dict = self._gguf.metadata
        self.model_id: str = model_identity(self.model_path, self._gguf.data_offset)
        self._text = None  # (tokenizer, chat template), built on first use

    # ---- identity and shape

    def gpu(self) -> dict | None:
        """The CUDA device and VRAM as of now (name, compute_capability, vram_total, vram_free, vram_used
        by this engine, weight_bytes, kv_bytes), or None on the CPU backend."""
        return getattr(self._native, "gpu", None)

    def kv_layout(self) -> dict:
        """What a snapshot's KV bytes mean; two engines can exchange snapshots when these are equal."""
        return {"kv_type": self.kv_type, "n_layer": self.n_layer, "kv_dim": self.n_head_kv * self.head_dim,
                "row_bytes": self._native.kv_row_bytes, "bytes_per_token": self.bytes_per_token}

    def context_capacity(self, ctx: int) -> int:
        return self._native.context_capacity(ctx)

    def context_group(self, ctx: int) -> int:
        return self._native.context_group(ctx)

    def context_tokens(self, ctx: int) -> list[int]:
        return self._native.context_tokens(ctx)

    def context_len(self, ctx: int) -> int:
        return self._native.context_len(ctx)

    def context_bytes(self, ctx: int) -> int:
        return self._native.context_len(ctx) * self.bytes_per_token

    def has_logits(self, ctx: int) -> bool:
        return self._native.has_logits(ctx)

    # ---- compute

    def interrupt(self, on: bool = True) -> None:
        """While on, every compute call (prefill, decode, step, extend, splice's reads; one under way included, at
        its next layer) raises EngineInterrupted, adding none of its tokens. Any thread: it is what a server's stop
        calls while the worker's prompt piece runs, instead of waiting for the piece (seconds at a deep history). The
        CUDA backend's forward runs whole: a call there is never interrupted (the stop waits for it, as before)."""
        self._native.interrupt(bool(on))

    @property
    def interrupted(self) -> bool:
        return bool(self._native.interrupted)

    def prefill(self, ctx: int, tokens: Sequence[int], *, chunk: int = 512) -> None:
        self._native.prefill(ctx, _tokens(tokens), _positive_int("chunk", chunk))

    def decode(self, ctxs: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        return self._native.decode(list(ctxs), _tokens(tokens))

    def step(self, pieces: Sequence[tuple[int, Sequence[int]]], ctxs: Sequence[int],
             tokens: Sequence[int]) -> np.ndarray:
        """One forward for prompt pieces of several contexts (`pieces`: (ctx, tokens) pairs) and one
        token for each of `ctxs` (the continuous agenda's mixed step: every row rides along the same
        weight reads). Returns the decode rows' logits (len(ctxs), n_vocab); a piece's context then
        has `logits(ctx)`. At most `max_rows` rows in all. Bitwise equal to prefill + decode."""
        return self._native.step([c for c, _ in pieces], [_tokens(t) for _, t in pieces], list(ctxs),
                                 _tokens(tokens))

    def extend(self, pieces: Sequence[tuple[int, Sequence[int]]]) -> np.ndarray:
        """Feeds each (ctx, tokens) piece to its context in ONE forward and returns the logits after
        EVERY token, (total tokens, n_vocab), the pieces' rows in order: the draft check of lookup
        decoding (server/lookup.py), which then truncates what it rejects. Bitwise equal to feeding
        the same tokens one decode at a time. At most `max_logit_rows` tokens (never above `max_rows`)."""
        return self._native.extend([c for c, _ in pieces], [_tokens(t) for _, t in pieces])

    @property
    def max_logit_rows(self) -> int:
        """The most tokens one `extend` takes (rows whose logits one forward keeps); at most `max_rows`."""
        return self._native.max_logit_rows

    @property
    def max_rows(self) -> int:
        """The most rows (prompt tokens + decode rows) one forward takes."""
        return self._native.max_rows

    def logits(self, ctx: int) -> np.ndarray:
        return self._native.logits(ctx)

    def truncate(self, ctx: int, n: int) -> None:
        self._native.truncate(ctx, n)

    def copy(self, src: int, dst: int, n: int) -> None:
        self._native.copy(src, dst, n)

    @property
    def shift_refusal(self) -> str | None:
        """Why this engine cannot move KV cells (`shift`, `splice`): multi-head latent attention, layers with a
        sliding window, the CUDA backend; None when it can."""
        return self._native.shift_refusal() or None

    def shift(self, ctx: int, a: int, b: int) -> None:
        """llama.cpp's seq_rm + seq_add on one context: keeps [0, a), drops [a, b) and moves [b, n) to start at a,
        its keys re-rotated by (a - b) with the model's RoPE. An approximation: the moved cells were computed beside
        the dropped ones. Leaves no logits. ValueError (naming why) where `shift_refusal` is not None."""
        n = self.context_len(ctx)
        if not 0 <= a <= b <= n:   # a drop past the end was a truncation to `a`, said by nothing
            raise ValueError(f"shift: cannot drop [{a}, {b}) of context {ctx}'s {n} tokens (0 <= a <= b <= {n})")
        self.splice(ctx, a, [range(b, n)] if b < n else [])

    def splice(self, ctx: int, keep: int, pieces: Sequence[range | Sequence[int]]) -> None:
        """Keeps [0, keep), then lays `pieces` out one after another: a `range` of the history's positions moves
        those cells (keys re-rotated to their new positions; ranges in history order, past `keep`, not
        overlapping), a sequence of token ids is read there (attending to what precedes it). The context's logits
        are the last piece's when it is read, else none. See `shift`."""
        spec: list[tuple[int, int]] = []
        new: list[int] = []
        for p in pieces:
            if isinstance(p, range):
                if p.step != 1:
                    raise ValueError(f"splice: a moved range must have step 1, got {p!r}")
                if p.start < 0:   # (-1, n) is the native call's mark for new tokens
                    raise ValueError(f"splice: a moved range must start at a position of the history, got {p!r}")
                spec.append((p.start, len(p)))
            else:
                t = _tokens(p)
                spec.append((-1, len(t)))
                new.extend(int(x) for x in t)
        self._native.splice(ctx, keep, spec, np.asarray(new, dtype=np.int32))

    def kv_read(self, ctx: int, t0: int, t1: int) -> bytes:
        """Raw KV of tokens [t0, t1): per layer K rows then V rows."""
        return self._native.kv_read(ctx, t0, t1)

    def kv_write(self, ctx: int, tokens: Sequence[int], data) -> None:
        """Appends tokens and their raw KV (kv_read's layout) to a context."""
        self._native.kv_write(ctx, self.context_len(ctx), _tokens(tokens), data)

    def kv_write_checked(self, ctx: int, tokens: Sequence[int], data, expected_crc: int) -> bool:
        """kv_write only when zlib.crc32(data) == expected_crc (one native call, no GIL); False when it
        does not match (nothing written)."""
        return self._native.kv_write_checked(ctx, self.context_len(ctx), _tokens(tokens), data, expected_crc)

    # ---- snapshots (format in snapshot.py)

    def snapshot(self, ctx: int, n: int | None = None) -> bytes:
        return b"".join(self.snapshot_chunks(ctx, n))

    def snapshot_chunks(self, ctx: int, n: int | None = None) -> Iterator[bytes]:
        from strata.engine import snapshot

        return snapshot.write_chunks(self, ctx, n)

    def restore(self, ctx: int, data) -> int:
        r = self.restorer(ctx)
        r.feed(data)
        return r.finish()

    def restorer(self, ctx: int):
        from strata.engine import snapshot

        return snapshot.Restorer(self, ctx)

    # ---- text

    def _text_parts(self):
        if self._text is None:
            from strata.engine.chat_template import ChatTemplate
            from strata.engine.tokenizer import Tokenizer

            tok = Tokenizer.from_metadata(self.metadata)
            # a template that cannot be used does not stop the model: text completion needs none
            self._text = (tok, ChatTemplate.from_metadata_or_unusable(self.metadata, tok))
        return self._text

    @property
    def tokenizer(self):
        return self._text_parts()[0]

    @property
    def chat_template(self):
        return self._text_parts()[1]

    @property
    def chat_template_problem(self) -> str | None:
        """Why the model's chat template cannot be used (chat_template.UnusableChatTemplate), else None."""
        return getattr(self.chat_template, "problem", None)

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self.tokenizer.eot_ids)

    @property
    def message_opener_ids(self) -> list[int]:
        return list(self.tokenizer.message_opener_ids)

    def tokenize(self, text: str, special: bool = True) -> list[int]:
        return self.tokenizer.encode(text, special=special)

    def detokenize(self, tokens: Iterable[int]) -> str:
        return self.tokenizer.decode(list(tokens))

    def apply_chat_template(self, messages, tools=None, add_generation_prompt: bool = True, **extra) -> str:
        """`extra`: more template variables (gpt-oss's `reasoning_effort`)."""
        return self.chat_template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                         **extra)

    def generate(self, tokens: Sequence[int], max_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, min_p: float = 0.0, repeat_penalty: float = 1.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0, seed: int | None = None,
                 stop_tokens: Iterable[int] | None = None) -> list[int]:
        """Generated tokens after `tokens` on the main context (its matching prefix is reused).

        Stops after max_tokens or at a stop token (default: the model's end-of-turn tokens), which
        is not returned and not added to the context.
        """
        from strata.engine.sampling import Sampler, SamplingParams

        tokens = [int(t) for t in tokens]
        if not tokens:
            raise ValueError("generate: tokens must not be empty")
        max_tokens = _positive_int("max_tokens", max_tokens, allow_zero=True)
        sampler = Sampler(SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                         repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                                         frequency_penalty=frequency_penalty, seed=seed), self.n_vocab)
        stops = self.eos_token_ids if stop_tokens is None else {int(t) for t in stop_tokens}
        logits = self.prefill_reusing(0, tokens)
        history = list(tokens)
        out: list[int] = []
        for _ in range(max_tokens):
            t = sampler.sample(logits, history)
            if t in stops:
                break
            out.append(t)
            history.append(t)
            if len(out) == max_tokens or self.context_len(0) >= self.context_capacity(0):
                break  # the last token is returned but not computed: the next call prefills it
            logits = self._native.decode([0], [t])[0]
        return out

    def prefill_reusing(self, ctx: int, tokens: Sequence[int]) -> np.ndarray:
        """Makes the context hold exactly `tokens`, reusing its longest matching prefix; returns the
        logits of the last token."""
        tokens = list(tokens)
        have = self.context_tokens(ctx)
        common = 0
        for a, b in zip(have, tokens, strict=False):
            if a != b:
                break
            common += 1
        if common == len(tokens) == len(have) and self.has_logits(ctx):
            return self.logits(ctx)
        common = min(common, len(tokens) - 1)  # the last token is always computed for its logits
        self.truncate(ctx, common)
        self.prefill(ctx, tokens[common:])
        return self.logits(ctx)

    def __repr__(self) -> str:
        return (f"Engine({self.model_path!r}, arch={self.arch}, n_contexts={self.n_contexts}, "
                f"kv={self.kv_type}, backend={self.backend}, threads={self.n_threads})")


SHORT_TOKENS = 64   # a list this short is checked in Python (a decode step's tokens, a lookup draft)


def _tokens(tokens) -> np.ndarray:
    # numpy's checks (asarray, dtype, min, max) cost ~6 us a call, more than a few tokens' own check: the
    # server's decode steps pass one token a row, a few calls a token
    if type(tokens) is list and 0 < len(tokens) <= SHORT_TOKENS and \
            all(type(t) is int and 0 <= t < 2**31 for t in tokens):
        return np.array(tokens, dtype=np.int32)
    a = np.asarray(tokens)
    if a.ndim != 1:
        raise ValueError(f"tokens must be a 1-D sequence of ints, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"tokens must be ints, got {a.dtype}")
    if a.size and (int(a.min()) < 0 or int(a.max()) >= 2**31):
        raise ValueError(f"token ids must be in [0, 2**31), got {int(a.min())}..{int(a.max())}")
    return a.astype(np.int32, copy=False)


def check_model(path) -> dict:
    """Whether this engine runs the GGUF at `path`, without loading it: the architecture, every shape and
    tensor type are checked (the file is memory-mapped, nothing is allocated), and the vocabulary the
    tokenizer needs (a pre-tokenizer Strata does not know, such as Kimi K2's `kimi-k2` or DeepSeek-V3's
    `deepseek-v3`, was found only by the server's load, after "listening on"). Returns {arch, n_layer, n_expert, n_expert_used}; raises
    ModelError / GGUFError / TokenizerError (ValueErrors) naming what it cannot run."""
    from strata.engine.tokenizer import check_vocabulary

    facts = dict(_engine.check_model(os.fspath(path)))
    gguf = GGUFFile(path)
    check_vocabulary(gguf.metadata)
    _check_vocabulary_fits(gguf, os.fspath(path))
    return facts


def _check_vocabulary_fits(gguf: GGUFFile, path: str) -> None:
    """ModelError when the tokenizer has more tokens than token_embd.weight has rows (a crafted or mismatched
    file; llama.cpp refuses it by the embedding's shape): every prompt holding one of the extra tokens would
    fail. Fewer tokens than rows (padding rows) are fine."""
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    embd = next((t for t in gguf.tensors if t.name == "token_embd.weight"), None)
    if isinstance(tokens, list) and embd is not None and len(embd.shape) == 2 and len(tokens) > embd.shape[1]:
        raise ModelError(f"model {path}: tokenizer.ggml.tokens has {len(tokens)} tokens, more than the "
                         f"{embd.shape[1]} rows of token_embd.weight (the model has no embedding for the rest)")


__all__ = ["Engine", "EngineError", "EngineInterrupted", "GGUFError", "GGUFFile", "GGUFTensor", "ModelError", "build_info",
           "check_model", "model_identity"]
