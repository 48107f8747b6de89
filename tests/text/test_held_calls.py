"""Tool calls held while they are written, over small vocabularies of markup pieces: key-value markup
(strata.engine.keyed_call, Qwen3-Coder's): an offered tool's name, keys among its parameters (each once, the
required ones before the call closes), free values, then free text; Harmony headers and Mistral's [ARGS] (json_args_call): the
name, the header up to <|message|>, arguments the tool's schema allows; a marker written with more in one
token is checked on (held_call, json_constraint)."""

from __future__ import annotations

import pytest
from strata.engine.json_args_call import HARMONY, HARMONY_ANALYSIS, MISTRAL, JsonArgsCall
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import compile_call, tool_arguments
from strata.engine.keyed_call import KeyedCall, KeyedMarkup
from strata.engine.token_bytes import Vocabulary

XML = KeyedMarkup(opening=b"\n<function=", first=b">\n<parameter=", empty=b">\n</function>\n</tool_call>", mid=b">\n",
                  value_end=b"\n</parameter>\n<", next_key=b"parameter=", end=b"/function>\n</tool_call>")
PIECES = [b"<tool_call>", b"\n<function=", b"edit_file", b"edit", b"_file", b"edit_fil", b"read", b">\n<parameter=",
          b"path", b"pth", b"line", b"ne", b"li", b">\n", b"a.py", b"\n</parameter>\n<", b"parameter=",
          b"/function>\n</tool_call>", b"Hi", b" there", b">\n</function>\n</tool_call>", b"\n", b"<", b"x"]
VOCAB = Vocabulary(PIECES + [b"<eos>"], special_ids=[len(PIECES)])
EOS = len(PIECES)
TOOLS = [("edit_file", ("path", "line"), ("path",)), ("read", (), ())]


def tok(piece: bytes) -> int:
    return PIECES.index(piece)


def write(c: KeyedCall, pieces: list[bytes]) -> None:
    for p in pieces:
        assert c.allows(tok(p)), p
        c.advance(tok(p))


def test_a_demanded_call_takes_only_offered_names_and_keys():
    c = KeyedCall(XML, TOOLS, VOCAB, [EOS], lead=b"<tool_call>")
    assert not c.allows(tok(b"Hi")) and not c.allows(EOS)
    write(c, [b"<tool_call>", b"\n<function="])
    assert not c.allows(tok(b"x")) and not c.allows(tok(b"pth"))
    write(c, [b"edit_fil"])                                  # a misspelling must go on to a real name
    assert not c.allows(tok(b">\n<parameter=")) and not c.allows(tok(b">\n"))
    c = KeyedCall(XML, TOOLS, VOCAB, [EOS], lead=b"<tool_call>")
    write(c, [b"<tool_call>", b"\n<function=", b"edit", b"_file", b">\n<parameter="])
    assert not c.allows(tok(b"pth"))                         # not a parameter of edit_file
    write(c, [b"path", b">\n", b"a.py", b"x", b"\n</parameter>\n<"])
    assert c.allows(tok(b"/function>\n</tool_call>"))      # path given: the call may close
    write(c, [b"parameter="])
    assert not c.allows(tok(b"path"))                        # each key once
    write(c, [b"li", b"ne", b">\n", b"x", b"\n</parameter>\n<", b"/function>\n</tool_call>"])
    assert not c.active and c.allows(tok(b"Hi")) and c.allows(EOS)     # free after the call


def test_required_keys_come_before_the_end_and_the_call_must_finish():
    c = KeyedCall(XML, TOOLS, VOCAB, [EOS], lead=b"<tool_call>")
    write(c, [b"<tool_call>", b"\n<function=", b"edit_file"])
    assert not c.allows(tok(b">\n</function>\n</tool_call>"))      # edit_file requires path
    write(c, [b">\n<parameter=", b"line", b">\n", b"x", b"\n</parameter>\n<"])
    assert not c.allows(tok(b"/function>\n</tool_call>"))           # still no path
    assert not c.allows(EOS)                                         # an unfinished call cannot end the answer
    write(c, [b"parameter=", b"path", b">\n", b"a.py", b"\n</parameter>\n<", b"/function>\n</tool_call>"])
    assert not c.active


def test_a_tool_without_parameters_closes_at_once():
    c = KeyedCall(XML, TOOLS, VOCAB, [EOS], lead=b"<tool_call>")
    write(c, [b"<tool_call>", b"\n<function=", b"read"])
    assert not c.allows(tok(b">\n<parameter="))
    write(c, [b">\n</function>\n</tool_call>"])
    assert not c.active


