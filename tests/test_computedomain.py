"""compute-domain.nvidia.com (fakeplugin.drivers.computedomain): slices, DeviceClasses, opaque configs, CDI
specs, NVIDIA's checkpoint format, Prepare/Unprepare against ComputeDomains, and the gRPC edge.

Unit tests: the few API calls the driver makes (ComputeDomain by UID, clique, node GET and label patch)
are answered by `Api`, a small in-test object; files and sockets are real.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cdi import validate_spec
from fakeplugin.drivers.computedomain import cdispec, deviceclasses, opaqueconfig, retry, slices
from fakeplugin.drivers.computedomain import checkpoint as cp
from fakeplugin.drivers.computedomain.plugin import ComputeDomainDriver
from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.inventory import InventoryError, load_inventory, parse_inventory
from fakeplugin.inventory.fields import DEFAULT_CLUSTER_UUID
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ClaimRef, ClaimState, PrepareResult
from fakeplugin.releases import get as release
from fakeplugin.runtime.driver import Claim, NodeDirs
from fakeplugin.runtime.emulation import emulation
from tests.harness.computedomain import (
    BOOT,
    CD_DRIVER,
    CD_UID,
    CLIQUE_ID,
    CLUSTER,
    NAMESPACE,
    NODE,
    Api,
    add_claim,
    allocation,
    channel_config,
    inventory,
)
from tests.harness.golden import check_golden
from tests.harness.hosted import Hosted
from tests.harness.server import RPC_TIMEOUT_S, WIRE

# -- inventory ----------------------------------------------------------------------------------------------


def test_fabric_gives_the_clique_id_and_a_default_cluster_uuid() -> None:
    inv = parse_inventory(inventory(clique=2, clusterUUID=CLUSTER.upper()), source="inv.yaml")
    assert inv.node_entry(NODE).clique_id == CLIQUE_ID  # lower-cased
    assert inv.node_entry("hgx-h200").clique_id == ""
    default = parse_inventory(inventory(clique=7), source="inv.yaml").node_entry(NODE)
    assert default.clique_id == f"{DEFAULT_CLUSTER_UUID}.7"
    zero = parse_inventory(inventory(clique=0, clusterUUID="00000000-0000-0000-0000-000000000000"))
    assert zero.node_entry(NODE).clique_id == ""  # what a GPU outside a multi-node fabric reports


def test_gpus_that_report_the_zero_cluster_uuid_give_no_clique() -> None:
    """An HGX H200's GPUs report a registered fabric with CliqueId 0 and the zero ClusterUUID (the capture;
    its profile's smi.fabric), a node entry with that fabric too: both mean no clique, an empty clique ID."""
    for fabric in ({}, {"fabric": {"clique": 0, "clusterUUID": "00000000-0000-0000-0000-000000000000"}}):
        node = {"name": "hgx-h200", "gpus": [{"profile": "h200", "count": 2}], **fabric}
        inv = parse_inventory({"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": [node]})
        values = [smi.gpu_values(d) for d in devices_for_node(inv, inv.nodes[0], "hgx-h200")]
        assert {(v["fabric_state"], v["fabric_clique_id"], v["fabric_cluster_uuid"]) for v in values} == {
            ("Completed", "0", "00000000-0000-0000-0000-000000000000")
        }
        assert inv.node_entry("hgx-h200").clique_id == ""


def test_a_clique_of_19_nodes_names_the_file_and_the_entries(tmp_path: Path) -> None:
    data = inventory(clique=2)
    data["nodes"].append(
        {"name": "gb200-b", "gpus": [{"profile": "gb200", "count": 4}], "fabric": {"clique": 2}}
    )
    path = tmp_path / "rack.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InventoryError) as e:
        load_inventory(path)
    assert str(e.value) == (
        f"{path}: nodes: clique {DEFAULT_CLUSTER_UUID}.2 has 19 nodes: nodes[0] (18), nodes[2] (1); "
        "at most 18 nodes share one clique (NVIDIA's --max-nodes-per-imex-domain; "
        "an NVL72 rack has 18 compute trays)"
    )
    data["nodes"][2]["fabric"]["clique"] = 3  # another clique: fine
    parse_inventory(data)


