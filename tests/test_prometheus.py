"""`--with prometheus` without a cluster: the example rules through Debian's promtool (checked, and their unit
tests in examples/prometheus/tests/ run), the checks `request` makes before anything starts, the generated
prometheus.yml (promtool check config), the add-on list of `--with`, and where the telemetry ports go.

promtool comes with Debian's package `prometheus` (hack/setup.sh installs it): missing, these skip (fail
in CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fakeplugin.cluster import addons, components, kueue, prometheus
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.state import ClusterError, ClusterNode, State
from fakeplugin.cluster.supervisor import STOP_ORDER
from tests.harness.paths import EXAMPLES
from tests.harness.tooling import unavailable

RULES = EXAMPLES / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None or shutil.which("prometheus") is None:
        unavailable(f"prometheus and promtool not found in PATH; {prometheus.INSTALL}")
    return found


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_the_example_rules_are_valid_and_their_unit_tests_pass(promtool: str) -> None:
    files = prometheus.rule_files(RULES)
    assert [p.name for p in files] == ["alerts.yaml", "recording.yaml"]
    checked = run(promtool, "check", "rules", *map(str, files))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rules found" in checked.stdout and "SUCCESS: 3 rules found" in checked.stdout
    tested = run(promtool, "test", "rules", str(RULES / "tests" / "rules.test.yaml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_rules_unit_tests_fail_when_the_alert_does_not_fire(promtool: str, tmp_path: Path) -> None:
    """The unit tests can fail: with the alert's threshold above XID 79 the firing case fails."""
    for name in ("alerts.yaml", "recording.yaml"):
        text = (RULES / name).read_text()
        (tmp_path / name).write_text(
            text.replace("DCGM_FI_DEV_XID_ERRORS > 0", "DCGM_FI_DEV_XID_ERRORS > 79")
        )
    (tmp_path / "tests").mkdir()
    shutil.copy(RULES / "tests" / "rules.test.yaml", tmp_path / "tests")
    tested = run(promtool, "test", "rules", str(tmp_path / "tests" / "rules.test.yaml"))
    assert tested.returncode != 0
    assert "alertname: GPUXidError" in tested.stdout + tested.stderr


def test_the_request_names_the_rules_and_the_server_version(promtool: str) -> None:
    req = prometheus.request()
    assert req.source == prometheus.DEFAULT_RULES
    assert [p.name for p in req.rules] == ["alerts.yaml", "recording.yaml"]
    assert req.binary == Path(shutil.which("prometheus") or "")
    assert req.version.startswith("prometheus, version ")


def test_a_missing_prometheus_is_refused_naming_the_apt_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError) as refused:
        prometheus.request()
    assert str(refused.value) == (
        "--with prometheus: prometheus and promtool not found in PATH; install Debian's package: "
        "apt-get install --no-install-recommends prometheus (hack/setup.sh does)"
    )


