"""`--with` of `cluster up`, `demo` and the pytest plugin (`--fakeplugin-with`): what a local cluster also
runs, a comma-separated list of add-ons, each with its optional argument (pure)."""

from __future__ import annotations

# Each add-on, as its help names it.
KNOWN = {
    "kueue": "kueue[=CONFIG]",
    "prometheus": "prometheus[=RULES]",
    "keda": "keda",
    "karpenter": "karpenter[=NODEPOOLS]",
}


def parse_with(spec: str) -> dict[str, str]:
    """`kueue=my.yaml,prometheus` → {"kueue": "my.yaml", "prometheus": ""}; {} for an empty spec; a clear
    error for an unknown add-on or one given twice."""
    chosen: dict[str, str] = {}
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        name, _, argument = item.partition("=")
        if name not in KNOWN:
            raise ValueError(f"--with {spec}: unknown add-on {name!r}; known: {', '.join(KNOWN.values())}")
        if name in chosen:
            raise ValueError(f"--with {spec}: {name} is given twice")
        chosen[name] = argument
    return chosen