def test_fabric_field_errors() -> None:
    data = inventory(clique=-1, clusterUUID="nope", extra=1)
    data["nodes"].append({"selector": {"matchLabels": {"a": "b"}}, "fabric": {"clique": 1}})
    with pytest.raises(InventoryError) as e:
        parse_inventory(data, source="f.yaml")
    assert str(e.value).splitlines() == [
        "f.yaml: nodes[0].fabric.extra: unknown field (known fields: clique, clusterUUID)",
        "f.yaml: nodes[0].fabric.clique: must be at least 0, got -1",
        "f.yaml: nodes[0].fabric.clusterUUID: must look like xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex), "
        'got "nope"',
        "f.yaml: nodes[2].fabric: needs nodes by name or namePrefix: a selector's nodes cannot be counted "
        "into a clique",
        "f.yaml: nodes[2].fabric: needs gpus: the clique is what NVML reports for the node's GPUs",
    ]


# -- slices, DeviceClasses ----------------------------------------------------------------------------------


def test_the_slice_holds_channel_0_and_daemon_0_exactly() -> None:
    # 25.12's slice name, as the top-level goldens (tests/test_golden.py); 0.5.0's: `00000-<driver>-<node>-`.
    docs = slices.node_slices(
        NODE, node_uid="uid-1", driver=CD_DRIVER, release=release("25.12"), publishes=True
    )
    assert [d["spec"]["devices"] for d in docs] == [
        [
            {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
            {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
        ]
    ]
    assert docs[0]["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert (
        slices.node_slices(NODE, node_uid="u", driver=CD_DRIVER, release=release(None), publishes=False) == []
    )
    check_golden("computedomain-slice.yaml", docs)


def test_device_classes_carry_the_charts_cel() -> None:
    classes = {
        c["metadata"]["name"]: c["spec"]["selectors"][0]["cel"]["expression"]
        for c in deviceclasses.device_classes()
    }
    a = "device.attributes['compute-domain.nvidia.com']"
    assert classes == {
        "compute-domain-default-channel.nvidia.com": f"device.driver == '{CD_DRIVER}' && "
        f"{a}.type == 'channel' && {a}.id == 0",
        "compute-domain-daemon.nvidia.com": f"device.driver == '{CD_DRIVER}' && {a}.type == 'daemon'",
    }
    names = [c["metadata"]["name"] for c in deviceclasses.device_classes("compute-domain.fake.nvidia.com")]
    assert names == [
        "compute-domain-default-channel.fake.nvidia.com",
        "compute-domain-daemon.fake.nvidia.com",
    ]


# -- opaque configs -----------------------------------------------------------------------------------------


def test_opaque_config_strict_decoding_texts() -> None:
    assert opaqueconfig.decode(channel_config(allocationMode="All")).channels_all
    with pytest.raises(
        ValueError, match=r'^strict decoding error: unknown field "foo", unknown field "bar"$'
    ):
        opaqueconfig.decode(channel_config(foo=1, bar=2))
    with pytest.raises(ValueError) as e:
        opaqueconfig.decode(channel_config(domainID=5))
    assert str(e.value) == (
        "json: cannot unmarshal number into Go struct field ComputeDomainChannelConfig.domainID "
        "of type string"
    )
    assert opaqueconfig.decode(channel_config(foo=1), strict=False).domain_id == CD_UID
    with pytest.raises(
        ValueError, match=r'^no kind "Nope" is registered for version "resource\.nvidia\.com/v1beta1"'
    ):
        opaqueconfig.decode({**channel_config(), "kind": "Nope"})


def test_a_config_of_the_wrong_kind_and_a_missing_domain_id() -> None:
    daemon_cfg = {**channel_config(), "kind": "ComputeDomainDaemonConfig"}
    alloc = allocation("channel-0", config=daemon_cfg, requests=["channel"])
    with pytest.raises(opaqueconfig.ComputeDomainConfigError) as e:
        opaqueconfig.config_groups(alloc, driver_name=CD_DRIVER, device_types={"channel-0": "channel"})
    assert (
        str(e.value)
        == "error generating configResultsMap: cannot apply ComputeDomainDaemonConfig to request: channel"
    )
    (group,) = opaqueconfig.config_groups(
        allocation("channel-0"), driver_name=CD_DRIVER, device_types={"channel-0": "channel"}
    )
    with pytest.raises(
        opaqueconfig.ComputeDomainConfigError, match=r"^error validating config: domainID cannot be empty$"
    ):
        opaqueconfig.check(group.config)


# -- CDI ----------------------------------------------------------------------------------------------------


def test_channel_spec_single_and_all() -> None:
    spec = cdispec.claim_spec("claim-1", [("channel-0", cdispec.channel_edits(1))], driver_name=CD_DRIVER)
    assert validate_spec(spec) == []
    assert spec["kind"] == "k8s.compute-domain.nvidia.com/claim"
    assert spec["devices"][0]["name"] == "claim-1-channel-0"
    assert spec["devices"][0]["containerEdits"] == {
        "deviceNodes": [
            {
                "path": "/dev/nvidia-caps-imex-channels/channel0",
                "type": "c",
                "major": 234,
                "minor": 0,
                "fileMode": 0o666,
            }
        ]
    }
    check_golden("cdi-computedomain-channel.yaml", [spec])
    nodes = cdispec.channel_edits(2048)["deviceNodes"]
    assert len(nodes) == 2048 and nodes[-1]["path"] == "/dev/nvidia-caps-imex-channels/channel2047"
    assert nodes[-1]["minor"] == 2047


def test_daemon_edits_env_mount_and_caps_device(tmp_path: Path) -> None:
    domain = {"metadata": {"uid": CD_UID, "name": "imex", "namespace": "team-a"}}
    edits = cdispec.daemon_edits(clique_id=CLIQUE_ID, domain=domain, domain_dir=tmp_path / "d")
    assert edits["env"] == [
        f"CLIQUE_ID={CLIQUE_ID}",
        f"COMPUTE_DOMAIN_UUID={CD_UID}",
        "COMPUTE_DOMAIN_NAME=imex",
        "COMPUTE_DOMAIN_NAMESPACE=team-a",
    ]
    assert edits["mounts"] == [
        {
            "hostPath": str(tmp_path / "d"),
            "containerPath": "/imexd",
            "options": ["rw", "nosuid", "nodev", "bind"],
        }
    ]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidia-caps/nvidia-cap4323"]
    assert "deviceNodes" not in cdispec.daemon_edits(clique_id="", domain=domain, domain_dir=tmp_path)


# -- checkpoint ---------------------------------------------------------------------------------------------


def test_kubelet_checksum_matches_go() -> None:
    # fnv32a of go-spew's "%#v" of []byte(`{"a":1}`), computed with the vendored go-spew and Go's hash/fnv.
    assert cp.kubelet_checksum(b'{"a":1}') == 1187653614


def test_checkpoint_round_trip_and_corruption(tmp_path: Path) -> None:
    entry = cp.Entry(
        ClaimState.PREPARE_COMPLETED, {"allocation": {"devices": {}}}, ({"devices": []},), "c", "ns"
    )
    started = cp.Entry(ClaimState.PREPARE_STARTED, {}, (), "s", "ns")
    checkpoint = cp.ComputeDomainCheckpoint(BOOT, {"b": started, "a": entry})
    data = cp.encode(checkpoint)
    doc = json.loads(data)
    assert list(doc) == ["checksum", "v1", "v2"]
    assert list(doc["v1"]["preparedClaims"]) == ["a"]  # completed claims only
    assert doc["v2"]["preparedClaims"]["b"] == {
        "checkpointState": "PrepareStarted",
        "status": {},
        "name": "s",
        "namespace": "ns",
    }
    assert cp.decode(data) == cp.ComputeDomainCheckpoint(BOOT, {"a": entry, "b": started})
    with pytest.raises(cp.ComputeDomainCheckpointError, match=r"^checkpoint is corrupted$"):
        cp.decode(data.replace(b'"name":"s"', b'"name":"t"'))


# -- Prepare / Unprepare ------------------------------------------------------------------------------------


def make_node(tmp_path: Path, *, retry_seconds: float) -> Any:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(inventory(clique=2, clusterUUID=CLUSTER)))
    api = Api()
    driver = ComputeDomainDriver(
        emulation(release="", driver_name=CD_DRIVER),
        api,
        namespace=NAMESPACE,
        retry_seconds=retry_seconds,
    )
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugins" / CD_DRIVER)
    plugin = driver.node(NODE, InventoryFile(inv), dirs=dirs, boot_id=BOOT, get_claim=api.get_claim)
    plugin.set_node(api.node)
    return Hosted(plugin, api.get_claim), api, dirs


@pytest.fixture
def node(tmp_path: Path) -> Any:
    """The plugin answering each call after one attempt: the Preparer's answers, one by one."""
    return make_node(tmp_path, retry_seconds=0)


def test_the_plugin_retries_a_not_ready_channel_within_the_call(tmp_path: Path) -> None:
    plugin, api, _ = make_node(tmp_path, retry_seconds=retry.TIMEOUT_SECONDS)
    ref = add_claim(api, "c1", "channel-0")
    api.ready("NotReady")
    timer = threading.Timer(1.0, api.ready)  # the daemon turns Ready while the call retries
    timer.start()
    (result,) = plugin.prepare([ref]).values()
    timer.join()
    assert result.error == "" and [d.device_name for d in result.devices] == ["channel-0"]


def test_channel_prepare_waits_until_ready_then_injects_and_unprepare_removes_the_label(node: Any) -> None:
    plugin, api, dirs = node
    ref = add_claim(api, "c1", "channel-0")
    (result,) = plugin.prepare([ref]).values()
    assert result.error == (
        "error preparing devices for claim 'team-a/claim-c1:c1': prepare devices failed: "
        "error applying config: error asserting ComputeDomain Ready: current node not ready in ComputeDomain"
    )
    assert api.node["metadata"]["labels"] == {
        "resource.nvidia.com/computeDomain": CD_UID
    }  # pulls the daemon in
    api.ready("NotReady")
    assert plugin.prepare([ref])["c1"].error.endswith("current node not ready in ComputeDomain")
    api.ready()
    result = plugin.prepare([ref])["c1"]
    assert result.error == ""
    assert [d.cdi_device_ids for d in result.devices] == [
        ("k8s.compute-domain.nvidia.com/claim=c1-channel-0",)
    ]
    spec = yaml.safe_load((dirs.cdi_root / "k8s.compute-domain.nvidia.com-claim_c1.yaml").read_text())
    assert [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia-caps-imex-channels/channel0"
    ]
    state = cp.ComputeDomainCheckpointFile(dirs.plugin_dir / "checkpoint.json").load()
    assert state.claims["c1"].state is ClaimState.PREPARE_COMPLETED
    assert plugin.prepare([ref])["c1"] == result  # idempotent, from the checkpoint

    assert plugin.unprepare([ref]) == {"c1": ""}
    assert api.node["metadata"]["labels"] == {}
    assert not (dirs.cdi_root / "k8s.compute-domain.nvidia.com-claim_c1.yaml").exists()
    assert "c1" not in cp.ComputeDomainCheckpointFile(dirs.plugin_dir / "checkpoint.json").load().claims


def test_ready_in_status_nodes_and_all_channels(node: Any) -> None:
    plugin, api, dirs = node
    api.domains[CD_UID]["status"] = {"nodes": [{"name": NODE, "cliqueID": CLIQUE_ID, "status": "Ready"}]}
    ref = add_claim(api, "c2", "channel-0", allocationMode="All")
    assert plugin.prepare([ref])["c2"].error == ""
    spec = yaml.safe_load((dirs.cdi_root / "k8s.compute-domain.nvidia.com-claim_c2.yaml").read_text())
    assert len(spec["devices"][0]["containerEdits"]["deviceNodes"]) == 2048


def test_namespace_mismatch_is_nvidias_permanent_error(node: Any) -> None:
    plugin, api, _ = node
    ref = add_claim(api, "c3", "channel-0", namespace="elsewhere")
    assert plugin.prepare([ref])["c3"].error == (
        "error preparing devices for claim 'elsewhere/claim-c3:c3': prepare devices failed: "
        "error applying config: error asserting ComputeDomain's namespace: "
        "the ResourceClaim's namespace is different than the ComputeDomain's namespace"
    )
    assert api.node["metadata"]["labels"] == {}  # checked before the label


def test_unknown_opaque_field_and_a_second_channel_claim(node: Any) -> None:
    plugin, api, _ = node
    api.ready()
    bad = add_claim(api, "c4", "channel-0", foo="bar")
    assert plugin.prepare([bad])["c4"].error == (
        "error preparing devices for claim 'team-a/claim-c4:c4': prepare devices failed: error generating "
        "configResultsMap: error getting opaque device configs: error decoding config parameters: "
        'strict decoding error: unknown field "foo"'
    )
    first, second = add_claim(api, "c5", "channel-0"), add_claim(api, "c6", "channel-0")
    assert plugin.prepare([first])["c5"].error == ""
    assert plugin.prepare([second])["c6"].error == (
        "error preparing devices for claim 'team-a/claim-c6:c6': unable to prepare claim c6: "
        "requested device channel-0 is already allocated to different claim c5"
    )


def test_daemon_claim_gets_env_mount_and_its_domain_dir(node: Any) -> None:
    plugin, api, dirs = node
    ref = add_claim(api, "d1", "daemon-0")
    result = plugin.prepare([ref])["d1"]
    assert result.error == ""
    assert result.devices[0].cdi_device_ids == (
        "k8s.compute-domain.nvidia.com/device=all",
        "k8s.compute-domain.nvidia.com/claim=d1-daemon-0",
    )
    domain_dir = dirs.plugin_dir / "domains" / CD_UID
    assert (domain_dir / "imexd.cfg.tmpl").is_file()
    spec = yaml.safe_load((dirs.cdi_root / "k8s.compute-domain.nvidia.com-claim_d1.yaml").read_text())
    edits = spec["devices"][0]["containerEdits"]
    assert f"CLIQUE_ID={CLIQUE_ID}" in edits["env"] and "COMPUTE_DOMAIN_NAMESPACE=team-a" in edits["env"]
    assert edits["mounts"][0] == {
        "hostPath": str(domain_dir),
        "containerPath": "/imexd",
        "options": ["rw", "nosuid", "nodev", "bind"],
    }
    assert (dirs.cdi_root / "k8s.compute-domain.nvidia.com-device_base.yaml").is_file()


def test_unprepare_of_a_started_claim_aborts_it_and_a_stale_retry_is_refused(node: Any) -> None:
    plugin, api, dirs = node
    ref = add_claim(api, "c7", "channel-0")
    assert plugin.prepare([ref])["c7"].error  # not ready: stays PrepareStarted
    assert plugin.unprepare([ref]) == {"c7": ""}
    entry = cp.ComputeDomainCheckpointFile(dirs.plugin_dir / "checkpoint.json").load().claims["c7"]
    assert entry.state is ClaimState.PREPARE_ABORTED and entry.aborted_at
    api.ready()
    assert plugin.prepare([ref])["c7"].error == (
        "error preparing devices for claim 'team-a/claim-c7:c7': stale prepare for claim team-a/claim-c7:c7: "
        "claim prepare was already aborted"
    )


def test_stale_prepare_started_claims_are_cleaned_up_at_open(tmp_path: Path, caplog: Any) -> None:
    plugin_dir = tmp_path / "plugins" / CD_DRIVER
    plugin_dir.mkdir(parents=True)
    status = {"allocation": allocation("channel-0", config=channel_config())}
    old = cp.ComputeDomainCheckpoint(
        BOOT, {"gone": cp.Entry(ClaimState.PREPARE_STARTED, status, (), "claim-gone", "team-a")}
    )
    (plugin_dir / "checkpoint.json").write_bytes(cp.encode(old))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(inventory(clique=2, clusterUUID=CLUSTER)))
    api = Api()
    api.node["metadata"]["labels"] = {"resource.nvidia.com/computeDomain": CD_UID}
    driver = ComputeDomainDriver(emulation(release="", driver_name=CD_DRIVER), api, retry_seconds=0)
    plugin = driver.node(
        NODE,
        InventoryFile(inv),
        dirs=NodeDirs(tmp_path / "cdi", plugin_dir),
        boot_id=BOOT,
        get_claim=api.get_claim,
    )
    with caplog.at_level(logging.INFO):
        plugin.open()
    assert "Checkpointed RC cleanup: unprepared stale claim: team-a/claim-gone:gone" in caplog.text
    assert (
        cp.ComputeDomainCheckpointFile(plugin_dir / "checkpoint.json").load().claims["gone"].state
        is ClaimState.PREPARE_ABORTED
    )
    assert api.node["metadata"]["labels"] == {}


