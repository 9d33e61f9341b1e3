"""Strict reading of YAML documents (inventory, GPU profiles) into typed values.

Every problem is collected, not just the first, as one line `<source>: <path>: <problem>` with
paths like `nodes[1].gpus[0].count`, so a user fixes a file in one round trip.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Iterable
from typing import Any

import yaml
from yaml.constructor import ConstructorError

TOP = "(top level)"


class SchemaError(ValueError):
    """A document broke its schema; str() is one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, source: str, error: type[SchemaError]) -> Any:
    """Parse one YAML document; syntax errors and duplicate keys become `error` naming the line."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else TOP
        raise error([f"{source}: {where}: invalid YAML: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise error([f"{source}: {TOP}: invalid YAML: {exc}"]) from None


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


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
                self.add(join(path, key), f"unknown field ({hint})")
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

    def integer(self, m: dict[str, Any], key: str, path: str, *, minimum: int | None = None) -> int | None:
        value = self._typed(m, key, path, (int,), "an integer")
        if value is not None and minimum is not None and value < minimum:
            self.add(join(path, key), f"must be at least {minimum}, got {value}")
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
                    join(join(path, key), str(k)), f"{what} must be a string, got {_describe(wrong)}{hint}"
                )
                good = False
        return value if good else None
