"""An answer kept off tool calls (tool_choice none, strata.engine.no_call, the rule server/no_call_rule.py
picks per format), over small vocabularies of markup pieces: a call's marker is refused where the readers take
it as a call (a special token banned; a marker of several tokens refused at its last one), and left free in
the reasoning and in a code block opened after prose; Harmony's header outside its analysis channel; Llama 3's
`<|python_tag|>` and its bare JSON call's start, a JSON answer that is no call left whole."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from strata.engine.harmony import parse_harmony
from strata.engine.no_call import NoCall
from strata.engine.token_bytes import Vocabulary
from strata.server.no_call_rule import BLOCK_MARKERS, no_call_rule

PIECES = [b"<tool_call>", b"<", b"tool", b"_call", b">", b">\n", b"[TOOL_CALLS]", b"<seed:tool_call>", b"<TOOLCALL>",
          b"Hi", b"\n", b"```", b"python", b"<think>", b"</think>", b"to=functions.", b"to", b"=functions", b".",
          b"<|channel|>analysis<|message|>", b"<|end|>", b"<|channel|>final<|message|>", b" ", b"get", b"x"]
SPECIAL = [PIECES.index(p) for p in (b"<tool_call>", b"[TOOL_CALLS]", b"<seed:tool_call>", b"<think>", b"</think>",
                                     b"<|channel|>analysis<|message|>", b"<|end|>", b"<|channel|>final<|message|>")]
VOCAB = Vocabulary(PIECES, special_ids=SPECIAL)


def tok(piece: bytes) -> int:
    return PIECES.index(piece)


def write(c: NoCall, pieces: list[bytes]) -> None:
    for p in pieces:
        assert c.allows(tok(p)), p
        c.advance(tok(p))


def refused(c: NoCall) -> set[bytes]:
    mask = c.allowed_mask()
    assert all(mask[i] == c.allows(i) for i in range(VOCAB.n))
    return {PIECES[i] for i in np.flatnonzero(~mask)}


@pytest.mark.parametrize("marker", [b"<tool_call>", b"[TOOL_CALLS]", b"<seed:tool_call>"])
def test_a_marker_that_is_one_special_token_is_banned_wherever_the_answer_is(marker):
    c = NoCall(BLOCK_MARKERS + (marker,), VOCAB)
    assert marker in refused(c)
    write(c, [b"Hi", b"\n"])
    assert marker in refused(c) and not c.allows(tok(marker))
    assert c.forced_bytes() == b""


def test_a_marker_of_several_tokens_is_refused_at_its_last():
    c = NoCall(BLOCK_MARKERS, VOCAB)
    write(c, [b"Hi", b" ", b"<", b"tool", b"_call"])
    assert refused(c) == {b"<tool_call>", b"<TOOLCALL>", b">", b">\n"}     # either token finishing it
    write(c, [b"x", b">"])                                   # `<tool_callx>` is no call's opening: free
    write(c, [b"<"])
    assert c.allows(tok(b">"))                               # `<>`: no marker


def test_the_marker_stays_free_in_the_reasoning_and_in_a_code_block_after_prose():
    c = NoCall(BLOCK_MARKERS, VOCAB, reasoning=(b"<think>", b"</think>"), opened=True)
    write(c, [b"<tool_call>", b"x", b"</think>", b"Hi", b"\n"])       # thought, not written
    assert not c.allows(tok(b"<tool_call>"))
    write(c, [b"```", b"python", b"\n", b"<tool_call>", b"\n", b"```", b"\n"])   # an example in code
    assert not c.allows(tok(b"<tool_call>"))                 # the block closed: a call's opening again
    c = NoCall(BLOCK_MARKERS, VOCAB, reasoning=(b"<think>", b"</think>"))
    write(c, [b"<think>", b"<", b"tool", b"_call", b">", b"</think>"])
    assert not c.allows(tok(b"<tool_call>"))


def harmony(prefill: str = "") -> NoCall:
    """The constraint the server holds a Harmony answer to under tool_choice none (VOCAB as its vocabulary)."""
    return no_call_rule(SimpleNamespace(harmony=True), prefill).constraint_for(SimpleNamespace(_json_vocabulary=VOCAB),
                                                                                ())


def test_harmony_keeps_a_recipient_off_every_header_and_leaves_the_bodies_free():
    c = harmony()
    write(c, [b"<|channel|>analysis<|message|>", b"to=functions.", b"get", b"<|end|>"])   # the analysis: thought
    assert refused(c) == {b"to=functions."}                  # a header again: a token writing `to=` refused
    write(c, [b"to"])
    assert not c.allows(tok(b"=functions")) and c.allows(tok(b"x"))
    write(c, [b"x", b"<|channel|>final<|message|>", b"Hi", b" ", b"to=functions."])   # a final body's text
    assert c.allows(tok(b"to=functions."))


# headers the reader takes as calls (harmony.py: any recipient), each a token the old check (`to=functions.`
# alone) let through, so the message's text went to a call's arguments and the answer's content was lost
CALL_HEADERS = [[b"to", b"=functions", b"x"], [b" ", b"to", b"=functions", b"."], [b"to", b"=functions", b"_call"]]


@pytest.mark.parametrize("header", CALL_HEADERS)
@pytest.mark.parametrize("before", [[], [b"<|channel|>analysis<|message|>", b"Hi", b"<|end|>"]])
def test_harmony_no_recipient_a_reader_takes_gets_through(header, before):
    """Every token the check allows written, the rest refused: the Harmony reader reads no call and keeps
    the final text."""
    c = harmony()
    written = b""
    for piece in before + header + [b"<|channel|>final<|message|>", b"Hi"]:
        if c.allows(tok(piece)):
            c.advance(tok(piece))
            written += piece
    answer = parse_harmony(written.decode(), ())
    assert answer.calls == [] and answer.content.endswith("Hi"), (written, answer)


def test_a_prefill_is_the_answers_start():
    c = NoCall(BLOCK_MARKERS, VOCAB, prefix=b"<tool")
    write(c, [b"_call"])
    assert not c.allows(tok(b">"))


def test_no_marker_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one non-empty call marker"):
        NoCall((b"",), VOCAB)


def test_a_harmony_prefill_is_the_final_messages_body():
    c = harmony("Send it ")
    assert c.allows(tok(b"to=functions."))                   # text, as the prompt's final message holds it


@pytest.mark.parametrize("answer, markers, reasoning, code_blocks", [
    (SimpleNamespace(harmony=False, think=None), BLOCK_MARKERS, None, True),             # ChatML, SmolLM2, Hermes
    (SimpleNamespace(harmony=False, mistral_calls=True, think=None), BLOCK_MARKERS + (b"[TOOL_CALLS]",), None, True),
    (SimpleNamespace(harmony=False, seed_calls=True, think=("<seed:think>", "</seed:think>"), opened=True),
     BLOCK_MARKERS + (b"<seed:tool_call>",), (b"<seed:think>", b"</seed:think>"), True),
    (SimpleNamespace(harmony=False, think=("<think>", "</think>")), BLOCK_MARKERS, (b"<think>", b"</think>"), True),
    (SimpleNamespace(harmony=False, llama_calls=True, think=None), BLOCK_MARKERS + (b"<|python_tag|>",), None, True),
])
def test_each_format_bans_its_readers_markers(answer, markers, reasoning, code_blocks):
    rule = no_call_rule(answer, "pre")
    assert (rule.markers, rule.reasoning, rule.code_blocks, rule.prefix, rule.kind) == \
        (markers, reasoning, code_blocks, b"pre", "none")
    assert rule.opened == bool(getattr(answer, "opened", False))
    assert rule.bare_calls == bool(getattr(answer, "llama_calls", False))     # Llama 3's bare JSON calls only


# ----- Llama 3: a bare JSON call's start (strata.engine.bare_call_scan) -----

JSON_PIECES = [b'{"', b"name", b'":', b' "', b"get", b'",', b"parameters", b'": {}}', b"age", b'": 3}', b"<|python_tag|>",
               b"<think>", b"</think>", b"Hi", b" ", b"x"]
JSON_VOCAB = Vocabulary(JSON_PIECES, special_ids=[JSON_PIECES.index(b"<|python_tag|>")])


def llama(prefill: str = "", opened: bool = False) -> NoCall:
    """The constraint the server holds a Llama 3 answer to under tool_choice none (JSON_VOCAB as its vocabulary)."""
    answer = SimpleNamespace(harmony=False, llama_calls=True, think=("<think>", "</think>"), opened=opened)
    return no_call_rule(answer, prefill).constraint_for(SimpleNamespace(_json_vocabulary=JSON_VOCAB), ())


def json_write(c: NoCall, pieces: list[bytes]) -> None:
    for p in pieces:
        assert c.allows(JSON_PIECES.index(p)), p
        c.advance(JSON_PIECES.index(p))


def json_refused(c: NoCall) -> set[bytes]:
    mask = c.allowed_mask()
    assert all(mask[i] == c.allows(i) for i in range(JSON_VOCAB.n))
    return {JSON_PIECES[i] for i in np.flatnonzero(~mask)}


def test_llama_bans_the_tag_and_refuses_a_bare_call_at_its_arguments_key():
    c = llama()
    assert json_refused(c) == {b"<|python_tag|>"}
    json_write(c, [b" ", b'{"', b"name", b'":', b' "', b"get", b'",', b' "', b"parameters"])
    assert json_refused(c) == {b"<|python_tag|>", b'":', b'": {}}', b'": 3}', b'",'}   # its closing quote
    json_write(c, [b"x", b'":'])                                           # "parametersx": no call's key
    assert json_refused(c) == {b"<|python_tag|>"}


def test_llama_leaves_a_json_answer_that_is_no_call_whole():
    c = llama()
    json_write(c, [b'{"', b"name", b'":', b' "', b"get", b'",', b' "', b"age", b'": 3}'])
    c = llama()
    json_write(c, [b"Hi", b" ", b'{"', b"name", b'":', b' "', b"get", b'",', b' "', b"parameters", b'": {}}'])


def test_llama_watches_the_content_after_the_reasoning_and_not_a_call_the_prefill_wrote():
    c = llama(opened=True)
    json_write(c, [b'{"', b"name", b'":', b' "', b"get", b'",', b' "', b"parameters", b'": {}}', b"</think>",
                   b'{"', b"name", b'":', b' "', b"get", b'",', b' "', b"parameters"])
    assert not c.allows(JSON_PIECES.index(b'": {}}'))
    c = llama(prefill='{"name": "get", "parameters')                     # the answer would finish the call
    assert not c.allows(JSON_PIECES.index(b'": {}}'))
    c = llama(prefill='{"name": "get", "parameters"')                    # the request wrote it: not refusable
    assert json_refused(c) == {b"<|python_tag|>"}


def test_a_token_costs_the_same_however_long_the_answer():
    """allows + advance, asked of every sampled token, do not copy the answer so far: `_seen` was bytes, and
    `+=` made a new copy of the whole answer at each token (3.0 -> 8.4 us a token on a 20x answer in
    benchmarks/RESULTS.md's session 40 section, 80-450 us at 100,000 tokens)."""
    import time

    def per_token(prefix: bytes) -> float:
        best = float("inf")
        for _ in range(3):
            c = llama(prefill=prefix.decode())
            t0 = time.perf_counter()
            for _ in range(300):
                c.allows(JSON_PIECES.index(b"Hi"))
                c.advance(JSON_PIECES.index(b"Hi"))
            best = min(best, time.perf_counter() - t0)
        return best

    short, long = per_token(b"Hi"), per_token(b"Hi " * 1_500_000)          # 4.5 MB of prose before
    assert long < 10 * short, (short, long)
