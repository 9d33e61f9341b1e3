"""A dcgm-exporter counters file: which DCGM fields become which Prometheus metrics (pure but for reading).

NVIDIA/dcgm-exporter 4.5.3-4.8.2 `internal/pkg/counters/counter_config.go` (`ReadCSVFile`,
`ExtractCounters`): Go's encoding/csv with `#` as the comment character (a line whose first character is
`#`; blank lines skipped), each field trimmed of spaces, three fields a record (`DCGM FIELD, Prometheus
metric type, help message`), the field resolved by go-dcgm's `GetFieldID` (current names, then legacy ones:
`dcgm-fields.txt` beside this module), the type one of `promMetricType` (gauge, counter, histogram, summary,
label). `label` makes the field a label of every series of its GPU instead of a metric
(`DCGM_FI_DRIVER_VERSION, label, ...` in the default file). The exporter's own fields (`DCGM_EXP_*`,
`exporter_counters.go`) are known names too.

Differences: the exporter names the record by its index among records; we name the file and its line, and
suggest the nearest known name. Known fields that fakeplugin does not simulate are accepted and produce no
series, as DCGM's blank values produce none in the exporter (`collector/gpu_collector.go` `toMetric`);
`unsimulated` lists them for a log line at start.

The shipped default is the exporter's `etc/default-counters.csv` at 4.5.3-4.8.2 (`default-counters.csv`
here, package data, its source in its header).
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

EXPORTER_RELEASE = "4.5.3-4.8.2"  # NVIDIA/dcgm-exporter tag, commit 691c927 (2026-05-06)
DEFAULT_FILE = "default-counters.csv"
PROM_TYPES = ("gauge", "counter", "histogram", "summary", "label")  # counters/variables.go promMetricType
# counters/exporter_counters.go: the exporter's own fields, IDs 9001.. (iota + 9000 after Unknown)
EXPORTER_FIELDS = {
    "DCGM_EXP_XID_ERRORS_COUNT": 9001,
    "DCGM_EXP_CLOCK_EVENTS_COUNT": 9002,
    "DCGM_EXP_GPU_HEALTH_STATUS": 9003,
    "DCGM_EXP_P2P_STATUS": 9004,
}
MAX_FILE_BYTES = 1 << 20  # the default file is 5 KiB; a counters file is never large


class CountersError(ValueError):
    """A counters file that dcgm-exporter would refuse, with its file and line."""


@dataclass(frozen=True, order=True)
class Counter:
    """One record. Ordered as the exporter's Go template ranges over its map keys (fmtsort: the struct's
    fields in order, FieldID first): field_id, field, prom_type, help."""

    field_id: int
    field: str
    prom_type: str
    help: str

    @property
    def is_label(self) -> bool:
        return self.prom_type == "label"


@functools.cache
def dcgm_fields() -> dict[str, int]:
    """Every field name the exporter resolves → its DCGM field ID (package data `dcgm-fields.txt`)."""
    text = resources.files(__package__).joinpath("dcgm-fields.txt").read_text(encoding="utf-8")
    fields: dict[str, int] = dict(EXPORTER_FIELDS)
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, number, *_ = line.split()
            fields.setdefault(name, int(number))  # current names first, as GetFieldID
    return fields


def parse(text: str, source: str) -> list[Counter]:
    """The counters of a file's `text`; `source` names it in errors (`<source>:<line>: ...`)."""
    fields = dcgm_fields()
    counters: list[Counter] = []
    lines = text.splitlines()
    for number, record in _records(lines, source):
        where = f"{source}:{number}"
        if len(record) != 3:
            raise CountersError(
                f"{where}: {len(record)} fields, expected 3: DCGM FIELD, Prometheus metric type, help message"
            )
        name, prom_type, help_text = (part.strip(" ") for part in record)  # strings.Trim(r, " ")
        if name not in fields:
            near = difflib.get_close_matches(name, list(fields), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise CountersError(
                f"{where}: unknown field {name!r}: no DCGM field dcgm-exporter {EXPORTER_RELEASE} knows{hint}"
            )
        if prom_type not in PROM_TYPES:
            raise CountersError(
                f"{where}: field {name}: unknown Prometheus metric type {prom_type!r} "
                f"(one of {', '.join(PROM_TYPES)})"
            )
        counters.append(Counter(fields[name], name, prom_type, help_text))
    return counters


def _records(lines: list[str], source: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every record: comment lines (`#` first) and blank lines skipped."""
    out: list[tuple[int, list[str]]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            out.append((number, split_record(line)))
        except ValueError as exc:
            raise CountersError(f"{source}:{number}: not a CSV record: {exc}") from None
    return out


def split_record(line: str) -> list[str]:
    """One line's fields by Go's encoding/csv rules (LazyQuotes off): a field that starts with `"` is quoted
    up to a `"` before the next comma or the end (`""` is a quote in it); a `"` anywhere else is an error.
    A quoted field running over several lines (Go allows it) is refused here [difference]."""
    fields: list[str] = []
    at = 0
    while True:
        if line.startswith('"', at):
            value, at = _quoted(line, at + 1)
        else:
            end = line.find(",", at)
            value = line[at:] if end < 0 else line[at:end]
            if '"' in value:
                raise ValueError(f'bare " in non-quoted field {value!r}')
            at = len(line) if end < 0 else end
        fields.append(value)
        if at >= len(line):
            return fields
        at += 1  # the comma


def _quoted(line: str, at: int) -> tuple[str, int]:
    """The quoted field starting at `at` (after its quote) and where it ends (at a comma or the end)."""
    value: list[str] = []
    while True:
        close = line.find('"', at)
        if close < 0:
            raise ValueError('extraneous or missing " in quoted-field')
        value.append(line[at:close])
        if line.startswith('"', close + 1):  # "" is one quote
            value.append('"')
            at = close + 2
            continue
        if close + 1 < len(line) and line[close + 1] != ",":
            raise ValueError('extraneous or missing " in quoted-field')
        return "".join(value), close + 1


def load(path: Path | None) -> list[Counter]:
    """The counters of the file at `path`; None: the shipped default. CountersError names the file."""
    if path is None:
        return default()
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise CountersError(f"{path}: {size} bytes, at most {MAX_FILE_BYTES} (a counters file)")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CountersError(f"{path}: cannot read the counters file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CountersError(f"{path}: not UTF-8 text: {exc}") from None
    return parse(text, str(path))


@functools.cache
def default() -> list[Counter]:
    """The shipped default counters (dcgm-exporter's etc/default-counters.csv)."""
    text = resources.files(__package__).joinpath(DEFAULT_FILE).read_text(encoding="utf-8")
    return parse(text, f"fakeplugin/telemetry/{DEFAULT_FILE}")
