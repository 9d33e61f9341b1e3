#!/bin/sh
# Capture real nvidia-smi behaviour on a GPU host, as reference data for the fake nvidia-smi
# (fakeplugin/drivers/gpu/prepare/nvidia-smi.sh). Not used by tests; run it on a machine with an NVIDIA driver:
#
#   hack/capture-nvidia-smi.sh OUT_DIR
#
# Writes OUT_DIR/cases.txt: for each case the command, its exit code and its stdout+stderr.
set -u
out="${1:?usage: $0 OUT_DIR}"
mkdir -p "$out"
f="$out/cases.txt"
: > "$f"
case_() {
	{
		printf '### nvidia-smi %s\n' "$*"
		nvidia-smi "$@" 2>&1
		printf '### rc=%s\n\n' "$?"
	} >> "$f"
}
fields="index name uuid count driver_version timestamp pci.bus_id pci.domain pci.bus pci.device pci.device_id
pci.sub_device_id vbios_version persistence_mode compute_mode compute_cap mig.mode.current mig.mode.pending
fan.speed temperature.gpu memory.total memory.reserved memory.used memory.free utilization.gpu
utilization.memory power.draw power.limit enforced.power.limit power.max_limit serial pstate clocks.sm
clocks.max.sm ecc.mode.current gpu_name gpu_uuid gpu_bus_id gpu_serial display_mode display_active
accounting.mode driver_model.current addressing_mode"
for q in $fields; do
	case_ --query-gpu="$q" --format=csv
	case_ --query-gpu="$q" --format=csv,noheader,nounits
done
case_ --query-gpu=index,name,uuid,memory.total,memory.used,memory.free,driver_version --format=csv
case_ --query-gpu=bogus --format=csv
case_ --query-gpu=name,bogus --format=csv
case_ --query-gpu=name
case_ --format=csv
case_ --query-gpu=name --format=json
case_ --query-gpu=name --format=csv -i 0
case_ --query-gpu=name --format=csv -i 7
case_ -L -i 0
case_ -L -i 7
case_ -L -i GPU-00000000-0000-0000-0000-000000000000
case_ -q -d MEMORY
case_ -q -d COMPUTE
case_ -q -d BOGUS
case_ -q -i 0 -d ECC
case_ --bogus
case_ -x
case_ --list-gpus
case_ --id=0 -L
case_ --help-query-gpu
case_ -h