def test_calls_the_model_opens_are_held_each_time_and_the_rest_is_free():
    c = KeyedCall(XML, TOOLS, VOCAB, [EOS], trigger=b"<tool_call>")
    write(c, [b"Hi", b" there", b"\n"])                     # free text before a call
    assert c.allows(EOS)
    write(c, [b"<tool_call>"])
    assert not c.allows(tok(b"Hi")) and not c.allows(EOS)
    write(c, [b"\n<function=", b"read", b">\n</function>\n</tool_call>", b"\n", b"<tool_call>", b"\n<function="])
    assert not c.allows(tok(b"x")) and c.allows(tok(b"edit_file"))
    with pytest.raises(ValueError):
        c.advance(tok(b"x"))                                 # the second call is held too


def test_best_allowed_picks_the_best_token_the_call_allows():
    import numpy as np

    c = KeyedCall(XML, TOOLS, VOCAB, [EOS], lead=b"<tool_call>")
    write(c, [b"<tool_call>", b"\n<function=", b"edit_file", b">\n<parameter="])
    logits = np.zeros(VOCAB.n, dtype=np.float32)
    logits[tok(b"pth")], logits[tok(b"line")], logits[tok(b"path")] = 9.0, 5.0, 4.0
    assert c.best_allowed(logits) == tok(b"line")


def test_best_allowed_never_returns_a_token_the_call_refuses():
    """Where every token the call allows has the logit -inf (banned), best_allowed says none, as
    JsonConstraint does; it returned token 0 (`<tool_call>`, refused after the lead) from an arg-max over the
    masked row, and advancing on it raised 'was not allowed here'."""
    import numpy as np

    c = KeyedCall(XML, TOOLS, VOCAB, [EOS], lead=b"<tool_call>")
    write(c, [b"<tool_call>"])
    logits = np.full(VOCAB.n, -np.inf, dtype=np.float32)
    logits[tok(b"Hi")] = 3.0                                  # refused here: the markup must come
    assert c.best_allowed(logits) is None
    logits[tok(b"\n<function=")] = -50.0
    assert c.best_allowed(logits) == tok(b"\n<function=")


def test_a_tool_whose_schema_lists_no_properties_takes_any_keys_once():
    c = KeyedCall(XML, [("edit_file", None, ())], VOCAB, [EOS], lead=b"<tool_call>")
    write(c, [b"<tool_call>", b"\n<function=", b"edit_file", b">\n<parameter=", b"pth", b">\n", b"x",
              b"\n</parameter>\n<", b"parameter="])
    assert not c.allows(tok(b">\n"))                         # a key is not empty
    write(c, [b"x", b">\n", b"a.py", b"\n</parameter>\n<", b"parameter=", b"pth"])
    assert not c.allows(tok(b">\n"))                         # "pth" was given already (a longer key may go on)
    write(c, [b"path", b">\n", b"x", b"\n</parameter>\n<", b"/function>\n</tool_call>"])
    assert not c.active


HPIECES = [b"<|channel|>", b"commentary", b" to=functions.", b"get_wether", b"get_weather", b" ", b"<|constrain|>",
           b"json", b"<|message|>", b'{"town": "Paris"}', b'{"city": "Paris"}', b"x", b"<", b"<|call|>",
           b" to=functions.get_wether", b" to=functions.get_weather", b"<|end|>", b"<|channel|>analysis<|message|>"]
HVOCAB = Vocabulary(HPIECES, special_ids=[0, 6, 8, 13, 16])
CALL = len(HPIECES) - 5          # <|call|>
WEATHER = tool_arguments({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})


def h(piece: bytes) -> int:
    return HPIECES.index(piece)


def hwrite(c, pieces: list[bytes]) -> None:
    for p in pieces:
        assert c.allows(h(p)), p
        c.advance(h(p))


def test_a_harmony_call_is_held_to_a_tool_its_header_and_its_arguments():
    c = JsonArgsCall(HARMONY, [("get_weather", WEATHER)], HVOCAB, [CALL], reasoning=HARMONY_ANALYSIS)
    hwrite(c, [b"<|channel|>", b"commentary", b" to=functions."])
    assert not c.allows(h(b"get_wether")) and not c.allows(CALL)
    hwrite(c, [b"get_weather"])
    assert not c.allows(h(b"x"))                              # a whole name ends at a space or markup
    hwrite(c, [b" ", b"<|constrain|>", b"json", b"<|message|>"])
    assert not c.allows(h(b'{"town": "Paris"}'))
    hwrite(c, [b'{"city": "Paris"}'])
    assert c.allows(CALL) and not c.allows(h(b"x"))            # the arguments are the body: then <|call|>
    c.advance(CALL)
    assert not c.active


