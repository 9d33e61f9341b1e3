"""Command lines and config files of every process of a local cluster (pure: values in, argv/dicts out).

Everything listens on 127.0.0.1 only. Clients authenticate with one static admin token (the API
server refuses anonymous auth together with AlwaysAllow) and everything is allowed: a throwaway test
cluster, never to be exposed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakeplugin import featuregates
from fakeplugin.cluster.layout import KubeletDirs, StateLayout
from fakeplugin.cluster.versions import DEFAULT_VERSION, KubernetesRelease, release
from fakeplugin.fleet.stages import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.0.0.0/24"
POD_CIDR = "10.64.0.0/12"
CLUSTER_DNS = "10.0.0.10"
# The CN of the client certificate the API server's aggregation layer presents to extension API servers.
FRONT_PROXY_CLIENT = "front-proxy-client"

# The feature gates `cluster up` turns on for the default version (each minor's: versions.RELEASES).
DEFAULT_FEATURE_GATES: dict[str, bool] = dict(release(DEFAULT_VERSION).feature_gates)

# The kubelet tunes these at start (container_manager_linux.go setupKernelTunables); it only ever
# sees stand-in files bound over them in its private mount namespace.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)

# Runs as `sh -ec ISOLATE kubelet-isolated <sysctl dir> <var-lib> <var-log> <kubelet argv...>` inside
# `unshare --mount --propagation private`: binds stand-ins over the six sysctls and per-node dirs over
# /var/lib and /var/log (hard-coded kubelet paths), then execs the kubelet. `-e`: any failed mount
# stops here, before the kubelet could touch the host.
ISOLATE = """\
dir=$1 varlib=$2 varlog=$3; shift 3
for f in {sysctls}; do
  s="$dir/$(echo "$f" | tr / _)"
  cat "/proc/sys/$f" > "$s"
  mount --bind "$s" "/proc/sys/$f"
done
mount --bind "$varlib" /var/lib
mount --bind "$varlog" /var/log
exec "$@"
""".format(sysctls=" ".join(KUBELET_SYSCTLS))


# Runs as `sh -ec KUEUE_ISOLATE kueue-isolated <upper> <work> <kueue argv...>` inside `unshare --mount
# --propagation private`: Kueue's manager reads its metrics certificate from the fixed path
# /etc/kueue/metrics/certs (cmd/kueue/main.go); an overlay of <upper> on /etc, seen by this process only,
# holds it there. The host's /etc is not written.
KUEUE_ISOLATE = """\
upper=$1 work=$2; shift 2
mount -t overlay fakeplugin-kueue-etc -o "lowerdir=/etc,upperdir=$upper,workdir=$work" /etc
exec "$@"
"""


# Client rate limits of the scheduler and the controller-manager. Their defaults (50/100 and 20/30 requests
# per second) cap a simulated fleet's pod starts: per pod the scheduler writes the claim's allocation and
# the binding, the controllers the pod, its claim and the pod's claim status. A test cluster on loopback
# can take far more (bench/fleet.py, docs/benchmarks.md).
CLIENT_QPS, CLIENT_BURST = 500, 1000
CLIENT_RATE = (f"--kube-api-qps={CLIENT_QPS}", f"--kube-api-burst={CLIENT_BURST}")


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    controller_manager: int


@dataclass(frozen=True)
class KubeletPorts:
    kubelet: int
    healthz: int


def parse_feature_gates(
    text: str | None, defaults: Mapping[str, bool] = DEFAULT_FEATURE_GATES
) -> dict[str, bool]:
    """`A=true,B=false` over the defaults. Names are Kubernetes' own; the components reject unknown ones."""
    gates = dict(defaults)
    for item, name, value in featuregates.settings(text):
        if not name or value is None:
            raise ValueError(f"--feature-gates: {item!r}: expected Name=true or Name=false")
        gates[name] = value
    return gates


def gates_flag(gates: dict[str, bool]) -> str:
    return ",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))


def etcd_argv(binary: Path, layout: StateLayout, ports: Ports) -> list[str]:
    client = f"http://{LOOPBACK}:{ports.etcd_client}"
    return [
        str(binary),
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls=http://{LOOPBACK}:{ports.etcd_peer}",
        f"--initial-advertise-peer-urls=http://{LOOPBACK}:{ports.etcd_peer}",
        f"--initial-cluster=default=http://{LOOPBACK}:{ports.etcd_peer}",
        "--unsafe-no-fsync=true",  # throwaway data; spares the shared disk
    ]


