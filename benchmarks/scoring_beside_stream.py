"""A stream's token gaps while another client's long prompt is scored (`/v1/completions` echo + logprobs,
max_tokens 0: read in 32-token Engine.extend pieces, each alone) against the same prompt read ordinarily, on a real
`strata serve --batch 2` with the default model: does the stream keep decoding between the scored pieces?

Each round, in turns (ordinary, scored, ...): a stream of 1,500 tokens (ignore_eos) starts; after its 20th token a
fresh long prompt (a new suffix, so nothing of it is reused) is sent; printed: the prompt's time, the stream's
gaps between chunks overlapping that time (count, largest, median), and the median gap before it (a
chunk holds one token or, with lookup decoding's guesses taken, several).

    .venv/bin/python benchmarks/scoring_beside_stream.py [--rounds 2] [--words 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    import openai

    from tests.conftest import find_default_model
    from tests.server.test_auth_and_lifecycle import serving

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--words", type=int, default=1000, help="the long prompt: ~7 tokens a word here")
    a = ap.parse_args()
    long = " ".join(f"word{i} is here." for i in range(a.words))
    with tempfile.TemporaryDirectory() as tmp, serving(
            ["--model", str(find_default_model()), "--ctx", "16384", "--batch", "2", "--slot-ctx", "8192"],
            Path(tmp)) as (port, _):
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=900)
        for _ in range(a.rounds):
            for mode in ("ordinary", "scored"):
                times: list[float] = []

                def stream(times: list[float]) -> None:
                    for _ in c.completions.create(model="m", prompt="Tell me a story about a cat.", max_tokens=1500,
                                                  temperature=0, stream=True, extra_body={"ignore_eos": True}):
                        times.append(time.monotonic())

                t = threading.Thread(target=stream, args=(times,))
                t.start()
                while len(times) < 20:
                    time.sleep(0.01)
                kw = dict(echo=True, max_tokens=0, logprobs=1) if mode == "scored" else dict(max_tokens=1)
                t0 = time.monotonic()
                r = c.completions.create(model="m", prompt=f"{mode} {time.time()} {long}", **kw)
                t1 = time.monotonic()
                t.join()
                # every gap that overlaps the prompt's time (one across its start or end too)
                during = [y - x for x, y in zip(times, times[1:], strict=False) if y > t0 and x < t1]
                before = [y - x for x, y in zip(times, times[1:], strict=False) if y < t0]
                print(f"{mode}: prompt {r.usage.prompt_tokens} (reused {r.usage.prompt_tokens_details.cached_tokens})"
                      f" in {t1 - t0:.1f} s; stream chunks in it {len(during)}, largest gap "
                      f"{max(during, default=0) * 1000:.0f} ms, median {statistics.median(during or [0]) * 1000:.0f}"
                      f" ms; before it median {statistics.median(before) * 1000:.0f} ms; the stream "
                      f"{len(times)} chunks, ended {times[-1] - t1:+.1f} s after the prompt", flush=True)


if __name__ == "__main__":
    main()
