"""The inventory's fields: the table of every field (docs/inventory.md repeats it, and
tests/test_reference_data.py checks that the two agree), their defaults and their upper bounds. The inventory
is one YAML file describing the GPUs of every node of the fleet; inventory.parse reads it into
inventory.model.

The reference lab (examples/seed-lab.yaml); without `driverRelease` it would emulate the default, 0.5.0::

    driverVersion: "580.126.20"
    cudaDriverVersion: "13.0"
    driverRelease: "25.12"
    nodes:
    - name: capi-dralabs-md-gput10-gzl84-f2m2d
      gpus:
      - profile: t10
        count: 2
    - name: capi-dralabs-md-gpua5000-jw4mx-d64jz
      gpus:
      - profile: rtx-a5000
        ecc: true

Fields:

| field | type | default | meaning |
| --- | --- | --- | --- |
| `driverVersion` | `"N.N"`, `"N.N.N"` | required | driver version as NVML prints it, `580.95.05` [1] |
| `cudaDriverVersion` | `"N.N"` | required | CUDA driver version, `13.0` (published as `13.0.0`) |
| `driverRelease` | string | `"0.5.0"` | NVIDIA release emulated: `25.12`, `0.4.1`, `0.5.0-dev`, `0.5.0` [7] |
| `gpuOperator` | `clusterPolicy`, `gpuCluster`, `none` | `clusterPolicy` | GPU Operator node labels [11] |
| `migStrategy` | `single`, `mixed`, `none` | `single` | the ClusterPolicy's MIG strategy: GFD's labels [11] |
| `nodes[]` | list | required | at least one entry: a node by name, many by prefix or by selector, a type |
| `nodes[].name` | string | one of the four | exact node name (DNS subdomain) |
| `nodes[].namePrefix` | string | one of the four | nodes `<namePrefix>0`...`<namePrefix><replicas-1>` [6] |
| `nodes[].replicas` | integer >= 1 | 1 | how many nodes a `namePrefix` entry stands for (namePrefix only) |
| `nodes[].selector.matchLabels` | map | one of the four | nodes whose labels include all of these [2] |
| `nodes[].instanceType.name` | label value | one of the four | Karpenter's nodes of this instance type [10] |
| `nodes[].instanceType.price` | number > 0 | required | per hour: Karpenter launches the cheapest that fits |
| `nodes[].instanceType.memory` | quantity | 8Gi per CPU | the node's memory as Karpenter sees it |
| `nodes[].instanceType.zones` | label values | `[zone-a]` | the zones it is offered in |
| `nodes[].instanceType.architecture` | `amd64`, `arm64` | `amd64` | its nodes' `kubernetes.io/arch` |
| `nodes[].labels` | map | `{}` | labels the local test cluster sets on the node; the plugin ignores them |
| `nodes[].gpuOperator` | as `gpuOperator` | the top level's | this entry's nodes' GPU Operator mode [11] |
| `nodes[].kubelet` | bool | true with GPUs | local test cluster: real kubelet, or kwok-simulated (false) |
| `nodes[].numaNodes` | integer 1..16 | 1 + top `numaNode` | NUMA nodes of each node; absent: unknown [8] |
| `nodes[].cpus` | integer | 16 per GPU | logical CPUs, split evenly over the NUMA nodes in blocks [8] |
| `nodes[].fabric.clique` | integer >= 0 | absent: no fabric | NVLink clique of its GPUs (NVML cliqueId) [9] |
| `nodes[].fabric.clusterUUID` | UUID | derived | NVML ClusterUUID; the all-zero UUID means no fabric [9] |
| `nodes[].gpus[]` | list | `[]` | the GPUs, minors 0..n-1 in this order; empty or absent: a plain worker |
| `nodes[].gpus[].profile` | string | required | GPU model, one of `fakeplugin profiles` |
| `nodes[].gpus[].count` | integer >= 1 | 1 | how many GPUs this entry describes |
| `nodes[].gpus[].ecc` | bool | profile's | ECC mode; picks the profile's memory total for that mode |
| `nodes[].gpus[].memory` | quantity | profile's | NVML memory.total: `23028Mi`, `15Gi` or bytes [3] |
| `nodes[].gpus[].productName` | string | profile's | NVML product name (<= 64 characters) |
| `nodes[].gpus[].uuid` | `GPU-` 8-4-4-4-12 hex | derived | fixed UUID; count 1 only; unique in the file [4] |
| `nodes[].gpus[].pciBusID` | `0000:3b:00.0` | derived | fixed PCI address; count 1 only; unique on node [4] |
| `nodes[].gpus[].numaNode` | integer >= 0 | spread | the NUMA node of every GPU of the entry [8] |
| `nodes[].gpus[].mig` | list | absent | MIG mode on, with these MIG devices created (`[]`: none) [5] |
| `nodes[].gpus[].mig[].profile` | string | required | MIG profile of the GPU's model, e.g. `1g.5gb` |
| `nodes[].gpus[].mig[].count` | integer >= 1 | 1 | how many such MIG devices |
| `nodes[].gpus[].mig[].placement` | integer | lowest free | first memory slice (a placement); count 1 |

[1] The slice attribute drops leading zeros (`580.95.5`), as the real driver's semver parse does.
[2] `{}` matches every node. The plugin takes the entry naming its node (by name, else by prefix and
    index), else the first entry (in file order) whose selector matches the node's labels.
[3] Required when the profile knows no memory total for the chosen ECC mode.
[4] Derived values come from the node name and minor (drivers.gpu.publish.devices). Overrides name exactly
    one device, hence count 1; NVML's `00000000:3B:00.0` form is accepted and normalised, and
    UUIDs are lower-cased. memory and productName apply to every GPU of the entry.
[5] As `nvidia-smi mig -cgi ... -C` left them: each GPU of the entry gets these MIG devices and is then
    published as them, not as a full GPU (static MIG). Devices without a placement take the lowest
    free ones, larger profiles first. With the plugin's DynamicMIG gate the devices are not published
    (the driver removes them); `mig` then only says that MIG mode is on, which matters on Ampere.
[6] A compact fleet: every generated node is as if it had its own `name` entry with the same fields
    (its identities derived from its own name). A fixed `uuid` needs `replicas: 1`. Indices are
    decimal without leading zeros, so `h100-7` is one of them and `h100-07` is not.
[7] fakeplugin.releases; docs/driver-releases.md shows what differs. `render --driver-release` and
    `serve --driver-release` (the chart's `driverRelease` value) override it.
[8] The GPU's NUMA node is its PCI sysfs `numa_node`: release 0.5.0-dev publishes it as
    `resource.kubernetes.io/numaNode`; the fake `nvidia-smi topo -m` shows it with the node's CPUs.
    Without `numaNodes` and `numaNode` the node is a VM whose sysfs says -1 (the H200 captures): no
    attribute, and topo shows NUMA 0 with every CPU. With NUMA nodes, a GPU without `numaNode` gets
    node `minor * numaNodes // GPUs` (8 GPUs on 2 nodes: 0-3 on 0, 4-7 on 1). NUMA node i holds CPUs
    `i*c .. (i+1)*c - 1`, c = cpus / numaNodes (real dual-socket hosts with SMT interleave their
    siblings, 0-55,112-167: not modelled).

[9] What NVML's GPU fabric info reports for every GPU of the node (a GB200/GB300 NVL72 compute tray): the
    compute-domain driver's clique ID is `<clusterUUID>.<clique>` (fakeplugin.drivers.computedomain); each
    GPU carries it (model.Board.fabric) and the fake `nvidia-smi -q` prints it (its Fabric section).
    Without `clusterUUID` every entry shares one fixed UUID (`DEFAULT_CLUSTER_UUID`), so the entries of
    one rack need only the same `clique`. A clique holds at most 18 nodes (NVIDIA's controller flag
    --max-nodes-per-imex-domain), counted over the file with replicas; fabric needs GPUs and named nodes
    (name or namePrefix: a selector's nodes cannot be counted).
[10] A GPU shape of a simulated cloud for Karpenter (docs/karpenter.md): a selector on
    `node.kubernetes.io/instance-type: <name>` whose nodes are always simulated (kwok's, served by
    `fakeplugin fleet`), and one instance type of Karpenter's kwok provider, whose ResourceSlice
    templates are this entry's devices (drivers.gpu.publish.instancetypes). Without GPUs: a CPU-only type.
[11] The node labels NVIDIA's GPU Operator gives a node with GPUs (drivers.gpu.publish.nodelabels,
    docs/emulation.md): `clusterPolicy`, its default mode (GPU Feature Discovery's labels, `gpu.present`,
    `gpu.deploy.*`); `gpuCluster`, its DRA mode (`gpu.present` and that mode's `gpu.deploy.*`, no GPU
    Feature Discovery); `none`, no operator. A node entry's value overrides the top level's.
    `migStrategy` is the ClusterPolicy's `mig.strategy` (one per cluster): `single` labels a node whose
    GPUs are all cut into one MIG profile as that profile (`gpu.product` `<model>-MIG-<profile>`),
    `mixed` adds `nvidia.com/mig-<profile>.*` per profile, `none` no MIG label.

Unknown fields anywhere are errors (typos never pass silently). The driver name is not
configuration: it is the `--driver-name` flag.

Every size has an upper bound that real hardware justifies (the `MAX_*` constants below; docs/inventory.md
has the table), checked while reading: the file's size before it is parsed, YAML depth and node count while
PyYAML composes it (aliases counted as what they repeat), list lengths before their items are read, counts
before anything is made of them. So no inventory makes the plugin or `validate` build more than a bounded
number of devices, however large the numbers in it.
"""