def test_a_harmony_header_must_end_within_its_limit():
    c = JsonArgsCall(HARMONY, [("get_weather", WEATHER)], HVOCAB, [CALL], reasoning=HARMONY_ANALYSIS)
    hwrite(c, [b" to=functions.", b"get_weather", b" "])
    for _ in range(HARMONY.max_len - 1):
        hwrite(c, [b"x"])
    assert not c.allows(h(b"x")) and c.allows(h(b"<")) and c.allows(h(b"<|message|>"))


def test_a_marker_inside_the_analysis_is_not_a_call():
    c = JsonArgsCall(HARMONY, [("get_weather", WEATHER)], HVOCAB, [CALL], reasoning=HARMONY_ANALYSIS)
    hwrite(c, [b"<|channel|>analysis<|message|>", b" to=functions.", b"x", b"<|end|>"])
    assert c.allows(h(b"x")) and not c.active
    hwrite(c, [b" to=functions."])
    assert c.active


def test_a_token_that_writes_the_marker_and_more_is_checked_on():
    c = JsonArgsCall(HARMONY, [("get_weather", WEATHER)], HVOCAB, [CALL], reasoning=HARMONY_ANALYSIS)
    assert not c.allows(h(b" to=functions.get_wether"))     # free text, but the call it opens is not offered
    assert c.allows(h(b" to=functions.get_weather"))
    j = JsonConstraint(compile_call([("get_weather", None)]), Vocabulary([b"<tool_call>", b'<tool_call>{"name": "x',
                                                                         b'<tool_call>{"name": "get_weather"']),
                       (), trigger=b"<tool_call>")
    assert j.allows(0) and j.allows(2) and not j.allows(1)


# Harmony's pieces and whitespace ones (the markup's ids as in HVOCAB)
GAP_PIECES = HPIECES + [b"\n", b"\n\n", b"\t", b"\r", b"  "]
GVOCAB = Vocabulary(GAP_PIECES, special_ids=[0, 6, 8, 13, 16])


def after_harmony_arguments() -> JsonArgsCall:
    c = JsonArgsCall(HARMONY, [("get_weather", WEATHER)], GVOCAB, [CALL], reasoning=HARMONY_ANALYSIS)
    hwrite(c, [b" to=functions.", b"get_weather", b" ", b"<|constrain|>", b"json", b"<|message|>",
               b'{"city": "Paris"}'])
    return c


@pytest.mark.parametrize("gap", [[], [b" "], [b"\n"], [b" ", b"\n"], [b"\r", b"\n"], [b"\n"] + [b"\t"] * 20,
                                 [b" ", b"\r", b"\n"] + [b" "] * 20])
def test_a_gap_before_harmonys_end_token_as_json_gaps_hold_it(gap):
    """A gap between the arguments and <|call|> is bounded as one between JSON tokens (json_grammar.ws_step):
    one blank, one line break, 20 blanks after it. Before, any 24 whitespace bytes (24 line breaks)."""
    c = after_harmony_arguments()
    for piece in gap:
        assert c.allows(GAP_PIECES.index(piece)), (gap, piece)
        c.advance(GAP_PIECES.index(piece))
    assert c.allows(CALL)
    c.advance(CALL)
    assert not c.active


@pytest.mark.parametrize("gap", [[b"\n\n"], [b"\n", b"\n"], [b"  "], [b" ", b" "], [b"\n"] + [b" "] * 21,
                                 [b"\n", b"\t", b"\n"], [b"\r", b"\r"]])
def test_a_gap_before_harmonys_end_token_past_json_gaps_bounds_is_refused(gap):
    c = after_harmony_arguments()
    for piece in gap[:-1]:
        c.advance(GAP_PIECES.index(piece))
    assert not c.allows(GAP_PIECES.index(gap[-1])), gap      # before: allowed (at most 24 bytes of any whitespace)
    assert c.allows(CALL)                                     # the end token still may come


def test_what_may_follow_harmonys_arguments_is_what_the_gap_takes():
    """The bytes offered after the arguments (the sampler's mask, forced text) are those the gap takes: at its
    21st blank after a break only the end token; in a gap's state, forced_bytes is empty (two ways on)."""
    c = after_harmony_arguments()
    for piece in [b"\n"] + [b" "] * 20:
        c.advance(GAP_PIECES.index(piece))
    mask = c.allowed_mask()
    assert [GAP_PIECES[i] for i in range(len(GAP_PIECES)) if mask[i]] == [b"<|call|>"]
    assert c.forced_bytes() == b""


MISTRAL_PIECES = [b"[TOOL_CALLS]", b"get_weather", b"get_wether", b"[ARGS]", b"[CALL_ID]", b"abcDEF123", b'{"city": "Paris"}',
                  b'{"town": "Paris"}', b"Sure.", b"</s>", b"[THINK]", b"[/THINK]"]
MVOCAB = Vocabulary(MISTRAL_PIECES, special_ids=[0, 3, 4, 9, 10, 11])


