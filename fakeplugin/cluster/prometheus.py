"""Prometheus on a local cluster (`cluster up --with prometheus[=RULES]`): Debian's real server (apt package
`prometheus`, /usr/bin/prometheus; docs/prometheus.md says why not one built from its Go module) scraping
every plugin's dcgm-exporter-compatible endpoint (`serve --telemetry-endpoint`, and the fleet's for the
simulated nodes), with alert and recording rules (default: examples/prometheus/).

What `start` does, in order: <state>/prometheus/prometheus.yml (every endpoint scraped every 2 s with
`honor_labels: true`, as users scrape dcgm-exporter; the rule files evaluated every 2 s); the server
(process `prometheus`, its data in <state>/prometheus/data, web and API on 127.0.0.1:<free port>); once it
is ready, it waits until every endpoint is up in Prometheus' own targets.

Everything is checked before anything starts (`request`): the binary (an error naming the apt package)
and the rule files (`promtool check rules`, Debian ships promtool in the same package).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster.components import LOOPBACK
from fakeplugin.cluster.simulated import fleet_process
from fakeplugin.cluster.state import ClusterError, ClusterNode, StateStore
from fakeplugin.cluster.supervisor import Supervisor

log = logging.getLogger("fakeplugin.cluster")

NAME = "prometheus"  # the process, the add-on's name in --with, and Debian's package
JOB = "fakeplugin"  # the scrape job of every telemetry endpoint
INTERVAL = "2s"  # scrape and rule evaluation: a test sees a change within seconds
RETENTION = "1d"
DEFAULT_RULES = Path(__file__).resolve().parents[1] / "examples" / "prometheus"
INSTALL = "install Debian's package: apt-get install --no-install-recommends prometheus (hack/setup.sh does)"
# Loopback only; proxies from the environment never apply.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class PrometheusRequest:
    """Prometheus as asked for, checked: the binary, its version line, the rule files."""

    binary: Path
    version: str
    source: Path
    rules: tuple[Path, ...]


def rule_files(source: Path) -> tuple[Path, ...]:
    """RULES of `--with prometheus=RULES`: a rule file, or a directory's *.yaml and *.yml files (not its
    subdirectories: examples/prometheus/tests/ holds the rules' unit tests)."""
    if source.is_file():
        return (source,)
    if not source.is_dir():
        raise ClusterError(
            f"--with prometheus={source}: no such file or directory (a rule file or a folder of them)"
        )
    files = tuple(sorted(p for p in source.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml")))
    if not files:
        raise ClusterError(f"--with prometheus={source}: no rule files (*.yaml, *.yml) in the folder")
    return files


def request(rules: str = "") -> PrometheusRequest:
    """Check what `--with prometheus[=RULES]` asks for: the prometheus and promtool binaries on PATH and the
    rule files (default: examples/prometheus/), through `promtool check rules`."""
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if binary is None or promtool is None:
        missing = " and ".join(n for n, p in (("prometheus", binary), ("promtool", promtool)) if p is None)
        raise ClusterError(f"--with prometheus: {missing} not found in PATH; {INSTALL}")
    source = Path(rules).absolute() if rules else DEFAULT_RULES
    files = rule_files(source)
    check = subprocess.run(
        [promtool, "check", "rules", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if check.returncode != 0:
        raise ClusterError(f"--with prometheus: promtool check rules {source}:\n{check.stdout}{check.stderr}")
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.partition("\n")[0]
    log.info("using %s (%s), rules %s", binary, version, ", ".join(map(str, files)))
    return PrometheusRequest(Path(binary), version, source, files)


def endpoints(kubelet_nodes: list[ClusterNode], simulated: list[ClusterNode], shards: int) -> list[str]:
    """The processes that serve a telemetry endpoint: every kubelet node's plugin, every fleet shard."""
    fleets = [fleet_process(i, shards) for i in range(shards)] if simulated else []
    return [f"plugin/{n.name}" for n in kubelet_nodes] + fleets


def config(targets: Mapping[str, int], rules: tuple[Path, ...]) -> dict[str, Any]:
    """prometheus.yml: every telemetry endpoint (process name → port) one target of job `fakeplugin`,
    labelled with its process (`plugin/<node>`, `fleet`), its own labels kept (honor_labels: the exporter's
    pod, namespace and hostname win over any target label, as users scrape dcgm-exporter)."""
    return {
        "global": {"scrape_interval": INTERVAL, "scrape_timeout": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [str(p) for p in rules],
        "scrape_configs": [
            {
                "job_name": JOB,
                "honor_labels": True,
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [f"{LOOPBACK}:{port}"], "labels": {"fakeplugin_process": name}}
                    for name, port in sorted(targets.items())
                ],
            }
        ],
    }


def argv(binary: Path, config_file: Path, data: Path, port: int) -> list[str]:
    return [
        str(binary),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data}",
        f"--storage.tsdb.retention.time={RETENTION}",
        f"--web.listen-address={LOOPBACK}:{port}",
    ]


def api(url: str, path: str, **params: str) -> Any:
    """GET a Prometheus HTTP API path (e.g. "query", "alerts"; `url` is the server's, ending in /): its
    `data`; a ClusterError with Prometheus' error otherwise."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    try:
        with _OPENER.open(f"{url}api/v1/{path}{query}", timeout=10) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:  # a bad query answers 400 with Prometheus' error as JSON
        body = json.load(exc)
    if body.get("status") != "success":
        raise ClusterError(
            f"Prometheus {url}api/v1/{path}{query}: {body.get('errorType')}: {body.get('error')}"
        )
    return body["data"]


def targets_up(url: str, count: int) -> bool:
    """Whether Prometheus has scraped `count` active targets, every one of them up."""
    try:
        active = api(url, "targets", state="active")["activeTargets"]
    except (OSError, ClusterError):
        return False
    return len(active) == count and all(t["health"] == "up" for t in active)


class Prometheus:
    """The process `prometheus`, started once the plugins whose endpoints it scrapes run."""

    def __init__(self, store: StateStore, processes: Supervisor) -> None:
        self._store, self._processes = store, processes

    def start(self, req: PrometheusRequest) -> None:
        """Write the config, start the server; returns once every endpoint is up in its targets."""
        state = self._store.require()
        home = self._store.layout.prometheus
        home.mkdir(parents=True, exist_ok=True)
        config_file = home / "prometheus.yml"
        text = yaml.safe_dump(config(state.telemetry_ports, req.rules), sort_keys=False)
        write_atomic(config_file, text.encode(), mode=0o644)
        self._processes.launch(NAME, [argv(req.binary, config_file, home / "data", state.ports[NAME])])
        url = prometheus_url(state.ports[NAME])
        self._processes.wait_http(NAME, f"{url}-/ready")
        self._processes.wait(
            f"Prometheus to scrape {len(state.telemetry_ports)} telemetry endpoints",
            lambda: targets_up(url, len(state.telemetry_ports)),
            [self._processes.record(NAME), *self._processes.records("plugin/", "fleet")],
        )
        log.info("Prometheus (%s): %s", req.version, url)


def prometheus_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}/"
