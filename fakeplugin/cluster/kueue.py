"""Kueue on a local cluster (`cluster up --with kueue[=CONFIG]`): the real manager, built from its Go module,
run on loopback against the cluster as its Deployment would run in one (docs/kueue.md).

What `start` does, in order: namespace kueue-system; Kueue's CRDs (server-side apply: some are large) with
their conversion webhooks; a CA and a serving certificate for 127.0.0.1 (openssl); the Configuration
(fakeplugin.kueue.config) written to <state>/kueue/; the manager (process `kueue`) in a private mount
namespace holding its metrics certificate at the fixed path it reads; once /readyz answers, the
mutating and validating webhook configurations (fakeplugin.kueue.manifests); then it waits until the Job
webhook suspends a Job created with a queue name, as on any cluster with Kueue.

Everything is checked before anything starts (`request`): the version, the CONFIG, the binary.
"""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import addons, binaries, components, versions
from fakeplugin.cluster.components import LOOPBACK
from fakeplugin.cluster.credentials import serving_certificate
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.machine import found_or_built, free_ports
from fakeplugin.cluster.state import StateStore
from fakeplugin.cluster.supervisor import Supervisor
from fakeplugin.kueue import manifests
from fakeplugin.kueue.config import DEFAULT_CONFIG, Endpoints, load_config, local_config

log = logging.getLogger("fakeplugin.cluster")

NAME = "kueue"  # the process, and the add-on's name in --with
NAMESPACE = "kueue-system"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class KueueRequest:
    """Kueue as asked for, checked: its version, binary and module files, and the user's Configuration."""

    version: str
    config: dict[str, Any]
    source: Path
    binary: Path
    module: Path


def parse_with(spec: str) -> str | None:
    """The CONFIG of `kueue[=CONFIG]` in a `--with` spec (fakeplugin.cluster.addons; "" for the default);
    None when the spec does not name Kueue."""
    return addons.parse_with(spec).get(NAME)


def request(config: str, version: str | None = None, *, build: bool = False) -> KueueRequest:
    """Check what `--with kueue[=config]` asks for: the version (default: the table's, or
    $FAKEPLUGIN_KUEUE_VERSION), the Configuration file (default: examples/kueue/config.yaml), the binary
    (built first with `build`)."""
    chosen = versions.kueue_version(version)
    source = Path(config).absolute() if config else DEFAULT_CONFIG
    user = load_config(source)
    binary, module = found_or_built(
        f"Kueue {chosen}",
        lambda: binaries.find_kueue(chosen),
        build,
        lambda: binaries.build(["kueue"], kueue_version=chosen),
    )
    log.info("using Kueue %s: %s (Configuration %s)", chosen, binary, source)
    return KueueRequest(chosen, user, source, binary, module)


def suspends_jobs(kubectl: Kubectl) -> bool:
    """Whether a Job created (dry run) with a queue name comes back suspended by Kueue's webhook: on any
    cluster with Kueue (tests/kind/test_kueue.py: its chart in kind)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"probe-{uuid.uuid4().hex[:8]}",
            "namespace": "default",
            "labels": {QUEUE_LABEL: "probe"},
        },
        "spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "probe"}]}}
        },
    }
    out = kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(job), check=False)
    return out.returncode == 0 and json.loads(out.stdout)["spec"].get("suspend") is True


class Kueue:
    def __init__(self, store: StateStore, processes: Supervisor, kubectl: Kubectl) -> None:
        self._store, self._processes, self._kubectl = store, processes, kubectl

    def start(self, req: KueueRequest) -> None:
        """Kueue's CRDs, manager and webhooks; returns once its Job webhook suspends Jobs."""
        home = self._store.layout.kueue
        certs = home / "certs"
        ca = serving_certificate(certs, LOOPBACK)
        webhook_port, health_port = free_ports(2)
        base = f"https://{LOOPBACK}:{webhook_port}"
        self._kubectl.send(
            "apply", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
        )
        crds = manifests.crds(req.module, base, ca)
        self._kubectl.send("apply", crds, timeout=120.0, server_side=True)
        for crd in crds:
            self._kubectl(
                "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
            )
        log.info("Kueue %s: %d CRDs established", req.version, len(crds))
        endpoints = Endpoints(LOOPBACK, webhook_port, health_port, certs)
        config, changed = local_config(req.config, endpoints)
        for line in changed:
            log.info("Kueue Configuration %s: set for a manager on loopback: %s", req.source, line)
        config_file = home / "config.yaml"
        write_atomic(config_file, yaml.safe_dump(config, sort_keys=False).encode(), mode=0o644)
        # Its /etc layer: the metrics certificate where the manager looks for it.
        upper, work = home / "etc", home / "etc-work"
        metrics = upper / "kueue" / "metrics" / "certs"
        metrics.mkdir(parents=True, exist_ok=True)
        work.mkdir(exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copyfile(certs / name, metrics / name)
        unshare, sh = shutil.which("unshare"), shutil.which("sh")
        assert unshare and sh  # check_host found them
        argvs = components.kueue_argvs(unshare, sh, upper, work, req.binary, config_file, self._store.layout)
        self._processes.launch(NAME, argvs)
        self._processes.wait_http(NAME, f"http://{LOOPBACK}:{health_port}/readyz")
        self._kubectl.send("apply", manifests.webhook_configurations(req.module, base, ca))
        self._processes.wait(
            "Kueue's Job webhook to suspend a queued Job",
            lambda: suspends_jobs(self._kubectl),
            [self._processes.record(NAME)],
        )
