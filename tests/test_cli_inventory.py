"""`fakeplugin render`, `validate` and `profiles`, run as real processes (exit codes, output, env vars)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fakeplugin.cli import build_parser
from fakeplugin.commands.validate import device_problems
from fakeplugin.drivers.gpu.publish.devices import gpu_uuid
from fakeplugin.inventory import parse_inventory
from fakeplugin.profiles import profile_names

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "examples" / "seed-lab.yaml"
A5000_NODE = "capi-dralabs-md-gpua5000-jw4mx-d64jz"
ENV_VARS = (
    "FAKEPLUGIN_INVENTORY",
    "FAKEPLUGIN_NODE",
    "NODE_LABELS",
    "NODE_UID",
    "DRIVER_NAME",
    "FAKEPLUGIN_OUTPUT",
)


def fakeplugin(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    clean["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "fakeplugin", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_render_seed_lab_prints_the_golden_output() -> None:
    result = fakeplugin("render", "--inventory", str(SEED))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (ROOT / "tests" / "golden" / "render-seed-lab.yaml").read_text()
    docs = list(yaml.safe_load_all(result.stdout))
    assert [(d["kind"], d["metadata"].get("name") or d["spec"]["nodeName"]) for d in docs] == [
        ("DeviceClass", "gpu.nvidia.com"),
        ("DeviceClass", "mig.nvidia.com"),
        ("DeviceClass", "vfio.gpu.nvidia.com"),
        ("ResourceSlice", "capi-dralabs-md-gput10-gzl84-f2m2d"),
        ("ResourceSlice", A5000_NODE),
    ]


def test_render_one_node_from_env_vars() -> None:
    result = fakeplugin(
        "render", "--node-uid", "0c9c4e0e-1b8a-4c7e-9d1e-2f3a4b5c6d7e",
        FAKEPLUGIN_INVENTORY=str(SEED), FAKEPLUGIN_NODE=A5000_NODE, DRIVER_NAME="gpu.fake.nvidia.com",
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (0, "")
    classes, (rs,) = (docs := list(yaml.safe_load_all(result.stdout)))[:3], docs[3:]
    assert [c["metadata"]["name"] for c in classes] == [
        "gpu.fake.nvidia.com",
        "mig.fake.nvidia.com",
        "vfio.gpu.fake.nvidia.com",
    ]
    assert rs["metadata"]["generateName"] == f"{A5000_NODE}-gpu.fake.nvidia.com-"
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "0c9c4e0e-1b8a-4c7e-9d1e-2f3a4b5c6d7e"
    assert rs["spec"]["driver"] == "gpu.fake.nvidia.com"
    (device,) = rs["spec"]["devices"]
    assert device["capacity"] == {"memory": {"value": "23028Mi"}}
    assert device["attributes"]["brand"] == {"string": "NvidiaRTX"}
    assert device["attributes"]["driverVersion"] == {"version": "580.126.20"}


def test_render_selector_nodes(tmp_path: Path) -> None:
    inv = tmp_path / "fleet.yaml"
    inv.write_text(
        'driverVersion: "580.95.05"\ncudaDriverVersion: "13.0"\n'
        "nodes:\n- selector: {matchLabels: {gpu: h200}}\n  gpus: [{profile: h200, count: 2}]\n"
    )
    everything = fakeplugin("render", "--inventory", str(inv))
    assert everything.returncode == 0
    assert [d["kind"] for d in yaml.safe_load_all(everything.stdout)] == ["DeviceClass"] * 3
    assert "nodes[0] selects nodes by label {'gpu': 'h200'}; render one with --node NAME" in everything.stderr

    one = fakeplugin("render", "--inventory", str(inv), "--node", "w7", "--node-labels", "gpu=h200,zone=a")
    assert one.returncode == 0
    (rs,) = list(yaml.safe_load_all(one.stdout))[3:]
    assert rs["spec"]["nodeName"] == "w7"
    assert [d["name"] for d in rs["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert rs["spec"]["devices"][0]["attributes"]["driverVersion"] == {"version": "580.95.5"}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["render"], 2, "--inventory (or FAKEPLUGIN_INVENTORY) is required"),
        (["render", "--inventory", str(SEED), "--node", "nope"], 1,
         f'fakeplugin render: error: {SEED}: no entry for node "nope": not named, and no selector matches '
         "labels {}"),
        (["render", "--inventory", str(SEED), "--driver-name", "GPU"], 2, 'invalid driver name "GPU"'),
        (["render", "--inventory", str(SEED), "--node-uid", "u"], 2, "--node-uid needs --node"),
    ],
)  # fmt: skip
def test_render_errors(args: list[str], code: int, message: str) -> None:
    result = fakeplugin(*args)
    assert (result.returncode, result.stdout) == (code, "")
    assert message in result.stderr


def test_validate_ok() -> None:
    result = fakeplugin("validate", "--inventory", str(SEED))
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"{SEED}: valid: 2 nodes, 3 GPUs on 2 nodes (driver 580.126.20, CUDA 13.0)\n"


def test_validate_prints_every_problem(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        'driverVersion: "580.95.05"\ncudaDriverVersion: "13.0"\n'
        "nodes:\n- name: a\n  gpus:\n  - profile: t4\n    count: 0\n- name: a\n  gpu: []\n"
    )
    result = fakeplugin("validate", "--inventory", str(inv))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        f"{inv}: nodes[0].gpus[0].count: must be at least 1, got 0",
        f'{inv}: nodes[1].gpu: unknown field (did you mean "gpus"?)',
        f'{inv}: nodes[1].name: duplicate node name "a" (also nodes[0])',
        f"3 problems in {inv}",
    ]


def test_profiles_table_and_yaml() -> None:
    table = fakeplugin("profiles")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    # Columns as wide as their longest cell: rtx-pro-6000-blackwell-server, its product name, "10.0".
    assert lines[0] == "   ".join(
        ["NAME".ljust(29), "PRODUCT NAME".ljust(44), "ARCH".ljust(12), "CC  ", "MEMORY ECC ON",
         "MEMORY ECC OFF", "DEFAULT ECC", "MIG"]
    )  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == profile_names()
    h200 = ["h200", "NVIDIA", "H200", "Hopper", "9.0", "143771Mi", "-", "on", "7", "profiles"]
    gb200 = ["gb200", "NVIDIA", "GB200", "Blackwell", "10.0", "189471Mi", "-", "on", "7", "profiles"]
    assert h200 in [line.split() for line in lines] and gb200 in [line.split() for line in lines]
    listed = yaml.safe_load(fakeplugin("profiles", "--output", "yaml").stdout)
    a5000 = next(p for p in listed if p["name"] == "rtx-a5000")
    assert a5000["memory"] == {"eccOn": "23028Mi", "eccOff": "24564Mi"} and a5000["eccDefault"] is False


@pytest.mark.parametrize("command", ["render", "validate", "profiles"])
def test_help_teaches_with_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and f"fakeplugin {command}" in out
    if command != "profiles":
        assert "(e.g. examples/seed-lab.yaml; required) [env FAKEPLUGIN_INVENTORY]" in " ".join(out.split())


def test_validate_reports_device_level_problems() -> None:
    inv = parse_inventory(
        {
            "driverVersion": "580.95.05",
            "cudaDriverVersion": "13.0",
            "nodes": [
                {"name": "n", "gpus": [{"profile": "t4"}, {"profile": "t4", "uuid": gpu_uuid("n", 0)}]}
            ],
        },
        source="inv.yaml",
    )
    assert device_problems(inv) == [
        f"inv.yaml: nodes[0].gpus[1] on node n: gpu-1 has the uuid of gpu-0 ({gpu_uuid('n', 0)}); "
        "override uuid with another value"
    ]
