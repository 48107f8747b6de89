"""server/replay/compare.py: a policy side by side with the yardstick on a tiny hand-computed timeline."""

from __future__ import annotations

import math

from strata.server.replay.compare import Victim, compare, when_class
from strata.server.replay.timeline import build_requests


def tiny():
    # A (40,000 tokens) is never continued; B (2,000) is continued 10 s after C (1,000) arrives.
    return build_requests([
        (0.0, "A", 40_000, 0, 0),
        (1.0, "B", 2_000, 0, 0),
        (300.0, "C", 1_000, 0, 0),
        (310.0, "B", 2_500, 2_000, 0),
    ])


def test_seed_000_gives_up_the_short_history_the_yardstick_keeps():
    c = compare(tiny(), 2, "affinity")
    # at 300 s both are past their protection; B's value (2K tokens) is below the keep score, A's
    # (40K) is not: place() takes B's slot; the yardstick gives up A, which is never continued.
    # At 310 s B's turn finds nothing of its own: place() takes C's slot (value below the keep score),
    # the yardstick A's again (neither comes back; A used longer ago).
    assert c.agree == 0
    assert c.differ == [
        (2, "expired", Victim(1, 2_000, 299.0, 10.0, 2_000), Victim(0, 40_000, 300.0, math.inf, 0)),
        (3, "expired", Victim(1, 1_000, 10.0, math.inf, 0), Victim(0, 40_000, 310.0, math.inf, 0)),
    ]
    count, tokens = c.classes()
    assert count == {("expired", "<60s", "never"): 1, ("expired", "never", "never"): 1}
    assert tokens[("expired", "<60s", "never")] == 2_000
    # the policy's own choices are applied: B's second turn reads its whole prompt
    assert c.result.prompt_tokens_read == 40_000 + 2_000 + 1_000 + 2_500


def test_the_yardstick_against_itself_always_agrees():
    c = compare(tiny(), 2, "oracle")
    assert c.differ == [] and c.agree == 1  # C takes A's slot; B's turn then finds its own
    assert c.result.prompt_tokens_read == 40_000 + 2_000 + 1_000 + 500


def test_when_classes():
    assert [when_class(x) for x in (0.0, 59.9, 60.0, 299.0, 300.0, math.inf)] == \
        ["<60s", "<60s", "<300s", "<300s", ">=300s", "never"]
