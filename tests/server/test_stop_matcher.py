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
    m = StopMatcher(("",))                  # an empty stop is no stop: each piece goes at once
    assert (m.feed("ab"), m.feed("c"), m.flush(), m.text) == ("ab", "c", "", "abc")


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


class _WholeScan:
    """The matcher as it was before it kept each stop's held end: every feed scanned the whole held span
    for every length. Slow, plainly right: the reference for the random check below."""

    def __init__(self, stops):
        self.stops, self.text, self.sent, self.matched = tuple(s for s in stops if s), "", 0, None

    def feed(self, piece):
        if self.matched is not None:
            return ""
        start = max(0, len(self.text) - max((len(s) for s in self.stops), default=0))
        self.text += piece
        found = [(self.text.find(s, start), n, s) for n, s in enumerate(self.stops) if self.text.find(s, start) >= 0]
        if found:
            at, _, self.matched = min(found)
            self.text = self.text[:at]
            return self.release(at)
        hold = max((next((k for k in range(min(len(s) - 1, len(self.text)), 0, -1) if self.text.endswith(s[:k])), 0)
                    for s in self.stops), default=0)
        return self.release(len(self.text) - hold)

    def release(self, upto):
        upto = max(upto, self.sent)
        out, self.sent = self.text[self.sent:upto], upto
        return out


def test_the_same_answers_as_a_whole_scan_on_random_streams():
    import random

    rng = random.Random(7)
    for _ in range(3000):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        pieces = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 8))]
        fast, slow = StopMatcher(tuple(stops)), _WholeScan(stops)
        for p in pieces:
            assert fast.feed(p) == slow.feed(p), (stops, pieces)
        assert (fast.matched, fast.text) == (slow.matched, slow.text), (stops, pieces)


def test_long_stops_cost_each_token_only_what_it_can_change():
    """16 stops of 100 KB that never match (a client's stop list is bounded in count, not length), over
    4,000 pieces: the matcher runs on the engine's thread, for every slot. Scanning the whole held span
    for every length cost the square of the text a token (15 ms a token at 4,800 characters, 24 s for
    the first 2,000 pieces here, minutes for all); now 0.04 ms. The bound is 100 times what it takes here."""
    import time

    m = StopMatcher(tuple("q" * 100_000 + str(i) for i in range(16)))
    start = time.monotonic()
    for _ in range(4000):
        assert m.feed("abcd") == "abcd"
        assert time.monotonic() - start < 20, "the matcher slows with the text's length"
    assert m.flush() == "" and m.matched is None
