#!/bin/sh
# fakeplugin's stand-in for nvidia-smi, bind-mounted into containers at /usr/bin/nvidia-smi by the claim
# CDI specs (fakeplugin/smi.py). POSIX sh + awk only: plain images (ubuntu:22.04: dash, mawk) have no more.
#
# The container's GPUs are the data files in /run/fakeplugin/gpus/: each allocated device's CDI edits mount
# one `<device>.env` there (key=value lines written by fakeplugin/smi.py), so the set of files is exactly
# the GPUs of the claims and requests this container got. GPUs are numbered from 0 in minor-number order
# (real nvidia-smi enumerates in PCI bus order, which is minor order on real hosts). No directory: no
# driver (exit 9); an empty directory: no devices (exit 6).
#
# Supported: (no option) summary table, -L, --query-gpu=... --format=csv[,noheader][,nounits], -q,
# -i/--id (with the summary, -q and --query-gpu), --version, -h; MIG devices as lines under their GPU in -L
# (the summary has no "MIG devices" box). Every other option, real ones included (-x, topo, mig, -l, ...),
# is refused as unknown (exit 255). Error texts and exit codes are the real tool's.
# FAKEPLUGIN_SMI_ROOT (tests only) is prepended to the data directory.

data_dir="${FAKEPLUGIN_SMI_ROOT:-}/run/fakeplugin/gpus"

bad_option() {
	printf "ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n\n" "$1"
	exit 255
}

missing_value() {
	printf "ERROR: Option %s is missing its value. Please run 'nvidia-smi -h' for help.\n\n" "$1"
	exit 2
}

invalid_combination() {
	printf "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"
	exit 2
}

help=0 version=0 list=0 full=0 query="" format="" ids="" with_ids=0
while [ $# -gt 0 ]; do
	case $1 in
	-h | --help) help=1 ;;
	--version) version=1 ;;
	-L | --list-gpus) list=1 ;;
	-q | --query) full=1 ;;
	--query-gpu=*) query=${1#--query-gpu=} ;;
	--format=*) format=${1#--format=} ;;
	--id=*) ids=${1#--id=} with_ids=1 ;;
	--query-gpu | --format | -i | --id)
		[ $# -ge 2 ] || missing_value "$1"
		case $1 in
		--query-gpu) query=$2 ;;
		--format) format=$2 ;;
		*) ids=$2 with_ids=1 ;;
		esac
		shift
		;;
	*) bad_option "$1" ;;
	esac
	shift
done

if [ "$help" = 1 ]; then
	mode=help
elif [ "$version" = 1 ]; then
	mode=version
elif [ "$list" = 1 ]; then
	if [ "$with_ids" = 1 ]; then
		printf "ERROR: Option -i is not valid for this command. Please run 'nvidia-smi -h' for help.\n\n"
		exit 2
	fi
	mode=list
elif [ -n "$query" ]; then
	mode=csv
	case ",$format," in
	*,csv,*) ;;
	*) invalid_combination ;;
	esac
	rest=$format,
	while [ -n "$rest" ]; do
		case ${rest%%,*} in
		csv | noheader | nounits) ;;
		*) invalid_combination ;;
		esac
		rest=${rest#*,}
	done
elif [ "$full" = 1 ]; then
	mode=full
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
	cat <<'EOF'
fakeplugin's nvidia-smi stand-in: reports the GPUs allocated to this container.

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    <no arguments>              Show a summary of GPUs connected to the system.
    -q,   --query               Display GPU info.
    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus ID; comma-separated).
    --query-gpu=                Information about GPU, e.g. --query-gpu=index,uuid,name,memory.total
    --format=                   csv, with optional noheader and nounits, e.g. --format=csv,noheader
EOF
	exit 0
fi

if [ ! -d "$data_dir" ]; then
	printf "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"
	exit 9
