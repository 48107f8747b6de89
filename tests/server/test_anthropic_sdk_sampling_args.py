"""docs/api.md's note on the anthropic SDK's sampling arguments, checked against the SDK `./run` installs
(the newest: pip is not pinned) and a real server. Found in session 43's new-user trial: the note said
"2.16 is what `./run` installs today" while a fresh clone's `./run` installed 2.17.0; a version named as
today's goes stale with every release, so the note says what holds for every SDK since 2.14 instead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.server.live import LiveServer, sdk_clients

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def test_the_note_names_no_sdk_version_that_the_installed_one_contradicts():
    import anthropic

    note = next(p for p in API_MD.read_text().split("\n\n") if "Recent `anthropic` SDKs" in p)
    since = re.search(r"SDKs \((\d+\.\d+) and later", note)
    assert since, note
    assert _version(anthropic.__version__) >= _version(since.group(1))
    for named in re.findall(r"(\d+\.\d+(?:\.\d+)?) is what `\./run` installs", note):
        assert _version(named) == _version(anthropic.__version__), (named, anthropic.__version__)


@pytest.fixture(scope="module")
def claude(tiny_model_factory):
    with LiveServer(model=str(tiny_model_factory()), ctx=512, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)[1]


def test_temperature_is_no_argument_and_goes_in_extra_body(claude):
    ask = dict(model="m", max_tokens=8, messages=[{"role": "user", "content": "Hello"}])
    with pytest.raises(TypeError, match="temperature"):
        claude.messages.create(temperature=0, **ask)
    first, again = (claude.messages.create(extra_body={"temperature": 0}, **ask) for _ in range(2))
    assert first.content and first.content == again.content   # 0 = greedy: the same answer every time
