"""The Helm chart's parts beyond the GPU plugin's DaemonSet: fleet mode (fleet.enabled: the fleet's shards and
kwok, their objects only, the fleet's RBAC, tests/harness/rbac.py FLEET_CALLS; the plugin DaemonSet kept off
simulated nodes) and telemetry (docs/prometheus.md: off by default; on, dcgm-exporter's port with the
annotations Prometheus reads, the PodResources socket, the Service, and exactly the extra grants, for the
plugin and for the fleet's shards), and the device status flag with its grants. Rendered with the helm of
hack/build-k8s.sh, as tests/test_chart.py does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fakeplugin.cli import build_parser
from tests.harness import chart
from tests.harness.chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    SEED_LAB,
    _env_vars,
    empty_or_null_fields,
    env_of,
    fleet_render,
    granted,
    named,
    objects,
    only,
    parse_with_env,
    plugin_container,
    refusal,
    render,
)
from tests.harness.rbac import (
    FLEET_CALLS,
    FLEET_TELEMETRY_CALLS,
    KUBELET_PLUGIN_DEVICE_STATUS_CALLS,
    KUBELET_PLUGIN_TELEMETRY_CALLS,
)

pytestmark = pytest.mark.build  # helm, from hack/build-k8s.sh


helm = chart.helm  # the fixture, module-scoped: one lookup per module


# -- fleet mode (fleet.enabled) -------------------------------------------------------------------------


def test_fleet_is_off_by_default_and_adds_only_its_objects(helm: Path) -> None:
    default = objects(render(helm))
    assert not [o for o in default if "fleet" in o["metadata"]["name"] or "kwok" in o["metadata"]["name"]]
    fleet = fleet_render(helm)
    added = sorted(
        (o["kind"], o["metadata"]["name"])
        for o in fleet
        if (o["kind"], o["metadata"]["name"]) not in {(d["kind"], d["metadata"]["name"]) for d in default}
    )
    assert added == sorted(
        [
            *[(k, f"{RELEASE}-fleet") for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")],
            ("Deployment", f"{RELEASE}-fleet-0"),
            ("Deployment", f"{RELEASE}-fleet-1"),
            *[
                (k, f"{RELEASE}-kwok")
                for k in ("ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            ],
            ("Deployment", f"{RELEASE}-kwok"),
        ]
    )
    for obj in fleet:
        assert empty_or_null_fields(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    no_kwok = fleet_render(helm, "--set", "fleet.kwok.enabled=false")
    assert not [o for o in no_kwok if o["metadata"]["name"].endswith("-kwok")]


def test_each_fleet_shard_runs_the_fleet_command_on_the_inventory(helm: Path) -> None:
    objs = fleet_render(helm)
    role = f"{RELEASE}-fleet"
    for shard in (0, 1):
        deployment = named(objs, "Deployment", f"{role}-{shard}")
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == role
        [container] = pod["containers"]
        args = build_parser().parse_args(container["args"])
        assert args.shard == f"{shard}/2"
        assert args.create_nodes == f"{NAMESPACE}.{RELEASE}"
        assert args.owner_cluster_role == role and named(objs, "ClusterRole", role)
        env = env_of(container)
        assert env["FAKEPLUGIN_INVENTORY"] == "/etc/fakeplugin/inventory.yaml"
        assert env["FAKEPLUGIN_FLEET_THREADS"] == "4" and env["EXTRA"] == "1"
        assert set(env) - {"EXTRA"} <= _env_vars("fleet")
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts == {"inventory": "/etc/fakeplugin", "state": env["FAKEPLUGIN_FLEET_NODES_DIR"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["inventory"]["configMap"]["name"] == f"{RELEASE}-inventory"
        assert volumes["state"] == {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}}
        # Never on a simulated node.
        [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]


def test_fleet_rbac_is_exactly_the_fleets_calls(helm: Path) -> None:
    objs = fleet_render(helm)
    role = named(objs, "ClusterRole", f"{RELEASE}-fleet")
    assert granted(objs, f"{RELEASE}-fleet") == FLEET_CALLS
    [own] = [r for r in role["rules"] if r["resources"] == ["clusterroles"]]
    assert own["resourceNames"] == [role["metadata"]["name"]]


def test_kwok_runs_with_the_fleets_stages(helm: Path) -> None:
    from fakeplugin.fleet.stages import kwok_config_yaml

    assert (CHART / "files" / "kwok.yaml").read_text() == kwok_config_yaml(), (
        "charts/fakeplugin/files/kwok.yaml: regenerate with `fakeplugin fleet --print-kwok-config`"
    )
    objs = fleet_render(helm)
    config = named(objs, "ConfigMap", f"{RELEASE}-kwok")
    assert config["data"]["kwok.yaml"] == kwok_config_yaml()
    pod = named(objs, "Deployment", f"{RELEASE}-kwok")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "fakeplugin.local/kwok:v0.8.0"
    assert "--config=/etc/kwok/kwok.yaml" in container["args"]
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in container["args"]
    assert pod["volumes"] == [{"name": "config", "configMap": {"name": f"{RELEASE}-kwok"}}]


def test_with_the_fleet_the_plugin_daemonset_stays_off_simulated_nodes(helm: Path) -> None:
    off = {"key": "type", "operator": "NotIn", "values": ["kwok"]}
    pod = only(fleet_render(helm), "DaemonSet")["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [off]
    assert "affinity" not in only(objects(render(helm)), "DaemonSet")["spec"]["template"]["spec"]
    mine = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    kept = fleet_render(helm, "--set-json", f"kubeletPlugin.affinity={json.dumps(mine)}")
    assert only(kept, "DaemonSet")["spec"]["template"]["spec"]["affinity"] == mine  # the user's wins


# ---- telemetry (docs/prometheus.md) ------------------------------------------------------------------------


def test_telemetry_is_off_by_default(helm: Path) -> None:
    objs = objects(render(helm))
    pod = only(objs, "DaemonSet")["spec"]["template"]
    container = plugin_container(objs)
    assert [o for o in objs if o["kind"] == "Service"] == []
    assert not [k for k in pod["metadata"]["annotations"] if k.startswith("prometheus.io/")]
    assert (container["args"], container.get("ports")) == (["serve"], None)
    assert not {"FAKEPLUGIN_TELEMETRY_ENDPOINT", "DCGM_POD_RESOURCES_KUBELET_SOCKET"} & set(env_of(container))
    assert "pod-resources" not in {v["name"] for v in pod["spec"]["volumes"]}


def test_telemetry_serves_dcgm_exporters_port_with_the_annotations_prometheus_reads(helm: Path) -> None:
    objs = objects(render(helm, *SEED_LAB, "--set", "telemetry.enabled=true"))
    ds = only(objs, "DaemonSet")
    pod = ds["spec"]["template"]
    container = plugin_container(objs)
    annotations = pod["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "prometheus.io/path": "/metrics",
    }
    # The plugin listens on the pod's IP, the port the annotation names; the socket is the mounted one's.
    env = env_of(container)
    assert env["FAKEPLUGIN_TELEMETRY_ENDPOINT"] == "0.0.0.0:9400"
    assert env["DCGM_POD_RESOURCES_KUBELET_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    # The kubelet's PodResources socket, read-only, where the plugin looks for it.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounts["pod-resources"] == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    assert volumes["pod-resources"]["hostPath"] == {
        "path": "/var/lib/kubelet/pod-resources",
        "type": "Directory",
    }
    # The Service a ServiceMonitor selects: headless, port `metrics` of exactly the plugin pods.
    service = only(objs, "Service")
    assert service["metadata"]["name"] == f"{RELEASE}-telemetry"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    for obj in (ds, service):
        assert empty_or_null_fields(obj) == [], obj["kind"]


def test_telemetry_port_path_and_service_follow_the_values(helm: Path) -> None:
    objs = objects(render(helm, "-f", "tests/golden/chart/values/everything.yaml"))
    pod = only(objs, "DaemonSet")["spec"]["template"]
    container = plugin_container(objs)
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9500"
    env = env_of(container)
    assert env["FAKEPLUGIN_TELEMETRY_ENDPOINT"] == "0.0.0.0:9500"
    assert env["DCGM_POD_RESOURCES_KUBELET_SOCKET"] == "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"
    assert container["ports"][0]["containerPort"] == 9500
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["pod-resources"] == (
        "/var/lib/k0s/kubelet/pod-resources"
    )
    assert [o for o in objs if o["kind"] == "Service"] == []  # telemetry.service.enabled: false


def test_telemetry_exporter_release_and_pod_uid_reach_serve_and_fleet(
    helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """telemetry.exporterRelease and .podUID become the plugin's and the fleet's flags (the exporter's own
    variable for the pod UID); the default is what GPU Operator v26.7.0 deploys; an unknown release is
    refused by the schema."""
    default = fleet_render(helm, "--set", "telemetry.enabled=true")
    chosen = fleet_render(
        helm, "--set", "telemetry.enabled=true,telemetry.exporterRelease=4.6.1-4.8.4,telemetry.podUID=true"
    )
    fields = {"spec.nodeName": "n", "metadata.uid": "u", "metadata.namespace": NAMESPACE}
    for objs, release, pod_uid in ((default, "4.6.0-4.8.3", False), (chosen, "4.6.1-4.8.4", True)):
        serving = [plugin_container(objs)] + [
            o["spec"]["template"]["spec"]["containers"][0]
            for o in objs
            if o["kind"] == "Deployment" and o["metadata"]["name"].startswith(f"{RELEASE}-fleet-")
        ]
        assert len(serving) == 3  # the plugin and the two shards of the fleet values
        for container in serving:
            env = env_of(container)
            assert env["FAKEPLUGIN_TELEMETRY_EXPORTER_RELEASE"] == release
            assert ("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID" in env) is pod_uid
            with monkeypatch.context() as patched:
                args = parse_with_env(patched, container, fields)
            assert (args.telemetry_exporter_release, args.kubernetes_enable_pod_uid) == (release, pod_uid)
    assert "exporterRelease" in refusal(helm, "--set", "telemetry.exporterRelease=4.8.4")


def test_telemetry_grants_exactly_its_extra_calls(helm: Path) -> None:
    """The plugin's ServiceAccount gets what telemetry reads beyond Prepare (each used pod), nothing else."""
    objs = objects(render(helm, "--set", "telemetry.enabled=true"))
    name = only(objs, "ServiceAccount")["metadata"]["name"]
    plain = granted(objects(render(helm)), name)
    assert granted(objs, name) == plain | KUBELET_PLUGIN_TELEMETRY_CALLS
    assert not KUBELET_PLUGIN_TELEMETRY_CALLS & plain


