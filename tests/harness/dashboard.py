"""NVIDIA's Grafana dashboard for dcgm-exporter, its queries as they stand in NVIDIA/dcgm-exporter
`grafana/dcgm-exporter-dashboard.json` (read at commit d5e5f510; unchanged since cffaeb8, #183, 2023, so the
same in the 4.5.3-4.8.2 tag, and the same queries in the stored version 1f7abdb7): its variables and every
panel's expression. tests/e2e/test_prometheus.py asks a real Prometheus; tests/test_telemetry_exporters.py
evaluates their selectors against a render."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# templating.list: both `includeAll` and `multi`, no allValue: "All" is every value, as a regex alternation.
DASHBOARD_VARIABLES = {
    "instance": "label_values(DCGM_FI_DEV_GPU_TEMP, instance)",
    "gpu": "label_values(DCGM_FI_DEV_GPU_TEMP, gpu)",
}
DASHBOARD_PANELS = (
    'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}',
    'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})',
    'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}',
    'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})',
    'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000',
    'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}',
    'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}',
    'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}',
)

Sample = tuple[str, Mapping[str, str]]  # (metric name, labels)
_SELECTOR = re.compile(r"(\w+)\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_LABEL_VALUES = re.compile(r"label_values\((\w+),\s*(\w+)\)")


def label_values(samples: Sequence[Sample], query: str) -> list[str]:
    """Grafana's `label_values(metric, label)`: the label's values on the metric's series, sorted."""
    match = _LABEL_VALUES.fullmatch(query)
    assert match is not None, query
    metric, label = match.groups()
    return sorted({labels[label] for name, labels in samples if name == metric and label in labels})


def selected(samples: Sequence[Sample], expr: str, variables: Mapping[str, Sequence[str]]) -> list[Sample]:
    """The series the expression's one selector picks, `$var` as Grafana's All (every value, alternated);
    PromQL's label regexes are anchored."""
    match = _SELECTOR.search(expr)
    assert match is not None and len(_SELECTOR.findall(expr)) == 1, expr
    metric, matchers = match.groups()
    text = matchers
    for name, values in variables.items():
        text = text.replace(f"${name}", "|".join(re.escape(v) for v in values))
    found = []
    for name, labels in samples:
        if name != metric:
            continue
        if all(_matches(labels.get(label, ""), op, value) for label, op, value in _MATCHER.findall(text)):
            found.append((name, labels))
    return found


def _matches(actual: str, op: str, value: str) -> bool:
    if op in ("=~", "!~"):
        return (re.fullmatch(value, actual) is not None) == (op == "=~")
    return (actual == value) == (op == "=")
