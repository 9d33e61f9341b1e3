#!/bin/sh
# fakeplugin's stand-in for nvidia-smi, bind-mounted into containers at /usr/bin/nvidia-smi by the claim
# CDI specs (fakeplugin/drivers/gpu/prepare/smi.py). POSIX sh + awk only: plain images (ubuntu:22.04: dash, mawk) have no more.
# This script parses the options and answers what needs no GPU data; the awk program nvidia-smi.awk, installed
# and mounted next to it (/usr/bin/nvidia-smi.awk), prints the rest. Without that file: exit 12 (the real
# tool's code for a missing NVML library).
#
# The container's GPUs are the data files in /run/fakeplugin/gpus/: each allocated device's CDI edits mount
# one `<device>.env` there (key=value lines written by fakeplugin/drivers/gpu/prepare/smi.py), so the set of files is exactly
# the GPUs of the claims and requests this container got. GPUs are numbered from 0 in minor-number order
# (real nvidia-smi enumerates in PCI bus order, which is minor order on real hosts). No directory: no
# driver (exit 9); an empty directory: no devices (exit 6). A key a data file lacks (one written by an
# older plugin) reads as N/A.
#
# Supported: (no option) summary table, -L/--list-gpus, --query-gpu=... [--format=csv[,noheader][,nounits]]
# (csv is the default), -q, -q -d/--display= MEMORY,COMPUTE,ECC, -i/--id (with the summary, -q and
# --query-gpu), --version, -h, --help-query-gpu; MIG devices as lines under their GPU in -L (the summary
# has no "MIG devices" box); `topo -m`/`--matrix` and `topo -mp`/`--matrix_pci` (the GPU matrix of the
# container's GPUs: NV# between GPUs of one NVLink model, else PIX/PHB for one pcieRoot, NODE for one NUMA
# node, SYS across; CPU and NUMA affinity from the data files), `topo`/`topo -h` (the real help text).
# --query-gpu accepts every field of nvidia-smi 580 (its --help-query-gpu); the ones the data files do not
# model print [N/A]. Every other option, real ones included (-x with -q, mig, -l, ...), is refused as
# unknown (exit 255), other -d types as unparsable (exit 2), other topo options as the real topo refuses an
# unknown one (exit 2; -i with -m: exit 255). Error texts and exit codes are the real tool's
# (tests/data/nvidia-smi-h200/cases.txt, tests/data/nvidia-smi-topo); -h and --help-query-gpu print our own
# text under the real first line.
# FAKEPLUGIN_SMI_ROOT (tests only) is prepended to the data directory.

