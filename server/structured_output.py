"""Rules an answer is held to while it is generated: JSON for `response_format` (chat completions,
completions), `text.format` (responses), `output_config.format` (Anthropic) (strata.engine.json_grammar,
json_schema); a tool call's opening when the request demands a call (strata.engine.forced_start).

What it is: `json_format(value, where)` reads a format field into a `JsonFormat` (the compiled schema) or
None for plain text, with a 400 naming the field on a bad value or a schema keyword that cannot be
enforced. Which answers are held to JSON (`constrained_format`): every one without tools; with tools offered
the model must stay free to call them, so no JSON is enforced (docs/api.md says so). `required_call`: with
tools and a choice that demands a call, the answer opens a call as the model's template writes one (read
off a probe rendering, up to a tool's name; the marker alone, `<tool_call>`, Mistral's `[TOOL_CALLS]` or
Seed-OSS's `<seed:tool_call>`, when the probe shows none; nothing for Harmony, whose calls are a channel),
and a template that writes `<tool_call>` + JSON has the whole call held as JSON, one that writes key-value
markup (Qwen3-Coder's XML, GLM's) its name and keys (KeyedCallRule). A reasoning model's answer
is free until its reasoning closes (the `</think>` tag, Harmony's final channel).
`answer_rule` picks one answer's rule for every API; the scheduler builds its constraint with
`constraint_for(tokenizer, eos_ids)`.

Not here: the automaton (json_grammar.py), the schema subset (json_schema.py), the sampler.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from strata.engine.forced_start import ForcedStart
from strata.engine.json_args_call import HARMONY, HARMONY_ANALYSIS, MISTRAL, CallHeader, JsonArgsCall
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import (
    ANY_OBJECT,
    Node,
    SchemaError,
    compile_call,
    compile_schema,
    tool_arguments,
)
from strata.engine.keyed_call import KeyedCall, KeyedMarkup
from strata.engine.token_bytes import Vocabulary
from strata.server.call_probe import (
    PROBE_TOOL,
    call_marker,
    call_opening,
    json_call_frame,
    json_call_spacing,
    keyed_markup,
    probe_call,
    writes_json_calls,
)
from strata.server.errors import APIError
from strata.server.no_call_rule import NoCallRule, no_call_rule

HARMONY_FINAL_CHANNEL = b"<|channel|>final<|message|>"   # where a Harmony answer's final text starts


@dataclass(frozen=True, eq=False)
class JsonFormat:
    root: Node
    after: bytes | None = None      # bytes the answer writes freely first (the end of its reasoning)
    prefix: bytes = b""             # the answer's start the request wrote itself (Anthropic's prefill)
    lead: bytes = b""               # bytes the answer must write before the JSON (a call's opening tag)
    trigger: bytes | None = None    # held each time the answer writes this (calls the model opens itself)
    reasoning: tuple[bytes, bytes] | None = None   # where a trigger is thought, not written
    opened: bool = False            # the prompt opened the reasoning
    close: bytes = b""              # written after each triggered value (a call's closing tag)
    may_think: tuple[bytes, bytes] | None = None   # reasoning tags a first token may open (then the value)
    forbid: tuple[bytes, ...] = ()  # texts the value may not write (where a call's reader ends it)
    spacing: tuple[bytes, bytes] | None = None   # the value's whitespace exactly as the template writes it back

    @property
    def kind(self) -> str:
        """For /metrics: json (a format asked for), call (a demanded call), calls (calls the model opens)."""
        return "calls" if self.trigger is not None else "call" if self.lead else "json"

    def constraint_for(self, tokenizer: Any, eos_ids: Any) -> JsonConstraint:
        c = JsonConstraint(self.root, Vocabulary.of(tokenizer), eos_ids, after=self.after, lead=self.lead,
                           trigger=self.trigger, reasoning=self.reasoning, opened=self.opened, close=self.close,
                           may_think=self.may_think, forbid=self.forbid, spacing=self.spacing)
        c.feed(self.prefix)
        return c

    def with_prefix(self, text: str, where: str) -> JsonFormat:
        """This format for an answer that continues `text`; a 400 when no JSON value starts with it."""
        if not text:
            return self
        prefix = text.encode()
        try:
            JsonConstraint(self.root, Vocabulary([]), (), after=self.after).feed(prefix)
        except ValueError:
            raise APIError(400, f"the assistant's prefill {text[:40]!r} does not begin a JSON value that "
                           f"'{where}' allows", param=where) from None
        return JsonFormat(self.root, self.after, prefix)


def _schema_format(spec: Any, where: str) -> JsonFormat:
    if not isinstance(spec, dict):
        raise APIError(400, f"'{where}' must be an object with a 'schema'", param=where)
    schema = spec.get("schema")
    if schema is None:
        raise APIError(400, f"'{where}.schema' is required for type 'json_schema'", param=where)
    try:
        return JsonFormat(compile_schema(schema))
    except SchemaError as e:
        raise APIError(400, f"'{where}': {e}", param=where) from None
    except RecursionError:
        raise APIError(400, f"'{where}.schema' is nested too deeply", param=where) from None


def json_format(value: Any, where: str = "response_format", flat: bool = False) -> JsonFormat | None:
    """The chat completions `response_format` (or, flat, a format whose json_schema fields sit beside its
    type: the Responses API's `text.format`, Anthropic's `output_config.format`): None for text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise APIError(400, f"'{where}' must be an object like {{\"type\": \"json_object\"}}", param=where)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JsonFormat(ANY_OBJECT)
    if kind == "json_schema":
        spec = value if flat else value.get("json_schema")
        other = value.get("json_schema") if flat else value
        if isinstance(spec, dict) and "schema" in spec and isinstance(other, dict) and "schema" in other \
                and spec["schema"] != other["schema"]:
            # a schema in both shapes that differ: which one the client meant is not known, and the other one
            # would be left out without a word
            here, there = (f"{where}.schema", f"{where}.json_schema.schema")[:: 1 if flat else -1]
            raise APIError(400, f"'{here}' and '{there}' are two different schemas: send one of them", param=where)
        if not (isinstance(spec, dict) and "schema" in spec) and isinstance(other, dict) and "schema" in other:
            # the other API's shape (chat's nested `json_schema` object on the Responses API, or the flat one on
            # chat): clients moving between them send it, and where the schema is leaves no doubt
            spec, flat = other, not flat
        return _schema_format(spec, where if flat else f"{where}.json_schema")
    raise APIError(400, f"'{where}.type' must be 'text', 'json_object' or 'json_schema', got {kind!r}", param=where)


