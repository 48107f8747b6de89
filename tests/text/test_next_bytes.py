"""The automata's next-byte hints (json_next_bytes.py, held_call.HeldCall._next_bytes and its subclasses'):
token_bytes.forced_run tries only the bytes a state's hint names, so a hint that left out a byte the state
takes would force text the model could have written otherwise. Checked against the full scan of all 256
bytes: over random schemas (JSON answers, unions whose branches begin alike) and random tools in every call
format, noisy models' answers sampled as the server holds them; at each state forced_run is asked about,
and along its run, every byte the automaton takes is in the hint, and the hinted run is the full scan's."""

from __future__ import annotations

import numpy as np
import pytest
import strata.engine.held_call as held_call
import strata.engine.json_constraint as json_constraint
from strata.engine import token_bytes
from strata.engine.json_grammar import step
from strata.engine.json_next_bytes import next_bytes
from strata.engine.json_schema import compile_schema

from tests.text.test_held_calls_fuzz import engines  # noqa: F401  (the fixture: tiny models of each call format)


class Checks:
    """forced_run, checked: counts the states whose hint was compared with the full scan."""

    def __init__(self):
        self.states = self.hinted = self.forced = 0

    def forced_run(self, step, state, may_end, memo, limit=256, next_bytes=None):
        assert next_bytes is not None, "every held constraint gives forced_run its hint"
        run = token_bytes.forced_run(step, state, may_end, memo, limit, next_bytes)
        full = token_bytes.forced_run(step, state, may_end, {}, limit)     # 256 bytes a state, nothing memoized
        assert run == full, (state, run, full)
        self.forced += bool(full)
        s = state
        for b in [None, *full]:
            s = s if b is None else step(s, b)
            taken = {x for x in range(256) if step(s, x) is not None}
            hint = next_bytes(s)
            self.states += 1
            if hint is not None:
                self.hinted += 1
                assert taken <= set(hint), (s, sorted(taken - set(hint)))
        return run


@pytest.fixture
def checks(monkeypatch) -> Checks:
    c = Checks()
    monkeypatch.setattr(json_constraint, "forced_run", c.forced_run)
    monkeypatch.setattr(held_call, "forced_run", c.forced_run)
    return c


def test_json_answers_hints_hold_on_random_schemas(checks, tiny_model_factory, smollm_tokenizer):
    from strata.engine import GGUFFile
    from strata.engine.tokenizer import Tokenizer

    from tests.text.test_json_answers_fuzz import alike_root, fuzz_answers

    tok = Tokenizer.from_metadata(GGUFFile(tiny_model_factory(n_vocab=512, seed=11)).metadata)
    fuzz_answers(tok, n=25, seed=61, limit=200)
    fuzz_answers(tok, n=15, seed=62, limit=250, roots=alike_root)
    fuzz_answers(smollm_tokenizer, n=6, seed=63, limit=150)
    fuzz_answers(smollm_tokenizer, n=6, seed=64, limit=150, roots=alike_root)
    assert checks.states > 3000 and checks.hinted > 0.8 * checks.states and checks.forced > 150, vars(checks)


@pytest.mark.parametrize("fmt_name", ["hermes", "qwen3_coder", "glm", "seed", "mistral", "nemo", "harmony"])
def test_held_calls_hints_hold_in_every_format(checks, engines, fmt_name):  # noqa: F811  (the fixture)
    from tests.text.fuzz_model import random_tools
    from tests.text.test_held_calls_fuzz import answer

    rng = np.random.default_rng(70 + len(fmt_name))
    for i in range(5):
        demanded = bool(i % 2) and fmt_name != "harmony"
        answer(engines[fmt_name], fmt_name, random_tools(rng, listed=fmt_name == "seed"), demanded, rng)
    assert checks.states > 200 and checks.forced > 20, vars(checks)


