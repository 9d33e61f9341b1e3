"""dcgm-exporter's exposition from 4.6.0-4.8.3 on (pure): NVIDIA/dcgm-exporter 7ad58324
`internal/pkg/rendermetrics/render_metrics.go` `Render` builds Prometheus client DTOs and writes them with
prometheus/common's `expfmt.MetricFamilyToText`:

- families sorted by metric name (`sort.Strings(names)`), each family's samples by `labelSignature`: the
  sample's label pairs sorted by name (then value), each written `<len(name)>:<name>=<len(value)>:<value>;`
  (lengths in bytes), compared as strings (`sort.SliceStable`);
- values parsed from the collector's text (`strconv.ParseFloat`) and written by expfmt's `writeFloat`: `1`,
  `0`, `-1` as such, else `strconv.AppendFloat(f, 'g', -1, 64)`, Go's shortest form, with an exponent
  (`e+06`, at least two digits) when the decimal exponent is below -4 or at least 6 (Go's `%g` rule for the
  shortest precision);
- `# HELP` text escaped (`\\` and line breaks; label values too, and `"`: ours never hold them).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from decimal import Decimal


@functools.lru_cache(maxsize=4096)  # a fleet's GPUs repeat a few values (idle ones above all)
def go_float(text: str) -> str:
    """A sample value as expfmt writes it, from the collector's text (`%d` or `%f`)."""
    f = float(text)
    if f in (0, 1, -1):
        return str(int(f))
    sign, digits, exponent = Decimal(repr(f)).as_tuple()  # repr: the shortest digits, as Go's
    assert isinstance(exponent, int)  # finite: DCGM's values are
    shown = "".join(map(str, digits)).rstrip("0")
    exponent += len(digits) - len(shown)
    point = len(shown) + exponent  # the value is 0.<shown> times 10**point
    minus = "-" if sign else ""
    if not -4 <= point - 1 < 6:
        mantissa = shown[0] + ("." + shown[1:] if len(shown) > 1 else "")
        e = point - 1
        return f"{minus}{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{shown}"
    if point >= len(shown):
        return f"{minus}{shown}{'0' * (point - len(shown))}"
    return f"{minus}{shown[:point]}.{shown[point:]}"


def label_signature(pairs: Iterable[tuple[str, str]]) -> str:
    """render_metrics.go `labelSignature`: the order of a family's samples."""
    return "".join(f"{len(k)}:{k}={len(v.encode())}:{v};" for k, v in sorted(pairs))


def escape_help(text: str) -> str:
    """expfmt's `escaper` for `# HELP` text."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")
