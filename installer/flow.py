"""The steps the terminal wizard and the Qt wizard share between the plan's questions.

Mechanism glue, no UI: builds the starting `Situation` from the real machine, turns an answer into
what the plan needs next (the model's file -> `ModelFacts`, a folder -> its free space, checked
writable), folds a bench report in, and writes the final file. A failure is an `AnswerError` whose
message the wizard shows before asking again. Which question comes next is `plan.py`'s call.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from strata.installer import config_file
from strata.installer.bench import BenchReport
from strata.installer.model_facts import ModelFileError, find_models, read_model_facts
from strata.installer.plan import apply_answer, cold_folder_problem, make_plan
from strata.installer.plan_types import (
    AnswerError,
    Answers,
    ModelRefused,
    Plan,
    PreviousAnswers,
    Question,
    Situation,
)
from strata.installer.profile import disk_facts, machine_profile

from strata import folders


def starting_situation(cold_dir: str | Path | None = None, extra_model: str | None = None,
                       model_reason: str | None = None) -> Situation:
    """The real machine, the proposed cold folder's free space, and the models found here; `extra_model` proposed
    first (`model_reason`: why, when it is not --model)."""
    found, default = find_models()
    if extra_model and extra_model not in found:
        found = (extra_model, *found)
    folder = Path(cold_dir).expanduser() if cold_dir else config_file.default_cold_dir()
    return Situation(machine=machine_profile(), cold_disk=disk_facts(folder), models_found=found,
                     default_model=extra_model or default, models_folder=models_folder(), cuda_built=cuda_built(),
                     packaged_model=default, default_model_reason=model_reason if extra_model else None)


PREVIOUS_MODEL_REASON = "the model the configuration there names (setup run again proposes that file's answers)"


def previous_choices(path: Path) -> tuple[str | None, str | None]:
    """(model file, cold folder) the configuration at `path` chose, for a new setup to propose instead of the
    defaults: a re-run (after an upgrade, to have a new key decided) proposed the bundled model and the platform
    folder, and Enter or --yes wrote them over the user's own. None for what the file does not choose, a model
    that is no longer there, a folder that is not there (a drive not mounted), or a file that cannot be read."""
    values, _, _ = config_file.previous_file(path)
    model = values.get("model")
    model_path = None
    if isinstance(model, str) and model:
        try:
            from strata.engine.models import resolve_model  # an id, a path, an earlier setup's default path

            model_path = str(resolve_model("model", model))
        except (ImportError, FileNotFoundError, OSError):
            model_path = None
    folder = values.get("conversation_cache_cold_dir", values.get("conversation_cache_spill_dir"))
    budget = values.get("conversation_cache_cold_mib", values.get("conversation_cache_disk_mib"))
    cold = (os.path.expanduser(folder) if isinstance(folder, str) and folder and isinstance(budget, int)
            and not isinstance(budget, bool) and budget > 0 else None)
    if cold is not None and not os.path.isdir(cold):   # its drive not mounted now: not made on the one below
        cold = None
    return model_path, cold


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def previous_answers(path: Path, model_path: str | None) -> PreviousAnswers | None:
    """The answers the file at `path` gave to the questions setup asks (its context, slots, disk level and
    budget), for a re-run to propose; `model_path`: its model, resolved (previous_choices). None: no file, or
    one that cannot be read. A value of the wrong type is left out (the recommendation is proposed)."""
    values, _, unreadable = config_file.previous_file(path)
    if unreadable or not values:
        return None
    folder = values.get("conversation_cache_cold_dir", values.get("conversation_cache_spill_dir"))
    budget = _count(values.get("conversation_cache_cold_mib", values.get("conversation_cache_disk_mib")))
    if isinstance(folder, str) and folder and budget:
        cold_dir = str(Path(folder).expanduser().absolute())   # as flow.accept records the answered folder
    elif budget == 0 or (isinstance(folder, str) and not folder):
        cold_dir = ""
    else:
        cold_dir = None                                       # not set: the server's default, not a choice
    return PreviousAnswers(model=model_path, ctx=_count(values.get("ctx")), batch=_count(values.get("batch")),
                           slot_ctx=_count(values.get("slot_ctx")), cold_dir=cold_dir, cold_mib=budget)


def rerun_situation(path: Path, cold_dir: str | None = None, model: str | None = None,
                    fresh: bool = False) -> Situation:
    """The starting situation of a setup that will write `path`: the model and cold folder the file there chose
    are proposed (unless --model / --cold-dir), and its other answers too unless `fresh` (the recommendation).
    A model of the file's that the model question would refuse (damaged, not one Strata runs) is not proposed:
    the default model is, with the refusal as its reason (it was proposed, then refused only after Next)."""
    their_model, their_cold = previous_choices(path)
    refused = None
    if their_model is not None and not model:
        try:
            read_model_facts(their_model)   # the check the model question's answer gets (accept)
        except ModelFileError as e:
            their_model, refused = None, str(e)
    s = starting_situation(cold_dir or their_cold, model or their_model,
                           None if model or their_model is None else PREVIOUS_MODEL_REASON)
    if refused is not None and s.default_model is not None:
        s = replace(s, default_model_reason=f"the default model: the configuration's own cannot be used ({refused})")
    return s if fresh else replace(s, previous=previous_answers(path, their_model))


def models_folder() -> str | None:
    """The folder `strata models` searches for the user's own GGUF files (None without the engine)."""
    try:
        from strata.engine.models import user_models_dir
    except ImportError:
        return None
    return str(user_models_dir())


