"""Counters of the server's work and their Prometheus text rendering (`GET /metrics`, names `strata_*`).

The scheduler's worker thread adds to `Metrics`; handlers read `snapshot()`. Nothing here measures
time or talks to the engine: callers pass the numbers.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field


@dataclass
class Metrics:
    requests_total: dict[str, int] = field(default_factory=dict)        # by status: ok, cancelled, error
    requests_by_api: dict[str, int] = field(default_factory=dict)
    rejected_total: dict[str, int] = field(default_factory=dict)        # by reason: queue_full, bad_request, auth
    prompt_tokens_total: int = 0                                         # at a prompt's first token, or its end
    prompt_tokens_read: int = 0
    prompt_tokens_reused: int = 0
    reused_by_source: dict[str, int] = field(default_factory=dict)
    prompt_tokens_shifted: int = 0                                       # of the reused: moved into place (--cache-reuse)
    prompts_aligned: int = 0                                             # prompts byte-aligned with a history (byte_align.py)
    prompt_tokens_aligned: int = 0                                       # ... the tokens of it held past the common prefix
    generated_tokens_total: int = 0                                      # counted as each token is made
    prefill_seconds_total: float = 0.0
    decode_seconds_total: float = 0.0
    decode_steps_total: int = 0
    decode_rows_total: int = 0
    lookup_drafted_total: int = 0                                        # lookup decoding: draft tokens checked
    lookup_taken_total: int = 0                                          # ... and taken (sampled by the model)
    held_answers_total: dict[str, int] = field(default_factory=dict)    # by rule: json, call, calls
    held_refusals_total: int = 0                                         # sampler first choices a rule refused
    held_forced_tokens_total: int = 0                                    # a held answer's fixed text, read ahead
    thinking_budget_cuts_total: int = 0                                  # reasoning ended at its token budget
    parks_total: dict[str, int] = field(default_factory=dict)           # slot, skip, cache
    restore_fallbacks: dict[str, int] = field(default_factory=dict)     # by cache level: the next best entry looked up, else the prompt read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_prompt(self, prompt: int, reused: int, source: str, read: int) -> None:
        """A request's prompt, counted once when it has been read (at its first token) or at its end,
        whichever comes first: `read` the tokens the engine read of it (less than prompt - reused for one
        cancelled or failed before the rest), `reused` the ones taken from `source` instead."""
        with self._lock:
            self.prompt_tokens_total += prompt
            self.prompt_tokens_reused += reused
            self.prompt_tokens_read += read
            if reused:      # a prompt read whole ("none") is no source: no series that can only say 0
                self.reused_by_source[source] = self.reused_by_source.get(source, 0) + reused

    def add_shifted(self, n: int) -> None:
        """A code completion moved `n` tokens of its context's history into place (--cache-reuse); they are
        counted as reused with its prompt (add_prompt) too."""
        with self._lock:
            self.prompt_tokens_shifted += n

    def add_aligned(self, n: int) -> None:
        """A prompt that went on as a history's bytes in other tokens took that history's (byte_align.py): `n`
        more of its tokens are held than matched as sent."""
        with self._lock:
            self.prompts_aligned += 1
            self.prompt_tokens_aligned += n

    def add_request(self, api: str, status: str) -> None:
        """A request ended (its prompt was counted by `add_prompt`, its tokens by `add_generated` as made)."""
        with self._lock:
            self.requests_total[status] = self.requests_total.get(status, 0) + 1
            self.requests_by_api[api] = self.requests_by_api.get(api, 0) + 1

    def add_generated(self, n: int = 1) -> None:
        with self._lock:
            self.generated_tokens_total += n

    def _count(self, counts: dict[str, int], key: str) -> None:
        with self._lock:
            counts[key] = counts.get(key, 0) + 1

    def add_rejected(self, reason: str) -> None:
        self._count(self.rejected_total, reason)

    def add_prefill(self, seconds: float) -> None:
        with self._lock:
            self.prefill_seconds_total += seconds

    def add_decode(self, seconds: float, rows: int) -> None:
        with self._lock:
            self.decode_seconds_total += seconds
            self.decode_steps_total += 1
            self.decode_rows_total += rows

    def add_lookup(self, drafted: int, taken: int) -> None:
        with self._lock:
            self.lookup_drafted_total += drafted
            self.lookup_taken_total += taken

    def add_held(self, rule: str, refusals: int) -> None:
        """An answer held to a rule (structured_output.py) finished; its sampler's refused first choices."""
        with self._lock:
            self.held_answers_total[rule] = self.held_answers_total.get(rule, 0) + 1
            self.held_refusals_total += refusals

    def add_forced(self, tokens: int) -> None:
        """Tokens of a held answer's fixed text taken in one step with the token before them."""
        with self._lock:
            self.held_forced_tokens_total += tokens

    def add_budget_cut(self) -> None:
        """An answer whose reasoning the server ended at its token budget (thinking_budget.py)."""
        with self._lock:
            self.thinking_budget_cuts_total += 1

    def add_park(self, kind: str) -> None:
        self._count(self.parks_total, kind)

    def add_restore_fallback(self, level: str) -> None:
        self._count(self.restore_fallbacks, level)

    def snapshot(self) -> dict:
        with self._lock:
            return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items() if k != "_lock"}