def front_proxy_ca(layout: StateLayout) -> tuple[Path, Path]:
    """The front-proxy CA's key and certificate (fakeplugin.cluster.credentials makes them)."""
    return layout.pki / "front-proxy-ca.key", layout.pki / "front-proxy-ca.crt"


def front_proxy_client(layout: StateLayout) -> tuple[Path, Path]:
    """The aggregation layer's client key and certificate, CN FRONT_PROXY_CLIENT."""
    return layout.pki / "front-proxy-client.key", layout.pki / "front-proxy-client.crt"


def client_ca(layout: StateLayout) -> tuple[Path, Path]:
    """The cluster's client CA's key and certificate: it signs nothing; see aggregation_args."""
    return layout.pki / "client-ca.key", layout.pki / "client-ca.crt"


def aggregation_args(layout: StateLayout) -> list[str]:
    """The API server's aggregation layer flags, kubeadm's values: how it authenticates to an extension
    API server (an APIService's, e.g. KEDA's external.metrics.k8s.io) and what that server trusts (the
    extension-apiserver-authentication ConfigMap the API server publishes from these). The client CA is
    there so that the ConfigMap has the client-ca-file an extension API server reads (without it, one
    logs an error each second); our clients authenticate with the token."""
    key, crt = front_proxy_client(layout)
    return [
        f"--client-ca-file={client_ca(layout)[1]}",
        f"--requestheader-client-ca-file={front_proxy_ca(layout)[1]}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={crt}",
        f"--proxy-client-key-file={key}",
    ]


def apiserver_argv(
    binary: Path, layout: StateLayout, ports: Ports, gates: dict[str, bool], k8s: KubernetesRelease
) -> list[str]:
    argv = [
        str(binary),
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={layout.pki}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--service-account-issuer=https://{LOOPBACK}:{ports.apiserver}",
        f"--service-account-key-file={layout.pki / 'sa.pub'}",
        f"--service-account-signing-key-file={layout.pki / 'sa.key'}",
        f"--token-auth-file={layout.token_file}",
        "--authorization-mode=AlwaysAllow",
        "--allow-privileged=true",  # as kubeadm clusters: the driver's DaemonSet is privileged
        "--kubelet-preferred-address-types=InternalIP",  # 127.0.0.1; node names are not in any DNS
        # ServiceAccount: no token volumes (tmpfs mounts) in pods. TaintNodesByCondition: its not-ready
        # taint is lifted by the node-lifecycle controller, which this cluster does not run.
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        f"--feature-gates={gates_flag(gates)}",
        *aggregation_args(layout),
    ]
    argv += k8s.apiserver_args
    if apis := k8s.runtime_config(gates):
        argv.append("--runtime-config=" + ",".join(f"{api}=true" for api in apis))
    return argv


def scheduler_config(layout: StateLayout, *, binding_timeout: int = 0) -> dict[str, Any]:
    """kube-scheduler's --config (KubeSchedulerConfiguration v1, served since 1.25). `binding_timeout`
    (seconds; 0: the scheduler's 600 s): how long DynamicResources' PreBind waits for binding conditions
    (DynamicResourcesArgs.bindingTimeout, kubernetes v1.37.2 pkg/scheduler/apis/config/types_pluginargs.go;
    the scheduler refuses it where DRADeviceBindingConditions is off: before 1.36)."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig), "qps": CLIENT_QPS, "burst": CLIENT_BURST},
        "leaderElection": {"leaderElect": False},
        # Feasible nodes to find per pod before scoring: the default adapts to 42% of 1000 nodes, and each
        # DRA filter call tries an allocation on the node. 10% of a large simulated fleet still leaves
        # at least 100 candidates (the scheduler's floor), so below 1000 nodes nothing changes.
        "percentageOfNodesToScore": 10,
    }
    if binding_timeout:
        args = {"bindingTimeout": f"{binding_timeout}s"}
        plugin = {"name": "DynamicResources", "args": args}
        config["profiles"] = [{"schedulerName": "default-scheduler", "pluginConfig": [plugin]}]
    return config


def scheduler_argv(binary: Path, layout: StateLayout, ports: Ports, gates: dict[str, bool]) -> list[str]:
    return [
        str(binary),
        f"--config={layout.scheduler_config}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.scheduler}",
        f"--cert-dir={layout.pki / 'kube-scheduler'}",
        f"--feature-gates={gates_flag(gates)}",
    ]


def controller_manager_argv(
    binary: Path, layout: StateLayout, ports: Ports, gates: dict[str, bool]
) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={layout.kubeconfig}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        "--leader-elect=false",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={ports.controller_manager}",
        f"--cert-dir={layout.pki / 'kube-controller-manager'}",
        *CLIENT_RATE,
        f"--flex-volume-plugin-dir={layout.kcm_volume_plugin_dir}",
        # API-only nodes have no kubelet renewing their lease: without this controller they stay Ready.
        "--controllers=*,-node-lifecycle-controller",
        f"--service-account-private-key-file={layout.pki / 'sa.key'}",
        f"--feature-gates={gates_flag(gates)}",
    ]


def token_file(token: str) -> str:
    """The API server's static token file (CSV: token,user,uid,groups): one admin."""
    return f'{token},admin,admin,"system:masters"\n'


