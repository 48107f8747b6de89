"""Generated request bodies against a live `strata serve` on a tiny generated model, as many as asked, any seed.

    .venv/bin/python scripts/fuzz_bodies.py --seed 5 --n 3000 [--clients 4] [--keep DIR]

Starts `strata serve` in a subprocess (tests/server/body_fuzz.py: the bodies, the server's flags, the checks),
sends the bodies one at a time and prints every finding: a 5xx, an error not in its API's shape, a stream cut
short, a request unanswered within --timeout s, a Traceback / ERROR in the server's log, /health not 200, or a
greedy answer that differs after the run from before it. Exit status 1 when anything was found. The test
(tests/server/test_generated_bodies.py) runs a few hundred of them at a fixed seed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model  # noqa: E402
from tests.fixtures.tiny_gguf import make_tiny_gguf  # noqa: E402
from tests.server import body_fuzz  # noqa: E402


def _mistral(name: str) -> tuple[str, str, tuple[str, ...]]:
    from tests.server import test_mistral_live as m
    return (FIXTURES / name).read_text(encoding="utf-8"), "tekken", m.ADDED


def _glm(name: str) -> tuple[str, str, tuple[str, ...]]:
    from tests.server import test_glm_live as g
    return g.TEMPLATES[name], "glm4", g.ADDED


def _seed() -> tuple[str, str, tuple[str, ...]]:
    from tests.server import test_seed_live as sd
    return sd.TEMPLATE, "seed-coder", tuple(dict.fromkeys(sd.ADDED + sd.MARKUP))


FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
# --template NAME: (chat template, pre-tokenizer, added tokens), as the live tests of each family make them
TEMPLATES = {
    "mistral-small-3.2": lambda: _mistral("Mistral-Small-3.2-24B-Instruct-2506.jinja"),
    "devstral": lambda: _mistral("unsloth-mistral-Devstral-Small-2507.jinja"),
    "nemo": lambda: _mistral("mistralai-Mistral-Nemo-Instruct-2407.jinja"),
    "ministral-3": lambda: _mistral("mistralai-Ministral-3-14B-Reasoning-2512.jinja"),
    "glm-4.6": lambda: _glm("GLM-4.6"),
    "glm-4.7": lambda: _glm("GLM-4.7-Flash"),
    "seed-oss": _seed,
    "smollm3": lambda: ((FIXTURES / "HuggingFaceTB-SmolLM3-3B.jinja").read_text(encoding="utf-8"), "smollm",
                        ("<think>", "</think>", "<tool_call>", "</tool_call>")),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=2000, help="bodies to send")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a request may take before it is a hang")
    ap.add_argument("--clients", type=int, default=1,
                    help="requests at once (above 1: a tenth of the streams closed after their first piece)")
    ap.add_argument("--template", choices=sorted(TEMPLATES), default=None,
                    help="a real model's chat template (tests/fixtures) on the tiny model, its markup as added "
                         "tokens (the model's random answers write some): the template's own checks and the "
                         "call readers in play; /infill then has no FIM tokens (its 400)")
    ap.add_argument("--keep", type=Path, default=None, help="folder for the model and the server's log (kept)")
    args = ap.parse_args()
    if args.n < 1 or args.timeout <= 0 or args.clients < 1:
        ap.error(f"--n and --clients must be at least 1 and --timeout above 0, got {args.n}, {args.clients} "
                 f"and {args.timeout}")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="fuzz_bodies_"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.template:
        template, pre, added = TEMPLATES[args.template]()
        model = make_tiny_gguf(folder / f"{args.template}.gguf", ctx_len=4096, n_vocab=512, seed=5,
                               tokenizer_pre=pre, added_tokens=added, chat_template=template)
    else:
        plain = make_tiny_gguf(folder / "plain.gguf", ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
        model = fim_model(plain, folder / "coder.gguf")
    todo = body_fuzz.cases(args.seed, args.n)
    served = body_fuzz.start_serve(str(model), folder)
    started = time.monotonic()
    try:
        before = body_fuzz.greedy_answer(served.url)
        if args.clients == 1:
            findings, statuses = body_fuzz.drive(served, todo, args.timeout)
        else:
            findings, statuses = body_fuzz.drive_together(served, todo, args.clients, args.timeout, seed=args.seed)
        after = body_fuzz.greedy_answer(served.url)
        if after != before:
            findings.append(f"the greedy answer changed: {before!r} before, {after!r} after")
    finally:
        body_fuzz.stop_serve(served)
    print(f"{len(todo)} bodies, seed {args.seed}, {time.monotonic() - started:.0f} s; answers by status: "
          f"{dict(sorted(statuses.items()))}; log: {served.log}")
    for f in findings:
        print(f)
    print(f"{len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
