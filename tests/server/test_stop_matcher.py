"""StopMatcher: stop sequences found across streamed pieces, and no text of a possible stop ever sent."""

from __future__ import annotations

from strata.server.jobs import StopMatcher


def stream(stops, pieces):
    m = StopMatcher(tuple(stops))
    sent = "".join(m.feed(p) for p in pieces)
    if m.matched is None:
        sent += m.flush()
    return sent, m.matched, m.text


def test_no_stops_passes_everything_through():
    assert stream([], ["ab", "c"]) == ("abc", None, "abc")


def test_stop_inside_one_piece():
    assert stream(["END"], ["hello END world"]) == ("hello ", "END", "hello ")


def test_stop_split_over_pieces_is_never_sent():
    m = StopMatcher(("</answer>",))
    out = [m.feed(p) for p in ["42 </", "ans", "wer> tail"]]
    assert out == ["42 ", "", ""]
    assert m.matched == "</answer>" and m.text == "42 "


def test_a_false_start_is_released_later():
    m = StopMatcher(("STOP",))
    assert m.feed("ST") == ""
    assert m.feed("ART") == "START"
    assert m.flush() == "" and m.matched is None


def test_the_earliest_of_several_stops_wins():
    assert stream(["b", "xyz"], ["axyzb"]) == ("a", "xyz", "a")


def test_held_text_comes_out_at_the_end():
    assert stream(["STOP"], ["abc", "ST"]) == ("abcST", None, "abcST")
