"""Karpenter's instance types from the inventory's `instanceType` entries (inventory.nodes,
publish.instancetypes, `render --karpenter-instance-types`): the entry, its errors, and templates that
are exactly what the fleet publishes less what only a running node knows."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import releases
from fakeplugin.cluster import addons, karpenter
from fakeplugin.cluster.state import ClusterError, cluster_nodes
from fakeplugin.drivers.gpu.publish.instancetypes import instance_types
from fakeplugin.drivers.gpu.publish.node import NodeDevices, node_slices
from fakeplugin.inventory import INSTANCE_TYPE_LABEL, InventoryError, load_inventory, parse_inventory
from tests.harness import DRIVER

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "karpenter" / "inventory.yaml"


def inventory(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"driverVersion": "580.95.05", "cudaDriverVersion": "13.0", "nodes": list(nodes)}


def problems(data: Any) -> list[str]:
    with pytest.raises(InventoryError) as exc:
        parse_inventory(data, source="inv.yaml")
    return exc.value.problems


def types(path: Path = EXAMPLE, **kwargs: Any) -> dict[str, dict[str, Any]]:
    inv = load_inventory(path)
    release = kwargs.pop("release", releases.get(inv.driver_release))
    return {t["name"]: t for t in instance_types(inv, driver=DRIVER, release=release, **kwargs)}


def test_an_instance_type_entry_selects_its_nodes_by_label_and_is_simulated() -> None:
    inv = parse_inventory(
        inventory(
            {"instanceType": {"name": "gpu-t4-1x", "price": 0.53}, "gpus": [{"profile": "t4"}], "cpus": 8},
            {"instanceType": {"name": "cpu", "price": 0.1, "memory": "32Gi", "zones": ["a", "b"]}},
        )
    )
    t4, cpu = inv.nodes
    assert t4.match_labels == {INSTANCE_TYPE_LABEL: "gpu-t4-1x"} and not t4.kubelet and t4.node_names() == []
    assert t4.instance_type is not None and t4.instance_type.memory_bytes == 8 * (8 << 30)  # 8Gi per CPU
    assert cpu.instance_type is not None and cpu.instance_type.zones == ("a", "b")
    assert cpu.instance_type.memory_bytes == 32 << 30 and cpu.instance_type.architecture == "amd64"
    assert inv.node_entry("kwok-gpu-t4-1x-abcde", {INSTANCE_TYPE_LABEL: "gpu-t4-1x"}) is t4
    assert inv.node_entry("kwok-other", {INSTANCE_TYPE_LABEL: "gpu-h100-8x"}) is None
    # A cluster of instance types alone has no node until Karpenter makes one.
    assert cluster_nodes(inv, 0, autoscaled=True) == []
    with pytest.raises(ClusterError, match="would have no nodes"):
        cluster_nodes(inv, 0)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"instanceType": {"name": "t"}}, "nodes[0].instanceType.price: required field is missing"),
        (
            {"instanceType": {"name": "t", "price": 0}},
            "nodes[0].instanceType.price: must be a number above 0",
        ),
        ({"instanceType": {"name": "t", "price": "cheap"}}, "instanceType.price: must be a number above 0"),
        (
            {"instanceType": {"name": "T/1", "price": 1}},
            'instanceType.name: "T/1" is not a valid label value',
        ),
        (
            {"instanceType": {"name": "t", "price": 1, "memory": "lots"}},
            "instanceType.memory: must be a quantity",
        ),
        ({"instanceType": {"name": "t", "price": 1, "zones": []}}, "instanceType.zones: lists 0 zones"),
        ({"instanceType": {"name": "t", "price": 1, "architecture": "s390x"}}, '"s390x" is not one of amd64'),
        (
            {"instanceType": {"name": "t", "price": 1, "size": 2}},
            "instanceType.size: unknown field (known fields: architecture, memory, name, price, zones)",
        ),
        ({"instanceType": {"name": "t", "price": 1}, "kubelet": True}, "kubelet must be false"),
        ({"instanceType": {"name": "t", "price": 1}, "name": "n"}, "needs exactly one of name"),
        (
            {
                "instanceType": {"name": "t", "price": 1},
                "gpus": [{"profile": "gb200"}],
                "fabric": {"clique": 1},
            },
            "nodes[0].fabric: needs nodes by name or namePrefix",
        ),
    ],
)
def test_bad_instance_type_entries_are_named(entry: dict[str, Any], said: str) -> None:
    assert any(said in p for p in problems(inventory(entry))), problems(inventory(entry))


def test_duplicate_instance_types_are_refused() -> None:
    entry = {"instanceType": {"name": "t", "price": 1}}
    assert problems(inventory(entry, entry)) == [
        'inv.yaml: nodes[1].instanceType.name: duplicate instance type "t" (also nodes[0])'
    ]


def test_the_example_types_carry_the_kwok_providers_fields_and_prices() -> None:
    got = types()
    assert list(got) == [
        "cpu-8x",
        "gpu-t4-1x",
        "gpu-t4-4x",
        "gpu-a100-8x",
        "gpu-a100-mig-8x",
        "gpu-h100-8x",
        "gpu-gb200-4x",
    ]
    h100 = got["gpu-h100-8x"]
    assert h100["resources"] == {"cpu": "192", "memory": "2097152Mi", "pods": "110"}
    assert h100["architecture"] == "amd64" and got["gpu-gb200-4x"]["architecture"] == "arm64"
    (offering,) = h100["offerings"]
    assert (offering["Price"], offering["Available"]) == (98.32, True)
    # Then the GPU Operator's labels (tests/test_nodelabels.py).
    assert offering["Requirements"][:2] == [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]},
    ]
    assert got["cpu-8x"]["resourceSlices"] == [] and got["cpu-8x"]["attributeBindings"] == []


def test_templates_are_the_fleets_slices_less_the_runtime_attributes() -> None:
    inv = load_inventory(EXAMPLE)
    t4 = types()["gpu-t4-4x"]
    published = node_slices(
        inv, "kwok-gpu-t4-4x-x1", node_uid="u", driver=DRIVER, labels={INSTANCE_TYPE_LABEL: "gpu-t4-4x"}
    )
    assert len(t4["resourceSlices"]) == len(published) == 1
    (template,), (real,) = t4["resourceSlices"], published
    assert "nodeName" not in template and template["pool"] == {
        "name": "gpu-t4-4x",
        "generation": 1,
        "resourceSliceCount": 1,
    }
    runtime = {"uuid", "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot"}
    for want, got in zip(real["spec"]["devices"], template["devices"], strict=True):
        assert set(want["attributes"]) - set(got["attributes"]) == runtime
        assert {k: v for k, v in want["attributes"].items() if k not in runtime} == got["attributes"]
        assert want["capacity"] == got["capacity"] and want["name"] == got["name"]
    assert got["attributes"]["productName"] == {"string": "Tesla T4"}
    assert t4["attributeBindings"] == []  # every GPU has its own UUID and PCIe root


def test_mig_devices_are_bound_to_their_parent_gpu() -> None:
    mig = types()["gpu-a100-mig-8x"]
    (template,) = mig["resourceSlices"]
    assert len(template["devices"]) == 56 and all(
        "parentUUID" not in d["attributes"] for d in template["devices"]
    )
    assert {d["attributes"]["profile"]["string"] for d in template["devices"]} == {"1g.5gb"}
    bound = {b["attribute"] for b in mig["attributeBindings"]}
    assert bound == {
        "gpu.nvidia.com/parentUUID",
        "resource.kubernetes.io/pciBusID",
        "resource.kubernetes.io/pcieRoot",
    }
    parent = [b for b in mig["attributeBindings"] if b["attribute"] == "gpu.nvidia.com/parentUUID"]
    assert len(parent) == 8 and all(len(b["devices"]) == 7 for b in parent)
    first = {d["device"] for d in parent[0]["devices"]}
    assert all(d.startswith(first.pop().split("-mig-")[0]) for d in [*first])
    assert {d["pool"] for b in parent for d in b["devices"]} == {"gpu-a100-mig-8x"}


def test_dynamic_mig_templates_carry_the_counters_in_their_own_slice() -> None:
    inv = inventory({"instanceType": {"name": "h200", "price": 1}, "gpus": [{"profile": "h200", "count": 2}]})
    parsed = parse_inventory(inv)
    (h200,) = instance_types(parsed, driver=DRIVER, release=releases.get(None), dynamic_mig=True)
    counters = [s for s in h200["resourceSlices"] if "sharedCounters" in s]
    devices = [s for s in h200["resourceSlices"] if "devices" in s]
    assert counters and devices and not any("devices" in s for s in counters)  # Karpenter's rule
    assert {s["pool"]["resourceSliceCount"] for s in h200["resourceSlices"]} == {len(h200["resourceSlices"])}
    assert any(d.get("consumesCounters") for s in devices for d in s["devices"])


def test_render_prints_the_file_karpenter_reads(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fakeplugin",
            "render",
            f"--inventory={EXAMPLE}",
            "--karpenter-instance-types",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [t["name"] for t in json.loads(out.stdout)] == list(types())
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(inventory({"name": "n1", "gpus": [{"profile": "t4"}]})))
    out = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "render", f"--inventory={plain}", "--karpenter-instance-types"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and f"{plain}: no instanceType entries" in out.stderr


def test_with_karpenter_parses_and_checks_its_nodepools(tmp_path: Path) -> None:
    assert addons.parse_with("karpenter=pools.yaml,prometheus") == {
        "karpenter": "pools.yaml",
        "prometheus": "",
    }
    default = karpenter.load_nodepools(karpenter.DEFAULT_NODEPOOLS)
    assert [(d["kind"], d["metadata"]["name"]) for d in default] == [
        ("KWOKNodeClass", "default"),
        ("NodePool", "gpu"),
    ]
    pool = default[1]["spec"]
    assert pool["disruption"] == {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "10s",
        "budgets": [{"nodes": "100%"}],
    }
    assert pool["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.kwok.sh",
        "kind": "KWOKNodeClass",
        "name": "default",
    }
    bad = tmp_path / "pools.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(
        ClusterError, match=rf"--with karpenter={bad}: document 1 is not a named Karpenter object"
    ):
        karpenter.load_nodepools(bad)
    with pytest.raises(ClusterError, match=r"no such file|No such file"):
        karpenter.load_nodepools(tmp_path / "none.yaml")


def test_karpenter_runs_with_dra_simulation_on_and_its_listeners_behind_the_bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FAKEPLUGIN_KARPENTER_LOG_LEVEL", raising=False)
    env = karpenter.environment(tmp_path / "kubeconfig", tmp_path / "types.json", 4001, 4002)
    assert env["LOG_LEVEL"] == "info"
    monkeypatch.setenv("FAKEPLUGIN_KARPENTER_LOG_LEVEL", "debug")
    assert karpenter.environment(tmp_path / "k", tmp_path / "t", 1, 2)["LOG_LEVEL"] == "debug"
    assert env["IGNORE_DRA_REQUESTS"] == "false" and env["DISABLE_LEADER_ELECTION"] == "true"
    assert env["INSTANCE_TYPES_FILE_PATH"] == str(tmp_path / "types.json")
    assert (env["METRICS_PORT"], env["HEALTH_PROBE_PORT"]) == ("4001", "4002")


def test_a_node_of_an_unknown_instance_type_is_reported_and_publishes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    known = NodeDevices(EXAMPLE, "kwok-gpu-abcde", driver=DRIVER, log_level=logging.DEBUG)
    with caplog.at_level(logging.DEBUG, logger="fakeplugin.drivers.gpu.publish.node"):
        known.set_node({INSTANCE_TYPE_LABEL: "gpu-t4-4x"}, "uid-1")
        unknown = NodeDevices(EXAMPLE, "kwok-gpu-fghij", driver=DRIVER, log_level=logging.DEBUG)
        unknown.set_node({INSTANCE_TYPE_LABEL: "gpu-b200-8x"}, "uid-2")
        cpu = NodeDevices(EXAMPLE, "kwok-cpu-klmno", driver=DRIVER, log_level=logging.DEBUG)
        cpu.set_node({INSTANCE_TYPE_LABEL: "cpu-8x"}, "uid-3")
    assert sorted(known) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"] and list(unknown) == list(cpu) == []
    assert "node kwok-cpu-klmno: its entry nodes[0] has no GPUs: publishing no devices" in caplog.messages
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        "node kwok-gpu-fghij: no inventory entry matches this node (no instanceType entry gpu-b200-8x, "
        "no selector of its labels): publishing no devices"
    ]


@pytest.mark.build
def test_a_karpenter_build_without_its_go_toolchain_says_so(tmp_path: Path) -> None:
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-k8s.sh"), "--only", "karpenter"],
        env={**os.environ, "FAKEPLUGIN_CACHE": str(tmp_path), "KARPENTER_GOTOOLCHAIN": "go1.99.99"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    assert (
        "error: karpenter needs Go toolchain go1.99.99 (its go.mod wants a newer Go than go1.26" in out.stderr
    )
    assert (
        "the go command could not fetch it (set KARPENTER_GOTOOLCHAIN to one the Go module proxy serves): "
        in out.stderr
    )
    assert "go: downloading go1.99.99" in out.stderr and "not available" in out.stderr
    assert not (tmp_path / "karpenter" / "v1.15.0" / "karpenter").exists()


def test_the_rbac_example_lets_karpenter_read_what_it_simulates() -> None:
    role, binding = yaml.safe_load_all((ROOT / "examples" / "karpenter" / "rbac.yaml").read_text())
    assert role["rules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices", "resourceclaims", "deviceclasses"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "karpenter", "namespace": "kube-system"}
    ]


def test_an_unknown_profile_or_release_is_named_before_anything_is_rendered(tmp_path: Path) -> None:
    bad = inventory({"instanceType": {"name": "gpu-x", "price": 1}, "gpus": [{"profile": "h300"}]})
    bad["driverRelease"] = "0.9.0"
    path = tmp_path / "types.yaml"
    path.write_text(yaml.safe_dump(bad))
    out = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "render", f"--inventory={path}", "--karpenter-instance-types"],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and out.stdout == ""
    assert f'{path}: driverRelease: unknown NVIDIA driver release "0.9.0"' in out.stderr
    assert f'{path}: nodes[0].gpus[0].profile: unknown profile "h300"' in out.stderr


def test_with_passthrough_a_types_vfio_devices_bind_their_pci_bus_id_to_their_gpus() -> None:
    t4 = types(passthrough=True)["gpu-t4-1x"]
    assert [d["name"] for s in t4["resourceSlices"] for d in s["devices"]] == ["gpu-0", "gpu-vfio-0"]
    by_attribute = {b["attribute"]: {d["device"] for d in b["devices"]} for b in t4["attributeBindings"]}
    assert by_attribute["resource.kubernetes.io/pciBusID"] == {"gpu-0", "gpu-vfio-0"}
