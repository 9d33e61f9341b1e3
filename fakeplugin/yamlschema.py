"""Strict reading of YAML documents (inventory, GPU profiles) into typed values.

Every problem is collected, not just the first, as one line `<source>: <path>: <problem>` with
paths like `nodes[1].gpus[0].count`, so a user fixes a file in one round trip.

Reading is bounded before anything large is built (`Limits`): the file's size, then while PyYAML composes
the document, its nesting depth, the length of each scalar, and the number of nodes counting every alias
as the whole node it stands for (so a billion-laughs document is refused after `max_nodes`, not expanded).
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.reader import ReaderError

TOP = "(top level)"
MERGE_TAG = "tag:yaml.org,2002:merge"
SHOWN_CHARS = 60  # longer values are shortened in messages


class SchemaError(ValueError):
    """A document broke its schema; str() is one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Limits:
    """Upper bounds on one YAML document, checked while reading it (see the module docstring)."""

    max_bytes: int
    max_depth: int  # collections nested in each other; the document's top node is at depth 1
    max_nodes: int  # scalars and collections, an alias counting as the size of the node it repeats
    # Longer scalars are refused before PyYAML resolves them: this also keeps every integer it makes below
    # Python's 4300-digit string conversion limit and its sexagesimal (1:2:3) arithmetic cheap.
    max_scalar_chars: int = 1024


# For documents without bounds of their own (the packaged GPU profiles): far above what any of them needs.
DEFAULT_LIMITS = Limits(max_bytes=1 << 20, max_depth=32, max_nodes=100_000)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one) and merge keys, and
    stops composing at the document's `Limits`."""

    def __init__(self, stream: str, limits: Limits) -> None:
        super().__init__(stream)
        self._limits = limits
        self._depth = 0
        self._nodes = 0  # nodes composed so far, aliases expanded
        self._anchor_sizes: dict[str, int] = {}  # anchor → expanded size of its node, once composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            size = self._anchor_sizes.get(event.anchor)
            if size is None and event.anchor in self.anchors:
                raise ComposerError(
                    None, None, f"alias *{event.anchor} is inside the node it refers to", event.start_mark
                )
            self._count(size or 0, event)  # an undefined alias: PyYAML reports it
            return super().compose_node(parent, index)
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > self._limits.max_scalar_chars:
            raise ComposerError(
                None,
                None,
                f"a value of {len(event.value)} characters (at most {self._limits.max_scalar_chars})",
                event.start_mark,
            )
        collection = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if collection and self._depth >= self._limits.max_depth:
            raise ComposerError(
                None, None, f"nested more than {self._limits.max_depth} levels deep", event.start_mark
            )
        before = self._nodes
        self._count(1, event)
        self._depth += collection
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= collection
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._anchor_sizes[anchor] = self._nodes - before
        return node

    def _count(self, nodes: int, event: yaml.Event) -> None:
        self._nodes += nodes
        if self._nodes > self._limits.max_nodes:
            raise ComposerError(
                None,
                None,
                f"more than {self._limits.max_nodes} values (aliases counted as what they repeat)",
                event.start_mark,
            )

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                raise ConstructorError(None, None, "merge keys (<<) are not supported", key_node.start_mark)
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def read_document(path: str | Path, source: str, error: type[SchemaError], limits: Limits) -> str:
    """The text of a UTF-8 file of at most `limits.max_bytes`; `error` names the file otherwise."""
    try:
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)  # never more, whatever the file is
    except OSError as exc:
        raise error([f"{source}: cannot read: {exc.strerror or exc}"]) from None
    if len(data) > limits.max_bytes:
        raise error(
            [f"{source}: {TOP}: the file is larger than {_bytes(limits.max_bytes)}, the most allowed"]
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.end].hex(" ")
        problem = f"not UTF-8 (byte {bad}: {exc.reason}); save the file as UTF-8"
        raise error([f"{source}: byte offset {exc.start}: {problem}"]) from None


def _bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


