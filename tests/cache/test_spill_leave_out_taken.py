"""SpillWriter.leave_out given a key the writer has taken already (its turn counted): the stop's plan is worked out
while the writer may take one more key (one past the hold before it began), and the plan names the keys it left
out after that. Kept in the left-out set, that key was subtracted twice (counted at its turn, then left out of the
queue's): the lines' N was one short until the flush ended."""

from __future__ import annotations

import threading

from strata.server.cache.spill import SpillWriter

DEADLINE_S = 60.0


def test_a_key_taken_before_it_is_left_out_is_not_left_out_again():
    go_on = threading.Event()
    outcomes = {"K": None, "L": 7}   # K: held unwritten by the stop (counted not kept at its turn); L: written

    def write_one(key: str):
        if key == "L":
            assert go_on.wait(DEADLINE_S)
        return outcomes[key]

    spill = SpillWriter(write_one)
    try:
        spill.mark({})
        spill.submit("K")
        spill.flush()                  # K taken and counted
        spill.leave_out(["K"])         # the plan names it after its turn
        spill.submit("L")
        calls: list[tuple[int, int, int]] = []

        def progress(*a: int) -> None:
            calls.append(a)
            go_on.set()

        spill.flush(progress, poll_s=0.01)
    finally:
        go_on.set()
        spill.stop()
    assert calls[0] == (0, 1, 0), calls   # before: (0, 0, 0): L, still to be written, left out for K
    assert calls[-1] == (1, 1, 0), calls
