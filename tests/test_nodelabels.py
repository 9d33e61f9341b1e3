"""The GPU Operator's node labels (fakeplugin.drivers.gpu.publish.nodelabels) and the inventory's
`gpuOperator`. Expected values are written out here from GPU Feature Discovery's rules
(NVIDIA/k8s-device-plugin v0.20.0 `internal/lm/`) applied by hand to the inventory and the profiles' NVML
values, not computed by the code under test: product = NVML name with blanks as `-`; memory = NVML
memory.total in MiB; family from the compute capability (8.x below 8.9: ampere); MIG `single` puts
`<model>-MIG-<profile>` and the MIG device's attributes on `nvidia.com/gpu.*`, `mixed` one
`nvidia.com/mig-<profile>.*` resource per profile."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import releases
from fakeplugin.cluster.state import cluster_nodes
from fakeplugin.drivers.gpu import GpuDriver, gpu_node_labels, instance_types, operator_labels
from fakeplugin.fleet.nodeobjects import LABEL_KEYS, NodeOwner, label_patch, simulated_node, simulated_nodes
from fakeplugin.inventory import Inventory, InventoryError, load_inventory, parse_inventory
from fakeplugin.inventory.file import InventoryFile, written
from fakeplugin.runtime.driver import NodeDirs
from fakeplugin.runtime.emulation import emulation
from tests.harness.seedlab import A5000, GPU_OPERATOR_LABELS, T10

STAMP = 1_780_000_000
LAB = Path("examples/seed-lab.yaml")


def labels_of(doc: dict[str, Any], node: str) -> dict[str, str]:
    inv = parse_inventory(doc, source="inv.yaml")
    entry = inv.node_entry(node)
    assert entry is not None
    return operator_labels(inv, entry, timestamp=STAMP)


def node_doc(gpus: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        **top,
        "nodes": [{"name": "n", "gpus": gpus}],
    }


@pytest.mark.parametrize("node", [A5000, T10])
def test_the_seed_labs_gpu_nodes_have_gfds_labels_by_default(node: str) -> None:
    inv = load_inventory(LAB)
    entry = inv.node_entry(node)
    assert entry is not None and entry.gpu_operator == "clusterPolicy"
    expected = {**GPU_OPERATOR_LABELS[node], "nvidia.com/gfd.timestamp": str(STAMP)}
    assert operator_labels(inv, entry, timestamp=STAMP) == expected


def test_a_two_part_driver_version_has_an_empty_revision() -> None:
    labels = labels_of(node_doc([{"profile": "t4"}], driverVersion="580.95"), "n")
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.95"
    assert labels["nvidia.com/cuda.driver-version.revision"] == labels["nvidia.com/cuda.driver.rev"] == ""


def test_a_captured_3d_controller_is_in_compute_mode() -> None:
    labels = labels_of(node_doc([{"profile": "h200", "count": 2}]), "n")
    assert labels["nvidia.com/gpu.mode"] == "compute"  # the H200 capture: class 0x3, subclass 0x2
    assert labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["nvidia.com/gpu.memory"] == "143771"


def test_a_mig_capable_gpu_without_a_layout_gets_the_mig_managers_labels() -> None:
    labels = labels_of(node_doc([{"profile": "a100-40gb"}]), "n")
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert labels["nvidia.com/mig.config"] == "all-disabled"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.memory"] == "40960"


A100_MIG = [{"profile": "a100-40gb", "count": 2, "mig": [{"profile": "1g.5gb", "count": 7}]}]
# The 1g.5gb MIG device of an A100-SXM4-40GB (the profile's NVML values): 4864 MiB, 14 SMs, 1 slice, 1 CE.
ONE_G_5GB = {
    "memory": "4864",
    "multiprocessors": "14",
    "slices.gi": "1",
    "slices.ci": "1",
    "engines.copy": "1",
    "engines.decoder": "0",
    "engines.encoder": "0",
    "engines.jpeg": "0",
    "engines.ofa": "0",
}


def test_mig_strategy_single_labels_the_mig_devices_as_the_gpu() -> None:
    labels = labels_of(node_doc(A100_MIG), "n")
    gpu = {k.removeprefix("nvidia.com/gpu."): v for k, v in labels.items() if k.startswith("nvidia.com/gpu.")}
    assert {k: v for k, v in gpu.items() if not k.startswith("deploy.")} == {
        "product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "count": "14",
        "replicas": "1",
        "sharing-strategy": "none",
        **ONE_G_5GB,
        "family": "ampere",  # the full GPU's, which the MIG labels do not overwrite
        "compute.major": "8",
        "compute.minor": "0",
        "machine": "Standard-PC-Q35-ICH9-2009",
        "mode": "unknown",
        "present": "true",
    }
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert "nvidia.com/mig.config" not in labels  # a layout is the user's mig.config
    assert not any(k.startswith("nvidia.com/mig-") for k in labels)


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param(
            [{"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 2}, {"profile": "2g.10gb"}]}],
            id="two profiles",
        ),
        pytest.param([{"profile": "a100-40gb", "mig": []}], id="MIG on, no device"),
        pytest.param(
            [{"profile": "a100-40gb", "mig": [{"profile": "1g.5gb"}]}, {"profile": "a100-40gb"}],
            id="MIG on and off",
        ),
    ],
)
def test_mig_strategy_single_of_a_layout_it_cannot_label_is_invalid(gpus: list[dict[str, Any]]) -> None:
    labels = labels_of(node_doc(gpus), "n")
    assert {
        k: labels[f"nvidia.com/gpu.{k}"] for k in ("product", "count", "replicas", "sharing-strategy")
    } == {
        "product": "NVIDIA-A100-SXM4-40GB-MIG-INVALID",
        "count": "0",
        "replicas": "0",
        "sharing-strategy": "",
    }
    assert labels["nvidia.com/gpu.memory"] == "0"


def test_mig_strategy_mixed_labels_each_profile_as_its_own_resource() -> None:
    gpus = [
        {"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 2}, {"profile": "1g.5gb+me"}]},
        {"profile": "a100-40gb", "mig": [{"profile": "3g.20gb"}]},
    ]
    labels = labels_of(node_doc(gpus, migStrategy="mixed"), "n")
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    # The full GPUs: MIG-enabled, labelled without sharing (replicas 0).
    assert {k: labels[f"nvidia.com/gpu.{k}"] for k in ("product", "count", "replicas", "memory")} == {
        "product": "NVIDIA-A100-SXM4-40GB",
        "count": "2",
        "replicas": "0",
        "memory": "40960",
    }
    mig = {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-")}
    base = {"replicas": "1", "sharing-strategy": "none"}
    expected = {
        "1g.5gb": {"product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "count": "2", **base, **ONE_G_5GB},
        "1g.5gb.me": {  # `+me` becomes `.me` in the resource name and the product
            "product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me",
            "count": "1",
            **base,
            **ONE_G_5GB,
            "engines.decoder": "1",
            "engines.jpeg": "1",
            "engines.ofa": "1",
        },
        "3g.20gb": {
            "product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
            "count": "1",
            **base,
            "memory": "19968",
            "multiprocessors": "42",
            "slices.gi": "3",
            "slices.ci": "3",
            "engines.copy": "3",
            "engines.decoder": "2",
            "engines.encoder": "0",
            "engines.jpeg": "0",
            "engines.ofa": "0",
        },
    }
    assert mig == {f"nvidia.com/mig-{p}.{k}": v for p, attrs in expected.items() for k, v in attrs.items()}


def test_several_models_are_labelled_as_the_first_gpus_model() -> None:
    labels = labels_of(node_doc([{"profile": "t4"}, {"profile": "l40s", "count": 2}]), "n")
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.count"]) == ("Tesla-T4", "1")
    assert labels["nvidia.com/gpu.mode"] == "unknown"


def test_gpu_cluster_mode_has_only_its_deploy_labels_and_none_has_nothing() -> None:
    doc = node_doc([{"profile": "h200"}], gpuOperator="gpuCluster")
    deploy = ("driver", "dra-driver", "dra-validator", "dcgm-dra", "dcgm-exporter-dra")
    assert labels_of(doc, "n") == {
        "nvidia.com/gpu.present": "true",
        **{f"nvidia.com/gpu.deploy.{o}": "true" for o in deploy},
    }
    assert labels_of({**doc, "gpuOperator": "none"}, "n") == {}


def test_a_node_entry_overrides_the_files_mode_and_a_node_without_gpus_has_none() -> None:
    doc = {
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "gpuOperator": "none",
        "nodes": [
            {"name": "a", "gpus": [{"profile": "t4"}], "gpuOperator": "clusterPolicy"},
            {"name": "b", "gpus": [{"profile": "t4"}]},
            {"name": "cpu", "gpuOperator": "clusterPolicy"},
        ],
    }
    assert labels_of(doc, "a")["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels_of(doc, "b") == {}
    assert labels_of(doc, "cpu") == {}


def test_the_inventorys_own_labels_win_over_the_operators() -> None:
    doc = node_doc([{"profile": "t4"}])
    doc["nodes"][0]["labels"] = {"nvidia.com/gpu.product": "mine", "zone": "z1"}
    inv = parse_inventory(doc)
    entry = inv.node_entry("n")
    assert entry is not None
    labels = gpu_node_labels(inv, entry, timestamp=STAMP)
    assert (labels["nvidia.com/gpu.product"], labels["zone"], labels["nvidia.com/gpu.count"]) == (
        "mine",
        "z1",
        "1",
    )


@pytest.mark.parametrize(
    ("where", "value", "problem"),
    [
        (
            "top",
            "ClusterPolicy",
            'inv.yaml: gpuOperator: unknown GPU Operator mode "ClusterPolicy"; one of: ',
        ),
        ("node", "gpu-cluster", 'inv.yaml: nodes[0].gpuOperator: unknown GPU Operator mode "gpu-cluster"'),
        ("node", True, "inv.yaml: nodes[0].gpuOperator: must be a string, got"),
    ],
)
def test_a_bad_gpu_operator_names_the_file_and_field(where: str, value: Any, problem: str) -> None:
    doc = node_doc([{"profile": "t4"}])
    (doc if where == "top" else doc["nodes"][0])["gpuOperator"] = value
    with pytest.raises(InventoryError) as err:
        parse_inventory(doc, source="inv.yaml")
    assert problem in str(err.value)
    assert "clusterPolicy, gpuCluster, none" in str(err.value) or problem.endswith("got")


def fleet_inventory(tmp_path: Path, gpus: list[dict[str, Any]]) -> Inventory:
    path = tmp_path / "inventory.yaml"
    doc = {
        **node_doc(gpus),
        "nodes": [{"name": "sim", "kubelet": False, "labels": {"zone": "z"}, "gpus": gpus}],
    }
    path.write_text(yaml.safe_dump(doc))
    return load_inventory(path)


def test_a_new_mig_layout_relabels_a_fleet_node_and_leaves_a_users_label(tmp_path: Path) -> None:
    before = simulated_nodes(fleet_inventory(tmp_path, [{"profile": "h200"}]), timestamp=STAMP)["sim"]
    assert (before["nvidia.com/gpu.product"], before["nvidia.com/mig.config"]) == (
        "NVIDIA-H200",
        "all-disabled",
    )
    # The Node as the fleet made it (the keys it gave in LABEL_KEYS), and a label a user added since.
    meta = {"labels": {**before, "team": "a"}, "annotations": {LABEL_KEYS: ",".join(sorted(before))}}
    layout = [{"profile": "h200", "mig": [{"profile": "1g.18gb", "count": 7}]}]
    after = simulated_nodes(fleet_inventory(tmp_path, layout), timestamp=STAMP + 60)["sim"]
    patch = label_patch(meta, after, "owner")
    assert patch is not None
    changed = patch["metadata"]["labels"]
    assert changed["nvidia.com/gpu.product"] == "NVIDIA-H200-MIG-1g.18gb"
    assert changed["nvidia.com/gpu.count"] == "7"
    assert changed["nvidia.com/gpu.memory"] == "16384"
    assert changed["nvidia.com/gfd.timestamp"] == str(STAMP + 60)
    assert changed["nvidia.com/mig.config"] is None  # ours, no longer given: removed
    assert "team" not in changed and "zone" not in changed  # a user's label and an unchanged one: untouched


class Nodes:
    """The Node calls NodeOwner.sync makes, on a dict (a merge patch of labels and annotations)."""

    def __init__(self) -> None:
        self.metas: dict[str, dict[str, Any]] = {}

    def list(self, path: str, **_: Any) -> tuple[list[dict[str, Any]], str]:
        return [{"metadata": m} for m in self.metas.values()], "1"

    def create(self, path: str, body: dict[str, Any]) -> None:
        self.metas[body["metadata"]["name"]] = body["metadata"]

    def patch(self, path: str, body: dict[str, Any]) -> None:
        meta = self.metas[path.rsplit("/", 1)[1]]
        for key in ("labels", "annotations"):
            merged = {**meta[key], **body["metadata"][key]}
            meta[key] = {k: v for k, v in merged.items() if v is not None}

    def delete(self, path: str) -> None:
        del self.metas[path.rsplit("/", 1)[1]]


def write_at(path: Path, doc: dict[str, Any], stamp: int) -> None:
    """The inventory file, last written at `stamp` (seconds since the epoch)."""
    path.write_text(yaml.safe_dump(doc))
    os.utime(path, (stamp, stamp))


def test_a_fleet_relabels_its_nodes_when_the_inventory_changes_not_on_every_sync(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    doc = {**node_doc([]), "nodes": [{"name": "sim", "kubelet": False, "gpus": [{"profile": "t4"}]}]}
    write_at(path, doc, STAMP)
    nodes, inventory = Nodes(), InventoryFile(path)
    owner = NodeOwner(nodes, inventory, owner="o", owns=lambda _: True)  # type: ignore[arg-type]
    assert owner.sync() == (1, 0, 0)
    assert nodes.metas["sim"]["labels"]["nvidia.com/gfd.timestamp"] == str(STAMP)  # the file's
    assert owner.sync() == (0, 0, 0)  # GFD's timestamp is the labels', not the sync's
    doc["nodes"][0]["gpus"] = [{"profile": "t4", "count": 2}]
    write_at(path, doc, STAMP + 100)
    assert inventory.reload_if_changed()
    assert owner.sync() == (0, 1, 0)
    labels = nodes.metas["sim"]["labels"]
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gfd.timestamp"]) == ("2", str(STAMP + 100))


def labelling_plugin(
    tmp_path: Path, inventory: InventoryFile, nodes: Nodes, name: str
) -> tuple[Any, list[dict[str, Any]]]:
    """The GPU plugin of node `name` with --gpu-operator-labels, its patches applied to `nodes`; and the
    list of the patches it sent."""
    sent: list[dict[str, Any]] = []

    def patch(node: str, body: dict[str, Any]) -> dict[str, Any]:
        sent.append(body)
        nodes.patch(f"/api/v1/nodes/{node}", body)
        return {}

    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
    plugin = GpuDriver(emulation(release=""), node_labels=patch).node(
        name, inventory, dirs=dirs, boot_id="b", get_claim=lambda ns, n: {}
    )
    return plugin, sent


def test_the_gpu_plugin_keeps_its_nodes_operator_labels_and_only_those(tmp_path: Path) -> None:
    """serve --gpu-operator-labels (drivers.gpu.labeller) through the GpuNode the runtime drives: labels at
    the Node's first sight, nothing while nothing changed, relabelled by an inventory edit, removed at close;
    a user's label and the inventory's own are never in a patch."""
    path = tmp_path / "inventory.yaml"
    doc = {**node_doc([]), "nodes": [{"name": "n", "labels": {"zone": "z"}, "gpus": [{"profile": "h200"}]}]}
    path.write_text(yaml.safe_dump(doc))
    inventory = InventoryFile(path)
    node = Nodes()
    node.metas["n"] = {"name": "n", "uid": "u1", "labels": {"zone": "z", "team": "a"}, "annotations": {}}
    plugin, sent = labelling_plugin(tmp_path, inventory, node, "n")
    plugin.set_node({"metadata": copy.deepcopy(node.metas["n"])})
    labels = node.metas["n"]["labels"]
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/mig.config"]) == (
        "NVIDIA-H200",
        "all-disabled",
    )
    assert (labels["team"], labels["zone"]) == ("a", "z")
    assert len(sent) == 1 and {"team", "zone"}.isdisjoint(sent[0]["metadata"]["labels"])
    plugin.set_node({"metadata": copy.deepcopy(node.metas["n"])})  # the informer brings our own patch back
    assert len(sent) == 1

    doc["nodes"][0]["gpus"] = [{"profile": "h200", "mig": [{"profile": "1g.18gb", "count": 7}]}]
    path.write_text(yaml.safe_dump(doc))
    assert inventory.reload_if_changed()
    plugin.refresh()
    labels = node.metas["n"]["labels"]
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.count"]) == (
        "NVIDIA-H200-MIG-1g.18gb",
        "7",
    )
    assert "nvidia.com/mig.config" not in labels

    plugin.close()
    assert node.metas["n"]["labels"] == {"zone": "z", "team": "a"}
    assert "fakeplugin.dev/gpu-operator-labels" not in node.metas["n"]["annotations"]


def test_mig_strategy_is_the_inventorys_single_by_default_and_none_labels_no_mig() -> None:
    layout = [{"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]}]
    assert parse_inventory(node_doc(layout)).mig_strategy == "single"
    labels = labels_of(node_doc(layout, migStrategy="none"), "n")
    assert "nvidia.com/mig.strategy" not in labels
    assert not any(k.startswith("nvidia.com/mig-") for k in labels)
    # No MIG label: the full GPUs' (MIG-enabled: no sharing, replicas 0), as GFD's newGPULabelers gives.
    assert {k: labels[f"nvidia.com/gpu.{k}"] for k in ("product", "count", "replicas")} == {
        "product": "NVIDIA-A100-SXM4-40GB",
        "count": "1",
        "replicas": "0",
    }
    assert labels["nvidia.com/mig.capable"] == "true"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("Mixed", 'inv.yaml: migStrategy: unknown MIG strategy "Mixed"; one of: single, mixed, none'),
        (1, "inv.yaml: migStrategy: must be a string, got"),
    ],
)
def test_a_bad_mig_strategy_names_the_file_and_field(value: Any, problem: str) -> None:
    with pytest.raises(InventoryError) as err:
        parse_inventory(node_doc([{"profile": "t4"}], migStrategy=value), source="inv.yaml")
    assert problem in str(err.value)


def test_a_new_mig_layout_relabels_per_the_strategy(tmp_path: Path) -> None:
    """The same layout change on a node of each strategy: `single` moves `gpu.product` to the MIG
    profile, `mixed` keeps the full GPU's and adds the profile's resource; both drop `mig.config`."""
    whole = [{"profile": "a100-40gb", "count": 2}]
    cut = [{"profile": "a100-40gb", "count": 2, "mig": [{"profile": "2g.10gb", "count": 3}]}]
    for strategy, product, mixed_count in (
        ("single", "NVIDIA-A100-SXM4-40GB-MIG-2g.10gb", None),
        ("mixed", "NVIDIA-A100-SXM4-40GB", "6"),
    ):
        before = labels_of(node_doc(whole, migStrategy=strategy), "n")
        after = labels_of(node_doc(cut, migStrategy=strategy), "n")
        assert before["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
        assert before["nvidia.com/mig.config"] == "all-disabled" and "nvidia.com/mig.config" not in after
        assert (after["nvidia.com/gpu.product"], after.get("nvidia.com/mig-2g.10gb.count")) == (
            product,
            mixed_count,
        )
        assert after["nvidia.com/mig.strategy"] == strategy


def test_simulated_nodes_of_cluster_up_need_no_patch_from_the_fleets_labeller(tmp_path: Path) -> None:
    """`cluster up` registers a simulated node with the labels and the annotation the fleet's labeller
    (fleet --gpu-operator-labels) would give, GFD's timestamp the file's: its first look sends nothing, a
    MIG layout change relabels it."""
    path = tmp_path / "inventory.yaml"
    doc = {**node_doc([]), "nodes": [{"name": "sim", "kubelet": False, "gpus": [{"profile": "h200"}]}]}
    write_at(path, doc, STAMP)
    inventory = InventoryFile(path)
    (node,) = cluster_nodes(inventory.inventory, 0, timestamp=written(path))
    body = simulated_node(node.name, node.labels, annotations=node.annotations)
    metas = Nodes()
    metas.metas["sim"] = {**body["metadata"], "uid": "u"}
    plugin, sent = labelling_plugin(tmp_path, inventory, metas, "sim")
    plugin.set_node({"metadata": copy.deepcopy(metas.metas["sim"])})
    assert sent == []
    doc["nodes"][0]["gpus"] = [{"profile": "h200", "mig": [{"profile": "1g.18gb", "count": 7}]}]
    write_at(path, doc, STAMP + 60)
    assert inventory.reload_if_changed()
    plugin.refresh()
    labels = metas.metas["sim"]["labels"]
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gfd.timestamp"]) == (
        "NVIDIA-H200-MIG-1g.18gb",
        str(STAMP + 60),
    )
    assert len(sent) == 1 and "nvidia.com/mig.config" not in labels


def test_karpenter_instance_types_offer_the_operator_labels_and_cpu_types_exclude_them() -> None:
    """Every offering carries its type's GPU Operator labels known at launch (no timestamp) as single
    `In` requirements (Karpenter's kwok provider puts them on the node it launches), and a type without
    one has `DoesNotExist` for it: a NodePool requiring `gpu.product` cannot get a CPU-only type."""
    inv = load_inventory(Path("examples/karpenter/inventory.yaml"))
    types = {t["name"]: t for t in instance_types(inv, driver="gpu.nvidia.com", release=releases.get(None))}

    def requirements(name: str) -> dict[str, tuple[str, list[str]]]:
        (first, *others) = types[name]["offerings"]
        assert all(o["Requirements"] == first["Requirements"] for o in others)
        return {r["key"]: (r["operator"], r.get("values", [])) for r in first["Requirements"]}

    t4, cpu = requirements("gpu-t4-1x"), requirements("cpu-8x")
    assert t4["nvidia.com/gpu.product"] == ("In", ["Tesla-T4"])
    assert t4["nvidia.com/gpu.present"] == ("In", ["true"])
    assert (t4["nvidia.com/gpu.count"], t4["nvidia.com/gpu.memory"]) == (("In", ["1"]), ("In", ["15360"]))
    assert "nvidia.com/gfd.timestamp" not in t4
    assert cpu["nvidia.com/gpu.product"] == cpu["nvidia.com/gpu.present"] == ("DoesNotExist", [])
    assert requirements("gpu-a100-mig-8x")["nvidia.com/gpu.product"] == (
        "In",
        ["NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"],
    )
    assert set(t4) == set(cpu)  # every type speaks of every key some type has