def cuda_built() -> bool:
    """Whether the native engine was built with its CUDA backend (False when it cannot be imported)."""
    try:
        from strata import _engine

        return bool(dict(_engine.build_info()).get("cuda"))
    except Exception:  # no native module in this checkout: plan for the CPU
        return False


def accept(s: Situation, a: Answers, q: Question, value) -> tuple[Situation, Answers]:
    """Record `value` for `q`, measuring what the answer points at. Raises AnswerError with the reason."""
    if q.key == "model" and not (s.model is not None and s.model.path == str(value)):
        try:
            s = replace(s, model=read_model_facts(value), bench=None)
        except ModelFileError as e:
            raise ModelRefused(str(e)) from None
        value = s.model.path
    elif q.key == "cold_dir":
        folder = Path(value).expanduser().absolute()
        if str(folder) != s.cold_disk.folder:
            try:
                s = replace(s, cold_disk=disk_facts(folder))
            except OSError as e:
                raise AnswerError(f"cannot tell the free space at {folder}: {e.strerror or e}") from None
        if not s.cold_disk.reports_size:   # before the write probe: a mkdir under /sys/fs/cgroup makes a cgroup
            raise AnswerError(cold_folder_problem(s.cold_disk))
        check_writable(folder)
        if problem := cold_folder_problem(s.cold_disk):
            raise AnswerError(problem)
        value = str(folder)
    return s, apply_answer(a, q.key, value)


def check_writable(folder: Path) -> None:
    """Create `folder` if needed and write one small file there; AnswerError naming the problem."""
    blocker = folder
    while not blocker.exists() and blocker != blocker.parent:   # the nearest part of the path that is there
        blocker = blocker.parent
    if blocker.exists() and not blocker.is_dir():   # mkdir says "File exists" / "Not a directory" of a file there
        raise AnswerError(f"cannot write to {folder}: {blocker} is a file, not a folder")
    try:
        folder.mkdir(folders.PRIVATE_FOLDER_MODE, parents=True, exist_ok=True)   # the server keeps conversations there
        probe = folder / f".strata-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"strata")
        probe.unlink()
    except OSError as e:
        raise AnswerError(f"cannot write to {folder}: {e.strerror or e}") from None
    if not os.access(folder, os.W_OK):
        raise AnswerError(f"cannot write to {folder}: permission denied")


def with_bench(s: Situation, report: BenchReport) -> Situation:
    """`s` with the bench's speeds and the measured cold folder (same folder: speeds kept)."""
    disk = report.disk if report.disk.folder == s.cold_disk.folder else s.cold_disk
    return replace(s, bench=report.bench, cold_disk=disk)


def finish(s: Situation, a: Answers, path: Path | None) -> tuple[Plan, Path]:
    """Make the plan and write it (default: $STRATA_CONFIG, else the platform config folder).
    Returns (plan, path written)."""
    target = Path(path).expanduser() if path else config_file.configured_path()
    plan = plan_for(s, a, target)
    return plan, config_file.write(plan, target, datetime.now().astimezone())


def plan_for(s: Situation, a: Answers, target: Path | None) -> Plan:
    """The plan for the file at `target`: make_plan's, with what the file there set by hand that setup never
    decides otherwise (a warm level) kept."""
    plan = make_plan(s, a)
    if target is None:
        return plan
    previous, _, _ = config_file.previous_file(target)
    return config_file.with_hand_set(plan, previous)


def format_plan(plan: Plan) -> list[str]:
    """The plan as lines: `key = value` and its reason, then the warnings."""
    width = max(len(c.key) for c in plan.choices)
    lines = []
    for c in plan.choices:
        shown = c.value if c.value != "" else '""'
        lines.append(f"  {c.key:<{width}} = {shown}")
        lines.append(f"  {'':<{width}}   {c.reason}")
    lines.extend(f"  WARNING: {w}" for w in plan.warnings)
    return lines