def test_a_checkpoint_of_another_boot_is_replaced(node: Any) -> None:
    plugin, _, dirs = node
    dirs.plugin_dir.mkdir(parents=True)
    other = cp.ComputeDomainCheckpoint(
        "other-boot", {"x": cp.Entry(ClaimState.PREPARE_COMPLETED, {}, (), "x", "ns")}
    )
    (dirs.plugin_dir / "checkpoint.json").write_bytes(cp.encode(other))
    plugin.open()
    assert cp.ComputeDomainCheckpointFile(
        dirs.plugin_dir / "checkpoint.json"
    ).load() == cp.ComputeDomainCheckpoint(BOOT, {})


def test_over_the_grpc_edge(node: Any, serve: Any) -> None:
    plugin, api, _ = node
    api.ready()
    add_claim(api, "g1", "channel-0")
    running = serve(plugin)
    v1 = WIRE["v1"][0]
    request = v1.NodePrepareResourcesRequest(claims=[v1.Claim(namespace="team-a", uid="g1", name="claim-g1")])
    response = running.dra("v1").NodePrepareResources(request, timeout=RPC_TIMEOUT_S)
    got = response.claims["g1"]
    assert got.error == ""
    assert [(d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in got.devices] == [
        (NODE, "channel-0", ["k8s.compute-domain.nvidia.com/claim=g1-channel-0"])
    ]
    unprepare = v1.NodeUnprepareResourcesRequest(
        claims=[v1.Claim(namespace="team-a", uid="g1", name="claim-g1")]
    )
    assert running.dra("v1").NodeUnprepareResources(unprepare, timeout=RPC_TIMEOUT_S).claims["g1"].error == ""
    assert api.node["metadata"]["labels"] == {}


def test_a_retryable_failure_is_retried_within_the_call_with_upstream_backoff() -> None:
    clock = [0.0]
    tried: list[tuple[float, list[str]]] = []
    ready_at = {"c1": 1.0, "c2": 99.0}  # c1 turns Ready after a second; c2 never within the call

    def prepare(claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        tried.append((clock[0], [c.ref.name for c in claims]))
        out = {}
        for c in claims:
            name, uid = c.ref.name, c.ref.uid
            if name == "bad":
                out[uid] = PrepareResult(error="error decoding config parameters")  # permanent
            elif clock[0] >= ready_at[name]:
                out[uid] = PrepareResult()
            else:
                out[uid] = PrepareResult(error=f"{name} not ready", retryable=True)
        return out

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    claims = [Claim(ClaimRef("ns", f"uid-{n}", n), {}) for n in ("c1", "c2", "bad")]
    results = retry.prepare_retrying(prepare, claims, timeout=10.0, clock=lambda: clock[0], sleep=sleep)
    assert results["uid-c1"] == PrepareResult()
    assert results["uid-c2"].error == "c2 not ready"  # the last error, at the deadline
    assert results["uid-bad"].error == "error decoding config parameters"
    assert tried[:5] == [
        (0.0, ["c1", "c2", "bad"]),
        (0.25, ["c1", "c2"]),
        (0.75, ["c1", "c2"]),
        (1.75, ["c1", "c2"]),  # c1 is Ready now
        (3.75, ["c2"]),
    ]
    # 250 ms doubling to 3 s: c2 at 0, .25, .75, 1.75, 3.75, 6.75, 9.75; its next (12.75) is past 10 s
    assert [t for t, names in tried if "c2" in names] == [0.0, 0.25, 0.75, 1.75, 3.75, 6.75, 9.75]


def test_no_retry_window_tries_once() -> None:
    calls = []

    def prepare(claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        calls.append(len(claims))
        return {c.ref.uid: PrepareResult(error="not ready", retryable=True) for c in claims}

    out = retry.prepare_retrying(prepare, [Claim(ClaimRef("ns", "u", "c"), {})], timeout=0)
    assert calls == [1] and out["u"].error == "not ready"
