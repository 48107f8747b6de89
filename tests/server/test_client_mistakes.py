"""A client pointed at the server the wrong way gets an answer that says how to point it right. Not
here: bad request bodies (test_bad_requests.py)."""

from __future__ import annotations

import anthropic
import openai
import pytest


def test_the_anthropic_sdk_given_the_openai_base_url_is_told_the_right_one(tiny_server):
    client = anthropic.Anthropic(base_url=tiny_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="local", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert "no endpoint POST /v1/v1/messages" in str(e.value)
    assert "the Anthropic SDK takes http://HOST:PORT" in str(e.value)


def test_an_openai_base_url_with_v1_twice_is_told_the_right_one(tiny_server):
    client = openai.OpenAI(base_url=tiny_server.url + "/v1/v1", api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="local", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert "the OpenAI SDK http://HOST:PORT/v1" in str(e.value)


def test_an_unknown_path_elsewhere_gets_no_base_url_advice(tiny_server):
    import httpx2 as httpx

    r = httpx.get(tiny_server.url + "/v1/nope", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["message"] == "no endpoint GET /v1/nope"


@pytest.mark.parametrize("path", ["/", "/v1", "/v1/"])
def test_the_address_itself_says_what_is_served_there(tiny_server, path):
    """A new user opened the address `strata serve` prints in a browser: a bare "no endpoint GET /"."""
    import httpx2 as httpx

    r = httpx.get(tiny_server.url + path, timeout=30)
    message = r.json()["error"]["message"]
    assert r.status_code == 404 and message.startswith(f"no endpoint GET {path} (this is Strata's HTTP API")
    for named in ("/health", "/v1/chat/completions", "/v1/messages", "http://HOST:PORT/v1", "docs/api.md"):
        assert named in message


def test_with_an_api_key_the_address_answers_a_client_without_it_401_first(tiny_model):
    """--api-key: the page that names what is served (and the /v1/v1 advice) is for a client that holds the key;
    one without it reads the 401 that every other path gives, no more than /health tells anyone."""
    import httpx2 as httpx

    from tests.server.live import LiveServer

    key = "s3cret-key"
    with LiveServer(model=str(tiny_model), ctx=1024, batch=1, threads=1, api_key=key, conversation_cache_mib=0) as s:
        for path in ("/", "/v1", "/v1/", "/v1/v1/messages", "/nope"):
            for method in ("GET", "POST"):
                r = httpx.request(method, s.url + path, timeout=30)
                message = r.json()["error"]["message"]
                assert r.status_code == 401 and message.startswith("no API key was given"), (method, path, message)
                assert "endpoint" not in message and "/v1/" not in message, (method, path, message)
            wrong = httpx.get(s.url + path, headers={"Authorization": "Bearer nope"}, timeout=30)
            assert wrong.status_code == 401 and "endpoint" not in wrong.json()["error"]["message"]
        assert httpx.get(s.url + "/health", timeout=30).status_code == 200
        r = httpx.get(s.url + "/", headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert r.status_code == 404 and "(this is Strata's HTTP API" in r.json()["error"]["message"]


@pytest.mark.parametrize("tool", [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    {"type": "function", "name": "get_weather"},
])
def test_an_openai_shaped_tool_on_the_anthropic_api_is_told_the_right_shape(tiny_server, tool):
    """A client that sends OpenAI's tool shape to /v1/messages: the tool was dropped as an unknown type without a
    word, and the model could never call it."""
    client = anthropic.Anthropic(base_url=tiny_server.url, api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model="local", max_tokens=4, messages=[{"role": "user", "content": "hi"}],
                               tools=[tool])
    message = e.value.body["error"]["message"]
    assert message.startswith("tools[0] is an OpenAI-shaped tool (type 'function'): the Anthropic API takes")
    assert "input_schema" in message
