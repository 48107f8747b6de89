"""Generated request bodies (tests/server/body_fuzz.py, a fixed seed) against `strata serve` in a subprocess on a
tiny model with fill-in-the-middle tokens (so /infill answers too): every answer is a 2xx or a 4xx in its API's
error shape with a message (5xx only where documented), no stream ends without its last event, no request goes
unanswered, the server's log holds no Traceback or ERROR, /health stays 200, and a greedy answer after the run is
the one before it. scripts/fuzz_bodies.py runs the same with any seed and any number of bodies."""

from __future__ import annotations

import pytest

from tests.server import body_fuzz

SEED = 37
N_BODIES = 400


def test_the_generator_is_deterministic_and_covers_every_endpoint():
    first, again = body_fuzz.cases(SEED, N_BODIES), body_fuzz.cases(SEED, N_BODIES)
    assert [(c.path, c.raw, c.content_type) for c in first] == [(c.path, c.raw, c.content_type) for c in again]
    assert len(first) == N_BODIES
    assert {c.path for c in first} >= {path for path, _ in body_fuzz.VALID}
    assert sum(c.what == "valid" for c in first) == len(body_fuzz.VALID)
    assert sum(c.what.startswith(("raw", "truncated", "bad utf-8", "content-type", "wrapped", "in ")) for c in first) \
        >= N_BODIES // 10


@pytest.fixture(scope="module")
def served(fim_coder, tmp_path_factory):
    running = body_fuzz.start_serve(str(fim_coder), tmp_path_factory.mktemp("generated_bodies"))
    yield running
    body_fuzz.stop_serve(running)


# bodies the generator found faults with, each kept as it was sent: (path, body (or its bytes), the status it gets)
FOUND: list[tuple[str, dict | bytes, int]] = [
    # a temperature so near 0 that logit / temperature overflowed: the draw raised, a 500 and a failed step
    ("/completion", {"prompt": "def f(", "n_predict": 4, "stop": ["\n"], "temperature": 5e-324, "top_k": 40,
                     "min_p": 0.05, "cache_prompt": True, "samplers": ["top_k"]}, 200),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                              "temperature": 1e-300, "stream": True}, 200),
    # a lone surrogate escape in a UTF-16 / UTF-32 body (JSON may come so, RFC 7159): looked for in the bytes, not
    # found (not ASCII bytes in a row), left unmended, and the tokenizer's TypeError was a 500
    ("/v1/chat/completions", '{"max_tokens": 2, "messages": [{"role": "user", "content": "a\\ud800"}]}'.encode("utf-16"),
     200),
    ("/v1/messages", '{"max_tokens": 2, "messages": [{"role": "user", "content": "a\\udc00"}]}'.encode("utf-32"), 200),
    ("/v1/sessions/fz/save", '{"messages": [{"role": "user", "content": "\\ud83d"}]}'.encode("utf-16-le"), 404),
    # a lone surrogate escape inside a call's arguments (JSON text in a JSON string): parsed for the template, the
    # str reached the tokenizer (its TypeError a 500); the body's own mending cannot see it
    ("/v1/chat/completions", {**body_fuzz.VALID[0][1], "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a\\ud800"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}, 200),
    ("/v1/responses", {"max_output_tokens": 2, "input": [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"path": "\\udc00"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}],
        "tools": [{"type": "function", "name": "read", "parameters": body_fuzz.SCHEMA}]}, 200),
    # a schema no value fits: the constrained answer found no token mid-value; the sampler's error failed the
    # scheduler's step (a 500 to every request in it, a Responses stream's response.failed, a Traceback)
    ("/v1/responses", {"input": "name a colour", "max_output_tokens": 4, "stream": True, "text": {"format": {
        "type": "json_schema", "name": "c", "schema": {"type": "string", "minLength": 5, "maxLength": 2}}}}, 400),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 8, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 0}}, "required": ["a"]}}}},
     400),
    # a required key the properties do not list, closed by default: no answer could be whole (the same failed step)
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 60, "seed": 1,
                              "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                                  "type": "object", "properties": {"a": {"enum": ["x"]}}, "required": ["a", "b"]}}}},
     200),
]


@pytest.mark.parametrize("path,body,status", FOUND, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(FOUND)])
def test_a_body_found_by_the_generator(served, path, body, status):
    raw = body if isinstance(body, bytes) else body_fuzz.dumps(body).encode()
    case = body_fuzz.Case(path, raw, "application/json", "found")
    findings, statuses = body_fuzz.drive(served, [case])
    assert not findings and statuses == {status: 1}, (findings, statuses)


def test_every_valid_body_is_answered(served):
    """The generator's starting points are valid (a 400 there would leave their fields' damage untested)."""
    valid = [body_fuzz.Case(path, body_fuzz.dumps(body).encode(), "application/json", "valid")
             for path, body in body_fuzz.VALID]
    findings, statuses = body_fuzz.drive(served, valid)
    assert not findings and set(statuses) <= {200, 404}, (findings, statuses)   # 404: the restore of a name not saved


def test_generated_bodies_get_an_answer_or_a_4xx_in_their_apis_shape(served):
    before = body_fuzz.greedy_answer(served.url)
    findings, statuses = body_fuzz.drive(served, body_fuzz.cases(SEED, N_BODIES))
    after = body_fuzz.greedy_answer(served.url)
    assert not findings, f"{len(findings)} of {N_BODIES} bodies:\n" + "\n".join(findings[:10])
    assert statuses.get(200, 0) >= N_BODIES // 10 and statuses.get(400, 0) >= N_BODIES // 3, statuses
    assert after == before
    log = served.log.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
