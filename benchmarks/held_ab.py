"""The held sampler of an older tree against this one, side by side in one process: the default model
generating benchmarks/structured_output.py's prompts and schemas greedily, free and held as the server holds
answers (canonical_split.CanonicalSplit around json_constraint.JsonConstraint), with the constraint modules
of `--before` (an older tree's engine_native/engine, e.g. from `git archive`) and with this tree's, each
prompt alternating the two, so that both see the same load. Prints, per schema, the sampler's milliseconds a
token and the answers' seconds each way and their ratio. Not a test (no assertion).

    git archive COMMIT engine_native/engine | tar -x -C /tmp/before
    .venv/bin/python benchmarks/held_ab.py --before /tmp/before/engine_native/engine [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import sys
import types
from pathlib import Path

from strata.engine import Engine
from strata.engine.models import default_model_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from structured_output import PROMPTS, SCHEMAS, generate  # noqa: E402

MODULES = ("canonical_split", "json_constraint", "json_grammar", "json_schema", "json_union", "json_numbers",
           "json_patterns", "json_next_bytes", "token_bytes")
OLD = "held_before"


class _Before(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads `held_before.X` from the older tree's X.py, its `strata.engine.Y` imports of these modules
    pointed at `held_before.Y` (the two trees' modules side by side; their C++ engine is this one's)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):
        if name.startswith(OLD + ".") and (self.folder / (name.split(".", 1)[1] + ".py")).exists():
            return importlib.util.spec_from_loader(name, self)
        return None

    def exec_module(self, module) -> None:
        source = (self.folder / (module.__name__.split(".", 1)[1] + ".py")).read_text()
        for m in MODULES:
            source = source.replace(f"strata.engine.{m} ", f"{OLD}.{m} ").replace(f"strata.engine.{m}\n", f"{OLD}.{m}\n")
        exec(compile(source, str(self.folder / module.__name__), "exec"), module.__dict__)


def load_before(folder: Path) -> types.SimpleNamespace:
    sys.modules[OLD] = types.ModuleType(OLD)
    sys.modules[OLD].__path__ = []
    sys.meta_path.insert(0, _Before(folder))
    import held_before.canonical_split as split  # type: ignore[import-not-found]
    import held_before.json_constraint as constraint  # type: ignore[import-not-found]
    import held_before.json_schema as schema  # type: ignore[import-not-found]
    import held_before.token_bytes as tb  # type: ignore[import-not-found]
    return types.SimpleNamespace(split=split, constraint=constraint, schema=schema, tb=tb)


def this_tree() -> types.SimpleNamespace:
    import strata.engine.canonical_split as split
    import strata.engine.json_constraint as constraint
    import strata.engine.json_schema as schema
    import strata.engine.token_bytes as tb
    return types.SimpleNamespace(split=split, constraint=constraint, schema=schema, tb=tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, type=Path, help="an older tree's engine_native/engine folder")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=120)
    a = ap.parse_args()
    if not (a.before / "json_constraint.py").exists():
        raise SystemExit(f"{a.before}: no json_constraint.py (give an engine_native/engine folder)")
    trees = {"before": load_before(a.before), "after": this_tree()}
    e = Engine(str(default_model_path()), n_ctx=1024, n_threads=a.threads)
    eos = list(e.eos_token_ids)
    prompts = [e.tokenizer.encode(e.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True))
               for p in PROMPTS]
    for name, schema in SCHEMAS.items():
        makers = {}
        for way, t in trees.items():
            vocab = t.tb.Vocabulary([e.tokenizer.token_bytes(i) for i in range(e.tokenizer.n_vocab)],
                                    e.tokenizer.special_ids)
            root = t.schema.ANY_OBJECT if schema is None else t.schema.compile_schema(schema)
            makers[way] = (lambda t=t, root=root, vocab=vocab:
                           t.split.CanonicalSplit(t.constraint.JsonConstraint(root, vocab, eos), e.tokenizer))
        seconds = {w: 0.0 for w in ["free", *trees]}
        sampler = {w: 0.0 for w in trees}
        tokens = {w: 0 for w in ["free", *trees]}
        for r in range(a.rounds + 1):                     # round 0 warms up (the vocabularies' sorted bytes)
            for p in prompts:
                for way in ["free", *trees] if r % 2 else ["free", *reversed(trees)]:
                    n, s, in_sampler = generate(e, p, a.max_tokens, makers[way]() if way in makers else None)
                    if r:
                        seconds[way] += s
                        tokens[way] += n
                        if way in sampler:
                            sampler[way] += in_sampler
        ms = {w: 1000 * sampler[w] / max(1, tokens[w]) for w in trees}
        print(f"{name:30s} free {tokens['free'] / seconds['free']:6.1f} tok/s | " + " | ".join(
            f"{w}: {tokens[w] / seconds[w]:6.1f} tok/s ({tokens[w] / seconds[w] / (tokens['free'] / seconds['free']):.2f}x"
            f" free), sampler {ms[w]:.3f} ms a token, {tokens[w] // a.rounds} tokens" for w in trees)
            + f" | sampler after/before {ms['after'] / ms['before']:.2f}")


if __name__ == "__main__":
    main()