def test_device_status_passes_the_flag_and_grants_exactly_its_extra_calls(
    helm: Path, monkeypatch: Any
) -> None:
    """Off by default: no flag, no grant. On: DEVICE_STATUS reaches `serve`, and the plugin's ServiceAccount
    gets the status update and the per-driver verb, for its driver name only."""
    plain = objects(render(helm))
    name = only(plain, "ServiceAccount")["metadata"]["name"]
    assert "DEVICE_STATUS" not in env_of(plugin_container(plain))
    objs = objects(render(helm, "--set", "kubeletPlugin.deviceStatus=true,driverName=gpu.example.com"))
    assert granted(objs, name) == granted(plain, name) | KUBELET_PLUGIN_DEVICE_STATUS_CALLS
    assert not KUBELET_PLUGIN_DEVICE_STATUS_CALLS & granted(plain, name)
    [driver_rule] = [
        r for r in named(objs, "ClusterRole", name)["rules"] if "resourceclaims/driver" in r["resources"]
    ]
    assert driver_rule["resourceNames"] == ["gpu.example.com"]
    container = plugin_container(objs)
    args = parse_with_env(monkeypatch, container, {"spec.nodeName": "n", "metadata.uid": "u"})
    assert args.device_status is True


def test_telemetry_in_fleet_mode_serves_every_shards_nodes(helm: Path) -> None:
    objs = fleet_render(helm, "--set", "telemetry.enabled=true,fleet.shards=2,fleet.podAnnotations.a=b")
    fleets = [
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].startswith(f"{RELEASE}-fleet-")
    ]
    assert len(fleets) == 2
    for deployment in fleets:
        pod = deployment["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        assert pod["metadata"]["annotations"] == {
            "example.com/team": "gpu-sim",  # tests/golden/chart/values/fleet.yaml's, and the one --set adds
            "a": "b",
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9400",
            "prometheus.io/path": "/metrics",
        }
        assert env_of(container)["FAKEPLUGIN_TELEMETRY_ENDPOINT"] == "0.0.0.0:9400"
        assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    (name,) = {
        o["metadata"]["name"]
        for o in objs
        if o["kind"] == "ServiceAccount" and "fleet" in o["metadata"]["name"]
    }
    plain = granted(fleet_render(helm), name)
    assert granted(objs, name) == plain | FLEET_TELEMETRY_CALLS
    assert not FLEET_TELEMETRY_CALLS & plain
    # Off, the fleet's pods are as before: no port, no endpoint, no prometheus.io annotations.
    off = [o for o in fleet_render(helm) if o["kind"] == "Deployment" and "-fleet-" in o["metadata"]["name"]]
    assert off
    for deployment in off:
        assert deployment["spec"]["template"]["metadata"]["annotations"] == {"example.com/team": "gpu-sim"}
        assert "ports" not in deployment["spec"]["template"]["spec"]["containers"][0]
