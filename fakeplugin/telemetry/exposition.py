"""dcgm-exporter's text exposition (pure): NVIDIA/dcgm-exporter 4.5.3-4.8.2
`internal/pkg/rendermetrics/render_metrics.go` `gpuMetricsFormat`; from 4.6.0-4.8.3 on the same lines in
expfmt's order (telemetry.expfmt: families by name, samples by their label signature).

Per counter with at least one series, in the order Go's text/template ranges over the collector's map
(`MetricsByCounter`, keyed by `counters.Counter`: sorted by DCGM field ID, then name, type, help):

    # HELP <field> <help>
    # TYPE <field> <type>
    <field>{<labels>} <value>        one line per series, in the collector's order

Label values are written as they are (the template does not escape them either; ours never hold a quote,
backslash or line break: Kubernetes names, UUIDs, product names). `# HELP <field> ` keeps its trailing space
when the help is empty, as the template does (render_metrics_test.go).
"""

from __future__ import annotations

from collections.abc import Iterator

from fakeplugin.telemetry import expfmt
from fakeplugin.telemetry.samples import Series

CONTENT_TYPE = "text/plain; charset=utf-8"  # the exporter sets none; Go's net/http sniffs this for text


def blocks(series: Series, *, by_name: bool = False) -> Iterator[bytes]:
    """The exposition, counter block by counter block (a fleet's is tens of MiB: the endpoint compresses
    each block as it comes, and never holds the whole text); `by_name`: expfmt's order (the rows' `order`)
    and HELP escaping."""
    for counter in sorted(series, key=lambda c: c.field) if by_name else sorted(series):
        rows = series[counter]
        if not rows:
            continue
        field = counter.field
        help_text = expfmt.escape_help(counter.help) if by_name else counter.help
        head = f"# HELP {field} {help_text}\n# TYPE {field} {counter.prom_type}\n"
        listed = sorted(rows, key=lambda row: row[3]) if by_name else rows
        yield "".join(
            [head, *(f"{field}{{{labels}{more}}} {value}\n" for labels, more, value, _ in listed)]
        ).encode()