def parse_yaml(text: str, source: str, error: type[SchemaError], limits: Limits = DEFAULT_LIMITS) -> Any:
    """Parse one YAML document within `limits`; syntax errors, duplicate keys and broken limits become
    `error` naming the line."""
    try:
        loader = _StrictLoader(text, limits)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except ReaderError as exc:  # a character YAML forbids; PyYAML names only its offset
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise error(
            [f"{source}: line {line}, column {column}: invalid YAML: character {char} is not allowed"]
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else TOP
        raise error([f"{source}: {where}: invalid YAML: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise error([f"{source}: {TOP}: invalid YAML: {exc}"]) from None


def shorten(text: str) -> str:
    """`text` for a one-line message: at most SHOWN_CHARS characters (saying how long it really is when cut),
    line breaks and other unprintable characters escaped (`\\n`, `\\x1b`)."""
    shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS]
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in shown)
    return shown if len(text) <= SHOWN_CHARS else f"{shown}... ({len(text)} characters)"


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f'string "{shorten(value)}"'
    if isinstance(value, int):
        return f"integer {_integer(value)}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _integer(value: int) -> str:
    """Decimal for readable sizes; huge ones by their size (str() of one may even raise)."""
    return str(value) if value.bit_length() <= 64 else f"of {value.bit_length()} bits"


def path_key(key: Any) -> str:
    """A mapping key as a part of a field path in a message (shortened, never failing)."""
    return _integer(key) if isinstance(key, int) and not isinstance(key, bool) else shorten(str(key))


def join(path: str, key: str) -> str:
    return key if path in ("", TOP) else f"{path}.{key}"


class Problems:
    """Collects problems of one document and reads typed fields, recording what is wrong.

    Readers return None when the field is absent or wrong; callers check `ok` before building
    the typed result.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.lines

    def add(self, path: str, problem: str) -> None:
        self.lines.append(f"{self.source}: {path or TOP}: {problem}")

    def mapping(
        self,
        value: Any,
        path: str,
        *,
        required: Iterable[str] = (),
        optional: Iterable[str] = (),
        hints: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """Check that `value` is a mapping with all `required` keys and no unknown ones; `hints`
        explain fields people are likely to try that do not belong here."""
        if not isinstance(value, dict):
            self.add(path, f"must be a mapping, got {_describe(value)}")
            return None
        required, optional = tuple(required), tuple(optional)
        known = (*required, *optional)
        for key in value:
            if not isinstance(key, str):
                self.add(path, f"keys must be strings, got {_describe(key)}")
            elif key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = (hints or {}).get(key) or (
                    f'did you mean "{close[0]}"?' if close else f"known fields: {', '.join(sorted(known))}"
                )
                self.add(join(path, path_key(key)), f"unknown field ({hint})")
        for key in required:
            if key not in value:
                self.add(join(path, key), "required field is missing")
        return value

    def _typed(self, m: dict[str, Any], key: str, path: str, kinds: tuple[type, ...], what: str) -> Any:
        if key not in m:
            return None
        value = m[key]
        # bool is an int in Python; YAML true/false must never pass as a number.
        if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
            return value
        hint = " (quote it in YAML)" if kinds == (str,) and isinstance(value, (int, float)) else ""
        self.add(join(path, key), f"must be {what}, got {_describe(value)}{hint}")
        return None

    def string(self, m: dict[str, Any], key: str, path: str) -> str | None:
        value = self._typed(m, key, path, (str,), "a string")
        if value == "":
            self.add(join(path, key), "must not be empty")
            return None
        return value

    def integer(
        self,
        m: dict[str, Any],
        key: str,
        path: str,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        why: str = "",
    ) -> int | None:
        """An integer within [minimum, maximum]; `why` explains the maximum in its message."""
        value = self._typed(m, key, path, (int,), "an integer")
        if value is not None and minimum is not None and value < minimum:
            self.add(join(path, key), f"must be at least {minimum}, got {_integer(value)}")
            return None
        if value is not None and maximum is not None and value > maximum:
            self.add(
                join(path, key),
                f"must be at most {maximum}{f' ({why})' if why else ''}, got {_integer(value)}",
            )
            return None
        return value

    def boolean(self, m: dict[str, Any], key: str, path: str) -> bool | None:
        return self._typed(m, key, path, (bool,), "true or false")

    def sequence(self, m: dict[str, Any], key: str, path: str) -> list[Any] | None:
        return self._typed(m, key, path, (list,), "a list")

    def string_map(self, m: dict[str, Any], key: str, path: str) -> dict[str, str] | None:
        """A mapping of strings to strings (labels); non-string values are reported one by one."""
        value = self._typed(m, key, path, (dict,), "a mapping of strings")
        if value is None:
            return None
        good = True
        for k, v in value.items():
            what = "key" if not isinstance(k, str) else "value" if not isinstance(v, str) else None
            if what is not None:
                wrong = k if what == "key" else v
                hint = " (quote it in YAML)" if isinstance(wrong, (bool, int, float)) else ""
                self.add(
                    join(join(path, key), path_key(k)),
                    f"{what} must be a string, got {_describe(wrong)}{hint}",
                )
                good = False
        return value if good else None