def sample_value(value: float) -> str:
    """Every digit: a count as a whole number, a float as the shortest text that reads back to it ('{:g}' kept 6
    significant digits, so a counter past 1,000,000 moved in steps of 10 and rate() over it was wrong)."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return str(int(value)) if value.is_integer() and abs(value) < 2 ** 53 else repr(value)
    return str(int(value))


def _esc(v: object) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_prometheus(m: dict, slots: list[dict], queue_depth: int, in_flight: int, model: dict | None = None) -> str:
    """Prometheus text exposition (version 0.0.4) of a `Metrics.snapshot()` and the slot table; `model`
    (name, arch, n_expert, n_expert_used, ...) becomes the `strata_model_info` series (labels, value 1)."""
    out: list[str] = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
        out.append(f"# HELP strata_{name} {help_text}")
        out.append(f"# TYPE strata_{name} {kind}")
        for labels, value in samples:
            lab = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
            out.append(f"strata_{name}{{{lab}}} {sample_value(value)}" if lab else f"strata_{name} {sample_value(value)}")

    if model:
        metric("model_info", "gauge", "The loaded model (labels; n_expert 0: a dense model).",
               [({k: v for k, v in model.items() if v is not None}, 1)])
    metric("requests_total", "counter", "Ended generation requests by status (running ones: requests_in_flight).",
           [({"status": s}, n) for s, n in sorted(m["requests_total"].items())] or [({"status": "ok"}, 0)])
    metric("requests_rejected_total", "counter", "Requests refused before running, by reason.",
           [({"reason": r}, n) for r, n in sorted(m["rejected_total"].items())] or [({"reason": "queue_full"}, 0)])
    metric("prompt_tokens_total", "counter", "Prompt tokens of requests whose prompt was read (at their first token) "
           "or that ended (ok, cancelled, error), whichever came first.",
           [({}, m["prompt_tokens_total"])])
    metric("prompt_tokens_read_total", "counter", "Prompt tokens read (prefilled) by the engine; with the reused ones, "
           "the total less what cancelled or failed requests never read.",
           [({}, m["prompt_tokens_read"])])
    metric("prompt_tokens_reused_total", "counter", "Prompt tokens reused from a slot or the cache, by source.",
           [({"source": s}, n) for s, n in sorted(m["reused_by_source"].items())] or [({"source": "slot"}, 0)])
    metric("prompt_tokens_shifted_total", "counter", "Of the reused prompt tokens, those a code completion moved "
           "into place (--cache-reuse; their KV approximate).", [({}, m.get("prompt_tokens_shifted", 0))])
    metric("prompts_aligned_total", "counter", "Prompts that went on as a history's bytes in other tokens (the model's "
           "answer sent back as text, tokenized otherwise) and took that history's tokens.",
           [({}, m.get("prompts_aligned", 0))])
    metric("prompt_tokens_aligned_total", "counter", "Tokens those aligned prompts held of the history past the tokens "
           "they matched as sent (not read again).", [({}, m.get("prompt_tokens_aligned", 0))])
    metric("generated_tokens_total", "counter", "Tokens generated, counted as each is made.",
           [({}, m["generated_tokens_total"])])
    metric("prefill_seconds_total", "counter", "Seconds spent reading prompts.", [({}, m["prefill_seconds_total"])])
    metric("decode_seconds_total", "counter", "Seconds spent in batched decode steps.",
           [({}, m["decode_seconds_total"])])
    metric("decode_steps_total", "counter", "Batched decode steps.", [({}, m["decode_steps_total"])])
    metric("decode_rows_total", "counter", "Rows over all decode steps (rows/steps = mean batch).",
           [({}, m["decode_rows_total"])])
    metric("lookup_drafted_tokens_total", "counter", "Lookup decoding: draft tokens checked by the model.",
           [({}, m["lookup_drafted_total"])])
    metric("lookup_taken_tokens_total", "counter",
           "Lookup decoding: draft tokens the model sampled itself (each saved a decode step).",
           [({}, m["lookup_taken_total"])])
    metric("held_answers_total", "counter", "Answers held to a rule while written, by rule: json (response_format), "
           "call (a demanded tool call), calls (calls the model opened, held to the offered tools), "
           "none (an answer kept off calls: tool_choice none).",
           [({"rule": k}, n) for k, n in sorted(m["held_answers_total"].items())] or [({"rule": "json"}, 0)])
    metric("held_refusals_total", "counter", "Tokens a held answer's sampler chose first and its rule refused.",
           [({}, m["held_refusals_total"])])
    metric("held_forced_tokens_total", "counter", "Tokens of held answers' fixed text (a call's markup, the one "
           "tool's name, a key) read ahead in the step of the token before them.", [({}, m["held_forced_tokens_total"])])
    metric("thinking_budget_cuts_total", "counter", "Answers whose reasoning reached its token budget (Anthropic's "
           "thinking.budget_tokens) and was ended by the server.", [({}, m["thinking_budget_cuts_total"])])
    metric("parks_total", "counter", "Parks of a history about to be overwritten, by kind.",
           [({"kind": k}, n) for k, n in sorted(m["parks_total"].items())] or [({"kind": "slot"}, 0)])
    metric("restore_fallbacks_total", "counter",
           "Cache hits that could not be restored (damaged, gone, refused): the prompt was read instead.",
           [({"level": k}, n) for k, n in sorted(m["restore_fallbacks"].items())] or [({"level": "ram"}, 0)])
    metric("queue_depth", "gauge", "Requests waiting for a context.", [({}, queue_depth)])
    metric("requests_in_flight", "gauge", "Requests holding a context (its history copied or restored, its prompt "
           "read, or generating).", [({}, in_flight)])
    busy = sum(1 for s in slots if s["id"] != "main" and s["state"] in ("prefill", "decode"))
    n_slots = sum(1 for s in slots if s["id"] != "main")
    metric("slots_total", "gauge", "Batch slots.", [({}, n_slots)])
    metric("slots_busy", "gauge", "Batch slots running a request (occupancy).", [({}, busy)])
    metric("slot_tokens", "gauge", "Tokens a context's history holds.",
           [({"slot": s["id"]}, s["tokens"]) for s in slots])
    metric("slot_prefill_tokens_per_second", "gauge", "Prompt reading speed of a context's last request.",
           [({"slot": s["id"]}, s["prefill_tps"]) for s in slots if s.get("prefill_tps") is not None])
    metric("slot_decode_tokens_per_second", "gauge", "Generation speed of a context's last request.",
           [({"slot": s["id"]}, s["decode_tps"]) for s in slots if s.get("decode_tps") is not None])
    return "\n".join(out) + "\n"
