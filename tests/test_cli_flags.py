"""One name, one meaning: a flag several commands take is the same flag in each (help, variable, default),
the old names are gone, and the driver names follow --driver-name the same way in serve, render and fleet."""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import pytest

from fakeplugin import DEFAULT_DRIVER_NAME
from fakeplugin.cli import build_parser
from fakeplugin.commands import SHARED, compute_domain_driver_name, plugin_driver_name
from fakeplugin.commands.fleet import fleet_drivers

ROOT = Path(__file__).resolve().parent.parent
SEED = str(ROOT / "examples" / "seed-lab.yaml")


def commands(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every (sub)command's parser by its command line, e.g. "cluster up"."""
    found = {path: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= commands(sub, f"{path} {name}".strip())
    return found


def flags_by_name() -> dict[str, dict[str, tuple[object, ...]]]:
    """Long option → command → what a user sees of it (help with its [env ...], default, metavar,
    choices, type, action)."""
    seen: dict[str, dict[str, tuple[object, ...]]] = defaultdict(dict)
    for command, parser in commands(build_parser()).items():
        for a in parser._actions:
            for option in (o for o in a.option_strings if o.startswith("--") and o != "--help"):
                seen[option][command] = (a.help, a.default, a.metavar, a.choices, a.type, type(a), a.dest)
    return seen


def test_a_flag_means_the_same_in_every_command_that_takes_it() -> None:
    seen = flags_by_name()
    for option, by_command in seen.items():
        variants = {repr(v) for v in by_command.values()}
        assert len(variants) == 1, f"{option} differs between {sorted(by_command)}: {variants}"
    taken_by_several = {option for option, by_command in seen.items() if len(by_command) > 1}
    # Each flag several commands take comes from SHARED (fault's --clear and --gpu-load: one helper each
    # in fault.py).
    assert taken_by_several - set(SHARED) == {"--clear", "--gpu-load"}
    assert sorted(seen["--kubeconfig"]) == [
        "compute-domain-controller", "compute-domain-daemon", "fault", "fleet", "serve", "view",
    ]  # fmt: skip
    assert sorted(seen["--state-dir"]) == ["calls", "cluster down", "cluster status", "cluster up", "demo"]
    help_text, default, *_ = seen["--state-dir"]["demo"]
    assert default == str(Path.home() / ".cache" / "fakeplugin" / "cluster")
    assert isinstance(help_text, str) and help_text.endswith("[env FAKEPLUGIN_CLUSTER_DIR]")


@pytest.mark.parametrize(
    ("argv", "old"),
    [
        (["render"], f"--config={SEED}"),
        (["validate"], f"--config={SEED}"),
        (["cluster", "up", "--inventory", SEED], "--workers=2"),
        (["cluster", "up", "--inventory", SEED], "--feature-gates=DRADeviceTaints=true"),
        (["fleet", "--inventory", SEED], "--workers=2"),
        (["fleet", "--inventory", SEED], "--state-dir=/tmp/fleet"),
        (["fault", "node", "n1", "--clear"], "--state-dir=/tmp/cluster"),
    ],
)
def test_the_old_flags_are_rejected(argv: list[str], old: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*argv, old])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(f"fakeplugin: error: unrecognized arguments: {old}\n")


@pytest.mark.parametrize(
    ("variable", "argv", "attribute", "default"),
    [
        ("FAKEPLUGIN_CONFIG", ["render"], "inventory", None),
        ("FAKEPLUGIN_WORKERS", ["cluster", "up"], "simulated_nodes", 0),
        ("KUBE_FEATURE_GATES", ["cluster", "up"], "kubernetes_feature_gates", ""),
        ("FAKEPLUGIN_FLEET_WORKERS", ["fleet"], "threads", 8),
        ("FAKEPLUGIN_DEMO_DIR", ["demo"], "state_dir", str(Path.home() / ".cache/fakeplugin/cluster")),
    ],
)
def test_the_old_variables_are_ignored(
    monkeypatch: pytest.MonkeyPatch, variable: str, argv: list[str], attribute: str, default: object
) -> None:
    monkeypatch.delenv("FAKEPLUGIN_CLUSTER_DIR", raising=False)
    monkeypatch.setenv(variable, "3")
    assert getattr(build_parser().parse_args(argv), attribute) == default


def test_no_help_mentions_a_deprecated_name() -> None:
    for command, parser in commands(build_parser()).items():
        assert "deprecated" not in parser.format_help(), command


@pytest.mark.parametrize(
    ("driver_name", "compute_domains"),
    [
        (DEFAULT_DRIVER_NAME, "compute-domain.nvidia.com"),
        ("gpu.fake.nvidia.com", "compute-domain.fake.nvidia.com"),
        ("fake.example.com", "compute-domain.fake.example.com"),
    ],
)
def test_the_compute_domain_driver_is_named_after_the_gpu_driver(
    driver_name: str, compute_domains: str
) -> None:
    assert compute_domain_driver_name(driver_name) == compute_domains
    for plugin, expected in (("gpus", driver_name), ("compute-domains", compute_domains)):
        for command in (["serve"], ["render"]):
            args = build_parser().parse_args([*command, "--plugin", plugin, "--driver-name", driver_name])
            assert plugin_driver_name(args) == expected


def test_fleet_compute_domains_follows_the_driver_name() -> None:
    argv = ["fleet", "--inventory", SEED, "--compute-domains", "--driver-name", "gpu.fake.nvidia.com"]
    args = build_parser().parse_args(argv)
    # The drivers only keep the client: nothing is asked of an API server while they are made.
    gpus, compute_domains = fleet_drivers(args, "", kube=None)  # type: ignore[arg-type]
    assert (gpus.name, compute_domains.name) == ("gpu.fake.nvidia.com", "compute-domain.fake.nvidia.com")
    assert compute_domains.emulation.driver_name == "compute-domain.fake.nvidia.com"
    default = build_parser().parse_args(["fleet", "--inventory", SEED, "--compute-domains"])
    assert [d.name for d in fleet_drivers(default, "", kube=None)] == [  # type: ignore[arg-type]
        "gpu.nvidia.com",
        "compute-domain.nvidia.com",
    ]