def kubeconfig(server: str, token: str) -> dict[str, Any]:
    """Admin kubeconfig: the static token, the API server's self-signed certificate not verified."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fakeplugin", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "fakeplugin", "context": {"cluster": "fakeplugin", "user": "admin"}}],
        "current-context": "fakeplugin",
    }


def fakecri_argv(binary: Path, node: KubeletDirs) -> list[str]:
    return [
        str(binary),
        f"--socket={node.cri_socket}",
        f"--cdi-spec-dir={node.cdi}",
        f"--output-dir={node.containers_dir}",
    ]


def kubelet_config(node: KubeletDirs, ports: KubeletPorts, gates: dict[str, bool]) -> dict[str, Any]:
    """KubeletConfiguration for a node without containers, cgroup v1 or v2, host left untouched."""
    endpoint = f"unix://{node.cri_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": LOOPBACK,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": LOOPBACK,
        "healthzPort": ports.healthz,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "failCgroupV1": False,  # 1.35 refuses cgroup v1 hosts by default
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,  # no kubepods hierarchy on the host
        "enforceNodeAllocatable": [],  # the default ["pods"] needs cgroupsPerQOS
        "failSwapOn": False,
        "makeIPTablesUtilChains": False,  # else a chain appears in the host's iptables
        "protectKernelDefaults": False,  # the kubelet writes its sysctls, to the stand-ins only
        "podLogsDir": str(node.pod_logs_dir),
        "volumePluginDir": str(node.volume_plugin_dir),
        "evictionHard": {},  # the fake runtime's filesystem stats must not evict anything
        "localStorageCapacityIsolation": False,
        "clusterDNS": [CLUSTER_DNS],
        "clusterDomain": "cluster.local",
        "featureGates": dict(sorted(gates.items())),
    }


def kubelet_argv(binary: Path, layout: StateLayout, node: KubeletDirs) -> list[str]:
    return [
        str(binary),
        f"--config={node.kubelet_config}",
        f"--kubeconfig={layout.kubeconfig}",
        f"--root-dir={node.kubelet_root}",
        f"--cert-dir={node.kubelet_root / 'pki'}",
        f"--hostname-override={node.name}",
        f"--node-ip={LOOPBACK}",
    ]


def isolated_argvs(unshare: str, sh: str, node: KubeletDirs, argv: list[str]) -> list[list[str]]:
    """The kubelet in its own mount namespace: the launch argv first, then what the same pid runs
    after each exec (sh, then the kubelet), so every stage can be recognised as ours."""
    inner = [
        sh,
        "-ec",
        ISOLATE,
        "kubelet-isolated",
        str(node.sysctl_dir),
        str(node.var_lib),
        str(node.var_log),
    ]
    return _in_mount_namespace(unshare, inner, argv)


def _in_mount_namespace(unshare: str, inner: list[str], argv: list[str]) -> list[list[str]]:
    """`inner` (a shell script's argv that mounts, then execs `argv`) in a private mount namespace."""
    return [[unshare, "--mount", "--propagation", "private", "--", *inner, *argv], [*inner, *argv], argv]


def kueue_argvs(
    unshare: str, sh: str, upper: Path, work: Path, binary: Path, config: Path, layout: StateLayout
) -> list[list[str]]:
    """Kueue's manager with its /etc layer, every stage of the same pid (as isolated_argvs)."""
    argv = [str(binary), f"--config={config}", f"--kubeconfig={layout.kubeconfig}"]
    return _in_mount_namespace(
        unshare, [sh, "-ec", KUEUE_ISOLATE, "kueue-isolated", str(upper), str(work)], argv
    )


def plugin_argv(
    python: str, inventory: Path, layout: StateLayout, node: KubeletDirs, extra: Sequence[str] = ()
) -> list[str]:
    return [
        python,
        "-m",
        "fakeplugin",
        "serve",
        f"--inventory={inventory}",
        f"--node-name={node.name}",
        f"--kubeconfig={layout.kubeconfig}",
        f"--kubelet-registrar-directory-path={node.registrar_dir}",
        f"--kubelet-plugins-directory-path={node.plugins_dir}",
        f"--cdi-root={node.cdi}",
        f"--boot-id-file={node.boot_id_file}",
        # The node's kubelet serves PodResources there (KubeletPodResourcesDynamicResources is on by
        # default from 1.34): serve --telemetry-endpoint attributes GPUs to containers from its List.
        f"--pod-resources-kubelet-socket={node.pod_resources_socket}",
        *extra,
    ]


def nvml_args(library: Path | None) -> list[str]:
    """A GPU plugin's `--nvml-library` (fakeplugin.nvml), when the library was built."""
    return [] if library is None else [f"--nvml-library={library}"]


def telemetry_args(ports: Mapping[str, int], process: str) -> list[str]:
    """A plugin's or fleet's `--telemetry-endpoint` on loopback, when the state gave `process` a port
    (`cluster up --with prometheus`); after the user's --plugin-args, so Prometheus' target is the one."""
    port = ports.get(process)
    return [] if port is None else [f"--telemetry-endpoint={LOOPBACK}:{port}"]


def kwok_argv(binary: Path, layout: StateLayout) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={layout.kubeconfig}",
        f"--config={layout.kwok_config}",
        f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}",
        f"--node-ip={LOOPBACK}",
        # Pod IPs kwok writes into pod status: addresses only, nothing listens on them or routes them.
        f"--cidr={POD_CIDR}",
    ]


