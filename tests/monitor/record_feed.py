"""Records real monitor-feed snapshots into tests/data/monitor/ (the model tests read them back).

Run: .venv/bin/python -m tests.monitor.record_feed
It starts `strata serve` on a tiny generated model (2 slots, park target disk, a cold level and a
system-prompt cache), records `idle.json`, then runs four agents (one changing the top of its prompt
every turn) and records `series.json` (snapshots 0.25 s apart while they run) and `after.json`.
Not a test: the files it writes are inputs of tests/monitor/test_model.py.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from pathlib import Path

from tests.fixtures.tiny_gguf import make_tiny_gguf
from tests.monitor import traffic

OUT = Path(__file__).resolve().parents[1] / "data" / "monitor"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = make_tiny_gguf(root / "tiny.gguf", ctx_len=4096, n_vocab=512, seed=3)
        port = traffic.free_port()
        url = f"http://127.0.0.1:{port}"
        proc = traffic.start_serve(traffic.serve_flags(model, port, root), root / "serve.log")
        try:
            traffic.wait_health(url, proc=proc)
            _save("idle.json", traffic.get_json(url + "/v1/monitor"))
            errors: list = []
            runner = threading.Thread(target=lambda: errors.extend(traffic.run_agents(url, 4, 6, max_tokens=64)))
            runner.start()
            series = []
            while runner.is_alive() and len(series) < 40:
                series.append(traffic.get_json(url + "/v1/monitor"))
                time.sleep(0.25)
            runner.join()
            if errors:
                raise RuntimeError(f"agents failed: {errors[0]!r}")
            series.append(traffic.get_json(url + "/v1/monitor"))
            _save("series.json", series)
            _save("after.json", series[-1])
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


def _save(name: str, obj) -> None:
    (OUT / name).write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote", OUT / name)


if __name__ == "__main__":
    raise SystemExit(main())
