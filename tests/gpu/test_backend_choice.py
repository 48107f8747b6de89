"""Choosing the backend (`--backend cpu|cuda|auto`, `Engine(backend=)`) on whatever this machine is.

Runs everywhere: on a machine without a GPU (CI) `auto` must give the CPU and `cuda` a clear error; with
a CUDA build and a device, `auto` gives the GPU. Not here: the GPU's arithmetic (test_parity.py).
"""

from __future__ import annotations

import pytest
from strata.engine import Engine
from strata.engine.gpu import cuda_built, cuda_devices, describe_gpu
from strata.server.config import ConfigError, load_config

HAS_GPU = cuda_built() and bool(cuda_devices())


def test_server_option_takes_cpu_cuda_auto():
    for value in ("cpu", "cuda", "auto"):
        assert load_config({"backend": value}, environ={}).values["backend"] == value
    assert load_config({}, environ={}).values["backend"] == "cpu"
    with pytest.raises(ConfigError, match="backend"):
        load_config({"backend": "tpu"}, environ={})


def test_auto_takes_the_gpu_only_when_there_is_one(tiny_model_factory):
    e = Engine(tiny_model_factory(dtype="Q4_0", seed=1), n_ctx=32, n_threads=1, backend="auto")
    if HAS_GPU:
        assert e.backend.startswith("cuda-sm") and e.gpu()["vram_used"] > 0
    else:
        assert e.backend.startswith("cpu-") and e.gpu() is None
        e.prefill(0, [3, 4, 5])
        assert e.logits(0).shape == (e.n_vocab,)


@pytest.mark.skipif(HAS_GPU, reason="this machine can run the CUDA backend")
def test_cuda_without_a_gpu_says_why(tiny_model_factory):
    with pytest.raises(ValueError, match="backend 'cuda' is not available: (this build has no CUDA backend|no CUDA "
                                         "device found)"):
        Engine(tiny_model_factory(dtype="Q4_0", seed=1), n_ctx=32, n_threads=1, backend="cuda")


@pytest.mark.skipif(cuda_built(), reason="this build has the CUDA backend")
def test_selftest_without_cuda_says_why():
    from strata.engine.gpu import selftest

    with pytest.raises(ValueError, match="this build has no CUDA backend"):
        selftest()


def test_gpu_description_names_device_and_vram():
    gib = 1 << 30
    info = {"name": "NVIDIA H200", "compute_capability": "9.0", "vram_total": 140 * gib, "vram_free": 120 * gib,
            "vram_used": 3 * gib // 2}
    assert describe_gpu(info) == ("NVIDIA H200 (sm 9.0), VRAM: 1.5 GiB used by the engine, 120.0 GiB free of "
                                  "140.0 GiB")
    del info["vram_used"]
    assert describe_gpu(info) == "NVIDIA H200 (sm 9.0), VRAM: 120.0 GiB free of 140.0 GiB"
    assert describe_gpu(None) == ""
