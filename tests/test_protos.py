"""The committed stubs in fakeplugin/_proto/ match protos/, and protos/ says what the kubelet expects."""

from __future__ import annotations

import filecmp
import subprocess
from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor

from fakeplugin._proto.dra.v1 import api_pb2 as dra_v1
from fakeplugin._proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from fakeplugin._proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as registration
from fakeplugin._proto.podresources.v1 import api_pb2 as podresources

REPO = Path(__file__).resolve().parent.parent
COMMITTED = REPO / "fakeplugin" / "_proto"
REGENERATE = "hack/gen-protos.sh"


def _files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }


def test_committed_stubs_are_fresh(tmp_path: Path) -> None:
    subprocess.run(["bash", str(REPO / REGENERATE), str(tmp_path)], check=True, cwd=REPO)
    fresh = _files(tmp_path / "fakeplugin" / "_proto")
    committed = _files(COMMITTED)
    assert fresh, "the generator produced nothing"
    stale = sorted(
        name
        for name in fresh.keys() | committed.keys()
        if name not in fresh or name not in committed or not filecmp.cmp(fresh[name], committed[name], False)
    )
    assert not stale, f"fakeplugin/_proto/ is stale ({', '.join(stale)}); run: {REGENERATE}"


def _method_paths(module, service: str) -> list[str]:
    svc = module.DESCRIPTOR.services_by_name[service]
    return [f"/{svc.full_name}/{m.name}" for m in svc.methods]


def _fields(message) -> dict[str, tuple[int, int]]:
    return {f.name: (f.number, f.type) for f in message.DESCRIPTOR.fields}


def test_service_names_and_method_paths() -> None:
    assert _method_paths(dra_v1, "DRAPlugin") == [
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
    ]
    assert _method_paths(dra_v1beta1, "DRAPlugin") == [
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
    ]
    assert _method_paths(registration, "Registration") == [
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    ]
    assert _method_paths(health_v1alpha1, "DRAResourceHealth") == [
        "/v1alpha1.DRAResourceHealth/NodeWatchResources"
    ]
    assert _method_paths(podresources, "PodResourcesLister") == [
        "/v1.PodResourcesLister/List",
        "/v1.PodResourcesLister/GetAllocatableResources",
        "/v1.PodResourcesLister/Get",
    ]
    watch = health_v1alpha1.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods[0]
    assert watch.server_streaming and not watch.client_streaming


def test_device_fields_share_id_in_v1_only() -> None:
    common = {
        "request_names": (1, FieldDescriptor.TYPE_STRING),
        "pool_name": (2, FieldDescriptor.TYPE_STRING),
        "device_name": (3, FieldDescriptor.TYPE_STRING),
        "cdi_device_ids": (4, FieldDescriptor.TYPE_STRING),
    }
    assert _fields(dra_v1.Device) == {**common, "share_id": (5, FieldDescriptor.TYPE_STRING)}
    assert _fields(dra_v1beta1.Device) == common
    share_id = dra_v1.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert share_id.has_presence, "share_id must be proto3 optional"


def test_claim_and_response_fields() -> None:
    for api in (dra_v1, dra_v1beta1):
        assert _fields(api.Claim) == {
            "namespace": (1, FieldDescriptor.TYPE_STRING),
            "uid": (2, FieldDescriptor.TYPE_STRING),
            "name": (3, FieldDescriptor.TYPE_STRING),
        }
        assert _fields(api.NodePrepareResourceResponse) == {
            "devices": (1, FieldDescriptor.TYPE_MESSAGE),
            "error": (2, FieldDescriptor.TYPE_STRING),
        }
        assert _fields(api.NodeUnprepareResourceResponse) == {"error": (1, FieldDescriptor.TYPE_STRING)}
        for response in (api.NodePrepareResourcesResponse, api.NodeUnprepareResourcesResponse):
            claims = response.DESCRIPTOR.fields_by_name["claims"]
            assert claims.number == 1 and claims.message_type.GetOptions().map_entry


def test_plugin_info_fields() -> None:
    assert _fields(registration.PluginInfo) == {
        "type": (1, FieldDescriptor.TYPE_STRING),
        "name": (2, FieldDescriptor.TYPE_STRING),
        "endpoint": (3, FieldDescriptor.TYPE_STRING),
        "supported_versions": (4, FieldDescriptor.TYPE_STRING),
    }
    assert _fields(registration.RegistrationStatus) == {
        "plugin_registered": (1, FieldDescriptor.TYPE_BOOL),
        "error": (2, FieldDescriptor.TYPE_STRING),
    }


def test_device_health_fields() -> None:
    assert _fields(health_v1alpha1.DeviceHealth) == {
        "device": (1, FieldDescriptor.TYPE_MESSAGE),
        "health": (2, FieldDescriptor.TYPE_ENUM),
        "last_updated_time": (3, FieldDescriptor.TYPE_INT64),
        "health_check_timeout_seconds": (4, FieldDescriptor.TYPE_INT64),
        "message": (5, FieldDescriptor.TYPE_STRING),
    }
    assert dict(health_v1alpha1.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def test_podresources_fields_dcgm_exporter_reads() -> None:
    """k8s.io/kubelet v0.37.2 pkg/apis/podresources/v1/api.proto: the fields of List's answer."""
    string, message = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
    assert _fields(podresources.ListPodResourcesResponse) == {"pod_resources": (1, message)}
    assert {k: v for k, v in _fields(podresources.PodResources).items() if k != "memory"} == {
        "name": (1, string),
        "namespace": (2, string),
        "containers": (3, message),
        "cpu_ids": (4, FieldDescriptor.TYPE_INT64),
    }
    assert _fields(podresources.ContainerResources)["dynamic_resources"] == (5, message)
    assert _fields(podresources.DynamicResource) == {
        "claim_name": (2, string),
        "claim_namespace": (3, string),
        "claim_resources": (4, message),
    }
    assert _fields(podresources.ClaimResource) == {
        "cdi_devices": (1, message),
        "driver_name": (2, string),
        "pool_name": (3, string),
        "device_name": (4, string),
        "share_id": (5, string),
    }
    assert podresources.ClaimResource.DESCRIPTOR.fields_by_name["share_id"].has_presence
