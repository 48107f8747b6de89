"""A session restore does not wait on an editor's code completion (a real `strata serve` in a subprocess, the tiny
model with fill-in-the-middle tokens, real HTTP). In the session-33 agent soak a user's restore into main waited its
30 s (SESSION_IDLE_WAIT_S) behind an editor's pause completion reading ~3,470 tokens there and was answered 503: a
save or restore waiting for a context ends the code completion running in it (answered with what it wrote), and
runs at once; an agent's request there is still waited for (test_session_waits_for_idle.py)."""

from __future__ import annotations

import json
import signal
import threading

import httpx2 as httpx

from tests.server.test_auth_and_lifecycle import listening_port, start_cli, wait_healthy
from tests.server.test_cache_and_policy import complete, ids

N_PREDICT = 3000        # with ignore_eos it writes all of them unless ended: ~3,100 of main's 4,096 tokens


def _serve(fim_coder, tmp_path):
    proc, log = start_cli(["--model", str(fim_coder), "--ctx", "4096", "--batch", "0", "--conversation-cache-mib",
                           "16", "--conversation-cache-sessions-dir", str(tmp_path / "sessions")], tmp_path)
    port = listening_port(log, proc)
    wait_healthy(port, proc)
    return proc, log, f"http://127.0.0.1:{port}"


class _Infill:
    """A streamed /infill (llama.vscode's request shape) on a thread: `first` is set at its first piece; `final`
    is its last event (stop true)."""

    def __init__(self, url: str) -> None:
        self.first, self.done = threading.Event(), threading.Event()
        self.pieces, self.final, self.status = 0, None, None
        body = {"input_prefix": "def f(x):\n    return x\n\n", "prompt": "y = ", "input_suffix": "print(y)\n",
                "n_predict": N_PREDICT, "ignore_eos": True, "temperature": 0, "stream": True}

        def run() -> None:
            try:
                with httpx.stream("POST", url + "/infill", json=body, timeout=300) as r:
                    self.status = r.status_code
                    for line in r.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        event = json.loads(line[6:])
                        if event.get("stop"):
                            self.final = event
                        elif event.get("content"):
                            self.pieces += 1
                            self.first.set()
            finally:
                self.first.set()
                self.done.set()

        threading.Thread(target=run, daemon=True).start()


def test_a_restore_into_main_ends_the_code_completion_running_there(fim_coder, tmp_path):
    proc, log, url = _serve(fim_coder, tmp_path)
    try:
        complete(url, ids(300, 81))                                   # main's history, saved as session `work`
        saved = httpx.post(url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
        assert saved.status_code == 200, saved.text
        n_work = saved.json()["n_tokens"]
        editor = _Infill(url)
        assert editor.first.wait(120) and editor.status == 200 and editor.pieces > 0
        restored = httpx.post(url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=120)
        assert editor.done.wait(120)
        assert restored.status_code == 200, restored.text              # before: after the completion's 3,000 tokens
        assert restored.json()["n_tokens"] == n_work
        final = editor.final
        assert final is not None and final["stop_type"] == "limit", final
        assert final["tokens_predicted"] < N_PREDICT, final              # ended for the restore (before: all 3,000)
        main = httpx.get(url + "/v1/slots", timeout=30).json()["slots"][0]
        assert main["conversation"] == "session:work" and main["tokens"] == n_work, main
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    text = log.read_text()
    assert "a code completion) in context main ends: a session save or restore waits for the context" in text, text
    assert "ERROR" not in text and "Traceback" not in text, text