data_dir="${FAKEPLUGIN_SMI_ROOT:-}/run/fakeplugin/gpus"
case $0 in
*/*) program=${0%/*}/nvidia-smi.awk ;;
*) program=nvidia-smi.awk ;; # `sh nvidia-smi` in its own directory
esac

bad_option() {
	printf "ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n\n" "$1"
	exit 255
}

not_valid_here() {
	printf "ERROR: Option %s is not valid for this command. Please run 'nvidia-smi -h' for help.\n\n" "$1"
	exit 2
}

missing_value() {
	printf "ERROR: Option %s is missing its value. Please run 'nvidia-smi -h' for help.\n\n" "$1"
	exit 2
}

# `topo [-m | --matrix | -mp | --matrix_pci | -h | --help]`; without an option it prints its help.
topo_mode=""
if [ "${1:-}" = topo ]; then
	shift
	topo_mode=help topo_help=0 topo_id=""
	while [ $# -gt 0 ]; do
		case $1 in
		-h | --help) topo_help=1 ;;
		-m | --matrix) topo_mode=topo ;;
		-mp | --matrix_pci) topo_mode=topo_pci ;;
		--id=*) topo_id=$1 ;;
		-i | --id)
			[ $# -ge 2 ] || missing_value "$1"
			topo_id=$1
			shift
			;;
		*)
			printf 'Option "%s" is not recognized.\n' "$1"
			exit 2
			;;
		esac
		shift
	done
	if [ "$topo_help" = 0 ] && [ -n "$topo_id" ]; then
		printf 'The -i command line argument must be used in conjunction with -n or -p.\n\n'
		exit 255
	fi
	if [ "$topo_help" = 1 ] || [ "$topo_mode" = help ]; then
		cat <<'TOPOHELP'

    topo -- Display topological information about the system.

    Usage: nvidia-smi topo [options]

    Options include:
    [-m | --matrix]: Display the GPUDirect communication matrix for the system.
    [-mp | --matrix_pci]: Display the GPUDirect communication matrix for the system (PCI Only).
    [-i | --id]: Enumeration index, PCI bus ID or UUID. Provide comma
                 separated values for more than one device
                 Must be used in conjuction with -n or -p.
    [-c | --cpu]: CPU number for which to display all GPUs with an affinity.
    [-n | --nearest_gpus]: Display the nearest GPUs for a given traversal path.
                   0 = a single PCIe switch on a dual GPU board
                   1 = a single PCIe switch
                   2 = multiple PCIe switches
                   3 = a PCIe host bridge
                   4 = an on-CPU interconnect link between PCIe host bridges
                   5 = an SMP interconnect link between NUMA nodes
                 Used in conjunction with -i which must be a single device ID.
    [-p | --gpu_path]: Display the most direct path traversal for a pair of GPUs.
                 Used in conjunction with -i which must be a pair of device IDs.
    [-p2p | --p2pstatus]:      Displays the p2p status between the GPUs of a given p2p capability
                   r - p2p read capabiity
                   w - p2p write capability
                   n - p2p nvlink capability
                   a - p2p atomics capability
                   p - p2p pcie capability

    [-C | --get-numa-id-of-nearby-cpu]: Displays NUMA ID of the nearest CPU for a GPU
                 Used in conjunction with -i which must be a single device ID.
    [-M | --get-numa-id-of-nearby-mem]: Displays NUMA ID of the nearest memory for a GPU
                 Used in conjunction with -i which must be a single device ID.
    [-gnid | --gpu-numa-id]: Displays NUMA ID of the specified GPU
                 Used in conjunction with -i which must be a single device ID.
    [-h | --help]: Display help information
    [-nvme | --matrix_nvme]: Display the GPUDirect communication matrix with NVMe devices.


TOPOHELP
		exit 0
	fi
fi

# Options are echoed in errors as given: "-i", "--id=0", "--format=csv".
help=0 help_query=0 version=0 list=0 full=0 query="" format="" ids=""
format_token="" id_token="" display="" display_token="" xml_token=""
while [ $# -gt 0 ]; do
	case $1 in
	-h | --help) help=1 ;;
	--help-query-gpu) help_query=1 ;;
	--version) version=1 ;;
	-L | --list-gpus) list=1 ;;
	-q | --query) full=1 ;;
	-x | --xml-format) xml_token=$1 ;;
	--query-gpu=*) query=${1#--query-gpu=} ;;
	--format=*) format=${1#--format=} format_token=$1 ;;
	--id=*) ids=${1#--id=} id_token=$1 ;;
	--display=*) display=${1#--display=} display_token=$1 ;;
	--query-gpu | --format | -i | --id | -d | --display)
		[ $# -ge 2 ] || missing_value "$1"
		case $1 in
		--query-gpu) query=$2 ;;
		--format) format=$2 format_token=$1 ;;
		-d | --display) display=$2 display_token=$1 ;;
		*) ids=$2 id_token=$1 ;;
		esac
		shift
		;;
	*) bad_option "$1" ;;
	esac
	shift
done

if [ -n "$topo_mode" ]; then
	mode=$topo_mode
elif [ "$help" = 1 ]; then
	mode=help
elif [ "$help_query" = 1 ]; then
	mode=help_query
elif [ "$version" = 1 ]; then
	mode=version
elif [ "$list" = 1 ]; then
	[ -z "$id_token" ] || not_valid_here "$id_token"
	mode=list
elif [ -n "$query" ]; then
	mode=csv
	rest=$format,
	while [ -n "$format_token" ] && [ -n "$rest" ]; do
		case ${rest%%,*} in
		csv | noheader | nounits) ;;
		*)
			echo "Format modifier is not recognized."
			exit 2
			;;
		esac
		rest=${rest#*,}
	done
elif [ "$full" = 1 ]; then
	[ -z "$format_token" ] || bad_option "$format_token"
	[ -z "$xml_token" ] || bad_option "$xml_token" # no XML report
	rest=$display,
	while [ -n "$display_token" ] && [ -n "$rest" ]; do
		case ${rest%%,*} in
		MEMORY | COMPUTE | ECC) ;;
		*)
			echo "Failed to parse --display/-d flags"
			exit 2
			;;
		esac
		rest=${rest#*,}
	done
	mode=full
elif [ -n "$xml_token" ]; then
	printf "Invalid combination of input arguments. Specify -q/--query and -x/--xml-format to run an XML query.  Please run 'nvidia-smi -h' for help.\n\n"
	exit 2
elif [ -n "$format_token$display_token" ]; then
	bad_option "${format_token:-$display_token}" # options of queries only
else
	mode=summary
fi

if [ "$mode" = help ]; then
	version_line=""
	for f in "$data_dir"/*.env; do
		[ -f "$f" ] || break
		version_line=$(sed -n 's/^driver_version=//p' "$f")
		break
	done
	printf 'NVIDIA System Management Interface -- v%s\n\n' "${version_line:-N/A}"
	cat <<'HELP'
fakeplugin's nvidia-smi stand-in: reports the GPUs allocated to this container.

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    <no arguments>              Show a summary of GPUs connected to the system.
    -q,   --query               Display GPU info.
    -d,   --display=            With -q: only MEMORY, COMPUTE, ECC (comma-separated).
    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus ID; comma-separated).
    --query-gpu=                Information about GPU, e.g. --query-gpu=index,uuid,name,memory.total
                                Call --help-query-gpu for the fields.
    --format=                   csv (the default), with optional noheader and nounits
HELP
	exit 0
fi

if [ "$mode" = help_query ]; then
	set -- /dev/null # the field list needs no driver
else
	if [ ! -d "$data_dir" ]; then
		printf "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"
		exit 9
	fi
	set -- "$data_dir"/*.env
	if [ ! -f "$1" ]; then
		echo "No devices were found"
		exit 6
	fi
fi

if [ ! -r "$program" ]; then
	printf 'nvidia-smi: cannot read %s, its awk program (fakeplugin installs and mounts it next to nvidia-smi).\n' "$program" >&2
	exit 12
fi
# The options reach awk as given through its environment: -v would turn their backslash escapes into
# characters (`--query-gpu='a\nb'` must name the field a\nb, as the real tool does).
export FAKEPLUGIN_SMI_FIELDS="$query" FAKEPLUGIN_SMI_FORMAT="$format" FAKEPLUGIN_SMI_IDS="$ids" \
	FAKEPLUGIN_SMI_DISPLAY="$display"
exec awk -v mode="$mode" -v now="$(date '+%a %b %e %H:%M:%S %Y')" -v stamp="$(date '+%Y/%m/%d %H:%M:%S.000')" \
	-f "$program" "$@"
