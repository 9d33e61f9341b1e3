"""Kueue's Configuration and manifests for a loopback manager (fakeplugin.kueue), and `--with kueue` input:
a bad CONFIG or version is refused before anything starts, naming the file and field."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fakeplugin.cluster import binaries, kueue, versions
from fakeplugin.cluster.credentials import serving_certificate
from fakeplugin.kueue import manifests
from fakeplugin.kueue.config import DEFAULT_CONFIG, Endpoints, KueueConfigError, load_config, local_config
from tests.harness.paths import EXAMPLES
from tests.harness.tooling import unavailable

AT = Endpoints("127.0.0.1", 19443, 18081, Path("/state/kueue/certs"))
BASE = "https://127.0.0.1:19443"


def test_the_default_configuration_maps_both_nvidia_classes() -> None:
    config = load_config(DEFAULT_CONFIG)
    assert DEFAULT_CONFIG.resolve() == (EXAMPLES / "kueue" / "config.yaml").resolve()
    assert config["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": "nvidia.com/mig", "deviceClassNames": ["mig.nvidia.com"]},
    ]
    counters = load_config(EXAMPLES / "kueue" / "mig-counters.yaml")["resources"]["deviceClassMappings"][1]
    assert counters["sources"][0]["counter"]["name"] == "memory"


def test_the_loopback_fields_are_set_over_the_user_s_and_each_change_is_reported() -> None:
    user = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "webhook": {"port": 9443},
        "metrics": {"enableClusterQueueResources": True},
        "featureGates": {"KueueDRAIntegration": True},
    }
    config, changed = local_config(user, AT)
    assert config["webhook"] == {"port": 19443, "host": "127.0.0.1", "certDir": "/state/kueue/certs"}
    assert config["metrics"] == {"enableClusterQueueResources": True, "bindAddress": "0"}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:18081"}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["featureGates"] == {"KueueDRAIntegration": True, "VisibilityOnDemand": False}
    assert changed == ["webhook.port: 9443 → 19443"]
    assert user["webhook"] == {"port": 9443}  # the user's dict is left as it was


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "apiVersion: v1\nkind: ConfigMap\n",
            "apiVersion/kind: got 'v1'/'ConfigMap'; a Kueue Configuration is",
        ),
        ("- a\n- b\n", "(top level): expected a Kueue Configuration (a mapping)"),
        (
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
            "featureGates: {VisibilityOnDemand: true}\n",
            "featureGates.VisibilityOnDemand: cannot be on for a manager outside a Pod",
        ),
        (
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
            "resources: {deviceClassMappings: [{name: x, deviceClassNames: []}]}\n",
            "resources.deviceClassMappings[0].deviceClassNames: expected a non-empty list",
        ),
        ("apiVersion: [unclosed\n", "line 2, column 1: invalid YAML"),
    ],
)
def test_a_file_that_is_not_a_kueue_configuration_is_refused_naming_it(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "kueue.yaml"
    path.write_text(text)
    with pytest.raises(KueueConfigError) as err:
        kueue.request(str(path))
    assert str(path) in str(err.value) and problem in str(err.value)


def test_an_unknown_add_on_or_kueue_version_is_refused_before_anything_starts(tmp_path: Path) -> None:
    assert kueue.parse_with("") is None
    assert kueue.parse_with("kueue") == ""
    assert kueue.parse_with("kueue=my.yaml") == "my.yaml"
    with pytest.raises(
        ValueError,
        match=r"--with volcano: unknown add-on 'volcano'; known: kueue\[=CONFIG\], prometheus\[=RULES\]",
    ):
        kueue.parse_with("volcano")
    with pytest.raises(versions.UnsupportedVersion, match=r"Kueue version 'v0.17.0': supported are v0.19.x"):
        kueue.request("", "v0.17.0")
    with pytest.raises(binaries.BinaryNotFound, match="fakeplugin cluster build --only kueue"):
        kueue.request("", env_free_version(tmp_path))


def env_free_version(tmp_path: Path) -> str:
    """A v0.19 release not in the build cache."""
    assert not binaries.kueue_dir("v0.19.99").exists()
    return "v0.19.99"


@pytest.fixture(scope="module")
def module() -> Path:
    try:
        return binaries.find_kueue(versions.KUEUE_VERSION)[1]
    except binaries.BinaryNotFound as exc:
        unavailable(str(exc))


@pytest.mark.build  # Kueue's module files, from hack/build-k8s.sh --only kueue
def test_crds_are_kueue_s_with_conversion_webhooks_by_url(module: Path) -> None:
    crds = manifests.crds(module, BASE, b"CA")
    names = {c["metadata"]["name"] for c in crds}
    assert {"clusterqueues.kueue.x-k8s.io", "workloads.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io"} <= names
    by_name = {c["metadata"]["name"]: c for c in crds}
    converted = {n for n, c in by_name.items() if "conversion" in c["spec"]}
    assert converted == {
        f"{r}.kueue.x-k8s.io"
        for r in ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
    }
    client = by_name["workloads.kueue.x-k8s.io"]["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client == {"url": f"{BASE}/convert", "caBundle": base64.b64encode(b"CA").decode()}


@pytest.mark.build  # Kueue's module files, from hack/build-k8s.sh --only kueue
def test_webhooks_are_kueue_s_by_url_with_its_namespace_selectors(module: Path) -> None:
    mutating, validating = manifests.webhook_configurations(module, BASE, b"CA")
    assert mutating["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert validating["metadata"]["name"] == "kueue-validating-webhook-configuration"
    hooks = {h["name"]: h for c in (mutating, validating) for h in c["webhooks"]}
    assert hooks["mjob.kb.io"]["clientConfig"]["url"] == f"{BASE}/mutate-batch-v1-job"
    assert all("service" not in h["clientConfig"] for h in hooks.values())
    left_alone = {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", "kueue-system"],
    }
    assert hooks["mjob.kb.io"]["namespaceSelector"]["matchExpressions"] == [left_alone]
    assert hooks["vpod.kb.io"]["namespaceSelector"]["matchExpressions"] == [left_alone]
    assert "namespaceSelector" not in hooks["vclusterqueue.kb.io"]  # as Kueue's kustomization leaves it


def test_the_examples_are_kueue_v1beta2_objects() -> None:
    for name in ("queues.yaml", "cohort.yaml"):
        kinds = [d["kind"] for d in yaml.safe_load_all((EXAMPLES / "kueue" / name).read_text()) if d]
        assert set(kinds) <= {"ResourceFlavor", "ClusterQueue", "LocalQueue"}, name


def test_cluster_up_refuses_a_bad_config_before_starting_anything(tmp_path: Path) -> None:
    bad = tmp_path / "not-kueue.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\n")
    state = tmp_path / "state"
    for spec, said in ((f"kueue={bad}", f"{bad}: apiVersion/kind"), ("volcano", "unknown add-on 'volcano'")):
        up = ["cluster", "up", "--inventory", str(EXAMPLES / "seed-lab.yaml"), "--state-dir", str(state)]
        out = subprocess.run(
            [sys.executable, "-m", "fakeplugin", *up, "--with", spec],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0 and said in out.stderr, out.stderr
        assert not state.exists()  # refused before anything started


def test_the_webhook_certificate_is_for_loopback_and_signed_by_the_ca_returned(tmp_path: Path) -> None:
    ca = serving_certificate(tmp_path, "127.0.0.1")
    assert ca == (tmp_path / "ca.crt").read_bytes() and ca.startswith(b"-----BEGIN CERTIFICATE-----")
    verify = ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")]
    assert subprocess.run(verify, capture_output=True, text=True, check=True).stdout.strip().endswith(": OK")
    text = ["openssl", "x509", "-in", str(tmp_path / "tls.crt"), "-noout", "-ext", "subjectAltName"]
    assert "IP Address:127.0.0.1" in subprocess.run(text, capture_output=True, text=True, check=True).stdout
