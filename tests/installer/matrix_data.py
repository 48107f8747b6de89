"""The seed 002 installer matrix as data: 5 machine profiles and 5 model sizes (tests/installer)."""

from __future__ import annotations

from strata.installer.plan_types import DiskFacts, MachineProfile, ModelFacts, Situation

GIB = 1024

# name -> (machine, cold-folder facts)
MACHINES: dict[str, tuple[MachineProfile, DiskFacts]] = {
    "small-laptop": (MachineProfile(2, 4, 8 * GIB, 5 * GIB),
                     DiskFacts("/home/u/.cache/strata/conversations", 12 * GIB)),
    "laptop": (MachineProfile(8, 16, 16 * GIB, 9 * GIB),
               DiskFacts("/home/u/.cache/strata/conversations", 200 * GIB)),
    "seed-002-desktop": (MachineProfile(12, 24, 32 * GIB, 20 * GIB),
                         DiskFacts("D:/strata/conversations", 900 * GIB)),
    "workstation": (MachineProfile(16, 32, 64 * GIB, 50 * GIB, "NVIDIA RTX 4090", 24 * GIB),
                    DiskFacts("/data/strata/conversations", 2000 * GIB)),
    "server": (MachineProfile(32, 64, 256 * GIB, 200 * GIB, "NVIDIA H200", 139 * GIB),
               DiskFacts("/var/lib/strata/conversations", 3000 * GIB)),
}

# name -> facts of a real model of that size (layers, KV heads, head dim, trained context)
MODELS: dict[str, ModelFacts] = {
    "135M": ModelFacts("/m/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct", 98_917_792, 30, 3, 64, 8192),
    "1B": ModelFacts("/m/Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Llama-3.2-1B-Instruct", 807_694_464, 16, 8, 64, 131072),
    "3B": ModelFacts("/m/Llama-3.2-3B-Instruct-Q4_K_M.gguf", "Llama-3.2-3B-Instruct", 2_019_377_696, 28, 8, 128, 131072),
    "8B": ModelFacts("/m/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "Llama-3.1-8B-Instruct", 4_920_739_232, 32, 8, 128, 131072),
    "32B": ModelFacts("/m/Qwen2.5-32B-Instruct-Q4_K_M.gguf", "Qwen2.5-32B-Instruct", 19_851_336_256, 64, 8, 128, 32768, "qwen2"),
}


def situation(machine: str, model: str) -> Situation:
    m, disk = MACHINES[machine]
    facts = MODELS[model]
    return Situation(machine=m, cold_disk=disk, models_found=(facts.path,), default_model=facts.path, model=facts)
