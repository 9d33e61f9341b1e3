"""`fakeplugin demo`: the seed lab end to end on a real local cluster, then clean up."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.commands import flag, shared_flags
from fakeplugin.commands.cluster import keda_request, kueue_request, prometheus_request

# Package data (links to examples/ in a source tree), so the demo runs from a wheel or the image too.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NAMESPACE = "demo"
GPU_NODE_LABELS = {"nvidia.com/dra-kubelet-plugin": "true"}  # as the reference lab labels GPU nodes

EPILOG = """\
steps:
  1. find the Kubernetes binaries, or download the official releases (verified) and build
     the rest with Go                                                 hack/build-k8s.sh
  2. bring up the seed lab: examples/seed-lab.yaml (2 x T10, 1 x RTX A5000 on real kubelets
     with our plugin) plus three plain workers                       fakeplugin cluster up
  3. Scenario I: examples/scenario-i.yaml (two containers share claim must-nvidia-gpu)
  4. per-pod claims: examples/template-deployment.yaml (ResourceClaimTemplate + Deployment)
  5. print what a user of the lab looks at
  6. with --with kueue: real Kueue admits a Job asking nvidia.com/gpu: 1 (examples/kueue/queues.yaml,
     job-extended-resource.yaml) once the template's pods are gone; docs/kueue.md
  7. with --with prometheus: Prometheus scrapes every plugin's telemetry (its URL printed); docs/prometheus.md
  8. tear everything down (unless --keep)

examples:
  fakeplugin demo
  fakeplugin demo --kubernetes-version v1.35.4     the same on the seed lab's 1.35 (built on first use)
  fakeplugin demo --with kueue                      and Kueue's GPU quota (Kueue built on first use)
  fakeplugin demo --keep     then: export KUBECONFIG=~/.cache/fakeplugin/cluster/admin.kubeconfig
  fakeplugin demo --keep --with prometheus          and Prometheus on the GPUs' telemetry, kept running
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="the seed lab end to end on a real local cluster (no Docker), then clean up",
        description="Bring up the reference lab (2 x T10, 1 x RTX A5000, three plain workers) on a real "
        "local Kubernetes cluster, run Scenario I and a per-pod claim template, and show the\n"
        "DeviceClasses, ResourceSlices, claims and what each container got.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flag(
        p,
        "--keep",
        env="FAKEPLUGIN_DEMO_KEEP",
        action="store_true",
        help="leave the cluster running afterwards (stop it with `fakeplugin cluster down --state-dir ...`)",
    )
    shared_flags(p, "--state-dir", "--kubernetes-version", "--with", "--kueue-version")
    p.set_defaults(func=run)


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def run(args: argparse.Namespace) -> int:
    from fakeplugin.cluster import Cluster

    state = Path(args.state_dir)
    kueue = kueue_request(args, build=True)
    prometheus = prometheus_request(args)
    keda = keda_request(args, build=True)
    step(
        f"seed lab on Kubernetes {args.kubernetes_version}: 2 x NVIDIA T10 and 1 x RTX A5000 on real "
        "kubelets, plus 3 plain workers"
    )
    inventory = yaml.safe_load((EXAMPLES / "seed-lab.yaml").read_text())
    for node in inventory["nodes"]:
        node["labels"] = {**node.get("labels", {}), **GPU_NODE_LABELS}
    state.mkdir(parents=True, exist_ok=True)
    lab = state.parent / f"{state.name}-inventory.yaml"
    lab.write_text(yaml.safe_dump(inventory, sort_keys=False))
    cluster = Cluster.up(
        lab,
        state,
        simulated_nodes=3,
        build=True,
        kubernetes_version=args.kubernetes_version,
        kueue=kueue,
        prometheus=prometheus,
        keda=keda,
        watchdog=not args.keep,
    )
    try:
        show_lab(cluster)
        cluster.kubectl("create", "namespace", NAMESPACE)
        step("Scenario I: claim must-nvidia-gpu, one pod with two containers sharing it")
        apply_example(cluster, "scenario-i.yaml")
        wait_running(cluster, 1, "app=scenario-i")
        step("per-pod claims: ResourceClaimTemplate single-gpu + Deployment gpu-per-pod (2 replicas)")
        apply_example(cluster, "template-deployment.yaml")
        wait_running(cluster, 2, "app=gpu-per-pod")
        show_claims(cluster)
        show_containers(cluster)
        if kueue is not None:
            show_kueue(cluster)
        if cluster.prometheus_url:
            step(f"Prometheus scrapes every plugin's telemetry: {cluster.prometheus_url}")
    finally:
        if args.keep:
            step(f"cluster kept: export KUBECONFIG={cluster.kubeconfig}")
        else:
            step("tearing down (use --keep to look around)")
            cluster.down()
    return 0