fi
set -- "$data_dir"/*.env
if [ ! -f "$1" ]; then
	echo "No devices were found"
	exit 6
fi

exec awk -v mode="$mode" -v fields="$query" -v format="$format" -v ids="$ids" \
	-v now="$(date '+%a %b %e %H:%M:%S %Y')" -v stamp="$(date '+%Y/%m/%d %H:%M:%S.000')" '
# One record per data file: g[n, key] = value. The record of a MIG device describes its parent GPU too.
FNR == 1 { n++ }
/^#/ || !index($0, "=") { next }
{
	eq = index($0, "=")
	g[n, substr($0, 1, eq - 1)] = substr($0, eq + 1)
}

function na(v) { return v == "N/A" ? "[N/A]" : v }

# Value of query field f for record r; "" marks an unknown field.
function csv_value(r, f, p) {
	if (f == "timestamp") return stamp
	if (f == "driver_version") return g[r, "driver_version"]
	if (f == "count") return ng
	if (f == "index") return pos[r]
	if (f == "name" || f == "gpu_name") return g[r, "name"]
	if (f == "serial" || f == "gpu_serial") return g[r, "serial"]
	if (f == "uuid" || f == "gpu_uuid") return g[r, "uuid"]
	if (f == "pci.bus_id" || f == "gpu_bus_id") return g[r, "bus_id"]
	if (f == "pci.domain") return "0x" substr(g[r, "bus_id"], 5, 4)
	if (f == "pci.bus") return "0x" substr(g[r, "bus_id"], 10, 2)
	if (f == "pci.device") return "0x" substr(g[r, "bus_id"], 13, 2)
	if (f == "pci.device_id") return g[r, "pci_device_id"]
	if (f == "pci.sub_device_id") return na(g[r, "pci_subsystem_id"])
	if (f == "vbios_version") return "[N/A]"
	if (f == "persistence_mode") return g[r, "persistence_mode"]
	if (f == "pstate") return g[r, "pstate"]
	if (f == "compute_mode") return "Default"
	if (f == "compute_cap") return g[r, "compute_cap"]
	if (f == "ecc.mode.current" || f == "ecc.mode.pending") return g[r, "ecc_mode"]
	if (f == "mig.mode.current" || f == "mig.mode.pending") return na(g[r, "mig_mode"])
	if (f == "fan.speed") return "[N/A]"
	if (f == "temperature.gpu") return g[r, "temperature_c"]
	if (f == "memory.total") return g[r, "memory_total_mib"] unit(" MiB")
	if (f == "memory.reserved") return g[r, "memory_reserved_mib"] unit(" MiB")
	if (f == "memory.used") return g[r, "memory_used_mib"] unit(" MiB")
	if (f == "memory.free") return free_mib(r) unit(" MiB")
	if (f == "utilization.gpu" || f == "utilization.memory") return g[r, "utilization_pct"] unit(" %")
	if (f == "power.draw") return watts(g[r, "power_draw_w"])
	if (f == "power.limit") return watts(g[r, "power_limit_w"])
	return ""
}

function header_unit(f) {
	if (f ~ /^memory\./) return " [MiB]"
	if (f ~ /^utilization\./ || f == "fan.speed") return " [%]"
	if (f ~ /^power\./) return " [W]"
	return ""
}

function unit(u) { return nounits ? "" : u }
function watts(v) { return v == "N/A" ? "[N/A]" : v unit(" W") }
function free_mib(r) { return g[r, "memory_total_mib"] - g[r, "memory_reserved_mib"] - g[r, "memory_used_mib"] }

# "%d W" in the table, the number rounded; N/A takes the place of the number and the W.
function table_watts(v, width) {
	return v == "N/A" ? sprintf("%" width "s ", "N/A") : sprintf("%" width ".0fW", v)
}

# A `-q` line: 4 spaces per level, the key left-justified to column 54, " : ", the value.
function kv(level, key, value) {
	printf "%s%-" (54 - 4 * level) "s : %s\n", substr("            ", 1, 4 * level), key, value
}

function bad_field(f) {
	printf "Field \"%s\" is not a valid field to query.\n\n", f
	exit 2
}

function no_devices() {
	print "No devices were found"
	exit 6
}

function select_gpus(i, j, k, want, id, hit) {
	m = 0
	if (ids == "") {
		for (i = 1; i <= ng; i++) sel[++m] = order[i]
		return
	}
	k = split(ids, want, ",")
	for (i = 1; i <= ng; i++) picked[order[i]] = 0
	for (j = 1; j <= k; j++) {
		id = want[j]
		hit = 0
		for (i = 1; i <= ng; i++)
			if (id == pos[order[i]] "" || id == g[order[i], "uuid"] || toupper(id) == g[order[i], "bus_id"]) {
				picked[order[i]] = 1
				hit = 1
			}
		if (!hit) no_devices()
	}
	for (i = 1; i <= ng; i++) if (picked[order[i]]) sel[++m] = order[i]
}

function summary(i, r, sep, ecc, pers) {
	sep = "+-----------------------------------------+------------------------+----------------------+"
	printf "%s       \n", now
	print "+-----------------------------------------------------------------------------------------+"
	printf "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-8s |\n",
		g[sel[1], "driver_version"], g[sel[1], "driver_version"], g[sel[1], "cuda_version"]
	print sep
	print "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |"
	print "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |"
	print "|                                         |                        |               MIG M. |"
	print "|=========================================+========================+======================|"
	for (i = 1; i <= m; i++) {
		r = sel[i]
		name = g[r, "name"]
		if (length(name) > 30) name = substr(name, 1, 27) "..."
		pers = g[r, "persistence_mode"] == "Enabled" ? "On" : "Off"
		ecc = g[r, "ecc_mode"] == "Enabled" ? "0" : "Off"
		printf "| %3d  %-30s %-3s |%19s %3s |%21s |\n", pos[r], name, pers, g[r, "bus_id"], "Off", ecc
		printf "| %3s  %4s    %-2s %s / %s |%8sMiB / %6sMiB |%7s%% %12s |\n",
			"N/A", g[r, "temperature_c"] "C", g[r, "pstate"], table_watts(g[r, "power_draw_w"], 14),
			table_watts(g[r, "power_limit_w"], 4), g[r, "memory_used_mib"], g[r, "memory_total_mib"],
			g[r, "utilization_pct"], "Default"
		printf "|%41s|%24s|%21s |\n", "", "", g[r, "mig_mode"]
		print sep
	}
	print ""
	print "+-----------------------------------------------------------------------------------------+"
	print "| Processes:                                                                              |"
	print "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |"
	print "|        ID   ID                                                               Usage      |"
	print "|=========================================================================================|"
	print "|  No running processes found                                                             |"
	print "+-----------------------------------------------------------------------------------------+"
}

function full(i, r, b) {
	print ""
	print "==============NVSMI LOG=============="
	print ""
	kv(0, "Timestamp", now)
	kv(0, "Driver Version", g[sel[1], "driver_version"])
	kv(0, "CUDA Version", g[sel[1], "cuda_version"])
	print ""
	kv(0, "Attached GPUs", ng)
	for (i = 1; i <= m; i++) {
		r = sel[i]
		b = g[r, "bus_id"]
		print "GPU " b
		kv(1, "Product Name", g[r, "name"])
		kv(1, "Product Brand", g[r, "brand"])
		kv(1, "Product Architecture", g[r, "architecture"])
		kv(1, "Persistence Mode", g[r, "persistence_mode"])
		kv(1, "Addressing Mode", g[r, "addressing_mode"])
		print "    MIG Mode"
		kv(2, "Current", g[r, "mig_mode"])
		kv(2, "Pending", g[r, "mig_mode"])
		kv(1, "Serial Number", g[r, "serial"])
		kv(1, "GPU UUID", g[r, "uuid"])
		kv(1, "Minor Number", g[r, "minor"])
		kv(1, "VBIOS Version", "N/A")
		print "    PCI"
		kv(2, "Bus", "0x" substr(b, 10, 2))
		kv(2, "Device", "0x" substr(b, 13, 2))
		kv(2, "Domain", "0x" substr(b, 5, 4))
		kv(2, "Device Id", g[r, "pci_device_id"])
		kv(2, "Bus Id", b)
		kv(2, "Sub System Id", g[r, "pci_subsystem_id"])
		kv(1, "Fan Speed", "N/A")
		kv(1, "Performance State", g[r, "pstate"])
		print "    FB Memory Usage"
		kv(2, "Total", g[r, "memory_total_mib"] " MiB")
		kv(2, "Reserved", g[r, "memory_reserved_mib"] " MiB")
		kv(2, "Used", g[r, "memory_used_mib"] " MiB")
		kv(2, "Free", free_mib(r) " MiB")
		kv(1, "Compute Mode", "Default")
		print "    Utilization"
		kv(2, "GPU", g[r, "utilization_pct"] " %")
		kv(2, "Memory", g[r, "utilization_pct"] " %")
		kv(2, "Encoder", "0 %")
		kv(2, "Decoder", "0 %")
		kv(2, "JPEG", "0 %")
		kv(2, "OFA", "0 %")
		print "    ECC Mode"
		kv(2, "Current", g[r, "ecc_mode"])
		kv(2, "Pending", g[r, "ecc_mode"])
		print "    Temperature"
		kv(2, "GPU Current Temp", g[r, "temperature_c"] " C")
		print "    GPU Power Readings"
		kv(2, "Average Power Draw", watts_q(g[r, "power_draw_w"]))
		kv(2, "Current Power Limit", watts_q(g[r, "power_limit_w"]))
		kv(1, "Processes", "None")
		print ""
	}
}

function watts_q(v) { return v == "N/A" ? v : v " W" }

function csv(i, j, k, r, f, line, v) {
	k = split(fields, f, ",")
	# Every field is checked before anything is printed, as the real tool does.
	for (j = 1; j <= k; j++) if (csv_value(sel[1], f[j]) == "") bad_field(f[j])
	if (!noheader) {
		line = ""
		for (j = 1; j <= k; j++) line = line (j > 1 ? ", " : "") f[j] header_unit(f[j])
		print line
	}
	for (i = 1; i <= m; i++) {
		line = ""
		for (j = 1; j <= k; j++) line = line (j > 1 ? ", " : "") csv_value(sel[i], f[j])
		print line
	}
}

END {
	# Physical GPUs: one per minor number, represented by its first record, in minor order; under each,
	# the records of its MIG devices in placement order (insertion sorts: n is small).
	for (r = 1; r <= n; r++) {
		minor = g[r, "minor"] + 0
		if (!(minor in gpu_of)) {
			gpu_of[minor] = r
			for (j = ng; j >= 1 && g[order[j], "minor"] + 0 > minor; j--) order[j + 1] = order[j]
			order[j + 1] = r
			ng++
		}
		if (g[r, "mig_uuid"] == "") continue
		p = gpu_of[minor]
		for (k = ++migs[p]; k > 1 && g[mig[p, k - 1], "mig_start"] + 0 > g[r, "mig_start"] + 0; k--)
			mig[p, k] = mig[p, k - 1]
		mig[p, k] = r
	}
	for (i = 1; i <= ng; i++) pos[order[i]] = i - 1
	nounits = ("," format ",") ~ /,nounits,/
	noheader = ("," format ",") ~ /,noheader,/
	if (mode == "list") {
		for (i = 1; i <= ng; i++) {
			r = order[i]
			printf "GPU %d: %s (UUID: %s)\n", i - 1, g[r, "name"], g[r, "uuid"]
			for (k = 1; k <= migs[r]; k++)
				printf "  MIG %-12sDevice %2d: (UUID: %s)\n", g[mig[r, k], "mig_profile"], k - 1, g[mig[r, k], "mig_uuid"]
		}
		exit 0
	}
	if (mode == "version") {
		split(g[order[1], "driver_version"], v, ".")
		printf "NVIDIA-SMI version  : %s\n", g[order[1], "driver_version"]
		printf "NVML version        : %s.%s\n", v[1], v[2]
		printf "DRIVER version      : %s\n", g[order[1], "driver_version"]
		printf "CUDA Version        : %s\n", g[order[1], "cuda_version"]
		exit 0
	}
	select_gpus()
	if (mode == "csv") csv()
	else if (mode == "full") full()
	else summary()
}
' "$@"
