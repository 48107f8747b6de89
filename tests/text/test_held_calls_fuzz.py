"""Held tool calls fuzzed end to end: for each call format (the real templates, each on a tiny model of its
vocabulary's markup), random offered tools, the rule the server picks for them (structured_output.answer_rule:
the call's markup read off the template's probe renderings), a noisy model's answers sampled through the
constraint, and the server's own answer reader (prompting.split_answer). The promise: a held call always
comes out as a call of an offered tool, with only keys its schema allows and values it allows (the parts
held: format / pattern are the tool's own to check; key-value markup holds the keys, not the values), and
the answer never meets a dead end (no token allowed while a call is open).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from strata.engine.token_bytes import Vocabulary

from tests.text.fuzz_model import (
    JSON_PIECES,
    Drive,
    NoisyModel,
    closed,
    held_until,
    random_tools,
    sampler_for,
    step,
    tool_pieces,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ASK = [{"role": "user", "content": "go"}]


def _formats() -> dict[str, dict]:
    from tests.server.test_glm_live import MARKUP as GLM_MARKUP
    from tests.server.test_harmony_live import SPECIALS as HARMONY_SPECIALS
    from tests.server.test_harmony_live import TEMPLATE as HARMONY_TEMPLATE
    from tests.server.test_mistral_live import MARKUP as MISTRAL_MARKUP
    from tests.server.test_seed_live import MARKUP as SEED_MARKUP
    from tests.server.test_seed_live import TEMPLATE as SEED_TEMPLATE
    from tests.text.test_chat_template import QWEN_LIKE
    from tests.text.test_xml_tool_template import XML_TEMPLATE

    mistral_added = ("[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                     "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", *MISTRAL_MARKUP)
    return {
        "hermes": dict(chat_template=QWEN_LIKE, added_tokens=("<tool_call>", "</tool_call>")),
        "qwen3_coder": dict(chat_template=XML_TEMPLATE, added_tokens=("<tool_call>", "</tool_call>")),
        "glm": dict(chat_template=(FIXTURES / "GLM-4.7-Flash.jinja").read_text(encoding="utf-8"),
                    tokenizer_pre="glm4", added_tokens=GLM_MARKUP),
        "seed": dict(chat_template=SEED_TEMPLATE, tokenizer_pre="seed-coder", added_tokens=SEED_MARKUP),
        "mistral": dict(chat_template=(FIXTURES / "Mistral-Small-3.2-24B-Instruct-2506.jinja").read_text(encoding="utf-8"),
                        tokenizer_pre="tekken", added_tokens=mistral_added),
        "nemo": dict(chat_template=(FIXTURES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text(encoding="utf-8"),
                     tokenizer_pre="tekken", added_tokens=mistral_added),
        "harmony": dict(chat_template=HARMONY_TEMPLATE,
                        added_tokens=(*HARMONY_SPECIALS, "assistant", "analysis", "commentary", "final", "json")),
    }


FORMATS = ("hermes", "qwen3_coder", "glm", "seed", "mistral", "nemo", "harmony")
RULES = {"hermes": "JsonFormat", "qwen3_coder": "KeyedCallRule", "glm": "KeyedCallRule", "seed": "KeyedCallRule",
         "mistral": "JsonArgsRule", "nemo": "JsonFormat", "harmony": "JsonArgsRule"}
KEYED = ("qwen3_coder", "glm", "seed")


@pytest.fixture(scope="module")
def engines(tiny_model_factory):
    from strata.engine import Engine

    shapes = _formats()
    return {name: Engine(str(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=11, **shape)), n_ctx=64, n_threads=1)
            for name, shape in shapes.items()}


@pytest.fixture(scope="module")
def tekken_tokenizer():
    from strata.engine.tokenizer import Tokenizer

    from tests.fixtures.tekken_vocab import tekken_metadata
    return Tokenizer.from_metadata(tekken_metadata())


def _rule(engine, tools, demanded):
    from strata.server.prompting import answer_format
    from strata.server.structured_output import answer_rule

    prompt = engine.tokenize(engine.apply_chat_template(ASK, tools=tools), special=True)
    fmt = answer_format(engine, prompt, ASK)
    return fmt, answer_rule(None, tools, demanded, fmt, engine)


def _markup(fmt_name: str, rule) -> list[bytes]:
    """The pieces of the format a model that knows it writes."""
    if fmt_name in KEYED:
        m = rule.markup
        return [m.opening, m.first, m.empty, m.mid, m.value_end, m.next_key, m.end, b"x", b"1"] + \
            [m.value_end + m.end, m.value_end + m.next_key] * 12       # values end often enough to finish
    if fmt_name == "harmony":
        return [b" <|constrain|>json<|message|>", b"<|message|>", b" ", b"json"]
    if fmt_name == "mistral":
        return [b"[ARGS]", b"[CALL_ID]abcDEF123[ARGS]"]
    if fmt_name == "nemo":
        return [b'[{"name": "', b'", "arguments": ', b', "id": "abcDEF123"}', b", {"] + [b"}]"] * 6
    return [b'{"name": "', b'", "arguments": ', b"}", b"\n</tool_call>"]


def _holding(c) -> bool:
    """Whether the constraint holds a call it has not finished (a JSON constraint: a value under way;
    Harmony's arguments: whole once only the end token may follow)."""
    if hasattr(c, "_step_uncached"):
        return c.active and not c._may_end(c.state)
    return c.active and bool(c.state[0])


def _opening(fmt_name: str, fmt) -> bytes:
    """What the model writes to open a call of its own (the rule waits for its marker)."""
    if fmt_name == "harmony":
        return b"<|channel|>commentary to=functions."
    if fmt_name in ("mistral", "nemo"):
        return b"[TOOL_CALLS]"
    return b"<seed:tool_call>" if fmt_name == "seed" else b"<tool_call>"


def answer(engine, fmt_name: str, tools: list[dict], demanded: bool, rng: np.random.Generator, tokenizer=None):
    """(text, calls read by the server, calls the constraint saw finished, the drive). `tokenizer`: the
    vocabulary the answer is sampled over (default: the tiny model's own; the rule is read off its template)."""
    from strata.server.prompting import split_answer

    fmt, rule = _rule(engine, tools, demanded)
    assert type(rule).__name__ == RULES[fmt_name], (fmt_name, rule)
    tokenizer = tokenizer or engine.tokenizer
    vocab = Vocabulary.of(tokenizer)
    eos = sorted(tokenizer.eot_ids) if tokenizer is not engine.tokenizer else sorted(engine.eos_token_ids)
    c = rule.constraint_for(tokenizer, eos)
    model = NoisyModel(vocab, _markup(fmt_name, rule) + tool_pieces(tools) + list(JSON_PIECES), rng)
    sampler = sampler_for(c, vocab, rng, tokenizer)
    drive = Drive()
    finished = 0
    if fmt.opened:                                   # the prompt opened the reasoning: it is closed first
        model.script(b"Hm." + fmt.think[1].encode())
        while model.scripted and step(model, sampler, drive) is not None:
            pass
    alone = fmt_name in ("harmony", "nemo")          # a call the whole answer (its reader takes no text first)
    for _ in range(1 if demanded or alone else int(rng.integers(1, 4))):
        if not demanded:
            model.script((b"" if alone else b"Ok.\n" if not finished else b"\n") + _opening(fmt_name, fmt))
            while model.scripted and not _holding(c):
                if step(model, sampler, drive, check_mask=0.2) is None:
                    break
        if not held_until(model, sampler, drive, lambda: _holding(c), limit=250, check_mask=0.05):
            return None, [], finished, drive
        finished += 1
    z = np.full(vocab.n, -1e4, dtype=np.float32)
    z[eos[0]] = 0.0                                  # Harmony: <|call|>, which ends its arguments' message
    assert sampler.sample(z) == eos[0], "a whole call lets the answer end"
    drive.tokens.append(eos[0])
    text = drive.text(vocab, eos)
    _, _, calls = split_answer(text, fmt, tools)
    return text, calls, finished, drive


def check_calls(fmt_name: str, tools: list[dict], text: str, calls: list[dict], finished: int) -> None:
    offered = {t["function"]["name"]: t["function"].get("parameters") for t in tools}
    if fmt_name == "nemo":                           # one list of calls, held whole
        assert len(calls) >= finished, (fmt_name, text, calls)
    else:
        assert len(calls) == finished, (fmt_name, text, calls)
    for call in calls:
        assert call["name"] in offered, (text, call)
        args = json.loads(call["arguments"])
        params = offered[call["name"]]
        assert isinstance(args, dict), (text, call)
        if fmt_name in KEYED:                        # the keys are held; the values are the model's text
            props = params.get("properties")
            if props is not None:
                assert set(args) <= set(props), (text, call)
            assert set(params.get("required", ())) <= set(args), (text, call)
        else:
            jsonschema.validate(args, closed(params))


@pytest.mark.parametrize("fmt_name", FORMATS)
@pytest.mark.parametrize("demanded", [False, True])
def test_held_calls_come_out_as_calls_of_offered_tools(engines, fmt_name, demanded):
    if demanded and fmt_name == "harmony":
        pytest.skip("a demanded Harmony call is not held (its calls are a channel)")
    rng = np.random.default_rng(FORMATS.index(fmt_name) * 2 + demanded)
    # 10 answers, half of them finished: the noisy model's answers differ with any change in how many random
    # draws come before them (a forced token takes none), and Mistral Nemo's finish ~84% of the time (8 seeds:
    # 47 / 45 of 56 with and without the closing markup forced whole), so 5 of 7 failed 1 seed in 11
    n, done, tokens, refusals = 10, 0, 0, 0
    for _ in range(n):
        tools = random_tools(rng, listed=fmt_name == "seed")    # Seed-OSS's template reads each tool's properties
        text, calls, finished, drive = answer(engines[fmt_name], fmt_name, tools, demanded, rng)
        assert not drive.dead_end, (fmt_name, tools, drive.text(Vocabulary.of(engines[fmt_name].tokenizer), []))
        tokens, refusals = tokens + len(drive.tokens), refusals + drive.refusals
        if text is None:
            continue                                 # a call still open at the token limit (no dead end)
        check_calls(fmt_name, tools, text, calls, finished)
        done += 1
    assert done >= n * 0.5, f"{fmt_name}: only {done} of {n} answers finished their calls"   # the rest: cut, not stuck



XML_PIECES = [b"<tool_call>", b"\n<function=", b"edit_file", b">\n<parameter=", b"path", b">\n", b"a.py", b"\n<parameter=",
              b"</tool_call>", b"\n</parameter>", b"x", b"\n<", b"<function=", b"</parameter>\n<", b"parameter=",
              b"/function>\n</tool_call>", b"<eos>"]


def test_a_value_cannot_write_the_markup_the_reader_ends_it_at():
    """Qwen3-Coder's reader ends a value at `</parameter>` or the next `<parameter=`, a function at
    `<function=` or `</function>`: inside a value these are refused, except as the value's own end, which is
    then written whole. `</tool_call>` is not (it was until the reader read it as the value's text:
    chat_template.tool_call_blocks ends the block at the tag after `</function>`): the value is read whole."""
    from strata.engine.keyed_call import KeyedCall
    from strata.server.prompting import AnswerFormat, split_answer

    from tests.text.test_held_calls import XML

    vocab = Vocabulary(XML_PIECES, special_ids=[0, 16])
    tools = [{"type": "function", "function": {"name": "edit_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]

    def opened() -> KeyedCall:
        c = KeyedCall(XML, [("edit_file", ("path",), ("path",))], vocab, [16], trigger=b"<tool_call>")
        for p in [b"<tool_call>", b"\n<function=", b"edit_file", b">\n<parameter=", b"path", b">\n", b"a.py"]:
            assert c.allows(XML_PIECES.index(p)), p
            c.advance(XML_PIECES.index(p))
        return c

    text = "<tool_call>\n<function=edit_file>\n<parameter=path>\na.py"
    for bad in [b"\n<parameter=", b"</tool_call>", b"<function="]:
        c = opened()
        assert c.allows(XML_PIECES.index(bad)) == (bad == b"</tool_call>"), bad
        _, _, calls = split_answer(text + bad.decode() + "\n</parameter>\n</function>\n</tool_call>",
                                   AnswerFormat(), tools)
        whole = [json.loads(k["arguments"]) for k in calls] == [{"path": "a.py" + bad.decode()}]
        assert whole == (bad == b"</tool_call>"), bad            # the reader would end the value at the others
    c = opened()
    c.advance(XML_PIECES.index(b"\n</parameter>"))
    assert not c.allows(XML_PIECES.index(b"x")) and c.allows(XML_PIECES.index(b"\n<"))   # its end, whole


MISTRAL_PIECES = [b"[TOOL_CALLS]", b"get_weather", b"[ x", b" ", b"x", b"[ARGS]", b"[CALL_ID]", b"abcDEF123", b"{}", b"</s>"]


def test_a_mistral_header_is_what_its_reader_takes():
    """Mistral's reader takes `NAME[ARGS]` or `NAME[CALL_ID]id[ARGS]` (a name without spaces); the header was
    held as free text up to [ARGS] (48 bytes), and `get_weather[ x[ARGS]{}` came out as no call at all."""
    from strata.engine.json_args_call import MISTRAL, JsonArgsCall
    from strata.engine.json_schema import tool_arguments
    from strata.engine.mistral import parse_mistral_calls

    vocab = Vocabulary(MISTRAL_PIECES, special_ids=[0, 5, 6, 9])

    def c_after(pieces):
        c = JsonArgsCall(MISTRAL, [("get_weather", tool_arguments({"type": "object"}))], vocab, [9])
        for p in pieces:
            assert c.allows(MISTRAL_PIECES.index(p)), p
            c.advance(MISTRAL_PIECES.index(p))
        return c

    assert parse_mistral_calls("[TOOL_CALLS]get_weather[ x[ARGS]{}")[1] == []     # what was let through
    c = c_after([b"[TOOL_CALLS]", b"get_weather"])
    assert not c.allows(MISTRAL_PIECES.index(b"[ x")) and not c.allows(MISTRAL_PIECES.index(b" "))
    c = c_after([b"[TOOL_CALLS]", b"get_weather", b"[CALL_ID]"])
    assert not c.allows(MISTRAL_PIECES.index(b"[ARGS]")) and not c.allows(MISTRAL_PIECES.index(b" "))  # an id first
    c = c_after([b"[TOOL_CALLS]", b"get_weather", b"[CALL_ID]", b"abcDEF123", b"x", b"[ARGS]", b"{}"])
    assert not c.active
    assert parse_mistral_calls("[TOOL_CALLS]get_weather[CALL_ID]abcDEF123x[ARGS]{}")[1][0]["name"] == "get_weather"


def test_a_json_call_cannot_write_the_markup_its_reader_ends_it_at():
    """A JSON call's string may not spell the text its reader ends the call at: Harmony's stream ended the
    arguments at a written `<|end|>`. Hermes' block reader reads `{"a": "x</tool_call>y"}` whole (the block
    ends where its JSON does: chat_template.tool_call_blocks), so its held call (structured_output's rule,
    which forbids nothing) may write it: a call writing code about tool calls."""
    from strata.engine.chat_template import parse_tool_calls
    from strata.engine.harmony import parse_harmony
    from strata.engine.json_args_call import HARMONY, JsonArgsCall
    from strata.engine.json_constraint import JsonConstraint
    from strata.engine.json_schema import compile_call, tool_arguments

    read = parse_tool_calls('<tool_call>\n{"name": "f", "arguments": {"a": "x</tool_call>y"}}\n</tool_call>')[1]
    assert [json.loads(c["arguments"]) for c in read] == [{"a": "x</tool_call>y"}]
    assert parse_harmony(' to=functions.f<|message|>{"a": "x<|end|>y"}').calls[0]["arguments"] == '{"a": "x'
    pieces = [b"<tool_call>", b'{"name": "f", "arguments": {"a": "x', b"</tool_call>", b"<|end|>", b"</", b"y",
              b' to=functions.f<|message|>{"a": "x', b"<eos>"]
    vocab = Vocabulary(pieces, special_ids=[7])
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    hermes = JsonConstraint(compile_call([("f", schema)]), vocab, [7], trigger=b"<tool_call>",
                            close=b"\n</tool_call>")
    harmony = JsonArgsCall(HARMONY, [("f", tool_arguments(schema))], vocab, [7])
    for c, opening in [(hermes, [0, 1]), (harmony, [6])]:
        for t in opening:
            c.advance(t)
        assert c.allows(5) and c.allows(4)                  # "</" alone: a value may still go on
    assert hermes.allows(2) and not harmony.allows(3)


@pytest.mark.parametrize("fmt_name, vocabulary", [("hermes", "smollm"), ("qwen3_coder", "smollm"), ("glm", "smollm"),
                                                  ("harmony", "smollm"), ("mistral", "tekken"), ("nemo", "tekken")])
def test_held_calls_on_real_vocabularies(engines, fmt_name, vocabulary, smollm_tokenizer, tekken_tokenizer):
    """The same on SmolLM2's 49,152 tokens (markup spelled by its merges: tokens that span a key's end and
    the next markup, or a call's end and text: '>.', '}".') and tekken's 131,072 (Mistral's markup as its own
    special tokens)."""
    tokenizer = tekken_tokenizer if vocabulary == "tekken" else smollm_tokenizer
    rng = np.random.default_rng(100 + FORMATS.index(fmt_name))
    done = 0
    # 4 answers: the noisy model finishes about half of Nemo's lists within the limit once a JSON gap holds one line
    # break (json_grammar.ws_step; 15 of 30 against 21 with 24 whitespace bytes), and 2 of them finished none
    for k in range(4):
        tools = random_tools(rng)
        demanded = bool(k % 2) and fmt_name != "harmony"
        text, calls, finished, drive = answer(engines[fmt_name], fmt_name, tools, demanded, rng, tokenizer)
        assert not drive.dead_end
        if text is not None:
            check_calls(fmt_name, tools, text, calls, finished)
            done += 1
    assert done >= 1