def apply_example(cluster: Any, name: str) -> None:
    print(cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLES / name)).stdout, end="")


def wait_running(cluster: Any, count: int, selector: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = pods_of(cluster, selector)
        if sum(p["status"].get("phase") == "Running" for p in pods) >= count:
            print(f"{count} pod(s) Running: {', '.join(p['metadata']['name'] for p in pods)}")
            return
        time.sleep(1)
    print(cluster.kubectl("describe", "pods", "-n", NAMESPACE, "-l", selector).stdout)
    raise RuntimeError(f"pods {selector} did not reach Running within {timeout:.0f}s (described above)")


def pods_of(cluster: Any, selector: str) -> list[dict[str, Any]]:
    return json.loads(cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json").stdout)[
        "items"
    ]


def show_lab(cluster: Any) -> None:
    step("kubectl get deviceclass")
    print(cluster.kubectl("get", "deviceclass").stdout, end="")
    step("kubectl get resourceslices")
    print(cluster.kubectl("get", "resourceslices").stdout, end="")
    slices = json.loads(cluster.kubectl("get", "resourceslices", "-o", "json").stdout)["items"]
    print(f"\n{'NODE':<38} {'DEVICE':<7} {'PRODUCT':<18} {'MEMORY':<9} UUID")
    for s in slices:
        for d in s["spec"].get("devices", []):
            a = d["attributes"]
            print(
                f"{s['spec']['nodeName']:<38} {d['name']:<7} {a['productName']['string']:<18} "
                f"{d['capacity']['memory']['value']:<9} {a['uuid']['string']}"
            )


def show_claims(cluster: Any) -> None:
    step("kubectl get resourceclaims (and what the scheduler allocated)")
    print(cluster.kubectl("get", "resourceclaims", "-n", NAMESPACE).stdout, end="")
    claims = json.loads(cluster.kubectl("get", "resourceclaims", "-n", NAMESPACE, "-o", "json").stdout)[
        "items"
    ]
    for c in claims:
        for r in c.get("status", {}).get("allocation", {}).get("devices", {}).get("results", []):
            print(
                f"  {c['metadata']['name']}: {r['driver']} {r['pool']}/{r['device']} (request {r['request']})"
            )


def show_containers(cluster: Any) -> None:
    from fakeplugin.testing.objects import container_gpus

    step("what each container got (recorded by the fake container runtime after CDI resolution)")
    for pod in pods_of(cluster, "app in (scenario-i,gpu-per-pod)"):
        for ctr in pod["spec"]["containers"]:
            record = cluster.container_record(NAMESPACE, pod["metadata"]["name"], ctr["name"])
            gpus = container_gpus(dict(e.split("=", 1) for e in record.get("env", [])))
            print(f"{pod['metadata']['name']}/{ctr['name']} on {pod['spec']['nodeName']}")
            print(f"  CDI devices:            {', '.join(record.get('cdiDevices', []))}")
            print(f"  GPUs in its env:        {', '.join(f'{n}={u}' for n, u in gpus.items())}")
            smi = cluster.run_in_container_view(
                NAMESPACE, pod["metadata"]["name"], ctr["name"], "/usr/bin/nvidia-smi", "-L"
            )
            for line in smi.stdout.splitlines():
                print(f"  $ nvidia-smi -L         {line}")


def show_kueue(cluster: Any) -> None:
    step("Kueue: the template's pods go (their 2 GPUs are free), then a queued Job asks nvidia.com/gpu: 1")
    cluster.kubectl("delete", "deployment", "gpu-per-pod", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    cluster.kubectl(
        "wait", "--for=delete", "pods", "-l", "app=gpu-per-pod", "-n", NAMESPACE, "--timeout=120s"
    )
    kueue = EXAMPLES / "kueue"
    print(cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(kueue / "queues.yaml")).stdout, end="")
    print(
        cluster.kubectl("create", "-n", NAMESPACE, "-f", str(kueue / "job-extended-resource.yaml")).stdout,
        end="",
    )
    wait_running(cluster, 1, "batch.kubernetes.io/job-name")
    # Kueue's Workloads by group: from 1.37 `workloads` names scheduling.k8s.io's (the gang API).
    step("kubectl get clusterqueues,workloads.kueue.x-k8s.io")
    print(cluster.kubectl("get", "clusterqueues,workloads.kueue.x-k8s.io", "-n", NAMESPACE).stdout, end="")
