"""steady_clock.may_adopt: when a start takes over the seal of a file another clock sealed far ahead (pure)."""

from __future__ import annotations

import pytest
from strata.server.cache.steady_clock import FS_CLOCK_SLACK_S, may_adopt

DAY = 86400.0


@pytest.mark.parametrize("sealed_by, offset, live, ok, why", [
    ("host-old", 2.0, set(), True, ""),                                   # a recreated container's: no server of it
    ("", 0.0, set(), True, ""),                                           # an older Strata's (names none)
    # a server whose clock is ahead runs there: the file may be its own under another name (review of 7a2f5a6)
    ("", 0.0, {"host-other"}, False, "the file may be its own"),          # its older Strata's
    ("host-old", 0.0, {"host-new"}, False, "the file may be its own"),    # its host's earlier name's
    ("host-other", -1.0, {"host-other"}, False, "a server of that clock uses the folder now"),
    ("host-right", 365 * DAY, set(), False, "clock is 31536000 s ahead of this one"),   # this clock a year behind
    ("host-right", -2 * FS_CLOCK_SLACK_S, set(), False, "s behind this one"),           # this clock ahead of it
    ("host-old", FS_CLOCK_SLACK_S, set(), True, ""),                      # within the slack: agrees
    ("host-old", None, set(), False, "could not be read"),                # no file could be made there
    ("host-old", 0.0, None, False, "no file locks"),                      # presence files cannot be locked
])
def test_may_adopt(sealed_by, offset, live, ok, why):
    got, reason = may_adopt(sealed_by, offset, live)
    assert got is ok and why in reason and (reason == "") is ok
