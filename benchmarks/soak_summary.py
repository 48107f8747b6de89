"""The summary of an agent soak's records (benchmarks/soak_agents.py): per phase (server lifetime) the process
figures, the folders' peaks against the budgets, /metrics at the drained end against what the clients saw, the
turns that reused less than the ideal, the sessions and the editor's completions. Pure: records in, a dict out."""

from __future__ import annotations


def completion_figures(done: list[dict]) -> dict:
    """The editor's completions by API: answered and abandoned, the answered ones' latency p50 / p90, their
    prompts' tokens and those reused (/infill says both)."""
    out = {}
    for api in ("infill", "suffix"):
        rs = [r for r in done if r["api"] == api]
        answered = sorted(r["s"] for r in rs if not r["abandoned"])

        def pct(q: float, xs: list = answered) -> float | None:
            return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None

        out[api] = {"sent": len(rs), "answered": len(answered), "abandoned": len(rs) - len(answered),
                    "p50_s": pct(0.5), "p90_s": pct(0.9),
                    "evaluated": sum(r.get("evaluated", 0) for r in rs), "reused": sum(r.get("cache_n", 0) for r in rs)}
    return out


def summarize(records: list[dict]) -> dict:
    """Per phase (server lifetime): the process figures, the folders' peaks against the budgets, /metrics at the
    drained end against what the clients saw, and the turns that reused less than the ideal."""
    out: dict = {"errors": [r for r in records if r["kind"] == "error"],
                 "events_lag_max_s": {}, "phases": {}}
    for ph in sorted({r.get("phase", 0) for r in records if r["kind"] == "request"}):
        samples = [r for r in records if r["kind"] in ("sample", "final_sample") and r.get("phase") == ph
                   and "VmRSS" in r]
        reqs = [r for r in records if r["kind"] == "request" and r["phase"] == ph]
        cont = [r for r in reqs if r["ideal"] > 0]
        final = next((r for r in records if r["kind"] == "final_sample" and r.get("phase") == ph), {})
        m = final.get("metrics", {})

        def total(prefix: str, m: dict = m) -> float:
            return sum(v for k, v in m.items() if k.split("{")[0] == prefix)

        folders: dict = {}
        for r in samples:
            for name, f in r["folders"].items():
                peak = folders.setdefault(name, {"peak_mib": 0.0, "peak_files": 0, "tmp_seen": 0, "half_pairs_seen": 0})
                peak["peak_mib"] = max(peak["peak_mib"], f["mib"])
                peak["peak_files"] = max(peak["peak_files"], f["files"])
                peak["tmp_seen"] += len(f["tmp"])
                peak["half_pairs_seen"] += len(f["half_pairs"])
        out["phases"][ph] = {
            "rss_mib": {"start": samples[0]["VmRSS"] // 1024 if samples else None,
                        "last": samples[-1]["VmRSS"] // 1024 if samples else None,
                        "peak": max((r["VmHWM"] for r in samples), default=0) // 1024},
            "fds": [min((r["fds"] for r in samples), default=0), max((r["fds"] for r in samples), default=0)],
            "threads": [min((r["Threads"] for r in samples), default=0), max((r["Threads"] for r in samples), default=0)],
            "log_kib": samples[-1]["log_bytes"] // 1024 if samples else 0,
            "folders": folders,
            "counters_went_back": [r["counters_went_back"] for r in samples if r.get("counters_went_back")],
            "client": {"answered": len(reqs), "prompt": sum(r["prompt"] for r in reqs),
                       "cached": sum(r["cached"] for r in reqs),
                       "cancelled": sum(r["kind"] == "cancelled" and r.get("phase") == ph for r in records),
                       "disconnects": sum(r["kind"] == "disconnect" and r.get("phase") == ph for r in records),
                       "continued": len(cont), "cached_continued": sum(r["cached"] for r in cont),
                       "ideal_continued": sum(r["ideal"] for r in cont)},
            "metrics": {"requests": {k: v for k, v in m.items() if k.startswith("strata_requests_total")},
                        "prompt": total("strata_prompt_tokens_total"),
                        "read": total("strata_prompt_tokens_read_total"),
                        "reused": total("strata_prompt_tokens_reused_total"),
                        "generated": total("strata_generated_tokens_total"),
                        "evictions": total("strata_cache_evictions_total"),
                        # moved into place by a code completion (--cache-reuse)
                        "shifted": total("strata_prompt_tokens_shifted_total"),
                        # the sessions folder's budget (--serve-arg=--conversation-cache-sessions-mib=N)
                        "session_refusals": total("strata_cache_session_refusals_total"),
                        "session_evictions": total("strata_cache_session_evictions_total")},
            "short_of_ideal": [{k: r[k] for k in ("agent", "conv", "req", "prompt", "cached", "ideal")}
                               for r in cont if r["cached"] < r["ideal"]],
            "sessions": {f"{r['kind']} {r['status']}": 0 for r in records if r["kind"].startswith("session")},
            "completions": completion_figures([r for r in records if r["kind"] == "completion" and r["phase"] == ph]),
        }
        for r in records:
            if r["kind"].startswith("session") and r.get("phase") == ph:
                out["phases"][ph]["sessions"][f"{r['kind']} {r['status']}"] += 1
        out["phases"][ph]["session_s_max"] = {k: max((r.get("s", 0) for r in records if r["kind"] == k
                                                      and r.get("phase") == ph), default=None)
                                              for k in ("session_save", "session_restore")}
        out["phases"][ph]["session_saves_of_another"] = sum(r["kind"] == "session_save" and r.get("other", False)
                                                            and r.get("phase") == ph for r in records)
        checks = [r for r in records if r["kind"] == "session_check" and r.get("phase") == ph]   # --check-saves
        judged = [r for r in checks if r["status"] == 200 and r.get("guard_status") not in (409, 507)]
        out["phases"][ph]["session_checks"] = {"right": sum(r["right"] for r in checks),
                                               # not judged: a 409, another request took main after the restore;
                                               # a 507, the sessions folder's budget refused the guarded save;
                                               # a restore not done (a 503: main ran a request the whole 30 s)
                                               "wrong": sum(not r["right"] for r in judged),
                                               "guard_409": sum(r.get("guard_status") == 409 for r in checks),
                                               "guard_507": sum(r.get("guard_status") == 507 for r in checks),
                                               "restore_not_done": sum(r["status"] != 200 for r in checks),
                                               "cached_from_main": sum(r.get("cached_from_main", False)
                                                                       for r in checks)}
        out["phases"][ph]["session_failures"] = session_failures([r for r in records if r.get("phase") == ph])
    lags = [r for r in records if r["kind"] == "events" and "lag_max_s" in r]
    out["events_lag_max_s"] = max((r["lag_max_s"] for r in lags), default=None)
    return out


def session_failures(records: list[dict]) -> dict[str, int]:
    """Each failed session call by kind, status and the server's message, counted ("session_check restore 503:
    ..."): why a restore or save failed (session 31's soak had a restore answered 503 and its log did not say why).
    A record from before the messages were logged says "(no message logged)"."""
    out: dict[str, int] = {}
    for r in records:
        if not r["kind"].startswith("session"):
            continue
        calls = [("", r.get("status"), r.get("message"))]
        if r["kind"] == "session_check":   # its restore, then the guarded save of main
            calls = [("restore ", r.get("status"), r.get("message")),
                     ("guard ", r.get("guard_status"), r.get("guard_message"))]
        for what, status, message in calls:
            if status is not None and status != 200:
                key = f"{r['kind']} {what}{status}: {message or '(no message logged)'}"
                out[key] = out.get(key, 0) + 1
    return out
