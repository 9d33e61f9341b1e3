"""Device health for the kubelet (fakeplugin.faults.devicehealth, fakeplugin.server.device_health): when
it is served, each device's status, and what the kubelet gets when it is not: real gRPC over the plugin's
unix socket, a client calling as the kubelet does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from fakeplugin._proto.dra_health.v1alpha1 import api_pb2 as dh
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg
from fakeplugin.drivers.gpu.publish.node import node_devices
from fakeplugin.faults import devicehealth
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.releases import RELEASES
from tests.harness.server import RPC_TIMEOUT_S

MIG_LAB = Path(__file__).parent.parent / "examples" / "mig.yaml"
GATE_ON = {devicehealth.GATE: True}
NOT_COVERED = "{} devices are not covered by the NVML health monitor"


def watch(running: Any, service: str) -> Any:
    """The kubelet's NodeWatchResources stream of `service` (v1alpha1 or v1.DRAResourceHealth)."""
    call = running.channel(running.server.paths.dra).unary_stream(
        f"/{service}/NodeWatchResources",
        request_serializer=dh.NodeWatchResourcesRequest.SerializeToString,
        response_deserializer=dh.NodeWatchResourcesResponse.FromString,
    )
    return call(dh.NodeWatchResourcesRequest(), timeout=RPC_TIMEOUT_S * 3)


def seen(update: dh.NodeWatchResourcesResponse) -> dict[str, tuple[str, str]]:
    return {d.device.device_name: (dh.HealthStatus.Name(d.health), d.message) for d in update.devices}


# --- when it is served ------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_served_only_on_request_by_the_gpu_plugin_with_the_gate(release: str) -> None:
    gates = dict(RELEASES[release].feature_gates)
    assert devicehealth.not_served(False, "gpus", GATE_ON).startswith("not requested (no NVIDIA release")
    assert "feature gate NVMLDeviceHealthCheck is off" in devicehealth.not_served(True, "gpus", gates)
    assert devicehealth.not_served(True, "compute-domains", GATE_ON) == (
        "the compute-domains plugin never serves it (PR #1243: HealthService(false))"
    )
    assert devicehealth.not_served(True, "gpus", gates | GATE_ON) == ""


def test_the_kinds_of_static_and_dynamic_mig_devices() -> None:
    inventory = InventoryFile(MIG_LAB).inventory
    static = {devicehealth.kind(d) for d in node_devices(inventory, "a100-static", {})}
    dynamic = {devicehealth.kind(d) for d in node_devices(inventory, "h200-dynamic", {}, dynamic_mig=True)}
    assert static == {"mig"}
    assert dynamic == {"gpu", "migdyn"}


def test_unhealthy_is_sticky_and_unwatched_kinds_stay_unknown() -> None:
    start = devicehealth.initial("gpu")
    assert start == devicehealth.Health("Healthy")
    skipped = devicehealth.step(start, "gpu", DeviceFault(13))
    assert skipped == devicehealth.Health("Healthy", "non-fatal XID 13 reported by NVML")
    assert devicehealth.step(skipped, "gpu", None) == skipped  # no event clears a message either
    broken = devicehealth.step(skipped, "gpu", DeviceFault(79))
    assert broken == devicehealth.Health("Unhealthy", "critical XID 79 reported by NVML")
    for later in (None, DeviceFault(), DeviceFault(31)):
        assert devicehealth.step(broken, "gpu", later) == broken
    lost = devicehealth.step(broken, "gpu", DeviceFault(79, lost=True))
    assert lost == devicehealth.Health("Unhealthy", "GPU is lost")  # an Unhealthy event replaces it
    for kind in ("migdyn", "vfio"):
        unknown = devicehealth.Health("Unknown", NOT_COVERED.format(kind))
        assert devicehealth.initial(kind) == unknown
        assert devicehealth.step(unknown, kind, DeviceFault(79)) == unknown


def test_the_stream_reports_each_kind_and_keeps_unhealthy_after_the_fault_clears(serve: Any) -> None:
    kinds = {"gpu-0": "gpu", "gpu-1": "gpu", "gpu-2-mig-1g.5gb-19-0": "mig"}
    kinds |= {"gpu-3-mig-1g.18gb-19-0": "migdyn", "gpu-vfio-4": "vfio"}
    faults: dict[str, DeviceFault] = {}
    running = serve(
        device_health=True,
        device_health_pool="node1",
        device_health_devices=list(kinds),
        device_health_interval_s=0.05,
        device_health_of=lambda name: (kinds[name], faults.get(name)),
    )
    info = running.registration().GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    assert list(info.supported_versions)[2:] == ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]
    stream = watch(running, "v1alpha1.DRAResourceHealth")
    first = next(stream)
    assert {d.device.pool_name for d in first.devices} == {"node1"}
    assert seen(first) == {
        "gpu-0": ("HEALTHY", ""),
        "gpu-1": ("HEALTHY", ""),
        "gpu-2-mig-1g.5gb-19-0": ("HEALTHY", ""),
        "gpu-3-mig-1g.18gb-19-0": ("UNKNOWN", NOT_COVERED.format("migdyn")),
        "gpu-vfio-4": ("UNKNOWN", NOT_COVERED.format("vfio")),
    }

    def until(name: str, wanted: tuple[str, str]) -> None:
        for _ in range(100):
            if seen(next(stream))[name] == wanted:
                return
        pytest.fail(f"{name} never reported {wanted}")

    faults["gpu-1"] = DeviceFault(lost=True)
    faults["gpu-vfio-4"] = DeviceFault(79)
    until("gpu-1", ("UNHEALTHY", "GPU is lost"))
    faults.clear()  # the annotation removed: upstream's status stays until the plugin restarts
    for _ in range(3):
        update = seen(next(stream))
        assert update["gpu-1"] == ("UNHEALTHY", "GPU is lost")
        assert update["gpu-0"] == ("HEALTHY", "")
        assert update["gpu-vfio-4"] == ("UNKNOWN", NOT_COVERED.format("vfio"))
    # A second watcher (the v1 service of a 1.37 kubelet) sees the same sticky state.
    v1 = watch(running, "v1.DRAResourceHealth")
    assert seen(next(v1))["gpu-1"] == ("UNHEALTHY", "GPU is lost")
    v1.cancel()
    stream.cancel()


# --- when it is not -------------------------------------------------------------------------------------


@pytest.mark.parametrize("service", ["v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"])
def test_unserved_the_kubelets_call_gets_unimplemented_as_from_grpc_go(serve: Any, service: str) -> None:
    running = serve()  # what serve passes for every release, without the gate, and for compute-domains
    info = running.registration().GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    with pytest.raises(grpc.RpcError) as refused:
        next(watch(running, service))
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert refused.value.details() == f"unknown service {service}"


def test_settings_refuse_device_health_without_the_devices_state() -> None:
    from fakeplugin.server import ServerSettings

    with pytest.raises(ValueError, match="the devices' kinds and faults are required"):
        ServerSettings(driver_name="gpu.example.com", device_health=True, device_health_pool="n")
