"""From validated API messages to prompt tokens, and from the model's answer back to text and tool calls.

Both APIs normalise their messages to one shape (OpenAI's chat messages: system / user / assistant with
`tool_calls` / tool) before the model's chat template renders them (`engine.apply_chat_template`; for a
template without tool support the text teammate's `render_tools_into_system` writes the tools into the
system prompt, see docs/api.md). The answer comes back through one of two formats (`AnswerFormat`, found
by `answer_format` from the model's vocabulary): text with an optional `<think>` block (`[THINK]` for
Mistral's vocabularies, `<seed:think>` for Seed-OSS's; reasoning.py) and tool-call blocks
(chat_template.parse_tool_calls; Mistral's, GLM's and Seed-OSS's in the engine's mistral.py, glm.py and
seed.py, each for a vocabulary with its markup token), or gpt-oss's Harmony
channels (harmony.py);
`split_answer` reads a whole answer, `AnswerStream` a streamed one, the same way for all three APIs.
Not here: request validation (openai_api / anthropic_api / responses_api).
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from strata.engine.bare_call_scan import body_start
from strata.engine.chat_template import parse_tool_calls, tool_parameter_types
from strata.engine.code_fences import CallBlockHold, CodeScan
from strata.engine.cut_call import (
    CALL_OPENERS,
    open_block,
    read_cut_bare_call,
    read_cut_call,
)
from strata.engine.glm import read_cut_glm_call
from strata.engine.harmony import HarmonyStream, is_harmony_vocabulary, parse_harmony
from strata.engine.mistral import keep_written_ids, read_cut_mistral_call
from strata.engine.seed import read_cut_seed_call
from strata.server.errors import APIError
from strata.server.jobs import StopMatcher
from strata.server.off_loop import off_loop
from strata.server.reasoning import (
    THINK_TAGS,
    ReasoningGate,
    reasoning_tags,
    reasoning_token_count,
    split_reasoning,
    thinking_opened,
)

REASONING_EFFORTS = ("low", "medium", "high")     # gpt-oss's template: "Reasoning: <effort>"
EFFORT_ALIASES = {"none": "low", "minimal": "low", "xhigh": "high", "max": "high"}   # OpenAI's other levels
# after the prompt's "<|start|>assistant": llama.cpp's continuation of a final message (common/parsers/gpt-oss.cpp),
# an analysis message (the prefill's reasoning: none) before the final message that the prefill starts
HARMONY_FINAL = "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>"


async def render_chat_async(engine: Any, messages: list[dict], tools: list[dict] | None,
                            prefill: str = "", template_vars: dict[str, Any] | None = None,
                            fits: Callable[[int], None] | None = None) -> list[int]:
    """`render_chat` in a worker thread (off_loop): a long conversation's template and tokenizer work (tens of
    milliseconds at 100K tokens) must not hold up the event loop and everyone's streams."""
    return await off_loop(render_chat, engine, messages, tools, prefill, template_vars, fits)


def render_chat(engine: Any, messages: list[dict], tools: list[dict] | None, prefill: str = "",
                template_vars: dict[str, Any] | None = None, fits: Callable[[int], None] | None = None) -> list[int]:
    """Token ids of the chat prompt with the generation prompt appended, then `prefill` (the start of the
    answer the client wrote: the model continues it). `template_vars` are more variables for the template
    (`reasoning_effort`). A template that refuses the messages' shape (some insist on one leading system
    message and alternating turns, which agents do not keep) renders them again in that shape
    (`alternating`), then with the system prompt folded into the first user turn for templates that have
    no system role (Gemma 1 / 2's); the messages as sent stay first, so that a template that takes them
    renders exactly what the client sent. `fits`: see `tokenized`."""
    problem = getattr(engine, "chat_template_problem", None)
    if problem:   # the server's model, not these messages: said as such (the start-up warned of it too)
        raise APIError(500, f"the model's chat template is unusable ({problem}): this server cannot turn messages "
                       "into a prompt for this model; /v1/completions (a prompt as text) still works. Use a model "
                       "file whose template parses (re-download it, or convert it with a current llama.cpp)")
    extra = template_vars or {}
    try:
        text = _render_any_shape(engine, messages, tools, extra)
    except (ValueError, TypeError, KeyError) as e:
        if extra and _renders_without(engine, messages, tools):   # the variables broke it, not the messages
            shown = ", ".join(f"{k}={v!r}" for k, v in extra.items())
            why = str(e).removeprefix("chat template failed on these messages: ")   # the messages are fine
            raise APIError(400, f"the model's chat template could not render with the template variables {shown} "
                           f"(chat_template_kwargs): {why}", param="chat_template_kwargs") from None
        raise APIError(400, f"the model's chat template could not render these messages: {e}") from None
    if prefill and getattr(getattr(engine, "chat_template", None), "harmony", False):
        prefill = HARMONY_FINAL + prefill      # the client's start of the answer is the final message's
    return tokenized(engine, text + prefill, fits)


