"""The fake nvidia-smi (prepare/nvidia-smi.sh and nvidia-smi.awk, prepare.smi) run as a container sees it,
under each shell and awk of tests/harness/smi_shells.py (the `smi_shell` fixture).

A container's view is built from real CDI specs: the plugin's files are written as the Preparer writes them,
then every mount of the injected devices (and of their specs) is copied from its hostPath to its
containerPath under a temporary root, which the script is pointed at with FAKEPLUGIN_SMI_ROOT. Output is
compared with real nvidia-smi 580.159.04 output of a two-H200 host (tests/data/nvidia-smi-h200): exactly
where the values are the same, by structure where the fake simulates them (temperature, power draw, serial).
The Fabric report (multi-node NVLink fabrics, the fabric-state fault) is tests/test_nvidia_smi_fabric.py's.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec, opaqueconfig, smi
from fakeplugin.drivers.gpu.prepare.preparer import GpuPreparer
from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import ClaimRef, DeviceSettings, GpuDevice, MigPlacement, MigResources
from fakeplugin.runtime.driver import Claim
from tests.harness import DRIVER
from tests.harness.factories import T10, numbered
from tests.harness.nvidia_smi import (
    CAPTURES,
    TIMESTAMP,
    UUID_A,
    UUID_B,
    captured,
    container_view,
    h200,
    parse_q,
    run_smi,
    smi_lines,
    smi_only,
    two_h200_view,
    write_claim,
)
from tests.harness.smi_shells import SCRIPT_COMMANDS, SHELLS, SmiShell, make_shell


def t10(minor: int) -> GpuDevice:
    return numbered(
        T10,
        minor,
        uuid=f"GPU-{minor:08x}-1111-2222-3333-444444444444",
        pci_bus_id=f"7c1e:{0x1B + minor:02x}:00.0",
    )


@pytest.fixture
def h200_host(tmp_path: Path) -> Path:
    return two_h200_view(tmp_path)


# ---- against the capture -----------------------------------------------------------------------------


def test_list_is_the_captured_one(smi_shell: SmiShell, h200_host: Path) -> None:
    assert smi_lines(smi_shell, h200_host, "-L") == captured("nvidia-smi -L")
    assert smi_lines(smi_shell, h200_host, "--list-gpus") == captured("nvidia-smi -L")


def test_version_is_the_captured_one(smi_shell: SmiShell, h200_host: Path) -> None:
    assert smi_lines(smi_shell, h200_host, "--version") == captured("nvidia-smi --version")


def test_query_noheader_nounits_is_the_captured_one(smi_shell: SmiShell, h200_host: Path) -> None:
    lines = smi_lines(
        smi_shell, h200_host, "--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader,nounits"
    )
    assert lines == captured("query csv noheader nounits")


def test_query_csv_matches_the_capture_field_by_field(smi_shell: SmiShell, h200_host: Path) -> None:
    expected = captured("query csv")
    fields = [f.split(" [")[0] for f in expected[0].split(", ")]
    lines = smi_lines(smi_shell, h200_host, f"--query-gpu={','.join(fields)}", "--format=csv")
    assert lines[0] == expected[0]  # header, units included
    simulated = {  # values the fake makes up, checked by shape
        "memory.free": r"143155 MiB",  # total - reserved - used; the real one is 1 MiB off that
        "temperature.gpu": r"33",
        "power.draw": r"84\.00 W",  # 12 % of the limit
        "serial": r"1\d{12}",
        "vbios_version": r"\[N/A\]",
    }
    for ours, real in zip(lines[1:], expected[1:], strict=True):
        for field, value, real_value in zip(fields, ours.split(", "), real.split(", "), strict=True):
            if field in simulated:
                assert re.fullmatch(simulated[field], value), (field, value)
            else:
                assert value == real_value, field


def test_summary_table_is_the_captured_layout(smi_shell: SmiShell, h200_host: Path) -> None:
    lines = smi_lines(smi_shell, h200_host)
    expected = captured("nvidia-smi")
    assert len(lines) == len(expected)
    assert TIMESTAMP.fullmatch(lines[0][:-7]) and lines[0].endswith(" " * 7)
    row = "| N/A   33C    P0             84W /  700W |"
    simulated = {9: row, 13: row}
    for i, (ours, real) in enumerate(zip(lines[1:], expected[1:], strict=True), start=1):
        if i in simulated:  # temperature and power draw: same columns, our values
            assert ours.startswith(simulated[i]) and ours[42:] == real[42:]
            assert [j for j, c in enumerate(ours) if c == "|"] == [j for j, c in enumerate(real) if c == "|"]
        else:
            assert ours == real, i


def test_query_report_is_a_subset_of_the_captured_one(smi_shell: SmiShell, h200_host: Path) -> None:
    ours = parse_q(smi_lines(smi_shell, h200_host, "-q"))
    real = parse_q((CAPTURES / "smi_q.txt").read_text().splitlines())
    assert len(ours) == len(real) == 3  # the header, then two GPUs
    simulated = {"Timestamp", "Serial Number", "VBIOS Version", "GPU Current Temp", "Free"}
    simulated.add("Average Power Draw")
    for ours_part, real_part in zip(ours, real, strict=True):
        real_keys = iter(key for key, _ in real_part)
        assert all(key in real_keys for key, _ in ours_part)  # same keys, same order
        real_values = dict(real_part)
        for key, value in ours_part:
            if key[-1] not in simulated:
                assert value == real_values[key], key


def test_errors_are_the_captured_ones(smi_shell: SmiShell, h200_host: Path) -> None:
    bogus = run_smi(smi_shell, h200_host, "--bogus")
    assert (bogus.returncode, bogus.stdout.splitlines()) == (255, captured("bad flag"))
    for args in (("-L", "-i", "0"), ("-L", "-i", "9")):
        result = run_smi(smi_shell, h200_host, *args)
        assert (result.returncode, result.stdout.splitlines()) == (2, captured("bad index"))


def test_unknown_query_field_and_bad_format_fail_with_exit_2(smi_shell: SmiShell, h200_host: Path) -> None:
    result = run_smi(smi_shell, h200_host, "--query-gpu=uuid,device_minor", "--format=csv")
    message = 'Field "device_minor" is not a valid field to query.\n\n'
    assert (result.returncode, result.stdout) == (2, message)
    # Named as given: a backslash escape stays two characters (awk's -v would make it a line break).
    escaped = run_smi(smi_shell, h200_host, "--query-gpu=uuid,a\\nb")
    assert (escaped.returncode, escaped.stdout) == (2, 'Field "a\\nb" is not a valid field to query.\n\n')
    octal_one = run_smi(smi_shell, h200_host, "--query-gpu=index", "-i", "\\061")  # -v: "1", GPU 1
    assert (octal_one.returncode, octal_one.stdout) == (6, "No devices were found\n")
    for args in (("--query-gpu=uuid", "--format=json"), ("-i",)):
        assert run_smi(smi_shell, h200_host, *args).returncode == 2, args


# ---- visibility: exactly the container's GPUs ---------------------------------------------------------


def test_a_container_sees_exactly_its_devices_of_several_claims(smi_shell: SmiShell, tmp_path: Path) -> None:
    plugin, cdi_root = tmp_path / "plugin", tmp_path / "cdi"
    two = write_claim(plugin, cdi_root, UUID_A, [t10(0), t10(1)])
    one = write_claim(plugin, cdi_root, UUID_B, [t10(3)])
    # The container asked for one request of the first claim (gpu-1) and all of the second.
    root = container_view(tmp_path / "ctr", [(two, ["gpu-1"]), (one, ["gpu-3"])])
    assert smi_lines(smi_shell, root, "-L") == [
        f"GPU 0: NVIDIA T10 (UUID: {t10(1).uuid})",
        f"GPU 1: NVIDIA T10 (UUID: {t10(3).uuid})",
    ]
    other = container_view(tmp_path / "other", [(two, ["gpu-0", "gpu-1"])])
    assert smi_lines(smi_shell, other, "--query-gpu=index,uuid", "--format=csv,noheader") == [
        f"0, {t10(0).uuid}",
        f"1, {t10(1).uuid}",
    ]


def test_ten_gpus_enumerate_by_minor_number(smi_shell: SmiShell, tmp_path: Path) -> None:
    devices = [t10(m) for m in (10, 2, 9, 0, 1)]
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", UUID_A, devices)
    root = container_view(tmp_path / "ctr", [(spec, [d.name for d in devices])])
    lines = smi_lines(smi_shell, root, "--query-gpu=index,uuid", "--format=csv,noheader")
    assert lines == [f"{i}, {t10(m).uuid}" for i, m in enumerate((0, 1, 2, 9, 10))]


def h200_mig(profile: str, gi_profile_id: int, start: int, size: int) -> GpuDevice:
    """A MIG device on the first captured H200 (resources: 3g.71gb's; the script does not show them)."""
    resources = MigResources(60, 3, 3, 0, 3, 0, 71424 * 1024 * 1024)
    placement = MigPlacement(profile, gi_profile_id, start, size, resources)
    parent = h200(0)
    return replace(
        parent,
        name=f"gpu-0-mig-{profile.replace('.', '')}-{gi_profile_id}-{start}",
        type="mig",
        uuid=f"MIG-{start:08x}-1111-2222-3333-444444444444",
        memory_bytes=resources.memory_bytes,
        parent_uuid=parent.uuid,
        mig=placement,
    )


def test_mig_devices_are_listed_under_their_gpu(smi_shell: SmiShell, tmp_path: Path) -> None:
    large, small = h200_mig("4g.71gb", 5, 0, 4), h200_mig("3g.71gb", 9, 4, 4)
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", UUID_A, [small, large, h200(1)])
    root = container_view(tmp_path / "ctr", [(spec, [small.name, large.name, "gpu-1"])])
    assert smi_lines(smi_shell, root, "-L") == [
        captured("nvidia-smi -L")[0],
        f"  MIG 4g.71gb     Device  0: (UUID: {large.uuid})",
        f"  MIG 3g.71gb     Device  1: (UUID: {small.uuid})",
        captured("nvidia-smi -L")[1],
    ]
    query = "--query-gpu=index,uuid,memory.total,mig.mode.current"
    assert smi_lines(smi_shell, root, query, "--format=csv,noheader") == [
        f"0, {h200(0).uuid}, 143771 MiB, Enabled",
        f"1, {h200(1).uuid}, 143771 MiB, Disabled",
    ]
    one = container_view(tmp_path / "one", [(spec, [small.name])])
    assert smi_lines(smi_shell, one, "-L") == [
        captured("nvidia-smi -L")[0],
        f"  MIG 3g.71gb     Device  0: (UUID: {small.uuid})",
    ]
    assert (
        smi_lines(smi_shell, one)[10]
        == "|                                         |                        |              Enabled |"
    )


def test_mps_puts_full_gpus_in_exclusive_process_compute_mode(smi_shell: SmiShell, tmp_path: Path) -> None:
    mps = DeviceSettings(opaqueconfig.MPS, mps_control_daemon="mps-control-daemon-x")
    timeslicing = DeviceSettings(opaqueconfig.TIME_SLICING, timeslice_interval="Long")
    spec = write_claim(
        tmp_path / "plugin",
        tmp_path / "cdi",
        UUID_A,
        [h200(0), h200(1)],
        {"gpu-0": mps, "gpu-1": timeslicing},
    )
    root = container_view(tmp_path / "ctr", [(spec, ["gpu-0", "gpu-1"])])
    assert smi_lines(smi_shell, root, "--query-gpu=index,compute_mode", "--format=csv") == [
        "index, compute_mode",
        "0, Exclusive_Process",
        "1, Default",
    ]
    table = smi_lines(smi_shell, root)
    assert table[9].endswith("|       0MiB / 143771MiB |      0%   E. Process |")
    assert table[13].endswith("|       0MiB / 143771MiB |      0%      Default |")
    exclusive = "    Compute Mode                                       : Exclusive_Process"
    default = "    Compute Mode                                       : Default"
    assert [line for line in smi_lines(smi_shell, root, "-q") if "Compute Mode  " in line] == [
        exclusive,
        default,
    ]
    assert smi_lines(smi_shell, root, "-q", "-d", "COMPUTE")[8:] == [
        "GPU 00000000:00:06.0",
        exclusive,
        "",
        "GPU 00000000:00:07.0",
        default,
        "",
    ]


def test_mps_on_a_mig_device_leaves_its_gpu_in_default_compute_mode(
    smi_shell: SmiShell, tmp_path: Path
) -> None:
    # The real driver sets EXCLUSIVE_PROCESS on the full GPUs of an MPS config only.
    small = h200_mig("3g.71gb", 9, 4, 4)
    mps = DeviceSettings(opaqueconfig.MPS, mps_control_daemon="mps-control-daemon-x")
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", UUID_A, [small], {small.name: mps})
    root = container_view(tmp_path / "ctr", [(spec, [small.name])])
    assert smi_lines(smi_shell, root, "--query-gpu=compute_mode", "--format=csv,noheader") == ["Default"]


def test_id_selects_by_index_uuid_or_bus_id(smi_shell: SmiShell, h200_host: Path) -> None:
    args = ("--query-gpu=index,uuid", "--format=csv,noheader")
    second = [f"1, {h200(1).uuid}"]
    assert smi_lines(smi_shell, h200_host, *args, "-i", "1") == second
    assert smi_lines(smi_shell, h200_host, *args, f"--id={h200(1).uuid}") == second
    assert smi_lines(smi_shell, h200_host, *args, "-i", "00000000:00:07.0") == second
    assert len(smi_lines(smi_shell, h200_host, "-q", "-i", "0,1")) == len(
        smi_lines(smi_shell, h200_host, "-q")
    )
    missing = run_smi(smi_shell, h200_host, *args, "-i", "7")
    assert (missing.returncode, missing.stdout) == (6, "No devices were found\n")


def test_no_driver_and_no_devices(smi_shell: SmiShell, tmp_path: Path) -> None:
    root = smi_only(tmp_path)
    no_driver = run_smi(smi_shell, root, "-L")
    assert no_driver.returncode == 9
    assert "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." in no_driver.stdout
    (root / "run/fakeplugin/gpus").mkdir(parents=True)
    for args in ((), ("-L",), ("-q",)):
        result = run_smi(smi_shell, root, *args)
        assert (result.returncode, result.stdout) == (6, "No devices were found\n"), args


def test_the_script_runs_the_awk_program_next_to_itself(smi_shell: SmiShell, h200_host: Path) -> None:
    bin_dir = h200_host / "usr/bin"
    # Started by its bare name in its own directory (`sh nvidia-smi` there: $0 has no slash).
    here = subprocess.run(
        [str(smi_shell.bin / "sh"), "nvidia-smi", "-L"],
        cwd=bin_dir,
        env=smi_shell.env(h200_host),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (here.returncode, here.stdout.splitlines(), here.stderr) == (0, captured("nvidia-smi -L"), "")
    (bin_dir / "nvidia-smi.awk").unlink()
    missing = run_smi(smi_shell, h200_host, "-L")
    assert (missing.returncode, missing.stdout) == (12, "")
    assert missing.stderr == (
        f"nvidia-smi: cannot read {bin_dir}/nvidia-smi.awk, its awk program (fakeplugin installs and mounts "
        "it next to nvidia-smi).\n"
    )
    # What the script answers alone needs no program.
    assert smi_lines(smi_shell, h200_host, "-h")[0] == "NVIDIA System Management Interface -- v580.159.04"


# ---- other GPUs: the same layout with their values ----------------------------------------------------


def test_a_gpu_without_power_or_mig_data_keeps_the_table_layout(smi_shell: SmiShell, tmp_path: Path) -> None:
    long_name = replace(t10(0), product_name="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", UUID_A, [long_name])
    root = container_view(tmp_path / "ctr", [(spec, ["gpu-0"])])
    lines = smi_lines(smi_shell, root)
    assert lines[2] == (
        "| NVIDIA-SMI 580.126.20             Driver Version: 580.126.20     CUDA Version: 13.0     |"
    )
    assert lines[8:11] == [
        "|   0  NVIDIA RTX PRO 6000 Blackwe... On  |   00007C1E:1B:00.0 Off |                    0 |",
        "| N/A   33C    P0            N/A  /  N/A  |       0MiB /  15360MiB |      0%      Default |",
        "|                                         |                        |                  N/A |",
    ]
    assert all(len(line) == 91 for line in lines[1:] if line)
    query = "--query-gpu=name,memory.free,power.draw,power.limit,mig.mode.current,ecc.mode.current"
    assert smi_lines(smi_shell, root, query, "--format=csv,noheader") == [
        "NVIDIA RTX PRO 6000 Blackwell Server Edition, 15360 MiB, [N/A], [N/A], [N/A], Enabled"
    ]


def test_ecc_mode_follows_the_inventory(smi_shell: SmiShell, tmp_path: Path) -> None:
    inv = parse_inventory(
        {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": "n", "gpus": [{"profile": "rtx-a5000", "ecc": False}]}],
        }
    )
    (ecc_off,) = devices_for_node(inv, inv.nodes[0], "n")
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", UUID_A, [ecc_off])
    root = container_view(tmp_path / "ctr", [(spec, ["gpu-0"])])
    assert smi_lines(
        smi_shell, root, "--query-gpu=ecc.mode.current,memory.total", "--format=csv,noheader"
    ) == ["Disabled, 24564 MiB"]
    assert smi_lines(smi_shell, root)[8].endswith("|                  Off |")
    assert "    Product Brand                                      : NVIDIA RTX" in smi_lines(
        smi_shell, root, "-q"
    )


def test_each_shell_pair_runs_the_script_with_its_own_commands_only(smi_shell: SmiShell) -> None:
    assert sorted(p.name for p in smi_shell.bin.iterdir()) == sorted(("sh", *SCRIPT_COMMANDS))
    assert smi_shell.env(Path("/ctr"))["PATH"] == str(smi_shell.bin)


def test_a_missing_shell_or_awk_skips_here_and_fails_in_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(SHELLS, "absent", {"sh": ("dash",), "awk": ("no-such-awk-of-fakeplugin",)})
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no-such-awk-of-fakeplugin is not installed"):
        make_shell("absent", tmp_path / "ci")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="under absent: no-such-awk-of-fakeplugin"):
        make_shell("absent", tmp_path / "here")


# ---- the plugin side: files, spec, lifecycle ----------------------------------------------------------


def test_spec_mounts_are_valid_cdi_and_keep_the_minimum_version(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    for uid, version in ((UUID_A, "0.5.0"), ("a" + UUID_A[1:], "0.3.0")):
        spec = cdispec.claim_spec(uid, [t10(0), t10(1)], driver_name=DRIVER, plugin_dir=plugin)
        assert cdi.validate_spec(spec) == []
        assert spec["cdiVersion"] == version
        options = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
        assert spec["containerEdits"]["mounts"] == [
            {
                "hostPath": str(plugin / "bin/nvidia-smi"),
                "containerPath": "/usr/bin/nvidia-smi",
                "options": options,
            },
            {
                "hostPath": str(plugin / "bin/nvidia-smi.awk"),
                "containerPath": "/usr/bin/nvidia-smi.awk",
                "options": options,
            },
        ]
        device_mounts = [m for d in spec["devices"] for m in d["containerEdits"]["mounts"]]
        assert [(m["hostPath"], m["containerPath"]) for m in device_mounts] == [
            (str(plugin / f"smi/{uid}-gpu-{i}.env"), f"/run/fakeplugin/gpus/gpu-{i}.env") for i in (0, 1)
        ]
    relative = cdispec.claim_spec(UUID_A, [t10(0)], driver_name=DRIVER, plugin_dir=Path("rel/plugin"))
    all_mounts = relative["containerEdits"]["mounts"] + relative["devices"][0]["containerEdits"]["mounts"]
    assert all(Path(m["hostPath"]).is_absolute() for m in all_mounts)


def test_preparer_writes_and_removes_the_files(tmp_path: Path) -> None:
    ref = ClaimRef(namespace="ns", uid=UUID_A, name="claim")
    result = {"request": "gpus", "driver": DRIVER, "pool": "node-a", "device": "gpu-1"}
    claim = {"metadata": {"uid": UUID_A}, "status": {"allocation": {"devices": {"results": [result]}}}}
    plugin = tmp_path / "plugin"
    preparer = GpuPreparer(
        driver_name=DRIVER,
        node_name="node-a",
        devices={d.name: d for d in map(t10, range(2))},
        get_claim=lambda namespace, name: claim,
        cdi_root=tmp_path / "cdi",
        plugin_dir=plugin,
        boot_id="0b00b00b-0000-4000-8000-000000000001",
    )
    preparer.open()
    script, program = plugin / "bin/nvidia-smi", plugin / "bin/nvidia-smi.awk"
    assert script.read_text() == smi.script_text() and script.stat().st_mode & 0o777 == 0o755
    assert program.read_text() == smi.program_text() and program.stat().st_mode & 0o777 == 0o644
    assert "exec awk " in smi.script_text() and "function csv_value(" in smi.program_text()

    assert preparer.prepare([Claim(ref, claim)])[UUID_A].error == ""
    data = plugin / "smi" / f"{UUID_A}-gpu-1.env"
    assert data.read_text() == smi.render_data(t10(1))
    assert f"uuid={t10(1).uuid}\n" in data.read_text()

    data.unlink()  # e.g. the plugin dir was cleaned while the checkpoint survived
    assert preparer.prepare([Claim(ref, claim)])[UUID_A].error == ""
    assert data.read_text() == smi.render_data(t10(1))

    assert preparer.unprepare([ref]) == {UUID_A: ""}
    assert not data.exists() and list((plugin / "smi").iterdir()) == []
    assert script.exists() and program.exists()  # shared by every claim


def test_unprepare_removes_the_data_an_earlier_version_kept_in_a_directory_per_claim(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    earlier = smi.data_dir(plugin) / UUID_A  # an earlier fakeplugin's layout: smi/<claimUID>/<device>.env
    earlier.mkdir(parents=True)
    (earlier / "gpu-1.env").write_text("uuid=x\n")
    smi.write_claim_data(plugin, UUID_B, [t10(2)])
    smi.remove_claim_data(plugin, UUID_A, ["gpu-1"])
    assert sorted(p.name for p in smi.data_dir(plugin).iterdir()) == [f"{UUID_B}-gpu-2.env"]
    smi.remove_claim_data(plugin, UUID_B, ["gpu-2"])
    smi.remove_claim_data(plugin, UUID_B, ["gpu-2"])  # nothing there is fine
    assert list(smi.data_dir(plugin).iterdir()) == []
