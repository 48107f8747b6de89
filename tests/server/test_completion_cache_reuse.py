"""--cache-reuse on a real server (tiny model with fill-in-the-middle tokens): an editor's keystrokes and its window
sliding read only their new tokens, the rest of the history moved into place (Engine.splice, server/cache_reuse.py);
an exact request after them on the same context is answered as a fresh server answers it.

The editor: a prefix of ~1,000 tokens, the typed part of the cursor's line, a ~500-token suffix (fim_prompt keeps
its first 510 - typed), default prefix-suffix-middle order. With --cache-reuse 0 each keystroke reads the suffix
again (prompt_n ~510), as before; with the default 256 it reads its typed tokens and the middle token. An exact
request (a raw /v1/completions prompt: the completion's tokens without the middle token, so not a code completion)
shares the whole moved history (a chat request after it shares none; it too is answered as a fresh server does); it must take only what precedes the first moved cell, whether it runs in that
context (no slots: everything runs in main) or copies from it (one slot). With four slots the window's slide is
placed in a blank slot and copies from the one that read the file: the copy takes the source's runs past the common
prefix too and moves them (before, it copied the common prefix only and read 1,430 tokens)."""

from __future__ import annotations

import pytest
import requests

from tests.server.live import LiveServer

PREFIX = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(60))
SUFFIX = "".join(f"print(f{i}(y))\n" for i in range(80))
DROPPED = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n\n" for i in range(20))   # the window slides


