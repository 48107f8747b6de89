"""The reasoning split (server/reasoning.py): a finished answer and the same answer streamed in any
pieces give the same reasoning and answer; answers that do not think pass through untouched."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strata.server.reasoning import ReasoningGate, split_reasoning

ANSWERS = [
    ("<think>\nThe user wants a list.\n</think>\n\nHere it is.", False),
    ("\nThe user wants a list.\n\n</think>\n\nHere it is.", True),            # the prompt opened it
    ("  <think>a</think>b", False),
    ("<think>\n\n</think>\n\nJust the answer.", False),                        # empty reasoning
    ("<think>\nstill thinking when the limit came", False),
    ("thinking when the limit came  \n", True),
    ("No thinking here. <think> is mentioned later.", False),
    ("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", False),
    ("<th", False),
    ("", False),
    ("   ", True),
    ("<think>x</thin", False),
    ("<think>a </think> </think> b", False),
]


def test_the_split_of_a_finished_answer():
    assert split_reasoning(ANSWERS[0][0], False) == ("The user wants a list.", "Here it is.")
    assert split_reasoning(ANSWERS[1][0], True) == ("The user wants a list.", "Here it is.")
    assert split_reasoning("<think>\n\n</think>\n\nJust the answer.", False) == ("", "Just the answer.")
    assert split_reasoning("<think>\nstill thinking", False) == ("still thinking", "")
    assert split_reasoning("No thinking. <think>x</think>", False) == (None, "No thinking. <think>x</think>")
    assert split_reasoning("<think>a </think> </think> b", False) == ("a", "</think> b")


def stream(text: str, opened: bool, cuts: list[int]) -> tuple[str | None, str]:
    gate = ReasoningGate(opened)
    pieces, last = [], 0
    for c in sorted(set(cuts)) + [len(text)]:
        pieces.append(text[last:c])
        last = c
    out = [x for p in pieces for x in gate.feed(p)] + gate.finish()
    reasoning = "".join(t for k, t in out if k == "reasoning")
    thought = opened or text.lstrip().startswith("<think>")
    return (reasoning if thought else None), "".join(t for k, t in out if k == "text")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ANSWERS), st.lists(st.integers(0, 60), max_size=12))
def test_any_streamed_pieces_give_the_finished_split(answer, cuts):
    text, opened = answer
    cuts = [c for c in cuts if c <= len(text)]
    assert stream(text, opened, cuts) == split_reasoning(text, opened)


def test_reasoning_goes_out_as_it_comes_and_only_the_tag_is_held():
    gate = ReasoningGate(False)
    assert gate.feed("<thi") == []
    assert gate.feed("nk>\nStep one") == [("reasoning", "Step one")]
    assert gate.feed(". Step two.\n</th") == [("reasoning", ". Step two.")]
    assert gate.feed("ink>\n\nThe answer") == [("text", "The answer")]
    assert gate.feed(" goes on.") == [("text", " goes on.")]
    assert gate.finish() == []
