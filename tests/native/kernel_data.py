"""Test data for the kernel tests: random weight rows of every supported type as raw GGUF bytes,
their true values (from `gguf.quants.dequantize`), and NumPy reimplementations of the activation
quantizers (Q8_0, Q8_1, Q8_K) that quants-generic.cpp must match byte for byte.

Not a quantizer for real models; K-quant and IQ4 blocks are random bytes with finite random scales so
every bit pattern of the packed scales, the high bits, the table indices and the signs gets exercised.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

from strata import _engine

K = _engine.kernels

TYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q8_1": 9,
            "Q2_K": 10, "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_K": 15, "IQ4_NL": 20, "IQ4_XS": 23, "BF16": 30, "MXFP4": 39}
WEIGHT_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                "Q6_K",
                "IQ4_NL", "IQ4_XS", "MXFP4"]
BLOCK = {"F32": 1, "F16": 1, "BF16": 1, "Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32,
         "Q2_K": 256, "Q3_K": 256, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "IQ4_NL": 32, "IQ4_XS": 256, "MXFP4": 32}
# types written as random bytes with random fp16 scales (the gguf package quantizes none of them):
# bytes a block, and the byte offsets of its fp16 scale fields
RANDOM_BLOCKS = {"Q2_K": (84, (80, 82)), "Q3_K": (110, (108,)), "Q4_K": (144, (0, 2)), "Q5_K": (176, (0, 2)), "Q6_K": (210, (208,)), "IQ4_NL": (18, (0,)),
                 "IQ4_XS": (136, (0,))}
Q8K_ACT = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")     # weight types whose products take Q8_K activations


def _random_halves(rng: np.random.Generator, size: int, lo: float, hi: float) -> np.ndarray:
    """(size, 2) uint8: little-endian fp16 of magnitudes log-uniform in [lo, hi], random sign."""
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), size))
    return (mag * rng.choice([-1.0, 1.0], size)).astype("<f2").view(np.uint8).reshape(size, 2)


def random_weights(rng: np.random.Generator, name: str, n_rows: int, n: int) -> np.ndarray:
    """(n_rows, row_bytes) uint8 of random `name` rows of n elements."""
    if name in RANDOM_BLOCKS:
        size, halves = RANDOM_BLOCKS[name]
        n_blocks = n_rows * n // BLOCK[name]
        blocks = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
        for off in halves:
            blocks[:, off:off + 2] = _random_halves(rng, n_blocks, 1e-4, 1e-2)
        return np.ascontiguousarray(blocks.reshape(n_rows, -1))
    scale = np.exp(rng.uniform(-3, 1, size=(n_rows, 1)))     # rows of different magnitudes
    x = (rng.standard_normal((n_rows, n)) * scale).astype(np.float32)
    if name == "F32":
        return x.view(np.uint8)
    if name == "F16":
        return x.astype(np.float16).view(np.uint8)
    return np.ascontiguousarray(quants.quantize(x, T[name]))


def true_values(name: str, w: np.ndarray) -> np.ndarray:
    """(n_rows, n) float32 of weight bytes w, as the gguf package reads them."""
    if name == "F32":
        return w.view(np.float32)
    if name == "F16":
        return w.view(np.float16).astype(np.float32)
    return quants.dequantize(w, T[name]).astype(np.float32)


def random_activations(rng: np.random.Generator, n_tok: int, n: int) -> np.ndarray:
    """(n_tok, n) float32 with outliers and an all-zero block, like hidden states."""
    x = rng.standard_normal((n_tok, n)).astype(np.float32) * np.float32(rng.uniform(0.1, 4))
    x[:, rng.integers(0, n, size=3)] *= 20                   # a few outlier channels
    if n >= 64:
        x[0, 32:64] = 0.0                                    # a zero block (d = 0 path)
    return x


# ---------------------------------------------------------------- NumPy activation quantizers


def _roundf(v: np.ndarray) -> np.ndarray:
    """C roundf (half away from zero) of float32 values, exactly (done in float64)."""
    v = v.astype(np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def quantize_q8_0(x: np.ndarray, with_sum: bool = False) -> np.ndarray:
    """(n,) float32 -> Q8_0 (or Q8_1 with with_sum) bytes, as ggml's reference quantizers."""
    b = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    qs = _roundf((b * inv).astype(np.float32)).astype(np.int8)
    parts = [d.astype("<f2").view(np.uint8)]
    if with_sum:
        s = (qs.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d).astype(np.float32)
        parts.append(s.astype("<f2").view(np.uint8))
    parts.append(qs.view(np.uint8))
    return np.concatenate(parts, axis=1).reshape(-1)


def quantize_q8_k(x: np.ndarray) -> np.ndarray:
    """(n,) float32 -> Q8_K bytes (f32 d, 256 int8, 16 int16 sums of 16), as ggml's reference."""
    out = []
    for b in x.astype(np.float32).reshape(-1, 256):
        i = int(np.argmax(np.abs(b)))                         # first index of the largest magnitude
        if b[i] == 0:
            out.append(np.zeros(292, dtype=np.uint8))
            continue
        iscale = np.float32(-127) / b[i]
        v = np.rint((iscale * b).astype(np.float32).astype(np.float64))   # half to even
        qs = np.minimum(127, v).astype(np.int8)
        bsums = qs.astype(np.int32).reshape(16, 16).sum(axis=1).astype("<i2")
        d = np.array([np.float32(1) / iscale], dtype="<f4")
        out.append(np.concatenate([d.view(np.uint8), qs.view(np.uint8), bsums.view(np.uint8)]))
    return np.concatenate(out)


def quantize_act_numpy(name: str, x: np.ndarray) -> np.ndarray:
    """The activation bytes quantize_act_row must produce for weight type `name`."""
    if name in ("F32", "F16", "BF16"):
        return x.astype(np.float32).view(np.uint8).copy()
    if name in ("Q4_1", "Q5_1"):
        return quantize_q8_0(x, with_sum=True)
    if name in Q8K_ACT:
        return quantize_q8_k(x)
    return quantize_q8_0(x)


def act_values(name: str, xq: np.ndarray) -> np.ndarray:
    """(n,) float64 values an activation row of weight type `name` stands for."""
    if name in ("F32", "F16", "BF16"):
        return xq.view(np.float32).astype(np.float64)
    if name in ("Q4_1", "Q5_1"):
        b = xq.reshape(-1, 36)
        return (b[:, 4:].view(np.int8) * b[:, 0:2].view("<f2").astype(np.float64)).reshape(-1)
    if name in Q8K_ACT:
        b = xq.reshape(-1, 292)
        return (b[:, 4:260].view(np.int8) * b[:, 0:4].view("<f4").astype(np.float64)).reshape(-1)
    b = xq.reshape(-1, 34)
    return (b[:, 2:].view(np.int8) * b[:, 0:2].view("<f2").astype(np.float64)).reshape(-1)


def min_times_sum(name: str, w_row: np.ndarray, xq: np.ndarray) -> float:
    """Sum over blocks of |m * s| for Q4_1 / Q5_1 (0 otherwise): the size of the terms whose fp16 s
    (ggml's Q8_1 block sum, rounded to 11 bits) the dot product uses instead of the exact sum."""
    if name not in ("Q4_1", "Q5_1"):
        return 0.0
    wb = w_row.reshape(-1, 20 if name == "Q4_1" else 24)
    m = wb[:, 2:4].view("<f2").astype(np.float64).reshape(-1)
    s = xq.reshape(-1, 36)[:, 2:4].view("<f2").astype(np.float64).reshape(-1)
    return float(np.abs(m * s).sum())
