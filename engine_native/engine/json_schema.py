"""JSON Schemas compiled for constrained answers (json_grammar.py): `compile_schema(schema)` turns the subset
below into `Node`s, refusing what it cannot enforce with a `SchemaError` that names the keyword and where
it is.

Enforced: `type` (one or a list), `properties`, `required`, `additionalProperties` (false, true or a
schema; unset: true, as JSON Schema), `items`, `minItems` / `maxItems`, `minLength` / `maxLength` (in
characters), `enum`, `const`, `anyOf` / `oneOf` whose branches begin with different characters (Pydantic's
`Optional[X]`: X or null), `$ref` to `#/$defs/...` or `#/definitions/...`. Ignored: annotations (`title`,
`description`, `default`, `examples`, `$schema`, `$id`, `strict`). Anything else (`pattern`, `format`,
`minimum`, `allOf`, `not`, ...) is refused by name rather than silently not enforced.

Not here: following an answer byte by byte (json_grammar.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$schema", "$id", "$comment", "strict",
                         "$defs", "definitions", "readOnly", "writeOnly", "deprecated"})


class SchemaError(ValueError):
    """A schema this module cannot enforce; the message names the keyword and its place."""


@dataclass(eq=False)
class Node:
    """One compiled schema: kind is any / object / array / string / number / integer / literal / union."""

    kind: str
    props: dict[str, Node] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    extra: Node | None = None             # additional properties' schema; None: none allowed
    items: Node | None = None
    min_n: int = 0                        # items or characters
    max_n: int | None = None
    literals: tuple[bytes, ...] = ()      # literal: the compact JSON of each allowed value
    alternatives: tuple[Node, ...] = ()   # union
    # an object whose "name" (written first) picks its "arguments" schema: literal bytes -> schema (a call)
    by_name: dict[bytes, Node] = field(default_factory=dict)
    pending_first: frozenset[int] = frozenset()   # "pending": a $ref being compiled (its first bytes)

    def first_bytes(self) -> frozenset[int]:
        k = self.kind
        if k == "pending":
            return self.pending_first
        if k == "object":
            return frozenset(b"{")
        if k == "array":
            return frozenset(b"[")
        if k == "string":
            return frozenset(b'"')
        if k in ("number", "integer"):
            return frozenset(b"-0123456789")
        if k == "literal":
            return frozenset(v[0] for v in self.literals)
        if k == "union":
            return frozenset().union(*(a.first_bytes() for a in self.alternatives))
        return frozenset(b'{["-0123456789tfn')   # any


ANY = Node("any")
# what an unconstrained value turns into at its first byte
ANY_OBJECT = Node("object", extra=ANY)
ANY_ARRAY = Node("array", items=ANY)
ANY_STRING = Node("string")
ANY_NUMBER = Node("number")
ANY_WORD = Node("literal", literals=(b"true", b"false", b"null"))


def _literal(values: Iterable[Any], where: str) -> Node:
    out = []
    for v in values:
        try:
            out.append(json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode())
        except (TypeError, ValueError) as e:
            raise SchemaError(f"{where}: {v!r} is not a JSON value ({e})") from None
    if not out:
        raise SchemaError(f"{where}: an empty enum allows nothing")
    return Node("literal", literals=tuple(dict.fromkeys(out)))


def _count(schema: dict, key: str, where: str) -> int | None:
    v = schema.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SchemaError(f"{where}.{key} must be a non-negative integer, got {v!r}")
    return v


class _Compiler:
    def __init__(self, root: Any, closed: bool = False):
        self.root = root
        self.closed = closed
        self.refs: dict[str, Node] = {}

    def ref(self, ref: Any, where: str) -> Node:
        if not isinstance(ref, str) or not ref.startswith(("#/$defs/", "#/definitions/")):
            raise SchemaError(f"{where}.$ref must point into #/$defs or #/definitions, got {ref!r}")
        if ref in self.refs:
            return self.refs[ref]
        section, name = ref[2:].split("/", 1)
        target = self.root.get(section, {}).get(name) if isinstance(self.root.get(section), dict) else None
        if target is None:
            raise SchemaError(f"{where}.$ref {ref!r} names no definition")
        # filled in below; a recursive schema reaches this same node meanwhile
        node = Node("pending", pending_first=self.declared_first_bytes(target, 0))
        self.refs[ref] = node
        done = self.node(target, ref)
        node.__dict__.update(done.__dict__)
        return node

    def declared_first_bytes(self, schema: Any, depth: int) -> frozenset[int]:
        """The first bytes a raw schema's values may take (for a union holding a $ref still compiling)."""
        every = ANY.first_bytes()
        if not isinstance(schema, dict) or depth > 32:
            return every
        if isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
            section, _, name = schema["$ref"][2:].partition("/")
            defs = self.root.get(section) if isinstance(self.root, dict) else None
            return self.declared_first_bytes(defs.get(name) if isinstance(defs, dict) else None, depth + 1)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                return frozenset().union(*(self.declared_first_bytes(b, depth + 1) for b in schema[key]))
        types = schema.get("type")
        names = [types] if isinstance(types, str) else types if isinstance(types, list) else None
        if names is None:
            return every
        starts = {"object": b"{", "array": b"[", "string": b'"', "number": b"-0123456789",
                  "integer": b"-0123456789", "boolean": b"tf", "null": b"n"}
        return frozenset(b for t in names for b in starts.get(t, b""))

    def node(self, schema: Any, where: str) -> Node:
        if schema is True or schema == {}:
            return ANY
        if not isinstance(schema, dict):
            raise SchemaError(f"{where} must be a schema object, got {schema!r}")
        if "$ref" in schema:
            return self.ref(schema["$ref"], where)
        known = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                 "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref"}
        for key in schema:
            if key not in known and key not in ANNOTATIONS:
                raise SchemaError(f"{where}.{key} is not supported in a response_format schema (supported: "
                                  f"{', '.join(sorted(known))})")
        if "const" in schema:
            return _literal([schema["const"]], f"{where}.const")
        if "enum" in schema:
            if not isinstance(schema["enum"], list):
                raise SchemaError(f"{where}.enum must be an array")
            return _literal(schema["enum"], f"{where}.enum")
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(f"{where}.{key} must be a non-empty array")
                return self.union([self.node(b, f"{where}.{key}[{i}]") for i, b in enumerate(branches)],
                                  f"{where}.{key}")
        types = schema.get("type")
        if types is None:
            return ANY if not ({"properties", "items"} & schema.keys()) else \
                self.typed(schema, "object" if "properties" in schema else "array", where)
        if isinstance(types, str):
            return self.typed(schema, types, where)
        if isinstance(types, list) and types and all(isinstance(t, str) for t in types):
            return self.union([self.typed(schema, t, where) for t in types], f"{where}.type")
        raise SchemaError(f"{where}.type must be a type name or a list of them, got {types!r}")

    def typed(self, schema: dict, kind: str, where: str) -> Node:
        if kind == "object":
            props_raw = schema.get("properties", {})
            if not isinstance(props_raw, dict):
                raise SchemaError(f"{where}.properties must be an object")
            props = {str(k): self.node(v, f"{where}.properties.{k}") for k, v in props_raw.items()}
            req = schema.get("required", [])
            if not isinstance(req, list) or not all(isinstance(r, str) for r in req):
                raise SchemaError(f"{where}.required must be an array of property names")
            missing = [r for r in req if r not in props and schema.get("additionalProperties") is False]
            if missing:
                raise SchemaError(f"{where}.required names {missing[0]!r}, which is not in properties")
            extra_raw = schema.get("additionalProperties", not (self.closed and "properties" in schema))
            extra = None if extra_raw is False else self.node(extra_raw, f"{where}.additionalProperties")
            return Node("object", props=props, required=frozenset(req), extra=extra)
        if kind == "array":
            items = self.node(schema.get("items", True), f"{where}.items")
            lo, hi = _count(schema, "minItems", where) or 0, _count(schema, "maxItems", where)
            return Node("array", items=items, min_n=lo, max_n=hi)
        if kind == "string":
            lo, hi = _count(schema, "minLength", where) or 0, _count(schema, "maxLength", where)
            return Node("string", min_n=lo, max_n=hi)
        if kind in ("number", "integer"):
            return Node(kind)
        if kind == "boolean":
            return _literal([True, False], where)
        if kind == "null":
            return _literal([None], where)
        raise SchemaError(f"{where}.type {kind!r} is not a JSON Schema type")

    def union(self, nodes: list[Node], where: str) -> Node:
        flat: list[Node] = []
        for n in nodes:
            flat.extend(n.alternatives if n.kind == "union" else [n])
        if any(n.kind == "any" for n in flat):
            return ANY
        # literals may share first bytes among themselves: merge them into one
        lits = [n for n in flat if n.kind == "literal"]
        rest = [n for n in flat if n.kind != "literal"]
        if len(lits) > 1:
            rest.append(Node("literal", literals=tuple(dict.fromkeys(v for n in lits for v in n.literals))))
        elif lits:
            rest.append(lits[0])
        seen: set[int] = set()
        for n in rest:
            fb = n.first_bytes()
            if fb & seen:
                raise SchemaError(f"{where}: branches that begin with the same character ({chr(min(fb & seen))!r}) "
                                  "cannot be told apart while the answer is written; not supported")
            seen |= fb
        return rest[0] if len(rest) == 1 else Node("union", alternatives=tuple(rest))


def compile_schema(schema: Any, closed: bool = False) -> Node:
    """The root node of a JSON Schema; SchemaError names what cannot be enforced. `closed`: an object with
    `properties` that says nothing of others takes only those (a tool's arguments: what a model should
    write, where JSON Schema's default would let it invent keys; `"properties": {}` takes none)."""
    return _Compiler(schema, closed).node(schema, "schema")


def compile_call(tools: list[tuple[str, Any]]) -> Node:
    """A tool call's JSON, {"name": ..., "arguments": ...}, "name" first: one of the tools' names, then the
    arguments that tool's parameters allow (objects that list properties take only those; a schema this
    cannot enforce, any object). `tools`: (name, parameters schema) pairs."""
    by_name: dict[bytes, Node] = {}
    for name, params in tools:
        try:
            args = compile_schema(params if params is not None else {"type": "object"}, closed=True)
        except (SchemaError, RecursionError):
            args = compile_schema({"type": "object"})
        by_name[json.dumps(name, ensure_ascii=False).encode()] = args
    names = _literal([n for n, _ in tools], "tools")
    return Node("object", props={"name": names, "arguments": compile_schema({"type": "object"})},
                required=frozenset({"name", "arguments"}), by_name=by_name)