def python_env(environ: Mapping[str, str], source: Path) -> dict[str, str]:
    """The environment of our own Python children (plugins, the fleet): `source` (the dir holding the
    fakeplugin package, maybe a source tree, not installed) importable the same way; the NVIDIA feature
    gates and consumable shares only from our state, never from FEATURE_GATES or CONSUMABLE_SHARES of the
    caller's environment (the one needs the other)."""
    return {
        **{k: v for k, v in environ.items() if k not in ("FEATURE_GATES", "CONSUMABLE_SHARES")},
        "PYTHONPATH": os.pathsep.join(filter(None, [str(source), environ.get("PYTHONPATH")])),
    }


def fleet_argv(
    python: str, inventory: Path, layout: StateLayout, plugin_args: Sequence[str], library: Path | None = None
) -> list[str]:
    """`fakeplugin fleet` for the cluster's simulated nodes: its GPU plugins with the mock NVML `library`
    as the kubelet nodes' (`nvml_args`), and the flags of the plugins' extra flags that the fleet shares
    with `serve` (the NVIDIA feature gates, fake device nodes, the driver release, consumable shares, the
    claim device status, --nvml-library), after it."""
    return [
        python,
        "-m",
        "fakeplugin",
        "fleet",
        f"--inventory={inventory}",
        f"--kubeconfig={layout.kubeconfig}",
        f"--nodes-dir={layout.root / 'nodes'}",
        *nvml_args(library),
        *fleet_flags(plugin_args),
    ]


# Fleet flags `render` has not.
PREPARE_ONLY_FLAGS = ("--fake-device-nodes", "--device-status", "--nvml-library=")


def fleet_flags(plugin_args: Sequence[str]) -> list[str]:
    """The plugins' extra flags that the fleet shares with `serve` (the NVIDIA feature gates, fake device
    nodes, the driver release, consumable shares, the claim device status, the NVML library); `render`
    takes them but those only Prepare reads (PREPARE_ONLY_FLAGS)."""
    return [
        a
        for a in plugin_args
        if a.startswith(
            (
                "--feature-gates=",
                "--driver-release=",
                "--consumable-shares=",
                *PREPARE_ONLY_FLAGS,
            )
        )
    ]