def constrained_format(fmt: JsonFormat | None, tools: Any, answer: Any) -> JsonFormat | None:
    """What the answer is held to: nothing with tools offered; after its reasoning for a thinking model (the
    prompt opened it, or the answer's first token does) (`answer`: prompting.AnswerFormat)."""
    if fmt is None or tools:
        return None
    if getattr(answer, "harmony", False):
        return JsonFormat(fmt.root, after=HARMONY_FINAL_CHANNEL)
    think = getattr(answer, "think", None)
    if getattr(answer, "opened", False):
        return JsonFormat(fmt.root, after=think[1].encode())
    return JsonFormat(fmt.root, may_think=(think[0].encode(), think[1].encode())) if think else fmt


@dataclass(frozen=True)
class ForcedCall:
    starts: tuple[bytes, ...]       # the texts a call may open with (its marker, up to a tool's name)
    after: bytes | None = None      # the end of its reasoning, for a thinking model; with `repeat`, the marker
    repeat: bool = False            # each call the model opens (after each marker): the starts less the marker
    reasoning: tuple[bytes, bytes] | None = None
    opened: bool = False            # the prompt opened the reasoning

    @property
    def kind(self) -> str:
        return "calls" if self.repeat else "call"

    def constraint_for(self, tokenizer: Any, eos_ids: Any) -> ForcedStart:
        return ForcedStart(self.starts, Vocabulary.of(tokenizer), after=self.after, repeat=self.repeat,
                           reasoning=self.reasoning, opened=self.opened)


