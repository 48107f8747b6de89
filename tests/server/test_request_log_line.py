"""The INFO line of a finished request. It read `request 7 (openai) length: context main, prompt ...`:
the finish reason bare before a colon, as if the request's length were 'context main' (a user's trial
of long conversations, session 19). Now `request 7 (openai) ended (length): context main, ...`."""

from __future__ import annotations

import re


def test_the_request_line_says_how_the_request_ended(tiny_server, oai, caplog):
    with caplog.at_level("INFO", logger="strata.server.scheduler"):
        r = oai.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "count to ten"}],
                                        max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"
    lines = [m.getMessage() for m in caplog.records if m.getMessage().startswith("request ")]
    pattern = (r"request \d+ \(openai\) ended \(length\): context (main|\d+), prompt \d+ \(reused \d+ from \w+\), "
               r"output 3, ttft \d+ ms")
    assert any(re.fullmatch(pattern, m) for m in lines), lines