def test_random_byte_walks_stay_inside_the_hints():
    """Walks byte by byte (any byte the automaton takes, punctuation and key bytes more often) through random
    schemas: at every state, the bytes taken are within the hint."""
    from tests.text.test_json_answers_fuzz import alike_root, random_root

    rng = np.random.default_rng(9)
    states = 0
    for k in range(60):
        root = compile_schema((alike_root if k % 3 == 0 else random_root)(rng))
        state: tuple | None = ((("V", root),), 0)
        for _ in range(120):
            assert state is not None
            taken = [x for x in range(256) if step(state, x) is not None]
            hint = next_bytes(state)
            assert hint is None or set(taken) <= hint, (state, sorted(set(taken) - hint))
            states += 1
            if not taken:
                break
            plain = [x for x in taken if x < 0x80 and (hint is None or len(hint) < 20)]
            pick = plain if plain and rng.random() < 0.8 else taken
            state = step(state, int(pick[int(rng.integers(len(pick)))]))
    assert states > 2000, states


def test_vocabulary_walks_with_hints_are_the_full_walks(smollm_tokenizer):
    """Vocabulary.walk leaps over a token's first two bytes where the hint leaves them out: the tokens it
    finds are the walk's without the hint, on SmolLM2's 49,152 tokens at states of random schemas."""
    import functools

    from strata.engine.token_bytes import Vocabulary

    from tests.text.test_json_answers_fuzz import alike_root, random_root

    vocab = Vocabulary.of(smollm_tokenizer)
    rng = np.random.default_rng(11)
    compared = leapt = 0
    for k in range(12):
        root = compile_schema((alike_root if k % 2 else random_root)(rng))
        memo_step = functools.lru_cache(maxsize=None)(step)
        state: tuple | None = ((("V", root),), 0)
        for n in range(40):
            assert state is not None
            taken = [x for x in range(256) if memo_step(state, x) is not None]
            if not taken:
                break
            if n % 3 == 0:
                hinted = vocab.walk(state, memo_step, next_bytes=next_bytes)
                assert np.array_equal(hinted, vocab.walk(state, memo_step)), state
                compared += 1
                leapt += next_bytes(state) is not None
            plain = [x for x in taken if x < 0x80]
            state = memo_step(state, int((plain or taken)[int(rng.integers(len(plain or taken)))]))
    assert compared > 60 and leapt > 30, (compared, leapt)


def _best_by_brute(c, logits: np.ndarray) -> int | None:
    allowed = [i for i in range(logits.shape[0]) if c.allows(i)]
    return max(allowed, key=lambda i: (logits[i], -i)) if allowed else None


def test_best_allowed_is_the_best_of_what_allows_takes(tiny_model_factory):
    """best_allowed walks the vocabulary at once where the hint names the next bytes (else it checks the 64
    best first): either way the allowed token of the highest logit, the lowest id on a tie, as a scan of
    `allows` over every token finds it. JSON answers, a JSON call after its markup, an XML call."""
    from strata.engine import GGUFFile
    from strata.engine.json_constraint import JsonConstraint
    from strata.engine.json_schema import compile_call
    from strata.engine.keyed_call import KeyedCall, KeyedMarkup
    from strata.engine.token_bytes import Vocabulary
    from strata.engine.tokenizer import Tokenizer

    from tests.text.test_json_answers_fuzz import random_root

    tok = Tokenizer.from_metadata(GGUFFile(tiny_model_factory(n_vocab=512, seed=11)).metadata)
    vocab, eos = Vocabulary.of(tok), [tok.eos_id]
    rng = np.random.default_rng(5)
    xml = KeyedMarkup(b"\n<function=", b">\n<parameter=", b">\n</function>", b">\n", b"\n</parameter>\n<",
                      b"parameter=", b"/function>")
    tool = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}}
    compared = 0
    for k in range(24):
        if k % 3 == 0:
            c = KeyedCall(xml, [("get_weather", ("city", "unit"), ("city",)), ("get_time", ("city",), ())], vocab, eos,
                          lead=b"<tool_call>")
        elif k % 3 == 1:
            c = JsonConstraint(compile_call([("get_weather", tool), ("get_time", tool)]), vocab, eos,
                               lead=b"<tool_call>\n", close=b"\n</tool_call>")
        else:
            c = JsonConstraint(compile_schema(random_root(rng)), vocab, eos)
        for _ in range(60):
            z = np.round(rng.standard_normal(vocab.n), 1).astype(np.float32)    # ties, too
            best = c.best_allowed(z)
            assert best == _best_by_brute(c, z)
            compared += 1
            if best is None or best in eos or not c.active:
                break
            c.advance(best if rng.random() < 0.5 else int(rng.choice(np.flatnonzero(c.allowed_mask()))))
    assert compared > 400, compared
