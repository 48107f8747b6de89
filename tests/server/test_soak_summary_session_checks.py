"""benchmarks/soak_summary.py's count of the soak's session checks (--check-saves): a check whose restore into
main was not done (a 503 after main ran another request the whole wait, as in session 31's soak) says nothing
of the save, so it is counted apart, not as a save that stored the wrong history."""

from benchmarks.soak_summary import summarize


def check(status: int, right: bool, guard_status: int | None = 200) -> dict:
    return {"kind": "session_check", "status": status, "right": right, "guard_status": guard_status,
            "cached_from_main": right, "phase": 1}


def test_a_restore_not_done_is_not_a_wrong_save():
    records = [{"kind": "request", "phase": 1, "agent": "session", "conv": "s-1", "req": "turn", "prompt": 900,
                "cached": 0, "ideal": 0},
               check(200, True), check(503, False, None), check(200, False, 409), check(200, False)]
    got = summarize(records)["phases"][1]["session_checks"]
    assert got == {"right": 1, "wrong": 1, "guard_409": 1, "guard_507": 0, "restore_not_done": 1,
                   "cached_from_main": 1}
