"""docs/api.md's examples, run as a user copies them: every curl command and every Python block (the
real `openai` and `anthropic` SDKs) against a live server on the tiny model, the address swapped for the
test server's. Not here: what the answers say (test_sdk_tiny.py, test_response_shapes.py)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import httpx2 as httpx
import pytest

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
DOC_ADDRESS = "http://127.0.0.1:8080"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", API_DOC.read_text(), flags=re.S)


def test_the_doc_has_the_examples_this_file_runs():
    assert len(blocks("bash")) >= 2 and len(blocks("python")) >= 2


@pytest.mark.parametrize("command", blocks("bash"), ids=lambda c: c.split()[1])
def test_each_curl_example_is_answered(tiny_server, command):
    words = shlex.split(command.replace("\\\n", " "))
    assert words[0] == "curl"
    url = next(w for w in words if w.startswith(DOC_ADDRESS)).replace(DOC_ADDRESS, tiny_server.url)
    headers = dict(h.split(": ", 1) for h in (words[i + 1] for i, w in enumerate(words) if w == "-H"))
    body = json.loads(words[words.index("-d") + 1])
    r = httpx.post(url, headers=headers, content=json.dumps(body), timeout=60)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("code", blocks("python"), ids=lambda c: c.split()[1])
def test_each_python_example_runs(tiny_server, code, capsys):
    assert DOC_ADDRESS in code
    exec(compile(code.replace(DOC_ADDRESS, tiny_server.url), str(API_DOC), "exec"), {})
    assert capsys.readouterr().out            # each example prints its answer


def test_the_sampling_fields_the_anthropic_sdk_lacks_go_in_extra_body(tiny_server):
    import anthropic

    assert 'extra_body={"temperature": 0}' in API_DOC.read_text()
    client = anthropic.Anthropic(base_url=tiny_server.url, api_key="unused", max_retries=0, timeout=60)
    ask = dict(model="local", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    answers = {client.messages.create(**ask, extra_body={"temperature": 0}).content[0].text for _ in range(2)}
    assert len(answers) == 1                  # greedy: the field reached the server
