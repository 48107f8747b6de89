"""Trial: the prompt tokens an editor's code completion reads per keystroke and per window slide, with and without
`strata serve --cache-reuse` (counts, not times: one editor alone, no agent).

The editor is fim_beside_agent.py's (llama.vscode's body: 256 lines before the cursor, the typed part, 64 lines after,
two 64-line ring-buffer chunks; SmolLM2 with FIM token ids written into a copy), typing from line 300 of
server/scheduler.py, so each line it ends moves the window of lines before the cursor (a slide): the file read once
(n_predict 0), then per line 3 keystrokes and the line ended, each request waited for (no time bound, n_predict 4).
Printed per server: the median and range of `timings.prompt_n` (read) and `cache_n` for keystrokes and slides, and
`strata_prompt_tokens_shifted_total`. Then, for each completion of the `--cache-reuse` server, whether its answer's
first token equals the `--cache-reuse 0` server's (greedy: temperature 0), as a measure of the approximation.

    .venv/bin/python benchmarks/fim_window_slide.py [--lines 6] [--threads 2] [--cache-reuse 256]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.fim_beside_agent import EDITED, editor_body, fim_smollm2  # noqa: E402

TARGET = "        result = self.place(job, now=time.monotonic(), reason='typed')\n"


def bodies(n_lines: int, start: int = 300) -> list[tuple[str, dict]]:
    """(kind, body): the warm-up, then per line three keystrokes and the line ended."""
    lines = EDITED.read_text().splitlines(keepends=True)
    out = [("warm-up", {**editor_body(lines, start, "", 64), "n_predict": 0})]
    line = start
    for _ in range(n_lines):
        for typed in (TARGET[:12], TARGET[:19], TARGET[:27]):
            out.append(("keystroke", editor_body(lines, line, typed, 64)))
        lines.insert(line, TARGET)
        line += 1
        out.append(("slide", editor_body(lines, line, "", 64)))
    return out


def run(model: Path, cache_reuse: int, threads: int, port: int, sent: list[tuple[str, dict]]) -> list[dict]:
    cmd = [str(ROOT / ".venv/bin/strata"), "serve", "--no-config", "--model", str(model), "--port", str(port),
           "--batch", "4", "--ctx", "12288", "--slot-ctx", "12288", "--threads", str(threads),
           "--cache-reuse", str(cache_reuse)]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    if requests.get(url + "/health", timeout=2).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"server did not start: {log.read().decode()[-2000:]}")
                time.sleep(0.5)
            out = []
            for kind, body in sent:
                a = requests.post(url + "/infill", timeout=600,
                                  json={**body, "n_predict": body["n_predict"] and 4, "temperature": 0}).json()
                out.append({"kind": kind, "read": a["timings"]["prompt_n"], "cache_n": a["timings"]["cache_n"],
                            "content": a["content"], "ms": a["timings"]["prompt_ms"]})
            metrics = requests.get(url + "/metrics", timeout=10).text
            shifted = next(line.split()[-1] for line in metrics.splitlines()
                           if line.startswith("strata_prompt_tokens_shifted_total"))
            print(f"--cache-reuse {cache_reuse}: strata_prompt_tokens_shifted_total {shifted}")
            return out
        finally:
            proc.terminate()
            proc.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-reuse", type=int, default=256)
    ap.add_argument("--port", type=int, default=8095)
    args = ap.parse_args()
    model = fim_smollm2(Path(tempfile.mkdtemp(prefix="fim_slide_")) / "smollm2-fim.gguf")
    sent = bodies(args.lines)
    results = {n: run(model, n, args.threads, args.port, sent) for n in (args.cache_reuse, 0)}
    for n, out in results.items():
        for kind in ("keystroke", "slide"):
            reads = [r["read"] for r in out if r["kind"] == kind]
            ms = [r["ms"] for r in out if r["kind"] == kind]
            print(f"--cache-reuse {n}: {kind}: {len(reads)}, read median {statistics.median(reads):.0f} "
                  f"({min(reads)}-{max(reads)}), prompt_ms median {statistics.median(ms):.0f}")
    on, off = results[args.cache_reuse], results[0]
    same = [a["content"][:1] == b["content"][:1] for a, b in zip(on, off, strict=True) if a["kind"] != "warm-up"]
    whole = [a["content"] == b["content"] for a, b in zip(on, off, strict=True) if a["kind"] != "warm-up"]
    print(f"answers (4 tokens, greedy) against --cache-reuse 0: first character equal in {sum(same)} of {len(same)}, "
          f"whole answer equal in {sum(whole)} of {len(whole)}")


if __name__ == "__main__":
    main()
