"""How the time goes between a prompt being read and the requests generating beside it (the policy;
Scheduler._step applies it).

While a long prompt is read (an agent's 6-8K-token turn), a request generating beside it (the agent's side request:
a title, a summary, 10-50 tokens out) rode along the prompt's pieces: one token per mixed step, a step being a
--prefill-slice-ms slice of the prompt (250 ms), ~4 tokens/s against ~100 alone on two cores, so a 40-token title
took ~10 s to write (benchmarks/RESULTS.md, "Side requests beside a long prompt", 2026-12-06).

`--decode-share S`: while requests generate beside a prompt being read, steps that only decode (the next token of
each generating request, or lookup decoding's guesses) go between the prompt's steps until they have taken S of
the time since the requests began generating beside it, the prompt's steps (the generating requests riding along)
the rest. The generating requests then keep at least about S of their rate alone, and the prompt at least 1 - S of
its read rate (MAX_SHARE keeps it a share: it never starves). 0: one token per prompt step, as before.
"""

from __future__ import annotations

# the default share of a step's time the generating requests get beside a prompt read (benchmarks/RESULTS.md,
# "Side requests decode beside a long prompt": chosen from the side request's total time against the long read's)
DECODE_SHARE = 0.5
# the most they may get: the prompt keeps at least 1 - MAX_SHARE of the time
MAX_SHARE = 0.9


def check_share(share: float) -> float:
    if not 0.0 <= share <= MAX_SHARE:
        raise ValueError(f"decode share {share!r} is outside 0..{MAX_SHARE} (the prompt being read keeps at least "
                         f"{1 - MAX_SHARE:.1f} of the time)")
    return share


def decode_turn(prompt_s: float, decode_s: float, share: float) -> bool:
    """Whether the next step, with requests generating beside a prompt being read, only decodes. `prompt_s`: the
    seconds of prompt steps since requests began generating beside the read; `decode_s`: the seconds of decode-only
    steps in that time; `share`: the part of the time the decode-only steps get (--decode-share). They decode while
    they have had at most their share of the whole; a tie (both 0: a request's first token just came) decodes, so a
    side request's first steps after its first token are its own."""
    check_share(share)
    if prompt_s < 0 or decode_s < 0:
        raise ValueError(f"seconds cannot be negative: prompt {prompt_s!r}, decode {decode_s!r}")
    return share > 0 and decode_s <= share * (prompt_s + decode_s)
