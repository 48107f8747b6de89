"""A held answer through the sampler (strata.engine.sampling.Sampler with `constraint=`) while the constraint
waits for its trigger: a token that writes the call's marker and more is drawn only when the more is what the
call allows (the sampler asked the constraint nothing while it waited, and the bad bytes either raised in
`advance` or were skipped, leaving the text and the automaton apart)."""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine.json_args_call import HARMONY, HARMONY_ANALYSIS, JsonArgsCall
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import compile_call, tool_arguments
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.token_bytes import Vocabulary

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
HPIECES = [b"Hi", b" to=functions.get_wether", b" to=functions.get_weather", b" to=functions.", b"x", b"<|call|>"]
JPIECES = [b"Hi", b'<tool_call>{"name": "x', b'<tool_call>{"name": "get_weather"', b"<tool_call>", b"x", b"<eos>"]


def _constraints():
    yield HPIECES, JsonArgsCall(HARMONY, [("get_weather", tool_arguments(WEATHER))], Vocabulary(HPIECES, [5]), [5],
                                reasoning=HARMONY_ANALYSIS)
    yield JPIECES, JsonConstraint(compile_call([("get_weather", WEATHER)]), Vocabulary(JPIECES, [5]), [5],
                                  trigger=b"<tool_call>")


@pytest.mark.parametrize("case", [0, 1])
@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_a_waiting_constraint_refuses_a_token_that_opens_a_bad_call(case, temperature):
    pieces, c = list(_constraints())[case]
    logits = np.full(len(pieces), -30.0, dtype=np.float32)
    logits[1], logits[2] = 20.0, 5.0               # the bad call is the model's first choice by far
    s = Sampler(SamplingParams(temperature=temperature, seed=3), len(pieces), constraint=c)
    assert s.sample(logits) == 2 and s.refusals == 1
    assert c.active                                  # the good call is held on


@pytest.mark.parametrize("case", [0, 1])
def test_a_waiting_constraints_mask_leaves_out_a_bad_call(case):
    pieces, c = list(_constraints())[case]
    mask = c.allowed_mask()
    assert not mask[1] and mask[0] and mask[2] and mask[3]


def test_a_waiting_forced_start_refuses_a_token_that_opens_another_tools_call():
    """The opening of each call a model writes (ForcedStart, repeat) while it waits for the marker: a token
    that writes the marker and a name no tool has was taken (allows said yes to everything while waiting)."""
    from strata.engine.forced_start import ForcedStart

    pieces = [b"Hi", b"<tool_call>\n<function=bsh", b"<tool_call>\n<function=bash", b"<tool_call>", b"<eos>"]
    c = ForcedStart([b"\n<function=bash", b"\n<function=read"], Vocabulary(pieces, [4]), after=b"<tool_call>",
                    repeat=True)
    assert c.allows(0) and c.allows(2) and c.allows(3) and not c.allows(1)
    assert list(c.allowed_mask()) == [True, False, True, True, True]
    logits = np.array([0.0, 9.0, 1.0, 0.0, 0.0], dtype=np.float32)
    assert Sampler(SamplingParams(), 5, constraint=c).sample(logits) == 2


def test_a_token_that_ends_a_call_writes_only_whitespace_after_it():
    """A token that finishes a held call, then writes the marker and a name no tool has: allowed (what
    followed a whole call was free), and advance then raised on the second call's bytes. In the token that
    finishes a call only whitespace may follow it (SmolLM2's '>.' after Seed-OSS's call put text between
    calls, and its reader read the next call as text); the next call opens in a token of its own."""
    from strata.engine.keyed_call import KeyedCall

    from tests.text.test_held_calls import XML

    pieces = [b"<tool_call>", b"\n<function=read", b">\n</function>\n</tool_call>\n<tool_call>\n<function=bsh",
              b">\n</function>\n</tool_call>\n<tool_call>\n<function=read", b">\n</function>\n</tool_call>", b"<eos>"]
    c = KeyedCall(XML, [("read", (), ())], Vocabulary(pieces, [5]), [5], trigger=b"<tool_call>")
    c.advance(0)
    c.advance(1)
    assert c.allows(4) and not c.allows(2) and not c.allows(3)
    c.advance(4)
    c.advance(0)
    assert c.active                                  # the second call is held on
    c = KeyedCall(XML, [("read", (), ())], Vocabulary(pieces, [5]), [5], trigger=b"<tool_call>")
    c.advance(0)
    c.advance(1)
    assert list(c.allowed_mask()) == [False, False, False, False, True, False]


def test_harmony_arguments_end_the_message():
    """Harmony's reader takes a call's whole message body as its arguments: a token that closed the JSON
    and wrote more ('}".', SmolLM2 has such merges) left arguments no JSON reader takes. After the JSON only
    whitespace, then the answer's end (<|call|>)."""
    from strata.engine.harmony import parse_harmony

    assert parse_harmony(' to=functions.f<|message|>{}".').calls[0]["arguments"] == '{}".'
    pieces = [b" to=functions.f<|message|>", b"{", b'}".', b"}", b" ", b"x", b"<|call|>"]
    c = JsonArgsCall(HARMONY, [("f", tool_arguments({"type": "object"}))], Vocabulary(pieces, [6]), [6])
    c.advance(0)
    c.advance(1)
    assert not c.allows(2) and c.allows(3) and not c.allows(6)
    c.advance(3)
    assert c.allows(4) and not c.allows(5) and c.allows(6)
    assert list(c.allowed_mask()) == [False, False, False, False, True, False, True]
    c.advance(4)
    s = Sampler(SamplingParams(), 7, constraint=c)
    assert s.sample(np.array([0, 0, 9, 0, 0, 5, 1], dtype=np.float32)) == 6
    assert not c.active