def _render_any_shape(engine: Any, messages: list[dict], tools: list[dict] | None, extra: dict[str, Any]) -> str:
    """The messages as sent rendered, else in the first strict shape the template takes; the first error.
    A template that takes the messages but leaves out a system message after the first (SmolLM3's and
    gpt-oss's write only the leading one) also gets the strict shapes, where that message is a user
    turn's text: Claude Code's environment and date come in such a message. So does one that takes a
    system message after the first now but will refuse the conversation's next turn (Mistral Small 3.2's
    counts it as a turn of the alternation: after a user message it passes as the assistant's, and the
    next answer and question break the alternation): the next turn is rendered in the strict shape, so
    this one is too, and the next turn's prompt begins with all of this one's."""
    try:
        text = engine.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, **extra)
    except (ValueError, TypeError, KeyError) as first:
        for shape, shape_tools in _strict_shapes(engine, messages, tools or None):
            try:
                return engine.apply_chat_template(shape, tools=shape_tools, add_generation_prompt=True, **extra)
            except (ValueError, TypeError, KeyError):
                continue
        raise first from None
    if not dropped_system_messages(messages, text) and _renders_next_turn(engine, messages, tools, extra):
        return text
    for shape, shape_tools in _strict_shapes(engine, messages, tools or None):
        try:
            shaped = engine.apply_chat_template(shape, tools=shape_tools, add_generation_prompt=True, **extra)
        except (ValueError, TypeError, KeyError):
            continue
        if not dropped_system_messages(messages, shaped) and _renders_next_turn(engine, shape, shape_tools, extra):
            return shaped
    return text


# a next turn for the probe of _renders_next_turn: an answer and a question
NEXT_TURN = [{"role": "assistant", "content": "."}, {"role": "user", "content": "."}]


def _renders_next_turn(engine: Any, messages: list[dict], tools: list[dict] | None, extra: dict[str, Any]) -> bool:
    """Whether the template also takes these messages followed by an answer and a question, asked only of
    messages with a system message after the first (the only ones a strict template takes now and
    refuses a turn later)."""
    if not any(m.get("role") == "system" for m in messages[1:]):
        return True
    try:
        engine.apply_chat_template(messages + NEXT_TURN, tools=tools or None, add_generation_prompt=True, **extra)
    except (ValueError, TypeError, KeyError):
        return False
    return True


def dropped_system_messages(messages: list[dict], text: str) -> bool:
    """Whether the rendered `text` lacks the text of a system message after the first message."""
    return any(m.get("role") == "system" and isinstance(m.get("content"), str) and m["content"].strip()
               and m["content"].strip() not in text for m in messages[1:])


def _renders_without(engine: Any, messages: list[dict], tools: list[dict] | None) -> bool:
    try:
        _render_any_shape(engine, messages, tools, {})
    except (ValueError, TypeError, KeyError):
        return False
    return True


def _strict_shapes(engine: Any, messages: list[dict], tools: list[dict] | None) -> list[tuple[list[dict], Any]]:
    """The (messages, tools) render_chat tries after the messages as sent, each different from the one
    before. For a template without tool support the folded shape carries the tools and calls as text
    already (the template's own fallback would put a system message back)."""
    from strata.engine.chat_template import render_tools_into_system

    shapes: list[tuple[list[dict], Any]] = [(alternating(messages), tools)]
    template = getattr(engine, "chat_template", None)
    has_tool_messages = any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)
    if template is not None and not getattr(template, "supports_tools", True) and (tools or has_tool_messages):
        shapes.append((system_folded(alternating(render_tools_into_system(messages, tools))), None))
    else:
        shapes.append((system_folded(alternating(messages)), tools))
    out: list[tuple[list[dict], Any]] = []
    for shape in shapes:
        if shape[0] != messages and shape not in out:
            out.append(shape)
    return out


def system_folded(messages: list[dict]) -> list[dict]:
    """A leading system message joined to the first user message (blank line between), for templates that
    raise on a system role; unchanged without one."""
    if not messages or messages[0]["role"] != "system":
        return messages
    system, rest = messages[0], list(messages[1:])
    first_user = next((i for i, m in enumerate(rest) if m["role"] == "user"), None)
    if first_user is None:
        return [{**system, "role": "user"}, *rest]
    user = rest[first_user]
    rest[first_user] = {**user, "content": f"{system['content']}\n\n{user['content']}"}
    return rest


def alternating(messages: list[dict]) -> list[dict]:
    """The messages in the shape strict templates want: system messages after the first turn become user
    messages, and consecutive system or user messages are joined by a blank line (tool results and
    assistant turns stay as they are). A user message right after tool results (Anthropic's tool_result
    blocks with text beside them) joins the last result: Mistral's templates take a user turn only after
    an assistant's text."""
    out: list[dict] = []
    for m in messages:
        if m["role"] == "system" and any(x["role"] != "system" for x in out):
            m = {**m, "role": "user"}
        last = out[-1] if out else None
        joins = m["role"] == "user" and last is not None and last["role"] == "tool"
        if joins or (last is not None and m["role"] == last["role"] and m["role"] in ("system", "user")):
            out[-1] = {**last, "content": f"{last['content']}\n\n{m['content']}"}
        else:
            out.append(m)
    return out


