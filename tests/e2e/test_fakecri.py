"""The fake CRI on its own: CreateContainer over its unix socket, CDI devices resolved with the real
CDI library from a spec dir, the record it writes, and the refusal of an unknown device.

Requests are encoded by hand (a few protobuf fields of runtime.v1), so no CRI stubs are needed.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from tests.harness.host import require_cluster_host

pytestmark = pytest.mark.cluster

CREATE_CONTAINER = "/runtime.v1.RuntimeService/CreateContainer"
SPEC = {
    "cdiVersion": "0.6.0",
    "kind": "example.com/gpu",
    "containerEdits": {"env": ["EXAMPLE_DRIVER=1"]},
    "devices": [
        {
            "name": "dev0",
            "containerEdits": {
                "env": ["EXAMPLE_VISIBLE_DEVICES=dev0"],
                "deviceNodes": [{"path": "/dev/example0", "type": "c", "major": 195, "minor": 0}],
                "mounts": [
                    {"hostPath": "/opt/example", "containerPath": "/opt/example", "options": ["ro", "bind"]}
                ],
            },
        }
    ],
}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes | str) -> bytes:
    """A length-delimited protobuf field (string or message)."""
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def create_container_request(namespace: str, pod: str, container: str, cdi_devices: list[str]) -> bytes:
    config = (
        _field(1, _field(1, container))  # metadata.name
        + _field(2, _field(1, "busybox:1.36"))  # image.image
        + _field(6, _field(1, "FROM_KUBELET") + _field(2, "yes"))  # envs[]
        + b"".join(_field(17, _field(1, d)) for d in cdi_devices)  # CDI_devices[].name
    )
    sandbox = _field(1, _field(1, pod) + _field(2, "uid-1") + _field(3, namespace))  # metadata
    return _field(1, "sandbox-1") + _field(2, config) + _field(3, sandbox)


@pytest.fixture
def fakecri(tmp_path: Path) -> Iterator[tuple[grpc.Channel, Path, Path]]:
    """A running fake CRI: (channel, CDI spec dir, record dir)."""
    binary = require_cluster_host(("fakecri",))["fakecri"]
    cdi_dir, records, sock = tmp_path / "cdi", tmp_path / "records", tmp_path / "cri.sock"
    cdi_dir.mkdir()
    argv = [str(binary), f"--socket={sock}", f"--cdi-spec-dir={cdi_dir}", f"--output-dir={records}"]
    with (tmp_path / "fakecri.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "fakecri.log").read_text()
            time.sleep(0.1)
        with grpc.insecure_channel(f"unix://{sock}") as channel:
            yield channel, cdi_dir, records
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def create(channel: grpc.Channel, request: bytes) -> bytes:
    call = channel.unary_unary(CREATE_CONTAINER, request_serializer=None, response_deserializer=None)
    return call(request, timeout=10)


def test_cdi_devices_are_resolved_into_the_record(fakecri: tuple[grpc.Channel, Path, Path]) -> None:
    channel, cdi_dir, records = fakecri
    (cdi_dir / "example.yaml").write_text(yaml.safe_dump(SPEC))

    create(channel, create_container_request("ns1", "pod1", "ctr", ["example.com/gpu=dev0"]))

    record = json.loads((records / "ns1_pod1_ctr.json").read_text())
    assert record["cdiDevices"] == ["example.com/gpu=dev0"]
    assert set(record["env"]) == {"FROM_KUBELET=yes", "EXAMPLE_DRIVER=1", "EXAMPLE_VISIBLE_DEVICES=dev0"}
    assert [(d["path"], d["type"], d["major"], d["minor"]) for d in record["deviceNodes"]] == [
        ("/dev/example0", "c", 195, 0)
    ]
    assert [(m["source"], m["destination"]) for m in record["mounts"]] == [("/opt/example", "/opt/example")]
    assert "error" not in record
    assert sorted(p.name for p in records.iterdir()) == ["ns1_pod1_ctr.json"]  # no temp files left


def test_an_unresolvable_cdi_device_fails_create_container(fakecri: tuple[grpc.Channel, Path, Path]) -> None:
    channel, cdi_dir, records = fakecri
    (cdi_dir / "example.yaml").write_text(yaml.safe_dump(SPEC))

    with pytest.raises(grpc.RpcError) as failed:
        create(
            channel,
            create_container_request("ns1", "pod2", "ctr", ["example.com/gpu=dev0", "example.com/gpu=gone"]),
        )

    assert failed.value.code() == grpc.StatusCode.UNKNOWN
    assert "unresolvable CDI devices example.com/gpu=gone" in failed.value.details()
    record = json.loads((records / "ns1_pod2_ctr.json").read_text())
    assert record["cdiDevices"] == ["example.com/gpu=dev0", "example.com/gpu=gone"]
    assert "unresolvable CDI devices example.com/gpu=gone" in record["error"]
