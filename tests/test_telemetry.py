"""GPU telemetry (fakeplugin.telemetry): dcgm-exporter's names, types, help, labels and order against a golden
taken from its source; the exposition parses; counters files and load annotations with bad input; values
consistent with the profile and the fake nvidia-smi; DRA attribution; the fleet's derivation of uses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fakeplugin.drivers.gpu.prepare.smi import gpu_values
from fakeplugin.drivers.gpu.publish.node import node_devices
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import GpuDevice
from fakeplugin.profiles import profile_names
from fakeplugin.telemetry import counters, exposition, samples, uses
from fakeplugin.telemetry.attribution import Use
from fakeplugin.telemetry.counters import CountersError
from fakeplugin.telemetry.exporters import exporter_release
from fakeplugin.telemetry.load import IDLE, Load, LoadError, busiest, format_load, parse_load
from fakeplugin.telemetry.samples import NodeState
from fakeplugin.telemetry.source import Telemetry

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "dcgm-exporter-4.5.3-4.8.2.txt"
# The golden and these tests are the release 4.5.3-4.8.2's shape (its `Hostname`, its DRA keys); what later
# releases change is tests/test_telemetry_exporters.py's.
RELEASE = exporter_release("4.5.3-4.8.2")
NODE = "gpu-node-1"


def devices(gpus: list[dict[str, Any]], node: str = NODE) -> list[GpuDevice]:
    text = yaml.safe_dump(
        {"driverVersion": "580.159.04", "cudaDriverVersion": "13.0", "nodes": [{"name": node, "gpus": gpus}]}
    )
    return node_devices(parse_inventory(yaml.safe_load(text)), node, {})


def render(*states: NodeState, chosen: list[counters.Counter] | None = None) -> str:
    series: samples.Series = {}
    for state in states:
        samples.node_series(state, chosen or counters.default(), series, release=RELEASE)
    return b"".join(exposition.blocks(series)).decode()


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def rows(text: str, metric: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of `metric`, parsed by the Prometheus parser."""
    family = families(text)[metric.removesuffix("_total")]
    return [(dict(s.labels), s.value) for s in family.samples]


def golden() -> tuple[dict[str, list[str]], list[tuple[str, str, str]]]:
    labels: dict[str, list[str]] = {}
    metrics: list[tuple[str, str, str]] = []
    for line in GOLDEN.read_text().splitlines():
        if line.startswith("#"):
            continue
        key, rest = line.split(" ", 1)
        if key == "metric":
            name, kind, help_text = rest.split(" ", 2)
            metrics.append((name, kind, help_text))
        else:
            labels[key.removesuffix(":")] = rest.split()
    return labels, metrics


H200 = [{"profile": "h200", "count": 2}]
USE = Use("trainer-0", "team-a", "main", "big-gpu", "team-a", "gpu.nvidia.com", NODE, "gpu-0")


# ---- the exporter's shape: a golden taken from its source ------------------------------------------------


def test_names_types_help_order_and_labels_match_the_exporters_default_counters() -> None:
    """An H200 (every default field simulated: DCP, clocks, NVLink, row remapping) with the default counters
    renders every metric of dcgm-exporter 4.5.3-4.8.2's default-counters.csv, in its order, with its type
    and help, each series with exactly the exporter's labels."""
    want_labels, want_metrics = golden()
    text = render(NodeState(NODE, devices(H200)))
    helps = re.findall(r"^# HELP (\S+) (.*)$", text, re.M)
    types = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert [(n, t, h) for (n, h), (_, t) in zip(helps, types, strict=True)] == want_metrics
    for name, _, _ in want_metrics:
        for labels, _ in rows(text, name):
            xid = want_labels["xid-labels"] if name == "DCGM_FI_DEV_XID_ERRORS" else []
            assert list(labels) == want_labels["labels"] + xid, name  # the template's order, then sorted