@dataclass(frozen=True)
class KeyedCallRule:
    """Calls in a template's key-value markup (Qwen3-Coder's XML, GLM's, Seed-OSS's) held to the offered
    tools: an offered tool's name, then keys among its parameters, each once, the required ones before the
    call closes; the values the model's own text (strata.engine.keyed_call)."""

    markup: KeyedMarkup
    tools: tuple[tuple[str, tuple[str, ...] | None, tuple[str, ...]], ...]   # name, parameters (None: any), required
    marker: bytes
    repeat: bool                    # each call the model opens (auto); else the answer is one call (demanded)
    after: bytes | None = None      # a demanded call: the end of the reasoning the prompt opened
    reasoning: tuple[bytes, bytes] | None = None
    opened: bool = False

    @property
    def kind(self) -> str:
        return "calls" if self.repeat else "call"

    def constraint_for(self, tokenizer: Any, eos_ids: Any) -> KeyedCall:
        return KeyedCall(self.markup, self.tools, Vocabulary.of(tokenizer), eos_ids,
                         trigger=self.marker if self.repeat else None, reasoning=self.reasoning, opened=self.opened,
                         after=self.after, lead=b"" if self.repeat else self.marker)


@dataclass(frozen=True, eq=False)
class JsonArgsRule:
    """Calls whose arguments are JSON after a header (gpt-oss's Harmony `to=functions.NAME ... <|message|>`,
    Mistral's `[TOOL_CALLS]NAME[ARGS]`) held to the offered tools: a tool's name, its header as written, the
    arguments that tool's schema allows (strata.engine.json_args_call)."""

    header: CallHeader
    tools: tuple[tuple[str, Node], ...]     # name, compiled arguments
    demanded: bool = False                  # the answer is one call (else each call the model opens)
    reasoning: tuple[bytes, bytes] | None = None
    opened: bool = False
    after: bytes | None = None              # a demanded call: the end of the reasoning the prompt opened

    @property
    def kind(self) -> str:
        return "call" if self.demanded else "calls"

    def constraint_for(self, tokenizer: Any, eos_ids: Any) -> JsonArgsCall:
        return JsonArgsCall(self.header, self.tools, Vocabulary.of(tokenizer), eos_ids, demanded=self.demanded,
                            reasoning=self.reasoning, opened=self.opened, after=self.after)


def json_args_rule(header: CallHeader, tools: list[dict], **how: Any) -> JsonArgsRule:
    return JsonArgsRule(header, tuple((t["function"]["name"], tool_arguments(t["function"].get("parameters")))
                                      for t in tools), **how)


def writes_json_list_calls(engine: Any) -> bool:
    """Whether the template writes calls as `[TOOL_CALLS]` and a JSON list of {"name", "arguments", "id"}
    (Mistral Nemo)."""
    return re.search(re.escape("[TOOL_CALLS]") + r'\[\{"name":\s*"' + PROBE_TOOL, probe_call(engine)) is not None


def json_list_calls(tools: list[dict]) -> Node:
    """Mistral Nemo's calls: a list of at least one {"name", "arguments", "id"} held as call_schema's."""
    calls = compile_call([(t["function"]["name"], t["function"].get("parameters")) for t in tools], with_id=True)
    return Node("array", items=calls, min_n=1)


def writes_mistral_args(engine: Any) -> bool:
    """Whether the template writes a call as `[TOOL_CALLS]NAME` then `[ARGS]` or `[CALL_ID]` (Mistral Small
    3.2, Devstral, Ministral 3; not Nemo's JSON list)."""
    return re.search(re.escape("[TOOL_CALLS]" + PROBE_TOOL) + r"\[(ARGS|CALL_ID)\]", probe_call(engine)) is not None