def split_prefill(messages: list[dict]) -> tuple[list[dict], str]:
    """(messages, prefill): a last assistant message without tool calls is not a finished turn but the
    start of the answer (Anthropic's prefill): the answer continues its text. An empty one (only
    thinking blocks) is dropped."""
    last = messages[-1] if messages else None
    if last is None or last.get("role") != "assistant" or last.get("tool_calls"):
        return messages, ""
    return messages[:-1], str(last.get("content") or "")


def only_named_tool(tools: list[dict], name: Any) -> list[dict]:
    """A tool_choice naming one function (either API): only that tool is offered; 400 when it is not in
    'tools'. `tools` are in the normalised (OpenAI function) shape."""
    return only_named_tools(tools, [("'tool_choice'", name)])


def only_named_tools(tools: list[dict], named: list[tuple[str, Any]]) -> list[dict]:
    """The offered tools a tool_choice names, as (where it names it, name) pairs (one named function, or
    `allowed_tools`): 400 for a name not in 'tools'. `tools` are in the normalised shape."""
    offered = {t["function"]["name"] for t in tools}
    for where, name in named:
        if not isinstance(name, str) or not name:
            raise APIError(400, f"{where}: each tool needs a non-empty string 'name'; got {name!r}", param="tool_choice")
        if name not in offered:
            raise APIError(400, f"{where} names {name!r}, which is not in 'tools'", param="tool_choice")
    names = {name for _, name in named}
    return [t for t in tools if t["function"]["name"] in names]


def conversation_key(messages: list[dict]) -> str:
    """Names a conversation by its system prompt and first user message (stable across its turns)."""
    system = next((m for m in messages if m.get("role") == "system"), None)
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    h = hashlib.sha256()
    for m in (system, first_user):
        h.update(json.dumps(m.get("content") if m else None, sort_keys=True, default=str).encode())
        h.update(b"\x00")
    return h.hexdigest()[:12]


def tokens_key(tokens: list[int]) -> str:
    """Conversation key of a raw-token prompt (/v1/completions): its first 256 tokens."""
    return hashlib.sha256(json.dumps(tokens[:256]).encode()).hexdigest()[:12]


def check_fits(n_prompt: int, capacity: int, api: str = "openai", param: str = "messages", trained: int = 0,
               at_least: bool = False, room: int = 1) -> None:
    """A prompt must leave `room` in the largest context: at least one generated token, or 0 for a prompt only
    scored (/v1/completions' `echo` with `max_tokens` 0, lm-eval-harness's loglikelihood of a whole --ctx window:
    it needs the prompt's rows alone). Worded as each
    API words it ("maximum context length" / "prompt is too long"), which is what agents look for in the
    message to compact their conversation and retry; `param` is the field the prompt came from (`messages`,
    completions' `prompt`, Responses' `input`). `trained`, the model's trained context (0: unknown), decides
    the way on: a larger --ctx only while the context is below it (past it the answers are unreliable, as the
    start-up warning says), else a shorter conversation. `at_least`: `n_prompt` is the fewest tokens the prompt
    can be (fewest_tokens), not its count: refused only past the context, and said so."""
    if room not in (0, 1):
        raise ValueError(f"room must be 0 (a prompt only scored) or 1 (one token generated at least), got {room!r}")
    if n_prompt + room > capacity:
        counted = "counted from its size, without tokenizing it; " if at_least else ""
        needs = " and the answer needs at least one" if room else ""
        hint = f"{counted}the context holds {capacity}{needs}; " + (
            f"the model was trained on {trained} tokens, so a larger --ctx would give unreliable answers: "
            "shorten the conversation" if 0 < trained <= capacity else "start the server with a larger --ctx")
        if api == "anthropic":
            message = f"prompt is too long: {n_prompt} tokens > {capacity - room} maximum ({hint})"
        else:
            message = (f"This model's maximum context length is {capacity} tokens. However, the prompt is "
                       f"{'at least ' if at_least else ''}{n_prompt} tokens ({hint}).")
        raise APIError(400, message, param=param, code="context_length_exceeded")
    if n_prompt == 0 and not at_least:
        raise APIError(400, "the prompt is empty", param="prompt")


def check_prompt_fits(engine: Any, n_prompt: int, api: str = "openai", param: str = "messages",
                      at_least: bool = False, room: int = 1) -> None:
    """check_fits against the loaded engine's largest context and the model's trained one."""
    check_fits(n_prompt, engine.context_capacity(0), api=api, param=param,
               trained=int(getattr(engine, "n_ctx_train", 0) or 0), at_least=at_least, room=room)