def m(piece: bytes) -> int:
    return MISTRAL_PIECES.index(piece)


@pytest.mark.parametrize("with_id", [False, True])
def test_a_mistral_call_is_held_to_a_tool_and_its_arguments(with_id):
    c = JsonArgsCall(MISTRAL, [("get_weather", WEATHER)], MVOCAB, [m(b"</s>")], reasoning=(b"[THINK]", b"[/THINK]"))
    for p in [b"[THINK]", b"[TOOL_CALLS]", b"[/THINK]", b"Sure."]:       # a marker while thinking is thought
        assert c.allows(m(p))
        c.advance(m(p))
    c.advance(m(b"[TOOL_CALLS]"))
    assert not c.allows(m(b"get_wether")) and not c.allows(m(b"</s>"))
    c.advance(m(b"get_weather"))
    assert not c.allows(m(b"Sure."))
    for p in ([b"[CALL_ID]", b"abcDEF123"] if with_id else []) + [b"[ARGS]"]:
        assert c.allows(m(p))
        c.advance(m(p))
    assert not c.allows(m(b'{"town": "Paris"}'))
    c.advance(m(b'{"city": "Paris"}'))
    assert not c.active and c.allows(m(b"</s>"))


def test_a_demanded_mistral_call_opens_with_its_marker():
    c = JsonArgsCall(MISTRAL, [("get_weather", WEATHER)], MVOCAB, [m(b"</s>")], demanded=True)
    assert not c.allows(m(b"Sure.")) and not c.allows(m(b"</s>")) and c.allows(m(b"[TOOL_CALLS]"))
    for p in [b"[TOOL_CALLS]", b"get_weather", b"[ARGS]", b'{"city": "Paris"}']:
        assert c.allows(m(p))
        c.advance(m(p))
    assert not c.active and c.allows(m(b"Sure."))


@pytest.mark.parametrize("text, want", [
    ('<tool_call>\n{"name": "get", "arguments": {"a": 1, "b": "x y,: z"}}', True),
    ('<tool_call>\n{"name": "get", "arguments": {"b": "a\\"b, c"}}', True),     # spaces and quotes in strings
    ('<tool_call>\n{"name":"get"', False),                                     # the space after ':' is owed
    ('<tool_call>\n{ "name"', False),                                          # none after '{'
    ('<tool_call>\n{"name": "get",\n "arguments"', False),                    # no newline
    ('<tool_call>\n{"name": "get", "arguments": {"a":  1}}', False),           # one space, not two
    ('<tool_call>\n\n{"name"', False),                                         # the JSON right after its opening
    ('<tool_call>\n {"name"', False),
])
def test_held_json_calls_are_spaced_as_the_template_writes_them(text, want):
    from strata.engine.json_constraint import JsonConstraint

    c = JsonConstraint(compile_call([("get", {"type": "object", "properties": {"a": {"type": "integer"},
                                                                             "b": {"type": "string"}}})]),
                       Vocabulary([]), (), lead=b"<tool_call>\n", spacing=(b", ", b": "))
    if want:
        c.feed(text.encode())
    else:
        with pytest.raises(ValueError):
            c.feed(text.encode())


@pytest.mark.parametrize("trigger", [False, True])
def test_one_token_may_end_a_json_call_and_begin_its_closing_tag(trigger):
    """Qwen's and Llama 3's pre-tokenizers keep punctuation with the newlines after it: '"}}\n' is one piece
    and often one token, the tokenizer's own end of a call before `</tool_call>`. It was refused (the closing
    tag began only after the token that ended the value), so the model had to write '"}}' '\n' instead."""
    pieces = [b"<tool_call>", b"\n", b'{"name": "f", "arguments": {"a": "x', b'"}}\n', b"</tool_call>", b'"}}',
              b"Sure.", b"<eos>"]
    vocab = Vocabulary(pieces, special_ids=[0, 4, 7])
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    how = dict(trigger=b"<tool_call>", lead=b"\n") if trigger else dict(lead=b"<tool_call>\n")
    c = JsonConstraint(compile_call([("f", schema)]), vocab, [7], close=b"\n</tool_call>", **how)
    for _ in range(2 if trigger else 1):
        for t in [0, 1, 2]:
            assert c.allows(t)
            c.advance(t)
        assert c.forced_bytes() == b""                   # the string may go on
        assert c.forced_bytes(b'"}}') == b"\n</tool_call>"
        assert c.allows(3) and c.allowed_mask()[3] and c.allows(5)
        c.advance(3)
        assert c.forced_bytes() == b"</tool_call>" and not c.allows(7) and not c.allows(6)
        c.advance(4)
    if trigger:
        assert not c.active and c.allows(6)              # free again until the next call
    else:
        assert c.allows(7) and not c.allows(6)           # the call is the whole answer