def test_bad_rules_are_refused_with_promtools_words(promtool: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: DCGM_FI_DEV_XID_ERRORS >\n"
    )
    with pytest.raises(ClusterError, match=rf"promtool check rules {bad}:\n(.|\n)*{bad}(.|\n)*parse error"):
        prometheus.request(str(bad))
    with pytest.raises(
        ClusterError, match=rf"--with prometheus={tmp_path / 'none'}: no such file or directory"
    ):
        prometheus.request(str(tmp_path / "none"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ClusterError, match=r"empty: no rule files \(\*.yaml, \*.yml\) in the folder"):
        prometheus.request(str(tmp_path / "empty"))


def test_the_config_scrapes_every_endpoint_keeping_the_exporters_labels(
    promtool: str, tmp_path: Path
) -> None:
    nodes = [ClusterNode("gpu-a", True, {}, 2, 0), ClusterNode("gpu-b", True, {}, 1, 1)]
    simulated = [ClusterNode("sim-0", False, {}, 8)]
    processes = prometheus.endpoints(nodes, simulated, shards=2)
    assert processes == ["plugin/gpu-a", "plugin/gpu-b", "fleet/0", "fleet/1"]
    assert prometheus.endpoints(nodes, [], shards=1) == ["plugin/gpu-a", "plugin/gpu-b"]
    config = prometheus.config(
        dict(zip(processes, [9401, 9402, 9403, 9404], strict=True)), prometheus.rule_files(RULES)
    )
    assert config["global"] == {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "2s"}
    (job,) = config["scrape_configs"]
    assert (job["job_name"], job["honor_labels"], job["metrics_path"]) == ("fakeplugin", True, "/metrics")
    assert job["static_configs"][:2] == [
        {"targets": ["127.0.0.1:9403"], "labels": {"fakeplugin_process": "fleet/0"}},
        {"targets": ["127.0.0.1:9404"], "labels": {"fakeplugin_process": "fleet/1"}},
    ]
    assert config["rule_files"] == [str(RULES / "alerts.yaml"), str(RULES / "recording.yaml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = run(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 2 rule files found" in checked.stdout


def test_the_server_listens_on_loopback_with_its_data_in_the_state_dir(tmp_path: Path) -> None:
    home = StateLayout(tmp_path).prometheus
    argv = prometheus.argv(Path("/usr/bin/prometheus"), home / "prometheus.yml", home / "data", 9090)
    assert argv == [
        "/usr/bin/prometheus",
        f"--config.file={home}/prometheus.yml",
        f"--storage.tsdb.path={home}/data",
        "--storage.tsdb.retention.time=1d",
        "--web.listen-address=127.0.0.1:9090",
    ]
    assert home in StateLayout(tmp_path).runtime_entries()  # `down` removes it
    assert STOP_ORDER.index("prometheus") < STOP_ORDER.index("plugin/")  # it stops before what it scrapes


def test_each_plugin_and_fleet_gets_its_endpoint_from_the_state() -> None:
    ports = {"plugin/gpu-a": 9401, "fleet": 9402}
    assert components.telemetry_args(ports, "plugin/gpu-a") == ["--telemetry-endpoint=127.0.0.1:9401"]
    assert components.telemetry_args(ports, "fleet") == ["--telemetry-endpoint=127.0.0.1:9402"]
    assert components.telemetry_args(ports, "plugin/gpu-b") == []
    state = State(
        "inv.yaml", "https://127.0.0.1:1", {}, True, {"prometheus": 9090}, [], telemetry_ports=ports
    )
    assert State.from_json(state.to_json()).telemetry_ports == ports


def test_with_lists_add_ons_comma_separated() -> None:
    assert addons.parse_with("") == {}
    assert addons.parse_with("prometheus") == {"prometheus": ""}
    assert addons.parse_with("kueue=my.yaml, prometheus=rules/") == {
        "kueue": "my.yaml",
        "prometheus": "rules/",
    }
    assert kueue.parse_with("prometheus") is None
    assert kueue.parse_with("prometheus,kueue") == ""
    assert addons.parse_with("prometheus,keda") == {"prometheus": "", "keda": ""}
    with pytest.raises(ValueError, match=r"^--with prometheus,prometheus: prometheus is given twice$"):
        addons.parse_with("prometheus,prometheus")
    with pytest.raises(
        ValueError,
        match=r"^--with grafana: unknown add-on 'grafana'; known: kueue\[=CONFIG\], prometheus\[=RULES\], "
        r"keda, karpenter\[=NODEPOOLS\]$",
    ):
        addons.parse_with("grafana")


def test_cluster_up_refuses_what_prometheus_cannot_do_before_anything_starts(
    promtool: str, tmp_path: Path
) -> None:
    """Bad rules, and --no-plugin (nothing to scrape): refused with nothing started, the state dir empty."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("groups: [{name: g, rules: [{record: r, expr: 'sum('}]}]\n")
    state = tmp_path / "state"
    up = ["cluster", "up", "--inventory", str(EXAMPLES / "seed-lab.yaml"), "--state-dir", str(state)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for extra, said in (
        (["--with", f"prometheus={bad}"], f"promtool check rules {bad}"),
        (["--with", "prometheus", "--no-plugin"], "--with prometheus scrapes the plugins' telemetry"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "fakeplugin", *up, *extra],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode != 0 and said in out.stderr, out.stderr
        assert not (state / "cluster.json").exists()