from __future__ import annotations

import uuid as uuidlib

from fakeplugin.yamlschema import Limits

MAX_ATTRIBUTE_STRING = 64  # ResourceSlice attribute string values are at most 64 characters

# Upper bounds (docs/inventory.md, "Inventory bounds", says why each); all checked before devices are built.
MAX_FILE_BYTES = 1 << 20  # a ConfigMap holds at most 1 MiB, and the inventory usually is one
MAX_YAML_DEPTH = 16  # the schema nests 7 deep (nodes[].gpus[].mig[]); twice that and more is not an inventory
MAX_YAML_NODES = 100_000  # 20 per node entry for MAX_NODES entries; PyYAML needs ~70 MB to hold them
MAX_NODES = 5000  # Kubernetes' largest supported cluster
MAX_GPUS_PER_NODE = 128  # one full ResourceSlice; 8x the largest real node (16 GPUs: HGX-2, DGX-2)
MAX_GPUS = MAX_NODES * 16  # every node of the largest cluster as large as the largest real node
MAX_LABELS = 64  # per labels/matchLabels map; a selector needs a few, a GPU node carries ~50 with GFD
MAX_GPU_MEMORY = 1 << 40  # 1 TiB; the largest GPU memory today is 288 GB (B300)
MAX_NUMA_NODES = 16  # 8 sockets, or 2 sockets split 4 ways (AMD NPS4, Intel SNC-4), twice over
MAX_CPUS = 4096  # Linux's default NR_CPUS on x86_64 (8192 with MAXSMP); the largest hosts have ~3840
MAX_CLIQUE = 2**32 - 1  # NVML's nvmlGpuFabricInfo_t.cliqueId is an unsigned int
MAX_NODES_PER_CLIQUE = 18  # NVIDIA's compute-domain controller --max-nodes-per-imex-domain default (NVL72)
# The clusterUUID of entries that name none: fixed, so every such entry is in one NVLink cluster.
DEFAULT_CLUSTER_UUID = str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, "nvlink-cluster.fakeplugin.dev"))
CPUS_PER_GPU = 16  # default cpus: both H200 captures are VMs with 16 vCPUs per GPU (0-15, 0-31)
# The label Karpenter (and every cloud's node) carries the instance type in: an instanceType entry selects it.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MEMORY_PER_CPU = 8 << 30  # an instanceType's default memory: 8Gi per CPU (a general-purpose cloud shape)
MAX_NODE_MEMORY = 64 << 40  # 64Ti: the largest single hosts (HPE/SGI shared-memory systems) reach 48 TiB
MAX_ZONES = 16
DEFAULT_ZONES = ("zone-a",)
ARCHITECTURES = ("amd64", "arm64")  # kubernetes.io/arch of an instanceType's nodes
# gpuOperator: the GPU Operator's modes (a ClusterPolicy, a GPUCluster) and none; the first is the default.
GPU_OPERATOR_MODES = ("clusterPolicy", "gpuCluster", "none")
# migStrategy: the ClusterPolicy's mig.strategy (NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go
# MIGStrategy); the first is the default (deployments/gpu-operator/values.yaml `mig.strategy`).
MIG_STRATEGIES = ("single", "mixed", "none")
LIMITS = Limits(max_bytes=MAX_FILE_BYTES, max_depth=MAX_YAML_DEPTH, max_nodes=MAX_YAML_NODES)