def keyed_rule(engine: Any, marker: bytes, tools: list[dict], **how: Any) -> KeyedCallRule | None:
    """The keyed-call rule for a template whose calls are key-value markup, None for others (or for tools
    whose parameters are no plain list of names)."""
    markup = keyed_markup(engine, marker)
    if markup is None:
        return None
    held = []
    for t in tools:
        params = t["function"].get("parameters")
        props = params.get("properties") if isinstance(params, dict) else None
        required = params.get("required", []) if isinstance(params, dict) else []
        names = [str(k) for k in props] if isinstance(props, dict) else None     # None: no list, any keys
        if not isinstance(required, list) or (names is not None and not set(map(str, required)) <= set(names)) or \
                any(not k or markup.mid[:1].decode("latin-1") in k for k in names or ()):
            return None       # keys this cannot tell apart: the opening alone is held (held_calls)
        held.append((t["function"]["name"], None if names is None else tuple(names), tuple(str(r) for r in required)))
    return KeyedCallRule(markup, tuple(held), marker, **how)


def call_schema(tools: list[dict]) -> Node:
    """A call's JSON: {"name": one of the tools, "arguments": what that tool's parameters allow} (json_schema
    compile_call, lenient: objects that list properties take only those; keywords that only validate are
    passed over and a part that cannot be held takes any value: it is the agent's schema, not a format the
    request asked for)."""
    return compile_call([(t["function"]["name"], t["function"].get("parameters")) for t in tools])


def held_calls(tools: Any, answer: Any,
               engine: Any) -> JsonFormat | KeyedCallRule | JsonArgsRule | ForcedCall | None:
    """With tools offered and the model free to call them or not: each call it opens (its marker written
    outside its reasoning and outside a code block opened after prose: code_fences.py) is held to the offered
    tools. A template that writes `<tool_call>` + JSON: a call
    of one of the tools with arguments its schema allows, then closed as the template closes calls; key-value
    markup (Qwen3-Coder's XML, GLM's, Seed-OSS's): a tool's name, then keys among its parameters (KeyedCallRule);
    gpt-oss's Harmony headers and Mistral's `[TOOL_CALLS]NAME[ARGS]`: a tool's name, then its arguments as
    that tool's schema allows (JsonArgsRule); Mistral Nemo's JSON list of calls, held as JSON calls are;
    another: the call's opening up to one of the tools' names (call_opening). The
    rest of the answer is free. Only for a template that writes calls itself: with tools rendered into the
    system prompt by Strata (a template without tools), the model's own format is unknown."""
    if tools and getattr(answer, "harmony", False):
        return json_args_rule(HARMONY, tools, reasoning=HARMONY_ANALYSIS)
    marker = call_marker(answer) if tools else None
    if marker is None or engine is None or not getattr(engine.chat_template, "supports_tools", False):
        return None
    think = getattr(answer, "think", None)
    reasoning = (think[0].encode(), think[1].encode()) if think else None
    opened = bool(getattr(answer, "opened", False))
    if marker == b"<tool_call>" and writes_json_calls(engine):
        opening, close = json_call_frame(engine)
        return JsonFormat(call_schema(tools), trigger=marker, opened=opened, reasoning=reasoning, lead=opening,
                          close=close, spacing=json_call_spacing(engine))
    keyed = keyed_rule(engine, marker, tools, repeat=True, reasoning=reasoning, opened=opened)
    if keyed is not None:
        return keyed
    if marker == MISTRAL.marker and writes_mistral_args(engine):
        return json_args_rule(MISTRAL, tools, reasoning=reasoning, opened=opened)
    if marker == MISTRAL.marker and writes_json_list_calls(engine):
        return JsonFormat(json_list_calls(tools), trigger=marker, opened=opened, reasoning=reasoning)
    opening = call_opening(engine, marker)
    if opening is None:
        return None
    rest = opening[len(marker.decode()):]
    return ForcedCall(tuple(rest.replace(PROBE_TOOL, t["function"]["name"]).encode() for t in tools), after=marker,
                      repeat=True, reasoning=reasoning, opened=opened)