def infill(server: LiveServer, typed: str, prefix: str = PREFIX) -> dict:
    r = requests.post(server.url + "/infill", timeout=120, json={
        "input_prefix": prefix, "prompt": typed, "input_suffix": SUFFIX, "n_predict": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def shifted_total(server: LiveServer) -> float:
    text = requests.get(server.url + "/metrics", timeout=10).text
    return float(next(line.split()[-1] for line in text.splitlines()
                      if line.startswith("strata_prompt_tokens_shifted_total")))


def editor(server: LiveServer) -> list[dict]:
    """A first completion, two keystrokes, the window sliding past its first 20 functions, one more keystroke."""
    assert PREFIX.startswith(DROPPED)
    slid = PREFIX[len(DROPPED):]
    return [infill(server, "y = "), infill(server, "y = f"), infill(server, "y = f1"), infill(server, "y = f1", slid),
            infill(server, "y = f1(", slid)]


@pytest.fixture
def off(fim_coder):
    """A fresh server per case: one that ran the editor before holds the slid window's history already (a later
    case's slide then copies it from there and reads only its suffix, not what --cache-reuse 0 reads at a slide)."""
    with LiveServer(model=str(fim_coder), ctx=4096, batch=1, threads=1, cache_reuse=0) as s:
        yield s


@pytest.mark.parametrize("batch", [0, 1, 4])
def test_keystrokes_and_a_sliding_window_read_only_their_new_tokens(fim_coder, off, batch):
    with LiveServer(model=str(fim_coder), ctx=4096, batch=batch, threads=1) as on:
        got = editor(on)
        reads = [a["timings"]["prompt_n"] for a in got]
        assert reads[0] == got[0]["tokens_evaluated"] > 1000           # the first reads everything
        assert all(n <= 6 for n in reads[1:]), reads                    # then the typed tokens and the middle one
        for a in got[1:]:
            assert a["timings"]["cache_n"] == a["tokens_evaluated"] - a["timings"]["prompt_n"]
        assert shifted_total(on) >= 3 * 500 + 700
        # the same editor with --cache-reuse 0 reads the suffix again at each keystroke, everything past the
        # repo-level start when the window slides
        old = [a["timings"]["prompt_n"] for a in editor(off)]
        assert min(old[1:]) > 500 and old[3] > 900, old
        assert shifted_total(off) == 0

        # an exact request on the history the completions left: the last one's tokens without the middle token
        engine = on.state.engine
        from strata.server.fim_prompt import FimRequest, fim_context, fim_prompt

        laid = fim_prompt(engine.tokenizer, FimRequest(prefix=PREFIX[len(DROPPED):], suffix=SUFFIX, prompt="y = f1(",
                                                       n_ctx=fim_context(engine), n_predict=2)).tokens
        assert len(laid) == got[-1]["tokens_evaluated"]
        holder = next(c for c in on.state.scheduler.table.contexts if c.tokens[:len(laid) - 1] == laid[:-1])
        approx_from = holder.approx_from
        assert approx_from is not None and holder.completion
        raw = laid[:-1] + engine.tokenize("\n", special=False)
        body = {"prompt": raw, "max_tokens": 8, "temperature": 0}
        answer = requests.post(on.url + "/v1/completions", timeout=120, json=body).json()
        assert 0 < answer["usage"]["prompt_tokens_details"]["cached_tokens"] <= approx_from
        chat = {"messages": [{"role": "user", "content": PREFIX[:400]}], "max_tokens": 8, "temperature": 0}
        chat_answer = requests.post(on.url + "/v1/chat/completions", timeout=120, json=chat).json()
        with LiveServer(model=str(fim_coder), ctx=4096, batch=batch, threads=1) as fresh:
            want = requests.post(fresh.url + "/v1/completions", timeout=120, json=body).json()
            chat_want = requests.post(fresh.url + "/v1/chat/completions", timeout=120, json=chat).json()
        assert answer["choices"][0]["text"] == want["choices"][0]["text"]
        assert answer["usage"]["completion_tokens"] == want["usage"]["completion_tokens"] == 8
        assert chat_answer["choices"][0]["message"] == chat_want["choices"][0]["message"]


def test_the_flag_is_checked_by_name(fim_coder):
    with pytest.raises(Exception, match=r"--cache-reuse.*-1.*below the minimum 0"):
        LiveServer(model=str(fim_coder), cache_reuse=-1)


def test_a_session_save_takes_only_what_precedes_the_moved_kv(fim_coder, tmp_path):
    """A slot holding a completion's moved KV saved as a session (restored, it would be taken as exact): a save of the
    slot keeps what precedes the first moved token; a save by the completion's tokens finds them held nowhere (404).
    Before, both saved the whole history."""
    with LiveServer(model=str(fim_coder), ctx=4096, batch=1, threads=1, conversation_cache_mib=16,
                    conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions")) as s:
        got = editor(s)
        assert all(a["timings"]["prompt_n"] <= 6 for a in got[1:])
        holder = next(c for c in s.state.scheduler.table.contexts if c.approx_from is not None)
        approx_from, held = holder.approx_from, list(holder.tokens)
        assert 0 < approx_from < len(held)
        r = requests.post(f"{s.url}/v1/sessions/slot/save", timeout=120,
                          json={"slot": "main" if holder.id == 0 else holder.id})   # the slide runs in main (editor_main)
        assert r.status_code == 200 and r.json()["n_tokens"] == approx_from, r.text
        r = requests.post(f"{s.url}/v1/sessions/tokens/save", json={"tokens": held[:approx_from + 10]}, timeout=120)
        assert r.status_code == 404, r.text
        r = requests.post(f"{s.url}/v1/sessions/part/save", json={"tokens": held[:approx_from]}, timeout=120)
        assert r.status_code == 200 and r.json()["n_tokens"] == approx_from, r.text


def test_a_model_whose_kv_cannot_be_moved_reads_instead(tiny_model_factory, caplog):
    """A model with windowed layers (gemma3): the server starts with --cache-reuse off and says why."""
    import logging

    from tests.engine.test_gemma3 import gemma_model

    with caplog.at_level(logging.INFO, logger="strata.server.scheduler"):
        with LiveServer(model=str(gemma_model(tiny_model_factory)), ctx=256, threads=1) as s:
            assert s.state.scheduler.cache_reuse == 0
    assert "--cache-reuse 256 is off: the KV of gemma3 (layers with a sliding window) cannot be moved" in caplog.text