def fewest_tokens(n_bytes: int, longest_token_bytes: int) -> int:
    """The fewest tokens a text of `n_bytes` bytes can be, when no token stands for more than
    `longest_token_bytes` of them (0, unknown: 0, no bound)."""
    return -(-n_bytes // longest_token_bytes) if longest_token_bytes > 0 else 0


def fits_check(engine: Any, api: str = "openai", param: str = "messages", room: int = 1) -> Callable[[int], None]:
    """What `tokenized` gives a prompt's fewest tokens to: the usual too-long 400 when even those cannot fit."""
    return functools.partial(check_prompt_fits, engine, api=api, param=param, at_least=True, room=room)


def tokenized(engine: Any, text: str, fits: Callable[[int], None] | None = None) -> list[int]:
    """`text`'s tokens, special tokens parsed. `fits` (fits_check), when given, is first told the fewest tokens
    the text can be: a prompt of megabytes that cannot fit is refused in milliseconds, not after the seconds of
    tokenizing that held a worker thread (eight 10 MB prompts kept a small chat waiting 78 s). Counting
    endpoints give none: they measure."""
    if fits is not None:
        longest = int(getattr(getattr(engine, "tokenizer", None), "longest_token_bytes", 0) or 0)
        fits(fewest_tokens(len(text.encode("utf-8", "surrogatepass")), longest))
    return list(engine.tokenize(text, special=True))


def split_tool_calls(text: str, tools: list[dict] | None, mistral: bool = False,
                     glm: bool = False, seed: bool = False, answer_end: bool = True) -> tuple[str, list[dict[str, str]]]:
    """(content, calls): calls parsed only when the request offered tools (their parameters' schema
    types type the values of XML calls); Mistral's `[TOOL_CALLS]NAME[ARGS]` calls when `mistral` (the
    model's vocabulary has that token: another model's text that mentions the format is text); GLM's
    `<tool_call>NAME<arg_key>...` calls when `glm` (the vocabulary has the `<arg_key>` token), Seed-OSS's
    `<seed:tool_call>` blocks when `seed` (the vocabulary has that token), likewise. `answer_end` False:
    the answer so far, which may go on (parse_tool_calls)."""
    if not tools:
        return text, []
    return parse_tool_calls(text, tool_parameter_types(tools), mistral=mistral, glm=glm, seed=seed,
                            offered=tool_names(tools), answer_end=answer_end)


def tool_names(tools: list[dict]) -> frozenset[str]:
    """The offered tools' names (the OpenAI function shape or Anthropic's)."""
    fns = (t.get("function", t) if isinstance(t, dict) else None for t in tools)
    return frozenset(fn["name"] for fn in fns if isinstance(fn, dict) and isinstance(fn.get("name"), str))


def call_id(prefix: str, call: dict | None = None) -> str:
    """A new id for a parsed call, or the id the model wrote for it (Mistral Small 3.2's `[CALL_ID]`: handed
    out as written, so that its template renders the call back exactly as the model wrote it)."""
    written = call.get("id") if call else None
    return written if isinstance(written, str) and written else f"{prefix}{uuid.uuid4().hex[:24]}"


# Where a tool call can begin in a model's answer (see strata.engine.chat_template.parse_tool_calls):
# blocks anywhere (Mistral's `[TOOL_CALLS]name[ARGS]{...}` too, for its vocabularies), a bare JSON call only
# as the whole answer.
TOOL_BLOCK_MARKERS = ("<tool_call>", "<TOOLCALL>")
MISTRAL_CALL_MARKER = "[TOOL_CALLS]"
GLM_ARG_MARKER = "<arg_key>"       # GLM-4.5+ vocabularies have it as a token (their calls: engine glm.py)
SEED_CALL_MARKER = "<seed:tool_call>"   # Seed-OSS's vocabulary has it as a token (its calls: engine seed.py)
LLAMA_CALL_MARKER = "<|python_tag|>"    # Llama 3.1 / 3.2 / 3.3's vocabularies have it as a token


def may_be_bare_call(head: str) -> bool:
    """Whether an answer that starts with `head` (no leading whitespace) can still be a bare JSON call as
    parse_tool_calls reads one: after an optional `<|python_tag|>` / `[TOOL_CALLS]`, a `{` or `[`, bare or
    as the first thing inside a code fence with no language or `json`. A fence of another language
    (```python) cannot be one, so a coding answer streams instead of being held to its end. The way to the
    JSON is read once, by bare_call_scan.body_start, which tool_choice none's watch for Llama 3's calls uses."""
    return body_start(head) is not None


class ToolTextGate:
    """Streams an answer's text while it cannot be part of a tool call, when tools were offered: text
    before a `<tool_call>` block goes out as it comes (a marker inside a code block opened after prose is
    text too: code_fences.py, as the readers read it, unless the block may still end the answer holding
    nothing but calls: held until it cannot); an answer that starts like a bare JSON call is held until it
    is complete. `finish(full_text)` returns the content still to send and the parsed calls."""

    def __init__(self, tools: list[dict], mistral: bool = False, glm: bool = False, seed: bool = False) -> None:
        self._tools = tools
        self._flags = (mistral, glm, seed)
        self._markers = TOOL_BLOCK_MARKERS + ((MISTRAL_CALL_MARKER,) if mistral else ()) + \
            ((SEED_CALL_MARKER,) if seed else ())
        self._matcher = StopMatcher(self._markers)
        self._calls_block = CallBlockHold(self._markers)
        self._in_code = CodeScan()  # the answer so far read once: markers in code blocks cost no rereading
        self._base = 0             # where the matcher's text begins in the answer's
        self._text = ""
        self.sent = ""
        self._held = ""            # whitespace at the end of the text so far: before a call it is not content
        self._decided = False      # the answer's start showed it is not a bare call

    def feed(self, piece: str) -> str:
        self._text += piece
        if not self._decided:
            head = self._text.lstrip()
            if not head:
                return ""
            if may_be_bare_call(head):     # held to the end (parse_tool_calls decides) or until it cannot be
                return ""
            self._decided = True
            out = self._scan(self._text)
        else:
            out = self._scan(piece)
        out = self._held + out
        hold = self._calls_block.at(self._text)     # the answer may end with a block of calls: held
        keep = len(out[:max(0, hold - len(self.sent))].rstrip() if hold is not None else out.rstrip())
        out, self._held = out[:keep], out[keep:]
        self.sent += out
        return out

    def _scan(self, piece: str) -> str:
        """The text that may go out after `piece`: up to a call's marker, past those in code blocks (no call
        was read before a marker the matcher stops at, so the answer before it is all content)."""
        out = self._matcher.feed(piece)
        while self._matcher.matched is not None:
            at = self._base + len(self._matcher.text)
            if not self._in_code(self._text[:at]):
                break
            marker = self._matcher.matched
            self._base = at + len(marker)
            self._matcher = StopMatcher(self._markers)
            out += marker + self._matcher.feed(self._text[self._base:])
        return out

    def finish(self, full_text: str, cut: bool = False,
               stopped: str | bool | None = None) -> tuple[str, list[dict[str, str]]]:
        content, calls = split_tool_calls(full_text, self._tools, *self._flags,
                                          answer_end=ended(full_text, cut, stopped))
        if not calls:
            content = full_text
        if cut or stopped:
            content, calls = with_cut_call(full_text, content, calls, self._tools, *self._flags)
        if stopped and not cut:
            content, calls = stopped_reading(full_text, content, calls, self._tools, *self._flags,
                                             stop=stopped if isinstance(stopped, str) else "")
        # the readers strip the content; what went out kept the answer's leading whitespace
        sent = self.sent if content.startswith(self.sent) else self.sent.lstrip()
        rest = content[len(sent):] if content.startswith(sent) else ""
        return rest, calls


def reasoning_effort(value: Any, param: str) -> dict[str, str]:
    """Template variables for a request's reasoning effort (OpenAI `reasoning_effort`, Responses
    `reasoning.effort`): {} when absent; OpenAI's other levels read as the nearest of gpt-oss's low /
    medium / high (EFFORT_ALIASES)."""
    if value is None:
        return {}
    value = EFFORT_ALIASES.get(value, value) if isinstance(value, str) else value
    if value not in REASONING_EFFORTS:
        known = ", ".join(sorted(set(REASONING_EFFORTS) | set(EFFORT_ALIASES)))
        raise APIError(400, f"'{param}' must be one of {known}; got {value!r}", param=param)
    return {"reasoning_effort": value}


# variables render_chat sets itself, and `self` (the render methods' own argument, which a keyword of that
# name collides with): a request cannot replace them
RESERVED_TEMPLATE_VARS = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token", "self")


def template_kwargs(value: Any, param: str = "chat_template_kwargs") -> dict[str, Any]:
    """More variables for the chat template from a request (llama.cpp's and vLLM's `chat_template_kwargs`:
    `{"enable_thinking": false}` for GLM's and Qwen3's templates, `{"clear_thinking": false}` for
    GLM-4.7's): {} when absent; an object of names to JSON values, none of RESERVED_TEMPLATE_VARS."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise APIError(400, f"'{param}' must be an object of template variables; got {value!r}", param=param)
    for name in value:
        if not name.isidentifier() or name in RESERVED_TEMPLATE_VARS:
            raise APIError(400, f"'{param}' cannot set the template variable {name!r}", param=param)
    return dict(value)


# ----- reading the answer -----

@dataclass(frozen=True)
class AnswerFormat:
    """How the model writes its answer: gpt-oss's Harmony channels (harmony.py), or text whose reasoning is
    a `<think>` block (`think`: its tags, Mistral's `[THINK]` ones for a vocabulary that has them; `opened`:
    the prompt ends inside it, reasoning.py) and whose calls are tool-call blocks (parse_tool_calls)."""

    harmony: bool = False
    opened: bool = False
    think: tuple[str, str] = THINK_TAGS
    mistral_calls: bool = False     # the vocabulary has Mistral's [TOOL_CALLS]: its calls are read
    glm_calls: bool = False         # the vocabulary has GLM's <arg_key>: its <tool_call>NAME<arg_key> calls are read
    seed_calls: bool = False        # the vocabulary has Seed-OSS's <seed:tool_call>: its blocks are read
    # the vocabulary has Llama 3.1's <|python_tag|>: its calls are bare JSON (read in every format), kept off
    # under tool_choice none with the tag (no_call_rule.py)
    llama_calls: bool = False
    # ids the request's calls and results hold: an id the model wrote again is not handed out (models copy
    # ids; Anthropic refuses repeated tool_use ids and agents pair results by id)
    taken_ids: frozenset[str] = frozenset()
    # parallel tool calls turned off (one_call.py): the answer's first call only
    one_call: bool = False
    # the prefill ends inside a call block this opens (open_call_block): the answer goes on writing that call
    call_opened: str = ""


PLAIN = AnswerFormat()


def answer_format(engine: Any, prompt: list[int], messages: Sequence[Mapping[str, Any]] = ()) -> AnswerFormat:
    """The format of the answer to `prompt` (rendered from `messages`): Harmony when the model's vocabulary
    has its markup tokens (`<|channel|>`, `<|message|>`), never from the model's name."""
    tokenizer = getattr(engine, "tokenizer", None)
    if is_harmony_vocabulary(tokenizer):
        return AnswerFormat(harmony=True)
    token_id = getattr(tokenizer, "token_id", None)

    def has(token: str) -> bool:
        return callable(token_id) and token_id(token) is not None

    tags = reasoning_tags(tokenizer)
    return AnswerFormat(opened=thinking_opened(engine, prompt, tags), think=tags,
                        mistral_calls=has(MISTRAL_CALL_MARKER), glm_calls=has(GLM_ARG_MARKER),
                        seed_calls=has(SEED_CALL_MARKER), llama_calls=has(LLAMA_CALL_MARKER),
                        taken_ids=call_ids_in(messages))


def call_ids_in(messages: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The ids of the messages' tool calls and tool results."""
    ids = {c.get("id") for m in messages for c in m.get("tool_calls") or () if isinstance(c, Mapping)}
    ids |= {m.get("tool_call_id") for m in messages}
    return frozenset(i for i in ids if isinstance(i, str) and i)


def _fresh_ids(calls: list[dict], taken: frozenset[str]) -> list[dict]:
    """The calls without the written ids the conversation already holds (call_id then makes new ones)."""
    return [{k: v for k, v in c.items() if k != "id"} if c.get("id") in taken else c for c in calls]


def split_answer(text: str, fmt: AnswerFormat, tools: list[dict] | None,
                 cut: bool = False, stopped: str | bool | None = None) -> tuple[str | None, str, list[dict]]:
    """(reasoning or None, content, calls) of a whole answer; calls only when the request offered tools (a
    call of a name not offered still comes back, in every format: the agent tells the model there is no
    such tool; held calls, structured_output.py, keep the model to the offered names). `cut`: the length
    limit ended the answer, which may end inside a call (with_cut_call); `stopped`: a stop sequence did
    (whole_calls)."""
    if fmt.harmony:
        answer = parse_harmony(text, tool_names(tools or []))
        calls = harmony_stopped(answer.calls) if stopped and not cut else answer.calls
        return answer.reasoning, answer.content, _first_if_one(calls, fmt) if tools else []
    reasoning, rest = split_reasoning(text, fmt.opened, fmt.think)
    text = fmt.call_opened + rest
    content, calls = split_tool_calls(text, tools, fmt.mistral_calls, fmt.glm_calls, fmt.seed_calls,
                                      answer_end=ended(text, cut, stopped))
    if cut or stopped:
        content, calls = with_cut_call(text, content, calls, tools, fmt.mistral_calls, fmt.glm_calls, fmt.seed_calls)
    if stopped and not cut:
        content, calls = stopped_reading(text, content, calls, tools, fmt.mistral_calls, fmt.glm_calls,
                                         fmt.seed_calls, stop=stopped if isinstance(stopped, str) else "")
    return reasoning, _less_opened(content, fmt), _fresh_ids(_first_if_one(calls, fmt), fmt.taken_ids)


def stopped_reading(text: str, content: str, calls: list[dict], tools: list[dict] | None,
                    mistral: bool = False, glm: bool = False, seed: bool = False,
                    stop: str = "") -> tuple[str, list[dict]]:
    """(content, calls) of an answer `text` a stop sequence ended, read as a cut one (with_cut_call): the cut
    call left out (whole_calls), and so is a Qwen3-Coder XML call the stop cut before its `</function>`, which
    the whole reader takes without its closing tags (a call of the values written so far, an agent would run
    it): the answer is then what came before that call, its block closed after the functions it wrote whole (the
    reader takes several in one block: only the last can be cut), or what came before the block."""
    calls = whole_calls(calls, closed=stop.lstrip().startswith(CALL_CLOSERS))
    at = open_block(text, CodeScan()) if calls else None
    last = text.rfind("<function=", at) if at is not None else -1
    if last < 0 or "</function>" in text[last:]:
        return content, calls
    opener = next(o for o in CALL_OPENERS if text.startswith(o, at))
    head = text[:last] + "</" + opener[1:] if "</function>" in text[at:last] else text[:at]
    before, calls = split_tool_calls(head, tools, mistral, glm, seed)
    return (before if calls else head.rstrip()), calls


# a call's closing tags: a stop sequence that begins with one cut nothing of the call it ends
CALL_CLOSERS = tuple("</" + o[1:] for o in CALL_OPENERS) + ("</seed:tool_call>",)


def harmony_stopped(calls: list[dict]) -> list[dict]:
    """The calls of a Harmony answer a stop sequence ended: a call ends the answer at its `<|call|>` (an end
    token, no stop sequence), so a last call whose arguments are not a whole object is one the stop sequence
    cut (`Par` in `{"city": "Paris"}`: '{"city": "'), left out as whole_calls leaves the other formats' out."""
    return calls[:-1] if calls and not _whole_object(calls[-1].get("arguments")) else calls


def whole_calls(calls: list[dict], closed: bool = False) -> list[dict]:
    """The calls of an answer a stop sequence ended, less the one it cut (with_cut_call's `"cut"` call): read as
    a cut call, so that its markup is not the answer's text (the stop sequence `Par` inside `{"city": "Paris"}`
    gave the text `<tool_call>\n{"name": "get_weather", "arguments": {"city": "`), and left out, since the stop
    reason does not say the call is not whole as the length one does: an agent would run it. A call whose
    arguments were written whole (the stop sequence cut only its closing tag, as a client's `</tool_call>`
    stop does) is a whole call; so is one the stop sequence `closed` (it begins with the call's closing tag: what the
    model wrote next ended the call), its arguments' object closed: a GLM call's values end with the tag alone, so
    its cut reader leaves the object open after `</arg_value>`, and the call was dropped."""
    out = []
    for c in calls:
        if not c.get("cut"):
            out.append(c)
            continue
        arguments = next((a for a in (c.get("arguments"), (c.get("arguments") or "") + "}" if closed else None)
                          if _whole_object(a)), None)
        if arguments is not None:
            out.append({**{k: v for k, v in c.items() if k != "cut"}, "arguments": arguments})
    return out


def _whole_object(arguments: Any) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except (TypeError, ValueError):
        return False


def ended(text: str, cut: bool, stopped: str | bool | None = None) -> bool:
    """Whether an answer `text` is read as ended (parse_tool_calls' answer_end): a code block opened after
    prose that it ends with holding nothing but calls is its calls. Not when the length limit cut it inside
    such a block (its closing fence not written): the model was still writing the block, an example as
    likely as a call, and an example run as a call is an action the model did not take (the text, with
    the length finish reason, is the safer reading). A block opening the answer is read as before. A stop
    sequence (`stopped`, the one that matched when known) is read as the length limit is, unless it is what
    closes the block (a client's ``` stop: the model's own closing fence, its calls whole calls)."""
    if stopped and not cut:
        return ended(text + stopped, True) if isinstance(stopped, str) else ended(text, True)
    return not (cut and CodeScan()(text + "\n"))     # a closing fence on the last line closes it


def open_call_block(prefill: str) -> str:
    """The end of a prefill (the client's start of the answer, Anthropic's) from a `<tool_call>` opening that
    nothing closes after it, outside a code block: the answer writes the rest of that call, which is read
    with it (AnswerFormat.call_opened); "" when the prefill does not end inside one."""
    at = open_block(prefill, CodeScan())   # a tag inside the open call's JSON string is the string's
    return "" if at is None else prefill[at:]


def _less_opened(content: str, fmt: AnswerFormat) -> str:
    """The content without the prefill's part of a call block it opened that did not read as a call (the
    client wrote it: the answer's content is what the model wrote)."""
    return content[len(fmt.call_opened):] if fmt.call_opened and content.startswith(fmt.call_opened) else content


def with_cut_call(text: str, content: str, calls: list[dict], tools: list[dict] | None,
                  mistral: bool = False, glm: bool = False, seed: bool = False) -> tuple[str, list[dict]]:
    """(content, calls) of an answer `text` the length limit cut, whose whole calls split_tool_calls read
    (`content`, `calls`), when it ends inside a call: a `[TOOL_CALLS]` call when `mistral` (the vocabulary
    has that token: mistral.read_cut_mistral_call), a GLM `<tool_call>NAME<arg_key>` call when `glm`
    (glm.read_cut_glm_call) or a `<seed:tool_call>` block when `seed` (seed.read_cut_seed_call), the flags
    as split_tool_calls reads whole calls, each read from `text` where the whole reader's run of calls
    gets to; a `<tool_call>` block at the end of the content (cut_call.read_cut_call); or a bare JSON call
    cut as the whole answer (cut_call.read_cut_bare_call: a list's calls written whole, then the cut one).
    The block is not content; the call as far as it was written is the last call when it got as far as
    an offered tool's name (`"cut": True`: OpenAI gives it back with its arguments as written, Anthropic
    with the members written whole, both with the length stop reason; Small 3.2's id when the model wrote
    it whole, as for a whole call)."""
    found = read_cut_mistral_call(text, tool_names(tools)) if tools and mistral else None
    if found is None and tools and glm:
        found = read_cut_glm_call(text, tool_names(tools), tool_parameter_types(tools))
    if found is None and tools and seed:
        found = read_cut_seed_call(text, tool_names(tools), tool_parameter_types(tools))
    if found is None and tools:
        found = read_cut_call(content, tool_names(tools), CodeScan())
        # after whole calls of those formats a `<tool_call>` block is text, as parse_tool_calls reads it (it
        # reads such blocks only when those readers read no call): the blocks' reader only for the blocks'
        # calls. Read again only when there is such a block and a flag may have read other calls: the whole
        # reader's block search is quadratic in the blocks, so reading it twice for every cut answer doubled
        # that (a 4,000-token answer of 200 calls: 56 ms more)
        if found is not None and calls and (mistral or glm or seed) and split_tool_calls(text, tools, answer_end=ended(text, True))[1] != calls:
            found = None
    if found is None and tools and not calls:     # a bare call is read only as the whole answer
        bare = read_cut_bare_call(content, tool_names(tools))
        if bare is not None:
            keep_written_ids(bare[1])    # Nemo's ids, as for the list not cut (parse_tool_calls)
            return bare
    if found is None:
        return content, calls
    before, call = found
    if call is None:
        return before, calls
    calls = [dict(c) for c in calls] + [call]
    if "id" in call:
        keep_written_ids(calls)      # Small 3.2's id: not handed out when a whole call of the answer has it too
    return before, calls


def _first_if_one(calls: list[dict], fmt: AnswerFormat) -> list[dict]:
    """The calls an answer carries: only the first when parallel calls are off (calls that closed together,
    one_call.py)."""
    return calls[:1] if fmt.one_call else calls


# a gpt-oss answer's reasoning: its analysis message, which opens the answer and ends at <|end|>
HARMONY_ANALYSIS_TAGS = ("<|channel|>analysis", "<|end|>")


def reasoning_tokens(tokens: Sequence[int], fmt: AnswerFormat, tokenizer: Any) -> int:
    """How many of an answer's tokens are its reasoning (OpenAI's `reasoning_tokens`): those of the
    `<think>` block split_answer reads as reasoning, or of gpt-oss's analysis message."""
    if tokenizer is None or not tokens:
        return 0
    pieces = [tokenizer.token_bytes(int(t)) for t in tokens]
    if fmt.harmony:
        return reasoning_token_count(pieces, False, HARMONY_ANALYSIS_TAGS)
    return reasoning_token_count(pieces, fmt.opened, fmt.think)


class AnswerStream:
    """A streamed answer read as split_answer reads it: `feed(piece)` gives ("reasoning" | "text", str)
    pieces that may go out now (text that may still be a tool call is held); `finish(full_text)` gives
    (the last pieces, the text still to send after them, the calls)."""

    def __init__(self, fmt: AnswerFormat, tools: list[dict] | None) -> None:
        self._tools = tools
        self._fmt = fmt
        self._harmony = HarmonyStream(tool_names(tools or [])) if fmt.harmony else None
        self._thinking = ReasoningGate(fmt.opened, fmt.think)
        self._gate = (ToolTextGate(tools, fmt.mistral_calls, fmt.glm_calls, fmt.seed_calls)
                      if tools and not fmt.harmony else None)
        if self._gate is not None and fmt.call_opened:
            self._gate.feed(fmt.call_opened)      # held (a call's opening), never sent: the client wrote it

    def feed(self, piece: str) -> list[tuple[str, str]]:
        if self._harmony is not None:
            return self._harmony.feed(piece)
        return self._gated(self._thinking.feed(piece))

    def _gated(self, pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
        out = []
        for kind, text in pieces:
            if kind == "text" and self._gate is not None:
                text = self._gate.feed(text)
            if text:
                out.append((kind, text))
        return out

    def finish(self, full_text: str, cut: bool = False,
               stopped: str | bool | None = None) -> tuple[list[tuple[str, str]], str, list[dict]]:
        """`cut`: the length limit ended the answer; `stopped`: a stop sequence did (split_answer)."""
        if self._harmony is not None:
            pieces = self._harmony.finish()      # before the calls: finishing reads the last one
            calls = harmony_stopped(self._harmony.calls) if stopped and not cut else self._harmony.calls
            return pieces, "", _first_if_one(calls, self._fmt) if self._tools else []
        pieces = self._gated(self._thinking.finish())
        if self._gate is None:
            return pieces, "", []
        rest, calls = self._gate.finish(self._fmt.call_opened + split_reasoning(full_text, self._fmt.opened,
                                                                               self._fmt.think)[1], cut,
                                     stopped)
        rest = _less_opened(rest, self._fmt)
        return pieces, rest, _fresh_ids(_first_if_one(calls, self._fmt), self._fmt.taken_ids)