def required_call(demanded: bool, tools: Any, answer: Any,
                  engine: Any = None) -> JsonFormat | KeyedCallRule | JsonArgsRule | ForcedCall | None:
    """With tools offered and a choice that demands a call: the answer opens a call. A model that writes
    JSON calls then writes one of the tools' names and the arguments that tool's schema allows; another
    writes its call's opening as its template does, up to one of the tools' names."""
    marker = call_marker(answer) if demanded and tools else None
    if marker is None:
        return None
    after = answer.think[1].encode() if getattr(answer, "opened", False) else None
    if marker == b"<tool_call>" and engine is not None and writes_json_calls(engine):
        opening, close = json_call_frame(engine)
        return JsonFormat(call_schema(tools), after=after, lead=marker + opening, close=close,
                          spacing=json_call_spacing(engine))
    keyed = keyed_rule(engine, marker, tools, repeat=False, after=after) if engine is not None else None
    if keyed is not None:
        return keyed
    if marker == MISTRAL.marker and engine is not None and writes_mistral_args(engine):
        return json_args_rule(MISTRAL, tools, demanded=True, after=after)
    if marker == MISTRAL.marker and engine is not None and writes_json_list_calls(engine):
        return JsonFormat(json_list_calls(tools), after=after, lead=marker)
    opening = call_opening(engine, marker) if engine is not None else None
    if opening is None:
        return ForcedCall((marker,), after=after)
    return ForcedCall(tuple(opening.replace(PROBE_TOOL, t["function"]["name"]).encode() for t in tools), after=after)


def shown_tools(every: Any, callable_: Any, demanded: bool, answer: Any, engine: Any) -> Any:
    """The tools the template writes when `tool_choice` narrows the calls to `callable_` (a named tool, or
    allowed tools with a call demanded) out of `every` offered tool: all of them when the demanded call is
    held to `callable_` by name, so the prompt's start (system prompt and tools) is the one the
    conversation's other turns render and its history is reused, not read again (a turn naming its tool read
    the whole conversation again: 6,426 of 6,557 tokens, Claude Code's shape on the default model); only
    `callable_` where nothing holds the name (a choice that demands no call, Harmony, whose demanded call is
    not held, a template whose probe shows no call): there the model would be free to call the others."""
    if not demanded or not callable_ or not every or len(every) == len(callable_):
        return callable_
    rule = required_call(True, callable_, answer, engine)
    if rule is None or (isinstance(rule, ForcedCall) and call_marker(answer) in rule.starts):
        return callable_
    return every


def answer_rule(wanted: JsonFormat | None, tools: Any, demanded: bool, answer: Any, engine: Any,
                prefill: str = "", where: str = "response_format",
                shown: Any = None) -> JsonFormat | ForcedCall | NoCallRule | None:
    """What one answer is held to: the JSON format asked for (none with tools offered; a `prefill` is its
    start); else, with tools, a demanded call or the calls the model opens itself (not after a prefill,
    which the request wrote). `demanded`: the API's tool_choice asks for a call. `shown`: the tools the prompt
    writes; with none of them callable (tool_choice none, which writes them so that the conversation's
    history is reused) the answer is kept off calls (no_call_rule.py; after a prefill too)."""
    held = constrained_format(wanted, tools, answer)
    if held is not None:
        return held.with_prefix(prefill, where)
    if shown and not tools:
        return no_call_rule(answer, prefill)
    if prefill:
        return None
    return required_call(demanded, tools, answer, engine) or held_calls(tools, answer, engine)
