"""Generated models (experts, RoPE scaling): Strata's logits against llama.cpp's on the same GGUF,
and (with --shaped) a model of a real MoE's layer shapes for engine_vs_llamacpp.py.

What it does: writes tiny random models (tests/fixtures/tiny_gguf.py) with experts (Mixtral-style
llama, qwen3moe, gpt-oss with its sinks, sliding window and MXFP4 experts) in several types, and with
linear and YaRN RoPE scaling, mistral3's attention temperature and YaRN keys, and deepseek2's
multi-head latent attention (needs a llama.cpp that knows it: /work/refenv/venv2), runs the same
tokens through Strata (this interpreter; `--against reference`: the tests' NumPy reference instead, the
oracle checked against the ground truth) and llama.cpp (--llama-python, in a subprocess; `--f32-kv`
keeps K / V in F32 on both sides, so that what is left is the math), and prints per model the largest logit difference relative to the position's largest
logit, and how many positions agree on the top token. `--shaped PATH` instead writes a model with
Qwen3-30B-A3B's expert shapes (n_embd 2048, 128 experts of 768, 8 a token; 16 query / 4 KV heads of
128, where the real model has 32 query heads) but `--layers` layers, a 1,024-token vocabulary
(the fixtures' tokenizer) and random Q4_K weights (down Q6_K), for the speed comparison;
`--shaped-arch gpt-oss` copies gpt-oss-20b's shapes (MXFP4 experts, Q8_0 elsewhere) instead, and
`--shaped-arch deepseek2` GLM-4.7-Flash's (latent attention: 20 heads over a 512 + 64 latent, q LoRA 768,
64 experts of 1536, 4 a token, one shared; Q4_0):

    .venv/bin/python benchmarks/generated_vs_llamacpp.py --llama-python /work/refenv/venv/bin/python
    .venv/bin/python benchmarks/generated_vs_llamacpp.py --llama-python /work/refenv/venv2/bin/python \
        --only deepseek2 --against reference --f32-kv
    .venv/bin/python benchmarks/generated_vs_llamacpp.py --shaped /tmp/moe-shaped.gguf --layers 6
    .venv/bin/python benchmarks/engine_vs_llamacpp.py --model /tmp/moe-shaped.gguf --threads 2

What it is not: a test (tests/engine/test_moe.py checks against the NumPy reference in CI; llama.cpp
is not installed there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12, 44, 45, 46, 47] * 3   # 60 positions
# gpt-oss: 4 query heads of 32 over 2 KV heads in a 64-wide model (heads not adding up to n_embd, as in
# the real 64 x 64 over 2880), a window of 20 positions in the even layers (the 60 positions pass it)
_OSS = {"arch": "gpt-oss", "n_layer": 3, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "head_dim": 32, "n_ff": 64,
        "n_expert": 8, "n_expert_used": 2, "sliding_window": 20}
_MXFP4_EXPERTS = {"ffn_gate": "MXFP4", "ffn_up": "MXFP4", "ffn_down": "MXFP4"}
_DS2 = {"arch": "deepseek2", "n_layer": 3, "n_ff": 32, "n_expert": 8, "n_expert_used": 2}
CASES = [   # (label, make_tiny_gguf parameters); the dense ones show the differences quantization alone makes
    ("llama dense, Q8_0", {"dtype": "Q8_0"}),
    ("llama dense, Q4_K", {"dtype": "Q4_K", "n_embd": 256, "n_ff": 512}),
    ("llama, 8 experts / 2, F32", {"dtype": "F32", "n_expert": 8, "n_expert_used": 2}),
    ("llama, 8 experts / 2, Q8_0", {"dtype": "Q8_0", "n_expert": 8, "n_expert_used": 2}),
    ("llama, 16 experts / 4, Q4_K (down Q6_K)", {"dtype": "Q4_K", "n_expert": 16, "n_expert_used": 4, "n_embd": 256,
                                                 "n_ff": 512, "type_overrides": {"ffn_down": "Q6_K"}}),
    ("qwen3moe, 8 experts / 2, F32", {"arch": "qwen3moe", "dtype": "F32", "n_expert": 8, "n_expert_used": 2}),
    ("qwen3moe, 16 experts / 4, Q4_K", {"arch": "qwen3moe", "dtype": "Q4_K", "n_expert": 16, "n_expert_used": 4,
                                        "n_embd": 256, "n_ff": 512}),
    ("llama F32, RoPE linear x4 (context 64)", {"dtype": "F32", "rope_scaling": ("linear", 4.0, 64)}),
    ("llama F32, YaRN x4 (original context 64)", {"dtype": "F32", "rope_scaling": ("yarn", 4.0, 64)}),
    ("llama F32, YaRN x8 (context 16, head size 32)", {"dtype": "F32", "rope_scaling": ("yarn", 8.0, 16),
                                                       "n_embd": 128}),
    ("qwen3 F32, YaRN x4 (original context 32)", {"arch": "qwen3", "dtype": "F32", "rope_scaling": ("yarn", 4.0, 32)}),
    ("llama F32, YaRN x4 with rope.scaling.attn_factor 0.8", {"dtype": "F32", "rope_scaling": ("yarn", 4.0, 64),
                                                              "rope_keys": {"rope.scaling.attn_factor": 0.8}}),
    ("qwen3 F32, YaRN x4 with yarn_* keys llama.cpp ignores", {
        "arch": "qwen3", "dtype": "F32", "rope_scaling": ("yarn", 4.0, 64),
        "rope_keys": {"rope.scaling.yarn_beta_fast": 16.0, "rope.scaling.yarn_ext_factor": 0.5}}),
    ("llama F32, a factor without a type (linear)", {"dtype": "F32", "rope_scaling": (None, 4.0, 64)}),
    ("gpt-oss F32, 8 experts / 2, window 20", {**_OSS, "dtype": "F32"}),
    # 4 experts of 4: no router choice that a near-tie could flip (with 8 / 2 one position of 60 may)
    ("gpt-oss F32, 4 / 4, window 5, YaRN x4 (original context 32)", {
        **_OSS, "dtype": "F32", "n_expert": 4, "n_expert_used": 4, "sliding_window": 5,
        "rope_scaling": ("yarn", 4.0, 32)}),
    ("gpt-oss Q8_0, MXFP4 experts 8 / 2", {**_OSS, "dtype": "Q8_0", "type_overrides": _MXFP4_EXPERTS}),
    ("gpt-oss Q8_0, MXFP4 experts 4 / 4", {**_OSS, "dtype": "Q8_0", "n_expert": 4, "n_expert_used": 4,
                                           "type_overrides": _MXFP4_EXPERTS}),
    # mistral3 (Devstral Small 2): the attention temperature from position 16 (the original context),
    # YaRN's log multiplier; over an original context of 1,024 the betas move YaRN's ramp
    ("mistral3 F32, temperature 0.5 past 16, YaRN x4, log mul 0.5", {
        "arch": "mistral3", "dtype": "F32", "rope_scaling": ("yarn", 4.0, 16),
        "rope_keys": {"attention.temperature_scale": 0.5, "rope.scaling.yarn_log_multiplier": 0.5}}),
    ("mistral3 F32, YaRN x4 over 1,024, betas 16 / 2, log mul 1", {
        "arch": "mistral3", "dtype": "F32", "rope_scaling": ("yarn", 4.0, 1024),
        "rope_keys": {"rope.scaling.yarn_beta_fast": 16.0, "rope.scaling.yarn_beta_slow": 2.0,
                      "rope.scaling.yarn_log_multiplier": 1.0}}),
    ("mistral3 F32, temperature 0.1 past 20, no scaling", {
        "arch": "mistral3", "dtype": "F32", "ctx_len": 20, "rope_keys": {"attention.temperature_scale": 0.1}}),
    # glm4moe (GLM-4.5): sigmoid routing + selection bias, normalised weights x 2.5, one shared expert, a dense
    # first layer, a nextn layer llama.cpp must skip too, NEOX RoPE over 8 of 16 dimensions
    ("glm4moe F32, 8 experts / 2, shared 1, dense lead 1, nextn 1", {
        "arch": "glm4moe", "dtype": "F32", "n_layer": 3, "n_ff": 32, "n_expert": 8, "n_expert_used": 2, "n_rot": 8}),
    ("glm4moe F32, 4 / 4, two shared, no dense layer", {
        "arch": "glm4moe", "dtype": "F32", "n_layer": 2, "n_ff": 32, "n_expert": 4, "n_expert_used": 4, "n_rot": 8,
        "glm": {"expert_shared_count": 2, "leading_dense_block_count": 0}}),
    ("glm4moe F32, softmax gating (expert_gating_func 1), unnormalised x2.5", {
        "arch": "glm4moe", "dtype": "F32", "n_layer": 3, "n_ff": 32, "n_expert": 8, "n_expert_used": 2, "n_rot": 8,
        "glm": {"expert_gating_func": 1, "expert_weights_norm": 0}}),
    ("glm4moe Q8_0, 8 experts / 2", {
        "arch": "glm4moe", "dtype": "Q8_0", "n_layer": 3, "n_ff": 32, "n_expert": 8, "n_expert_used": 2, "n_rot": 8}),
    ("glm4moe Q8_0, 4 / 4 (no choice to flip)", {
        "arch": "glm4moe", "dtype": "Q8_0", "n_layer": 3, "n_ff": 32, "n_expert": 4, "n_expert_used": 4, "n_rot": 8}),
    # gemma3: windows of 20 in layers 0 and 2 with RoPE base 10000 unscaled, the global layer at 1e6 with
    # linear x4; sandwich norms, GeGLU, scaled embeddings, Q/K norms
    ("gemma3 F32, window 20 (2 of 3 layers), bases 1e6 x4 / 10000", {
        "arch": "gemma3", "dtype": "F32", "n_layer": 3, "n_head": 4, "n_head_kv": 2, "head_dim": 32,
        "sliding_window": 20, "swa_pattern": 2, "rope_freq_base": 1e6, "rope_scaling": ("linear", 4.0, 64)}),
    ("gemma3 F32, default period 6 (7 layers), logit cap 3", {
        "arch": "gemma3", "dtype": "F32", "n_layer": 7, "sliding_window": 20, "rope_keys": {"final_logit_softcapping": 3.0}}),
    ("gemma3 Q8_0, window 20, bases 1e6 x4 / 10000", {
        "arch": "gemma3", "dtype": "Q8_0", "n_layer": 3, "n_head": 4, "n_head_kv": 2, "head_dim": 32,
        "sliding_window": 20, "swa_pattern": 2, "rope_freq_base": 1e6, "rope_scaling": ("linear", 4.0, 64)}),
    ("seed_oss F32 (Q/K/V biases, NEOX)", {"arch": "seed_oss", "dtype": "F32", "n_layer": 4}),
    ("smollm3 F32 (layer 3 without RoPE)", {"arch": "smollm3", "dtype": "F32", "n_layer": 4}),
    ("smollm3 Q8_0", {"arch": "smollm3", "dtype": "Q8_0", "n_layer": 4}),
    # IQ4_NL / IQ4_XS weights (tests/fixtures/iq4_blocks.py quantizes them), Q3_K and Q2_K (random blocks), and
    # mixed with other K-quants as llama.cpp's IQ4_XS, Q3_K_M and Q2_K files mix them
    ("llama IQ4_NL", {"dtype": "IQ4_NL"}),
    ("llama IQ4_XS", {"dtype": "IQ4_XS", "n_embd": 256, "n_ff": 512}),
    ("llama IQ4_XS, output Q6_K, token_embd Q4_K", {"dtype": "IQ4_XS", "n_embd": 256, "n_ff": 512,
                                                     "type_overrides": {"output": "Q6_K", "token_embd": "Q4_K"}}),
    ("llama Q3_K (a Q3_K_M mix: attn_v, ffn_down Q5_K, output Q6_K)", {
        "dtype": "Q3_K", "n_embd": 256, "n_ff": 512,
        "type_overrides": {"attn_v": "Q5_K", "ffn_down": "Q5_K", "output": "Q6_K"}}),
    ("llama Q3_K", {"dtype": "Q3_K", "n_embd": 256, "n_ff": 512}),
    ("llama Q2_K", {"dtype": "Q2_K", "n_embd": 256, "n_ff": 512}),
    ("llama Q2_K (a Q2_K file's mix: attn_v, ffn_down Q3_K, output Q6_K)", {
        "dtype": "Q2_K", "n_embd": 256, "n_ff": 512,
        "type_overrides": {"attn_v": "Q3_K", "ffn_down": "Q3_K", "output": "Q6_K"}}),
    ("mistral3 Q4_K, temperature 0.5 past 16, YaRN x4", {
        "arch": "mistral3", "dtype": "Q4_K", "n_embd": 256, "n_ff": 512, "rope_scaling": ("yarn", 4.0, 16),
        "rope_keys": {"attention.temperature_scale": 0.5}}),
    # deepseek2 (GLM-4.7-Flash, DeepSeek-V2-Lite): multi-head latent attention, 4 heads over a latent of 32 and
    # one shared RoPE key of 8 (keys 16 + 8, values 16 a head); glm4moe's experts (dense lead 1, shared 1,
    # nextn 1 with GLM-4.7-Flash's nextn.* tensors llama.cpp must skip too)
    ("deepseek2 F32, no q LoRA, sigmoid gating + bias", {**_DS2, "dtype": "F32"}),
    ("deepseek2 F32, q LoRA 24, sigmoid gating", {**_DS2, "dtype": "F32", "mla": {"q_lora_rank": 24}}),
    ("deepseek2 F32, softmax gating (expert_gating_func 1), normalised", {
        **_DS2, "dtype": "F32", "glm": {"expert_gating_func": 1}}),
    ("deepseek2 F32, gating key absent (softmax), unnormalised, no scale, no bias", {
        **_DS2, "dtype": "F32", "mla": {"exp_probs_b": 0},
        "glm": {"expert_gating_func": None, "expert_weights_norm": 0, "expert_weights_scale": None}}),
    ("deepseek2 F32, latent 48 + RoPE 16 (64), values 24, two shared, no dense, no nextn", {
        **_DS2, "dtype": "F32", "n_rot": 16, "mla": {"kv_lora_rank": 48, "vh": 24},
        "glm": {"expert_shared_count": 2, "leading_dense_block_count": 0, "nextn_predict_layers": 0}}),
    ("deepseek2 F32, YaRN x4 (original context 16), log mul 0.1 (m 1)", {
        **_DS2, "dtype": "F32", "rope_scaling": ("yarn", 4.0, 16), "rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1}}),
    ("deepseek2 F32, YaRN x4, log mul 0.0707 (m 0.707)", {
        **_DS2, "dtype": "F32", "rope_scaling": ("yarn", 4.0, 16),
        "rope_keys": {"rope.scaling.yarn_log_multiplier": 0.0707}}),
    ("deepseek2 F32, YaRN x4, no log mul, attn_factor 0.8", {
        **_DS2, "dtype": "F32", "rope_scaling": ("yarn", 4.0, 16), "rope_keys": {"rope.scaling.attn_factor": 0.8}}),
    ("deepseek2 F32, linear x4, log mul 0.1", {
        **_DS2, "dtype": "F32", "rope_scaling": ("linear", 4.0, 16), "rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1}}),
    ("deepseek2 F32, temperature 0.5 per 16 (Mistral Large 3), YaRN x4, log mul 0.1", {
        **_DS2, "dtype": "F32", "rope_scaling": ("yarn", 4.0, 16), "mla": {"temperature_length": 16},
        "rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1, "attention.temperature_scale": 0.5}}),
    ("deepseek2 Q8_0, q LoRA 32, latent 32, keys 32 + 16, values 32, 8 experts / 2", {
        **_DS2, "dtype": "Q8_0", "n_rot": 16, "mla": {"q_lora_rank": 32, "nope": 32, "vh": 32}}),
    ("deepseek2 Q8_0, the same with 4 / 4 (no choice to flip)", {
        **_DS2, "dtype": "Q8_0", "n_rot": 16, "n_expert": 4, "n_expert_used": 4,
        "mla": {"q_lora_rank": 32, "nope": 32, "vh": 32}}),
]


def llama_logits(python: str, path: str, tokens: list[int], f32_kv: bool = False) -> np.ndarray:
    """llama.cpp's logits of every position; `f32_kv`: K / V kept in F32 without flash attention (the
    default, F16, rounds what attention reads: differences of ~0.1% that hide nothing but storage)."""
    kv = ", type_k=0, type_v=0, flash_attn=False" if f32_kv else ""
    code = (
        "import json, sys, numpy as np, llama_cpp\n"
        "path, toks, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]\n"
        # yarn_beta_* -1: the model's (llama-cpp-python's defaults, 32 / 1, override the file's keys, which
        # llama.cpp itself and llama-server read for mistral3)
        "m = llama_cpp.Llama(model_path=path, n_ctx=128, n_threads=2, logits_all=True, verbose=False,\n"
        f"                    yarn_beta_fast=-1.0, yarn_beta_slow=-1.0{kv})\n"
        "m.eval(toks)\n"
        "np.save(out, np.array(m.scores[:len(toks)], dtype=np.float32))\n")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "logits.npy")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        r = subprocess.run([python, "-c", code, path, json.dumps(tokens), out], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"llama.cpp failed on {path} (exit {r.returncode}):\n{r.stderr[-2000:]}")
        return np.load(out)


def compare(python: str, only: str = "", against: str = "engine", f32_kv: bool = False) -> list[dict]:
    """Per case, llama.cpp's logits against Strata's engine's (`against` "engine") or the NumPy reference's
    (tests/fixtures/reference.py: "reference", the test oracle checked against the ground truth)."""
    from tests.fixtures.reference import ReferenceModel
    from tests.fixtures.tiny_gguf import make_tiny_gguf

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i, (label, params) in enumerate(CASES):
            if only not in label:
                continue
            path = make_tiny_gguf(Path(d) / f"m{i}.gguf", seed=3, **params)
            if against == "reference":
                ours = ReferenceModel(path).logits(TOKENS)
            else:
                from strata.engine import Engine

                engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32" if f32_kv else "f16")
                ours = np.stack([engine.decode([0], [t])[0] for t in TOKENS])
            theirs = llama_logits(python, str(path), TOKENS, f32_kv)
            rel = np.abs(ours - theirs).max(1) / np.abs(theirs).max(1)
            agree = int((ours.argmax(1) == theirs.argmax(1)).sum())
            rows.append({"model": label, "max_rel_diff": float(rel.max()), "median_rel_diff": float(np.median(rel)),
                         "top1_agree": f"{agree}/{len(TOKENS)}"})
    return rows


def write_shaped(path: str, n_layer: int, arch: str = "qwen3moe") -> None:
    from tests.fixtures.tiny_gguf import make_tiny_gguf

    if arch == "gpt-oss":   # gpt-oss-20b: 2880 wide, 64 query / 8 KV heads of 64, 32 experts of 2880, 4 a token
        make_tiny_gguf(path, arch="gpt-oss", dtype="Q8_0", n_layer=n_layer, n_embd=2880, n_head=64, n_head_kv=8,
                       head_dim=64, n_ff=2880, n_vocab=1024, n_expert=32, n_expert_used=4, ctx_len=4096,
                       sliding_window=128, type_overrides=_MXFP4_EXPERTS, use_temp_file=n_layer > 4)
        return
    if arch == "deepseek2":   # GLM-4.7-Flash: 2048 wide, 20 heads, q LoRA 768, latent 512 + RoPE 64, nope 192,
        # values 256, 64 experts of 1536 (4 a token, one shared), the first layer dense; Q4_0, Q8_0 embeddings
        make_tiny_gguf(path, arch="deepseek2", dtype="Q4_0", n_layer=n_layer, n_embd=2048, n_head=20, head_dim=128,
                       n_ff=1536, n_vocab=1024, n_expert=64, n_expert_used=4, n_rot=64, ctx_len=32768,
                       rope_freq_base=1e6, mla={"kv_lora_rank": 512, "q_lora_rank": 768, "nope": 192, "vh": 256},
                       glm={"expert_shared_count": 1, "leading_dense_block_count": 1, "nextn_predict_layers": 0,
                            "expert_weights_scale": 1.8, "expert_weights_norm": 1, "expert_gating_func": 2},
                       type_overrides={"token_embd": "Q8_0"}, tied_embeddings=True, use_temp_file=True)
        return
    make_tiny_gguf(path, arch="qwen3moe", dtype="Q4_K", n_layer=n_layer, n_embd=2048, n_head=16, n_head_kv=4,
                   n_ff=768, n_vocab=1024, n_expert=128, n_expert_used=8, ctx_len=4096,
                   type_overrides={"token_embd": "Q8_0", "output": "Q6_K", "ffn_down": "Q6_K"},
                   use_temp_file=n_layer > 4)   # 48 layers: 17 GB, written a tensor at a time


def _share(x: float) -> str:
    """A relative difference as a percentage, or in powers of ten below 0.01% (F32 against F32)."""
    return f"{x:.2%}" if x >= 1e-4 else f"{x:.1e}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-python", default="/work/refenv/venv/bin/python",
                    help="an interpreter where `import llama_cpp` works")
    ap.add_argument("--shaped", metavar="PATH", help="write the real-shaped model here instead")
    ap.add_argument("--layers", type=int, default=6, help="layers of the --shaped model")
    ap.add_argument("--shaped-arch", choices=("qwen3moe", "gpt-oss", "deepseek2"), default="qwen3moe",
                    help="whose shapes --shaped copies: Qwen3-30B-A3B's, gpt-oss-20b's (MXFP4 experts) or "
                         "GLM-4.7-Flash's (deepseek2: latent attention)")
    ap.add_argument("--only", metavar="TEXT", help="only the cases whose label contains TEXT (e.g. mistral3)")
    ap.add_argument("--against", choices=("engine", "reference"), default="engine",
                    help="compare llama.cpp with Strata's engine or with the tests' NumPy reference")
    ap.add_argument("--f32-kv", action="store_true",
                    help="K / V in F32 on both sides (llama.cpp without flash attention): the math alone")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.shaped:
        write_shaped(args.shaped, args.layers, args.shaped_arch)
        print(f"wrote {args.shaped} ({os.path.getsize(args.shaped) / 2**20:.0f} MiB)")
        return 0
    rows = compare(args.llama_python, args.only or "", args.against, args.f32_kv)
    if args.json:
        print(json.dumps({"results": rows}))
        return 0
    print("| model | max logit difference | median | same top token |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['model']} | {_share(r['max_rel_diff'])} | {_share(r['median_rel_diff'])} | {r['top1_agree']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
