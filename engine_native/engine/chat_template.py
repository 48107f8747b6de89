"""Chat templates: messages (and tools) -> the prompt text a model was trained on; tool calls back out.

What it is:
- `ChatTemplate(template, bos_token, eos_token).render(messages, tools=None, add_generation_prompt=True,
  **extra)`: renders a GGUF's `tokenizer.chat_template` (a Hugging Face Jinja template) in an
  `ImmutableSandboxedEnvironment` with what HF templates expect: `messages`, `tools`,
  `add_generation_prompt`, `bos_token`, `eos_token`, `raise_exception(msg)`, `strftime_now(fmt)`,
  a `tojson` filter with `indent`/`ensure_ascii`/`separators`/`sort_keys`, loop controls
  (`{% break %}`), `trim_blocks` and `lstrip_blocks`. Messages are normalised first: `content`
  None becomes "", a list of content parts becomes the concatenation of its text parts, and a tool
  call's `arguments` given as a JSON string (the OpenAI wire form) becomes the object most templates
  expect (a template that fails on objects is rendered again with the JSON string). `ChatTemplate.from_metadata(metadata, tokenizer)` falls back to ChatML when the file has
  no template.
- `render_tools_into_system(messages, tools)`: for templates that do not mention `tools`, the
  documented way Strata offers tools anyway (Hermes / Qwen 2.5 style, which small instruct models
  follow best). The returned messages:
    1. start with a system message whose content is the original system prompt (if any), a blank
       line, then this block:

           # Tools

           You may call one or more functions to assist with the user query.

           You are provided with function signatures within <tools></tools> XML tags:
           <tools>
           {one tool as compact JSON per line}
           </tools>

           For each function call, return a json object with function name and arguments within
           <tool_call></tool_call> XML tags:
           <tool_call>
           {"name": <function-name>, "arguments": <args-json-object>}
           </tool_call>

    2. write each assistant `tool_calls` entry into the assistant's content as
       `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (after any text, one per call),
    3. turn each `tool` message into a `user` message `<tool_response>\n...\n</tool_response>`
       (consecutive tool results share one user message).
  `render` applies it by itself when tools (or tool messages) meet a template without tool support.
- `harmony_messages(messages)`: what `render` does to messages for gpt-oss's Harmony template (one that
  writes `<|channel|>`): `reasoning_content` becomes the `thinking` field it reads, one call a message.
- As llama.cpp's Jinja, `+` of an undefined value or None and a string is the string.
- `parse_tool_calls(text) -> (content, calls)`: the model's answer split into its text and its calls
  `[{"name": str, "arguments": json str}]`, for `<tool_call>{json}</tool_call>` blocks (Hermes,
  Qwen; an unterminated last block counts; also `<TOOLCALL>[...]</TOOLCALL>`, Nemotron), Qwen3-Coder's
  `<tool_call><function=NAME><parameter=P>value</parameter>...</function></tool_call>` (a value is
  what is written, one newline trimmed at each end: a string for a parameter whose schema type is
  "string" (or anyOf / oneOf with a string branch, or a string enum), else the JSON value it reads
  as, when it reads as one (never NaN / Infinity, which are not JSON); `types` from
  `tool_parameter_types(tools)`; with no schema a number, true / false / null, an object or a list
  is that value), a bare JSON object `{"name":..., "arguments"|"parameters":
  ...}` or a list of them (optionally in a ```json fence, or after `<|python_tag|>` / `[TOOL_CALLS]`),
  Mistral's `[TOOL_CALLS]NAME[ARGS]{...}` (mistral.py; its templates' messages are prepared there too),
  GLM's `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>` (glm.py; values typed
  as Qwen3-Coder's, tool_values.py).

What it is not: tokenization (`tokenizer.py`) or the API's message format conversion (the server).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.sandbox
from strata.engine.call_objects import as_call
from strata.engine.code_fences import CodeScan, closing_block, first_outside_code
from strata.engine.glm import parse_glm_calls
from strata.engine.mistral import keep_written_ids, mistral_messages, parse_mistral_calls, template_traits
from strata.engine.seed import parse_seed_calls
from strata.engine.tool_values import tool_parameter_types, typed_value  # noqa: F401 (the server's import)

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


class ChatTemplateError(ValueError):
    """A template that does not parse, raised an exception, or failed on the given messages."""


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _TemplateEnvironment(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The sandbox, with llama.cpp's leniency for `+`: an undefined or None operand beside a string is
    the empty string (gpt-oss's template writes `"// " + tool.description`, and a tool's description is
    optional in every API); and `*` / `**` that would make a value too big to hold are refused (_refuse_huge)."""

    intercepted_binops = frozenset(["+", "*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _refuse_huge(operator, left, right)
        if operator == "+":
            empty_left = left is None or isinstance(left, jinja2.Undefined)
            empty_right = right is None or isinstance(right, jinja2.Undefined)
            if empty_left and isinstance(right, str):
                return right
            if empty_right and isinstance(left, str):
                return left
        return super().call_binop(context, operator, left, right)


# A model file's template is untrusted: a repetition or a power that would fill memory (or take minutes) is
# refused before it is computed. No real template repeats more than a line of dashes or powers past a few digits.
_MAX_ITEMS = 1 << 24
_MAX_POWER_BITS = 1 << 16


def _refuse_huge(operator: str, left: Any, right: Any) -> None:
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(n, int) and len(seq) * n > _MAX_ITEMS:
                raise ChatTemplateError(f"chat template failed: '*' would make {len(seq) * n} items "
                                        f"(at most {_MAX_ITEMS})")
    elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
        bits = max(left.bit_length() - 1, 1) * right   # the result has at least this many bits
        if bits > _MAX_POWER_BITS:
            raise ChatTemplateError(f"chat template failed: '**' would make a number of {bits}+ bits "
                                    f"(at most {_MAX_POWER_BITS})")


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


# ---------------------------------------------------------------------------------------------------
# message normalisation
# ---------------------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise ChatTemplateError(f"unsupported content part {part!r}: only text parts can be rendered")
        return "".join(parts)
    raise ChatTemplateError(f"message content must be a string or a list of text parts, got {content!r}")


def _call_function(call: Mapping[str, Any]) -> tuple[str, Any]:
    fn = call.get("function", call)
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ChatTemplateError(f"tool call without a function name: {call!r}")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            pass  # keep a non-JSON string (or one nested deeper than json reads) as it is
    return fn["name"], args


def normalize_messages(messages: Any, object_arguments: bool = True) -> list[dict[str, Any]]:
    """Copies of the messages with text content and tool-call arguments as objects (or, with
    object_arguments=False, as JSON strings); errors name the message."""
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise ChatTemplateError(f"messages must be a list of objects, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ChatTemplateError(f"messages[{i}] must be an object, got {type(m).__name__}")
        if not isinstance(m.get("role"), str) or not m["role"]:
            raise ChatTemplateError(f"messages[{i}] has no role")
        msg = dict(m)
        try:
            msg["content"] = _content_text(m.get("content"))
        except ChatTemplateError as exc:
            raise ChatTemplateError(f"messages[{i}]: {exc}") from None
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                if not isinstance(call, Mapping):
                    raise ChatTemplateError(f"messages[{i}].tool_calls has a non-object entry {call!r}")
                name, args = _call_function(call)
                if not object_arguments and not isinstance(args, str):
                    args = json.dumps(args, ensure_ascii=False)
                # name first, as models write calls (the SDKs send arguments first; a template that
                # writes `function | tojson`, as Nemo's, must give back what the model wrote)
                fn = {"name": name, "arguments": args, **{k: v for k, v in dict(call.get("function", {})).items()
                                                          if k not in ("name", "arguments")}}
                calls.append({**call, "type": call.get("type", "function"), "function": fn})
            msg["tool_calls"] = calls
        elif "tool_calls" in msg:
            del msg["tool_calls"]   # None or []: templates that test `"tool_calls" in message` read no call
        out.append(msg)
    return out


def _arguments_not_an_object(msgs: Sequence[Mapping[str, Any]]) -> str | None:
    """The first earlier tool call whose arguments are not a JSON object (what most templates iterate), named
    by its function and id (the three APIs hold calls in different places: messages[i].tool_calls[j], a
    tool_use block, an input item; the messages here are already converted), or None."""
    for m in msgs:
        for call in m.get("tool_calls") or ():
            args = call["function"]["arguments"]
            if not isinstance(args, Mapping):
                shown = args if isinstance(args, str) else json.dumps(args)
                named = f"the earlier call of {call['function'].get('name')!r}" + (
                    f" (id {call['id']!r})" if call.get("id") else "")
                return f"{named}: its arguments must be a JSON object, got {shown[:80]!r}"
    return None


def _tool_call_text(name: str, args: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def render_tools_into_system(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None) -> list[dict]:
    """Messages for a template without tool support: tools in the system prompt, calls and results as
    text (the format is in the module docstring)."""
    msgs = normalize_messages(messages)
    if tools:
        if not isinstance(tools, Sequence) or isinstance(tools, str | bytes):
            raise ChatTemplateError(f"tools must be a list, got {type(tools).__name__}")
        block = "\n".join(
            [TOOLS_HEADER] + [json.dumps(t, ensure_ascii=False) for t in tools] + [TOOLS_FOOTER]
        )
        if msgs and msgs[0]["role"] == "system":
            system = msgs[0]["content"]
            msgs[0] = {**msgs[0], "content": (system + "\n\n" if system else "") + block}
        else:
            msgs.insert(0, {"role": "system", "content": block})
    out: list[dict] = []
    for m in msgs:
        if m["role"] == "tool":
            response = "<tool_response>\n" + m["content"] + "\n</tool_response>"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + response
            else:
                out.append({"role": "user", "content": response, "_tool_results": True})
            continue
        if m.get("tool_calls"):
            texts = [m["content"]] if m["content"] else []
            texts += [_tool_call_text(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
            m = {k: v for k, v in m.items() if k != "tool_calls"}
            m["content"] = "\n".join(texts)
        out.append(m)
    for m in out:
        m.pop("_tool_results", None)
    return out


def harmony_messages(msgs: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Normalised messages as gpt-oss's template reads them (llama.cpp's preparation, plus one call a
    message): an assistant's `reasoning_content` (the wire form of all three APIs) is its `thinking`,
    and an assistant turn with reasoning and tool calls keeps no `content` (the template refuses both);
    a turn of several calls becomes one assistant message a call (the template writes only the first
    call of a message), the first with the reasoning, each followed by its own results (the `tool`
    messages after the turn, matched by `tool_call_id`, else by position: the template names a result
    after the last call it wrote)."""
    out: list[dict] = []
    i = 0
    while i < len(msgs):
        m = msgs[i]
        i += 1
        if m.get("role") != "assistant":
            out.append(dict(m))
            continue
        msg = {k: v for k, v in m.items() if k != "reasoning_content"}
        if isinstance(m.get("reasoning_content"), str) and m["reasoning_content"] and "thinking" not in m:
            msg["thinking"] = m["reasoning_content"]
            if msg.get("tool_calls"):
                msg["content"] = ""
        calls = msg.pop("tool_calls", None) or []
        if not calls:
            out.append(msg)
            continue
        first = i
        while i < len(msgs) and msgs[i].get("role") == "tool":
            i += 1
        ids = [c.get("id") if isinstance(c, Mapping) else None for c in calls]
        results: list[list[dict]] = [[] for _ in calls]
        for pos, r in enumerate(msgs[first:i]):
            rid = r.get("tool_call_id")
            k = ids.index(rid) if rid is not None and rid in ids else min(pos, len(calls) - 1)
            results[k].append(dict(r))
        for k, call in enumerate(calls):
            out.append({**msg, "tool_calls": [call]} if k == 0 else {"role": "assistant", "content": "",
                                                                     "tool_calls": [call]})
            out += results[k]
    return out


# ---------------------------------------------------------------------------------------------------
# the template
# ---------------------------------------------------------------------------------------------------


class UnusableChatTemplate:
    """Stands in for a model's chat template that cannot be used (it does not parse, or is empty): the
    model still loads, tokenizes and completes text (/v1/completions); every render raises
    ChatTemplateError naming the problem, so chat requests get that instead of a prompt in some other
    model's format. `Engine.chat_template_problem` says why (the server warns at start-up)."""

    supports_tools = False
    harmony = False
    mistral_traits = (False, False)

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem

    def render(self, *args: Any, **kwargs: Any) -> str:
        raise ChatTemplateError(f"the model's chat template is unusable ({self.problem}): chat requests cannot be "
                                "served with this model file; /v1/completions takes a prompt as text")


class ChatTemplate:
    def __init__(self, template: str, bos_token: str = "", eos_token: str = ""):
        if not isinstance(template, str) or not template.strip():
            raise ChatTemplateError("chat template is empty")
        self.source = template
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        env = _TemplateEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"],
            undefined=jinja2.Undefined,
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(template)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(f"chat template does not parse: {exc.message} (line {exc.lineno})") from None
        # a template that never mentions tools cannot render them: Strata writes them into the system prompt
        self.supports_tools: bool = re.search(r"\btools\b", template) is not None
        # gpt-oss's Harmony format (as llama.cpp detects it): messages prepared by harmony_messages
        self.harmony: bool = "<|channel|>" in template
        # Mistral's templates: 9-character call ids, reasoning as thinking blocks (mistral.py)
        self.mistral_traits: tuple[bool, bool] = template_traits(template)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], tokenizer=None) -> ChatTemplate:
        """The GGUF's `tokenizer.chat_template` (ChatML when absent) with its BOS/EOS texts."""
        template = metadata.get("tokenizer.chat_template") or CHATML_TEMPLATE
        bos = eos = ""
        if tokenizer is not None:
            if tokenizer.bos_id is not None:
                bos = tokenizer.token_text(tokenizer.bos_id)
            if tokenizer.eos_id is not None:
                eos = tokenizer.token_text(tokenizer.eos_id)
        return cls(str(template), bos, eos)

    @classmethod
    def from_metadata_or_unusable(cls, metadata: Mapping[str, Any], tokenizer=None) -> ChatTemplate | UnusableChatTemplate:
        """`from_metadata`, or an UnusableChatTemplate naming why the file's template cannot be used."""
        try:
            return cls.from_metadata(metadata, tokenizer)
        except ChatTemplateError as exc:
            return UnusableChatTemplate(str(metadata.get("tokenizer.chat_template") or ""), str(exc))

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None = None,
               add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text; ChatTemplateError names what went wrong (never another exception type)."""
        has_tool_messages = any(
            isinstance(m, Mapping) and (m.get("role") == "tool" or m.get("tool_calls")) for m in messages
        ) if isinstance(messages, Sequence) else False
        if not self.supports_tools and (tools or has_tool_messages):
            msgs, tools = render_tools_into_system(messages, tools), None
        else:
            msgs = normalize_messages(messages)
        msgs = self._prepared(msgs)
        if tools is not None and (not isinstance(tools, Sequence) or isinstance(tools, str | bytes)):
            raise ChatTemplateError(f"tools must be a list, got {type(tools).__name__}")
        variables = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
            "messages": msgs,
            "add_generation_prompt": bool(add_generation_prompt),
        }
        if tools:   # no tools: no `tools` variable, as llama.cpp renders GGUF templates (`tools` None broke
            variables["tools"] = list(tools)   # `if not tools is defined %}{% set tools = [] ... tools | length`)
        try:
            return self._render(variables)
        except ChatTemplateError as first:
            if not any(m.get("tool_calls") for m in msgs):
                raise
            # some templates concatenate `arguments` as a string (DeepSeek style) where most take an
            # object: try the string form before giving up, and report the first error if both fail
            try:
                variables["messages"] = self._prepared(normalize_messages(messages, object_arguments=False))
                return self._render(variables)
            except ChatTemplateError:
                pass
            bad = _arguments_not_an_object(msgs)
            if bad:
                raise ChatTemplateError(f"{bad} ({first})") from None
            raise

    def _prepared(self, msgs: list[dict]) -> list[dict]:
        """Normalised messages in the shape this template reads (Harmony's, Mistral's)."""
        if self.harmony:
            return harmony_messages(msgs)
        if any(self.mistral_traits):
            return mistral_messages(msgs, *self.mistral_traits)
        return msgs

    def _render(self, variables: dict[str, Any]) -> str:
        try:
            return self._template.render(**variables)
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from None
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise ChatTemplateError(f"chat template failed on these messages: {type(exc).__name__}: {exc}") from None
        except (ArithmeticError, RecursionError, MemoryError) as exc:   # OverflowError: the sandbox's range limit
            raise ChatTemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from None


# ---------------------------------------------------------------------------------------------------
# tool calls in the model's answer
# ---------------------------------------------------------------------------------------------------

_TOOL_CALL_OPENER = re.compile(r"<(tool_call|TOOLCALL)>")
_JSON_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)
# Qwen3-Coder's calls: <function=NAME> then <parameter=P>value</parameter> pairs, then </function>;
# a missing closing tag ends at the next opening one or at the end (a cut answer)
_XML_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|(?=<function=)|$)", re.DOTALL)
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)


def _calls_from_json(text: str) -> list[dict[str, str]] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):   # not JSON, or nested deeper than json reads
        return None
    items = value if isinstance(value, list) else [value]
    calls = [as_call(v) for v in items]
    if not calls or any(c is None for c in calls):
        return None
    keep_written_ids(calls)  # type: ignore[arg-type]
    return calls  # type: ignore[return-value]


def _xml_value(raw: str, schema_type: Any) -> Any:
    """A Qwen3-Coder parameter's value: one newline trimmed at each end, typed by typed_value."""
    value = raw[1:] if raw.startswith("\n") else raw
    return typed_value(value[:-1] if value.endswith("\n") else value, schema_type)


def _calls_from_xml(body: str, types: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]] | None:
    calls = []
    for f in _XML_FUNCTION.finditer(body):
        name = f.group(1).strip()
        known = types.get(name, {})
        args = {}
        for p in _XML_PARAMETER.finditer(f.group(2)):
            key = p.group(1).strip()
            args[key] = _xml_value(p.group(2), known.get(key))
        calls.append({"name": name, "arguments": json.dumps(args, ensure_ascii=False)})
    return calls or None


def tool_call_blocks(text: str, is_text: Callable[[int], bool] | None = None) -> Iterator[tuple[int, int, str]]:
    """(start, end, body) of each `<tool_call>` / `<TOOLCALL>` block in `text`, the body stripped. The closing
    tag can be an argument's text (a call writing code about tool calls), so a body that opens as JSON and
    decodes ends where its JSON does, and a Qwen3-Coder XML body at the first closing tag right after a
    `</function>`; any other body ends at the first closing tag, or at the text's end (a cut answer).
    `is_text(start)`: whether the opening tag at `start` is text (in a code block): no block, the search goes
    on right after the tag."""
    pos = 0
    while (m := _TOOL_CALL_OPENER.search(text, pos)) is not None:
        if is_text is not None and is_text(m.start()):
            pos = m.end()
            continue
        closer = f"</{m.group(1)}>"
        at = len(text) - len(text[m.end():].lstrip())
        end = _json_block_end(text, at, closer) if text[at:at + 1] in ("{", "[") else None
        if end is None and text.startswith("<function=", at):
            end = _xml_block_end(text, at, closer)
        if end is None:
            close = text.find(closer, m.end())
            end = len(text) if close < 0 else close + len(closer)
        body_end = end - len(closer) if text.endswith(closer, 0, end) else end
        yield m.start(), end, text[m.end():body_end].strip()
        pos = end


def _json_block_end(text: str, at: int, closer: str) -> int | None:
    """Where a block whose JSON starts at `at` ends: after the closing tag that follows the JSON (or at the
    text's end, a cut answer); None when the JSON does not decode or something else follows it."""
    try:
        _, json_end = _JSON_DECODER.raw_decode(text, at)
    except (ValueError, RecursionError):
        return None
    after = len(text) - len(text[json_end:].lstrip())
    if after == len(text):
        return after
    return after + len(closer) if text.startswith(closer, after) else None


# another XML block: its opening tag, then its `<function=` (an opening tag alone can be a value's text)
_XML_BLOCK_OPENER = re.compile(r"<(?:tool_call|TOOLCALL)>\s*<function=")


def _xml_block_end(text: str, at: int, closer: str) -> int | None:
    """Where an XML block (its `<function=` at `at`) ends: after the first closing tag that follows a
    `</function>` and whitespace, before any other XML block opens; None when there is none."""
    for close in (i.start() for i in re.finditer(re.escape(closer), text[at:])):
        before = text[at:at + close]
        if _XML_BLOCK_OPENER.search(before):
            return None
        if before.rstrip().endswith("</function>"):
            return at + close + len(closer)
    return None


def xml_call_open(text: str) -> bool:
    """Whether `text` ends inside a Qwen3-Coder XML call: its last block opened a `<function=` whose
    `</function>` is not written yet, so a closing tag it holds is a parameter's text."""
    bodies = [body for _, _, body in tool_call_blocks(text)]
    return bool(bodies) and bodies[-1].startswith("<function=") and not bodies[-1].endswith("</function>")


def _mistral_first(text: str) -> bool:
    """Whether `[TOOL_CALLS]` comes before any `<tool_call>` / `<TOOLCALL>` block in `text` (outside code blocks)."""
    at = first_outside_code(text, "[TOOL_CALLS]")
    return at >= 0 and all(i < 0 or i > at for i in (first_outside_code(text, "<tool_call>"),
                                                      first_outside_code(text, "<TOOLCALL>")))


def _fenced_calls(text: str, types: Mapping[str, Mapping[str, Any]] | None, mistral: bool, glm: bool, seed: bool,
                  offered: Collection[str] | None) -> tuple[str, list[dict[str, str]]] | None:
    """(content, calls) of an answer that ends with a fenced block (```` ``` ````, ```` ```json ````,
    ```` ```xml ````) holding nothing but calls of offered tools, as a model that calls in a fence writes
    (Qwen2.5-Coder): the calls before the block and the block's, the content the text before its fence;
    None for any other answer."""
    block = closing_block(text)
    if block is None:
        return None
    start, body = block
    markers = ("<tool_call>", "<TOOLCALL>") + (("[TOOL_CALLS]",) if mistral else ()) + \
        (("<seed:tool_call>",) if seed else ())
    if not body.lstrip().startswith(markers):
        return None
    content, calls = parse_tool_calls(body, types, mistral, glm, seed, offered)
    if not calls or content.strip() or (offered is not None and any(c["name"] not in offered for c in calls)):
        return None
    head, head_calls = parse_tool_calls(text[:start], types, mistral, glm, seed, offered)
    return head.strip(), head_calls + calls


def parse_tool_calls(text: str, types: Mapping[str, Mapping[str, Any]] | None = None,
                     mistral: bool = True, glm: bool = True, seed: bool = True,
                     offered: Collection[str] | None = None, answer_end: bool = True) -> tuple[str, list[dict[str, str]]]:
    """(content without the calls, [{"name", "arguments" (a JSON string)}]); ([], text) when none.
    `types` (tool_parameter_types of the tools offered) types Qwen3-Coder's XML and GLM's parameter values.
    `mistral`: read Mistral's `[TOOL_CALLS]NAME[ARGS]` calls (the server: only for a vocabulary with that
    token); never when a `<tool_call>` block comes first (its arguments may quote Mistral's markup).
    `glm`: read GLM's `<tool_call>NAME<arg_key>...</tool_call>` calls (glm.py) when the first `<tool_call>`
    block opens one. `seed`: read Seed-OSS's `<seed:tool_call>` blocks (seed.py) when the answer has one.
    A call in a code block opened after prose is text, unless the block ends the answer and holds nothing
    but calls (of the `offered` tools' names, when given): code_fences.py; `answer_end` False: `text` is
    the answer so far, which may go on (a block it ends with may be an example yet)."""
    fenced = _fenced_calls(text, types, mistral, glm, seed, offered) if answer_end else None
    if fenced is not None:
        return fenced
    if mistral and _mistral_first(text):
        found = parse_mistral_calls(text, offered or ())
        if found is not None:
            return found
    if glm:
        found = parse_glm_calls(text, types, offered or ())
        if found is not None and found[1]:
            return found
    if seed:
        found = parse_seed_calls(text, types)
        if found is not None and found[1]:
            return found
    if "<tool_call>" in text or "<TOOLCALL>" in text:
        calls: list[dict[str, str]] = []
        kept: list[str] = []
        pos = 0

        inside = CodeScan()             # each prefix below begins with the one before it: read once

        def in_code(start: int) -> bool:     # the content before it: the text less the calls read so far
            return inside("".join(kept) + text[pos:start])

        for start, end, body in tool_call_blocks(text, in_code):
            found = _calls_from_json(body) or _calls_from_xml(body, types or {})
            if found is None:
                continue  # not a call: stays in the content
            kept.append(text[pos:start])
            pos = end
            calls.extend(found)
        kept.append(text[pos:])
        if calls:
            return "".join(kept).strip(), calls
        return text, []
    body = text.strip()
    for prefix in ("<|python_tag|>", "[TOOL_CALLS]"):
        if body.startswith(prefix):
            body = body[len(prefix) :].strip()
    fence = _FENCE.match(body)
    if fence:
        body = fence.group(1)
    if body.startswith(("{", "[")):
        found = _calls_from_json(body)
        if found:
            return "", found
    return text, []