def test_series_lines_as_the_exporters_template_writes_them() -> None:
    gpu = devices(H200)[0]
    text = render(NodeState(NODE, [gpu]))
    expected = (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{gpu.uuid}",pci_bus_id="{gpu_values(gpu)["bus_id"]}",'
        f'device="nvidia0",modelName="NVIDIA H200",Hostname="{NODE}",'
        'DCGM_FI_DRIVER_VERSION="580.159.04"} 0\n'
    )
    assert expected in text
    assert re.search(r"^DCGM_FI_DEV_POWER_USAGE\{.*\} 84\.000000$", text, re.M)  # a double: %f
    assert re.search(r'^DCGM_FI_DEV_XID_ERRORS\{.*,err_code="0",err_msg="No Error"\} 0$', text, re.M)
    assert re.match(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", gpu_values(gpu)["bus_id"])
    empty = counters.parse("DCGM_FI_DEV_GPU_UTIL, gauge,\n", "mine.csv")
    assert render(NodeState(NODE, [gpu]), chosen=empty).startswith("# HELP DCGM_FI_DEV_GPU_UTIL \n")


def test_exposition_parses_with_prometheus_and_carries_every_kind_of_series() -> None:
    """Two nodes (one with attribution and an XID, one with MIG devices): the Prometheus parser reads every
    family, with the types of the counters file and one sample per series line."""
    mig = devices([{"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]}], node="mig-node")
    text = render(
        NodeState(NODE, devices(H200), {"gpu-1": DeviceFault(79)}, [USE], {"gpu-0": Load(90, 50)}),
        NodeState("mig-node", mig),
    )
    parsed = families(text)
    assert len(parsed) == len(golden()[1])
    assert parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    assert parsed["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"
    assert sum(len(f.samples) for f in parsed.values()) == len(
        [ln for ln in text.splitlines() if ln[0] != "#"]
    )
    hosts = {s.labels["Hostname"] for s in parsed["DCGM_FI_DEV_GPU_TEMP"].samples}
    assert hosts == {NODE, "mig-node"}


def test_order_is_by_field_id_whatever_the_file_says() -> None:
    chosen = counters.parse(
        "DCGM_FI_DEV_FB_USED, gauge, used\nDCGM_FI_DEV_SM_CLOCK, gauge, sm\nDCGM_FI_DEV_GPU_UTIL, gauge, u\n",
        "mine.csv",
    )
    text = render(NodeState(NODE, devices(H200)), chosen=chosen)
    assert re.findall(r"^# TYPE (\S+)", text, re.M) == [
        "DCGM_FI_DEV_SM_CLOCK",  # 100
        "DCGM_FI_DEV_GPU_UTIL",  # 203
        "DCGM_FI_DEV_FB_USED",  # 252
    ]


# ---- counters files ----------------------------------------------------------------------------------------


def test_shipped_default_is_the_exporters_file_with_its_release_in_the_header() -> None:
    text = (ROOT / "fakeplugin" / "telemetry" / "default-counters.csv").read_text()
    assert text.startswith(
        "# dcgm-exporter 4.5.3-4.8.2 (NVIDIA/dcgm-exporter, tag 4.5.3-4.8.2, commit 691c927)"
    )
    chosen = counters.default()
    assert [c.field for c in chosen if c.is_label] == ["DCGM_FI_DRIVER_VERSION"]
    assert len(chosen) == 26
    assert all(samples.is_simulated(c, RELEASE) for c in chosen)


def test_counters_file_comments_whitespace_legacy_and_exporter_names(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(
        "# my counters\n\n"
        "  DCGM_FI_DEV_GPU_UTIL ,   gauge , GPU utilization (in %).\n"
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, legacy name\n"
        "DCGM_EXP_XID_ERRORS_COUNT, counter, the exporter's own\n"
        'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter,"known, ""not"" simulated"\n'
    )
    chosen = counters.load(path)
    assert [(c.field, c.field_id, c.prom_type) for c in chosen] == [
        ("DCGM_FI_DEV_GPU_UTIL", 203, "gauge"),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449, "counter"),
        ("DCGM_EXP_XID_ERRORS_COUNT", 9001, "counter"),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310, "counter"),
    ]
    assert chosen[0].help == "GPU utilization (in %)."
    assert chosen[3].help == 'known, "not" simulated'
    text = render(NodeState(NODE, devices(H200)), chosen=chosen)
    assert set(families(text)) == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "# c\nDCGM_FI_DEV_GPU_UTIL, gauge, ok\nDCGM_FI_DEV_GPU_UTILS, gauge, typo\n",
            "mine.csv:3: unknown field 'DCGM_FI_DEV_GPU_UTILS': no DCGM field dcgm-exporter 4.5.3-4.8.2 "
            "knows (did you mean DCGM_FI_DEV_GPU_UTIL?)",
        ),
        (
            "DCGM_FI_DEV_GPU_UTIL, gague, typo\n",
            "mine.csv:1: field DCGM_FI_DEV_GPU_UTIL: unknown Prometheus metric type 'gague' (one of gauge, "
            "counter, histogram, summary, label)",
        ),
        ("DCGM_FI_DEV_GPU_UTIL, gauge\n", "mine.csv:1: 2 fields, expected 3: DCGM FIELD, Prometheus"),
        ('DCGM_FI_DEV_GPU_UTIL, gauge,"open\n', 'mine.csv:1: not a CSV record: extraneous or missing " in'),
        (
            'DCGM_FI_DEV_GPU_UTIL, gauge, "quoted"\n',
            'mine.csv:1: not a CSV record: bare " in non-quoted field',
        ),
    ],
)
def test_bad_counters_file_names_file_line_and_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(content)
    with pytest.raises(CountersError) as err:
        counters.load(path)
    assert str(err.value).startswith(message.replace("mine.csv", str(path)))


def test_unreadable_or_huge_counters_file(tmp_path: Path) -> None:
    with pytest.raises(CountersError, match="cannot read the counters file"):
        counters.load(tmp_path / "absent.csv")
    big = tmp_path / "big.csv"
    big.write_text("# x\n" * (counters.MAX_FILE_BYTES // 4 + 1))
    with pytest.raises(CountersError, match="at most 1048576"):
        counters.load(big)


# ---- the load annotation -----------------------------------------------------------------------------------


def test_load_values() -> None:
    assert parse_load("90", "pod a/b") == Load(90, 90)
    assert parse_load("utilization=90, memory=40", "pod a/b") == Load(90, 40)
    assert parse_load("utilization=0", "pod a/b") == IDLE
    assert format_load(75) == "utilization=75" and format_load(75, 10) == "utilization=75,memory=10"
    assert busiest([None, Load(10, 80), Load(60, 5)]) == Load(60, 80)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("101", "utilization '101' is not a whole number 0 to 100"),
        ("-1", "utilization '-1' is not a whole number 0 to 100"),
        ("utilization=50,memory=1.5", "memory '1.5' is not a whole number 0 to 100"),
        ("memory=50", "no utilization"),
        ("utilization=5,utilization=6", "entry 'utilization=6'"),
        ("util=5", "entry 'util=5'"),
        ("", "utilization '' is not a whole number"),
    ],
)
def test_bad_load_names_object_and_annotation(value: str, problem: str) -> None:
    with pytest.raises(LoadError) as err:
        parse_load(value, "claim team-a/big-gpu")
    text = str(err.value)
    assert text.startswith(f"claim team-a/big-gpu: annotation fakeplugin.dev/gpu-load={value!r}: {problem}")
    assert text.endswith("expected utilization=N[,memory=M] or N (percent, 0 to 100)")


def test_format_load_refuses_out_of_range() -> None:
    with pytest.raises(LoadError, match="utilization 101: a whole number of percent, 0 to 100"):
        format_load(101)
    with pytest.raises(LoadError, match="memory -5"):
        format_load(5, -5)


# ---- values: the profile, the fake nvidia-smi, the load model ---------------------------------------------


def values_by_metric(text: str) -> dict[str, float]:
    """metric → value of the only series (one GPU)."""
    return {name: f.samples[0].value for name, f in families(text).items()}


@pytest.mark.parametrize("profile", profile_names())
def test_idle_values_agree_with_the_fake_nvidia_smi(profile: str) -> None:
    """Every shipped model, idle: framebuffer used + free + reserved is nvidia-smi's total and reserved its
    reserve; power is its idle draw; temperature its reading; utilization 0."""
    gpu = devices([{"profile": profile}])[0]
    smi = gpu_values(gpu)
    got = values_by_metric(render(NodeState(NODE, [gpu])))
    total, reserved = int(smi["memory_total_mib"]), int(smi["memory_reserved_mib"])
    assert got["DCGM_FI_DEV_FB_USED"] + got["DCGM_FI_DEV_FB_FREE"] + got["DCGM_FI_DEV_FB_RESERVED"] == total
    assert got["DCGM_FI_DEV_FB_RESERVED"] == reserved and got["DCGM_FI_DEV_FB_USED"] == 0
    assert got["DCGM_FI_DEV_GPU_TEMP"] == int(smi["temperature_c"])
    assert got["DCGM_FI_DEV_GPU_UTIL"] == 0
    if smi["power_draw_w"] == "N/A":
        assert "DCGM_FI_DEV_POWER_USAGE" not in got  # DCGM blank: no series
    else:
        assert got["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(float(smi["power_draw_w"]), abs=0.01)


@pytest.mark.parametrize("load", [Load(100, 100), Load(90, 30), Load(1, 0)])
def test_loaded_values_stay_within_the_board(load: Load) -> None:
    gpu = devices(H200)[0]
    idle = values_by_metric(render(NodeState(NODE, [gpu])))
    busy = values_by_metric(render(NodeState(NODE, [gpu], uses=[USE], loads={"gpu-0": load})))
    limit = float(gpu_values(gpu)["power_limit_w"])
    assert idle["DCGM_FI_DEV_POWER_USAGE"] < busy["DCGM_FI_DEV_POWER_USAGE"] <= limit
    assert busy["DCGM_FI_DEV_GPU_UTIL"] == load.utilization
    assert busy["DCGM_FI_DEV_FB_USED"] + busy["DCGM_FI_DEV_FB_FREE"] + busy["DCGM_FI_DEV_FB_RESERVED"] == int(
        gpu_values(gpu)["memory_total_mib"]
    )
    assert busy["DCGM_FI_DEV_SM_CLOCK"] == 1980 and idle["DCGM_FI_DEV_SM_CLOCK"] == 345
    assert busy["DCGM_FI_DEV_GPU_TEMP"] >= idle["DCGM_FI_DEV_GPU_TEMP"]
    assert 0 < busy["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] <= 1
    assert busy["DCGM_FI_DEV_MEM_COPY_UTIL"] <= busy["DCGM_FI_DEV_GPU_UTIL"]


def test_an_idle_allocated_gpu_looks_exactly_like_an_unallocated_one() -> None:
    gpu = devices(H200)[0]
    free = render(NodeState(NODE, [gpu]))
    allocated = render(NodeState(NODE, [gpu], uses=[USE]))
    attribution = re.compile(r',(container|dra_[a-z_]+|namespace|pod)="[^"]*"')
    assert len(attribution.findall(allocated)) == 8 * len(families(free))
    assert attribution.sub("", allocated) == free


def test_xid_is_the_latest_of_the_node_fault_with_the_exporters_message() -> None:
    text = render(
        NodeState(NODE, devices(H200), {"gpu-1": DeviceFault(79), "gpu-0": DeviceFault(None, True)})
    )
    by_gpu = {labels["gpu"]: (labels, value) for labels, value in rows(text, "DCGM_FI_DEV_XID_ERRORS")}
    assert by_gpu["1"][1] == 79
    assert by_gpu["1"][0]["err_code"] == "79" and by_gpu["1"][0]["err_msg"] == "GPU has fallen off the bus"
    assert by_gpu["0"][1] == 0 and by_gpu["0"][0]["err_msg"] == "No Error"  # lost, but no XID
    big = render(NodeState(NODE, devices(H200), {"gpu-0": DeviceFault(999)}))
    assert 'err_code="999",err_msg="Unknown Error"' in big


def test_dcp_only_on_volta_and_newer_datacenter_gpus() -> None:
    def dcp(profile: str) -> bool:
        text = render(NodeState(NODE, devices([{"profile": profile}])))
        return "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in families(text)

    assert dcp("h200") and dcp("t4") and dcp("a100-40gb") and dcp("l40s")
    assert not dcp("rtx-a5000")  # a workstation board (brand NvidiaRTX)


# ---- MIG ---------------------------------------------------------------------------------------------------


def test_mig_devices_get_their_own_series_and_the_parent_none() -> None:
    found = devices(
        [{"profile": "h200", "mig": [{"profile": "3g.71gb"}, {"profile": "4g.71gb"}]}, {"profile": "h200"}]
    )
    text = render(NodeState(NODE, found))
    temps = rows(text, "DCGM_FI_DEV_GPU_TEMP")
    instances = [(lb["gpu"], lb.get("GPU_I_PROFILE"), lb.get("GPU_I_ID")) for lb, _ in temps]
    assert instances == [("0", "4g.71gb", "1"), ("0", "3g.71gb", "2"), ("1", None, None)]
    parent = found[0].parent_uuid
    assert {lb["UUID"] for lb, _ in temps[:2]} == {parent}
    assert list(temps[0][0])[5:8] == ["GPU_I_PROFILE", "GPU_I_ID", "Hostname"]
    fb = {lb.get("GPU_I_PROFILE"): v for lb, v in rows(text, "DCGM_FI_DEV_FB_FREE")}
    assert fb["4g.71gb"] == 71424  # the profile's memory, nothing used
    assert [lb["gpu"] for lb, _ in rows(text, "DCGM_FI_DEV_GPU_UTIL")] == ["1"]  # none on GPU instances


def test_gpu_instance_ids_as_nvml_numbers_them() -> None:
    a100 = devices([{"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]}])
    assert [samples.gpu_instance_id(d) for d in a100] == [7, 8, 9, 10, 11, 12, 13]
    halves = devices([{"profile": "a100-40gb", "mig": [{"profile": "3g.20gb", "count": 2}]}])
    assert [samples.gpu_instance_id(d) for d in halves] == [1, 2]


def test_a_mig_devices_use_attributes_no_series_in_flex_mode() -> None:
    """As dcgm-exporter 4.5.3-4.8.2 in its default mode: the use's key is the parent's UUID, which has no
    series of its own on a MIG GPU; its instance's series are keyed <gpu>-<GPU_I_ID> (dcgm-exporter #714)."""
    found = devices([{"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]}])
    use = Use("p", "ns", "c", "claim", "ns", "gpu.nvidia.com", NODE, found[0].name)
    assert render(NodeState(NODE, found, uses=[use])) == render(NodeState(NODE, found))


# ---- attribution -------------------------------------------------------------------------------------------


def test_a_device_shared_by_containers_has_a_series_for_each() -> None:
    gpu = devices(H200)[0]
    second = Use("trainer-0", "team-a", "sidecar", "big-gpu", "team-a", "gpu.nvidia.com", NODE, "gpu-0")
    again = Use("trainer-0", "team-a", "main", "other", "team-a", "gpu.nvidia.com", NODE, "gpu-0")
    elsewhere = Use("x", "team-a", "c", "c", "team-a", "compute-domain.nvidia.com", NODE, "gpu-0")
    text = render(NodeState(NODE, [gpu], uses=[USE, second, again, elsewhere], loads={"gpu-0": Load(90, 90)}))
    utils = rows(text, "DCGM_FI_DEV_GPU_UTIL")
    assert [(lb["container"], lb["dra_claim_name"], v) for lb, v in utils] == [
        ("main", "big-gpu", 90),
        ("sidecar", "big-gpu", 90),
    ]
    labels = utils[0][0]
    assert {k: labels[k] for k in golden()[0]["dra-labels"]} == {
        "container": "main",
        "dra_claim_name": "big-gpu",
        "dra_claim_namespace": "team-a",
        "dra_device_name": "gpu-0",
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": NODE,
        "namespace": "team-a",
        "pod": "trainer-0",
    }


# ---- the fleet's uses, derived from claims and pods (pure) -------------------------------------------------


def claim(name: str, results: list[tuple[str, str]], annotation: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "team-a",
            "name": name,
            "annotations": {} if annotation is None else {"fakeplugin.dev/gpu-load": annotation},
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": d, "pool": NODE, "device": dev, "request": "gpus"} for d, dev in results
                    ]
                }
            }
        },
    }


def pod(name: str, containers: dict[str, list[str]], **kw: Any) -> dict[str, Any]:
    annotations = {"fakeplugin.dev/prepared": "true"} | kw.pop("annotations", {})
    spec_claims = [
        {"name": "gpus", "resourceClaimTemplateName": "t"},
        {"name": "shared", "resourceClaimName": "shared-gpu"},
    ]
    return {
        "metadata": {"namespace": "team-a", "name": name, "uid": f"uid-{name}", "annotations": annotations}
        | kw.pop("metadata", {}),
        "spec": {
            "nodeName": NODE,
            "resourceClaims": spec_claims,
            "containers": [
                {"name": c, "resources": {"claims": [{"name": r} for r in refs]}}
                for c, refs in containers.items()
            ],
        },
        "status": {
            "phase": "Running",
            "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}],
        }
        | kw.pop("status", {}),
    }


CLAIMS = {
    ("team-a", "trainer-0-gpus"): claim(
        "trainer-0-gpus", [("gpu.nvidia.com", "gpu-0"), ("gpu.nvidia.com", "gpu-1")]
    ),
    ("team-a", "shared-gpu"): claim("shared-gpu", [("gpu.nvidia.com", "gpu-2")], annotation="utilization=20"),
}


def test_fleet_uses_follow_the_kubelets_list() -> None:
    """Each container's referenced claims in the pod's order, every device of each (not filtered by
    request, as the kubelet's GetDynamicResources); containers without claims have none."""
    trainer = pod("trainer-0", {"main": ["shared", "gpus"], "logs": []})
    got = uses.node_uses([trainer], CLAIMS)
    assert [(u.container, u.claim_name, u.device) for u in got] == [
        ("main", "trainer-0-gpus", "gpu-0"),
        ("main", "trainer-0-gpus", "gpu-1"),
        ("main", "shared-gpu", "gpu-2"),
    ]
    assert got[0] == Use(
        "trainer-0",
        "team-a",
        "main",
        "trainer-0-gpus",
        "team-a",
        "gpu.nvidia.com",
        NODE,
        "gpu-0",
        pod_uid=trainer["metadata"]["uid"],  # the pod's, for --kubernetes-enable-pod-uid
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"annotations": {"fakeplugin.dev/prepared": "false"}},  # not prepared yet
        {"metadata": {"deletionTimestamp": "2026-12-03T19:00:00Z"}},  # deleting
        {"status": {"phase": "Succeeded"}},
    ],
)
def test_fleet_pods_that_are_not_active_use_nothing(changes: dict[str, Any]) -> None:
    assert uses.node_uses([pod("trainer-0", {"main": ["gpus"]}, **changes)], CLAIMS) == []
    assert uses.node_uses([{**pod("trainer-0", {"main": ["gpus"]}), "gone": True}], CLAIMS) == []


def test_fleet_extended_resource_claim_reaches_its_container() -> None:
    extended = pod("ext", {"main": []})
    extended["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "ext-extended",
        "requestMappings": [{"containerName": "main", "resourceName": "nvidia.com/gpu", "requestName": "r0"}],
    }
    claims = {("team-a", "ext-extended"): claim("ext-extended", [("gpu.nvidia.com", "gpu-3")])}
    assert [(u.container, u.device) for u in uses.node_uses([extended], claims)] == [("main", "gpu-3")]


def test_loads_claim_wins_then_pods_and_bad_values_are_reported() -> None:
    trainer = pod("trainer-0", {"main": ["shared", "gpus"]}, annotations={"fakeplugin.dev/gpu-load": "90"})
    other = pod("other", {"main": ["shared"]}, annotations={"fakeplugin.dev/gpu-load": "bad"})
    found = uses.node_uses([trainer, other], CLAIMS)
    pods = {("team-a", "trainer-0"): trainer, ("team-a", "other"): other}
    errors: list[str] = []
    loads = uses.device_loads(found, CLAIMS, pods, lambda e: errors.append(str(e)))
    assert loads == {"gpu-0": Load(90, 90), "gpu-1": Load(90, 90), "gpu-2": Load(20, 20)}
    assert errors == [
        "pod team-a/other: annotation fakeplugin.dev/gpu-load='bad': utilization 'bad' is not a whole "
        "number 0 to 100; expected utilization=N[,memory=M] or N (percent, 0 to 100)"
    ]


def test_a_deleted_pod_loses_its_labels_in_the_next_render() -> None:
    trainer = pod("trainer-0", {"main": ["gpus"]})
    state = devices(H200)
    with_pod = render(NodeState(NODE, state, uses=uses.node_uses([trainer], CLAIMS)))
    gone = render(NodeState(NODE, state, uses=uses.node_uses([{**trainer, "gone": True}], CLAIMS)))
    assert 'pod="trainer-0"' in with_pod and "pod=" not in gone


# ---- a host's render: nodes at one moment, energy integrated ----------------------------------------------


class View:
    def __init__(self, name: str, found: list[GpuDevice], faults: dict[str, DeviceFault] | None = None):
        self.node_name = name
        self.found = {d.name: d for d in found}
        self.faults = faults or {}

    def device_state(self) -> tuple[dict[str, GpuDevice], dict[str, DeviceFault]]:
        return self.found, self.faults


class Fixed:
    def __init__(self, loads: dict[str, Load]) -> None:
        self.loads = loads

    def read(self, node: str) -> tuple[list[Use], dict[str, Load]]:
        return [USE] if node == NODE else [], self.loads


def test_energy_counter_integrates_power_and_nodes_render_by_name() -> None:
    now = [100.0]
    attribution = Fixed({})
    views = [View("z-node", devices(H200, node="z-node")), View(NODE, devices(H200))]
    telemetry = Telemetry(
        lambda: views, attribution, counters.default(), release=RELEASE, clock=lambda: now[0]
    )

    def energy() -> dict[tuple[str, str], float]:
        text = b"".join(telemetry.render()).decode()
        return {
            (lb["Hostname"], lb["gpu"]): v for lb, v in rows(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        }

    assert set(energy().values()) == {0}
    now[0] += 10
    attribution.loads = {"gpu-0": Load(100, 100)}  # from now on: 0.95 of 700 W
    first = energy()
    assert first[(NODE, "1")] == pytest.approx(84 * 10 * 1000)  # idle 84 W for the 10 s before
    now[0] += 2
    second = energy()
    assert second[(NODE, "0")] == pytest.approx(first[(NODE, "0")] + 665 * 2 * 1000)
    assert list(second)[:2] == [(NODE, "0"), (NODE, "1")]  # nodes by name: gpu-node-1 before z-node


def test_label_counters_become_labels_of_every_series() -> None:
    """`label` records (counter_config.go) are labels named by the field, after Hostname, sorted; the
    serial is the fake nvidia-smi's."""
    gpu = devices(H200)[0]
    chosen = counters.parse(
        "DCGM_FI_DEV_GPU_UTIL, gauge, u\nDCGM_FI_DEV_SERIAL, label, s\nDCGM_FI_DEV_NAME, label, n\n",
        "mine.csv",
    )
    [(labels, _)] = rows(render(NodeState(NODE, [gpu]), chosen=chosen), "DCGM_FI_DEV_GPU_UTIL")
    assert list(labels)[-3:] == ["Hostname", "DCGM_FI_DEV_NAME", "DCGM_FI_DEV_SERIAL"]
    assert labels["DCGM_FI_DEV_SERIAL"] == gpu_values(gpu)["serial"]
    assert labels["DCGM_FI_DEV_NAME"] == "NVIDIA H200"


def test_a_dynamic_mig_partitions_load_and_use_show_on_its_gpu() -> None:
    """DynamicMIG: a partition is no GPU instance before it is created (no UUID), so its GPU keeps its
    series; the partition's use attributes them (its key is the parent's UUID) and its load moves them."""
    inventory = {"driverVersion": "580.159.04", "cudaDriverVersion": "13.0", "nodes": [
        {"name": NODE, "gpus": [{"profile": "h200"}]}]}  # fmt: skip
    found = node_devices(parse_inventory(inventory), NODE, {}, dynamic_mig=True)
    part = next(d for d in found if d.mig is not None)
    use = Use("p", "ns", "c", "cl", "ns", "gpu.nvidia.com", NODE, part.name)
    text = render(NodeState(NODE, found, uses=[use], loads={part.name: Load(60, 10)}))
    [(labels, value)] = rows(text, "DCGM_FI_DEV_GPU_UTIL")
    assert value == 60 and "GPU_I_PROFILE" not in labels
    assert (labels["dra_mig_profile"], labels["dra_mig_device_uuid"]) == (part.mig.profile, "")
