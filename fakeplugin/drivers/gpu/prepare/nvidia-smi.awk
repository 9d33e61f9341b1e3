# fakeplugin's nvidia-smi, the part that prints: run by nvidia-smi.sh (`awk -f`, the file next to the
# script, in the container as on the host) once the options are parsed, over the container's GPU data files.
# POSIX awk only: it runs under mawk, busybox awk and `gawk --posix` alike (tests/test_nvidia_smi*.py).
#
# Variables (-v) from the script: mode (summary, list, csv, full, version, topo, topo_pci, help_query),
# now (asctime stamp), stamp (CSV stamp); the options as given, from the environment (no escapes processed):
# fields (--query-gpu), format (--format), ids (-i), display (-d). Operands: the data files (`key=value`
# lines, fakeplugin/prepare/smi.py); /dev/null for help_query.

# One record per data file: g[n, key] = value. The record of a MIG device describes its parent GPU too.
FNR == 1 { n++ }
/^#/ || !index($0, "=") { next }
{
	eq = index($0, "=")
	g[n, substr($0, 1, eq - 1)] = substr($0, eq + 1)
}

# Every --query-gpu field of nvidia-smi 580, in the order of its --help-query-gpu: the name, then "/alias"
# where there is one; `alias_prefix` gives each of `list` (under `prefix`) the alias `alias_prefix name`.
# The CSV header always shows the name.
function add_fields(list, prefix, alias_prefix, k, i, w, a) {
	k = split(list, w, " ")
	for (i = 1; i <= k; i++) {
		split(w[i], a, "/")
		known[++nknown] = prefix a[1]
		name_of[prefix a[1]] = prefix a[1]
		if (alias_prefix != "") a[2] = alias_prefix a[1]
		if (a[2] != "") {
			alias[nknown] = a[2]
			name_of[a[2]] = prefix a[1]
		}
	}
}

BEGIN {
	fields = ENVIRON["FAKEPLUGIN_SMI_FIELDS"]
	format = ENVIRON["FAKEPLUGIN_SMI_FORMAT"]
	ids = ENVIRON["FAKEPLUGIN_SMI_IDS"]
	display = ENVIRON["FAKEPLUGIN_SMI_DISPLAY"]
	add_fields("timestamp driver_version vgpu_driver_capability.heterogenous_multivGPU count name/gpu_name")
	add_fields("serial/gpu_serial uuid/gpu_uuid pci.bus_id/gpu_bus_id pci.domain pci.bus pci.device")
	add_fields("pci.baseClass pci.subClass pci.device_id pci.sub_device_id")
	add_fields("fractional_multiVgpu heterogeneous_timeSlice_profile heterogeneous_timeSlice_sizes " \
		"homogeneous_placements mig_timeSlicing mig_timeSlicing_mode", "vgpu_device_capability.")
	add_fields("pcie.link.gen.current pcie.link.gen.gpucurrent pcie.link.gen.max pcie.link.gen.gpumax")
	add_fields("pcie.link.gen.hostmax pcie.link.width.current pcie.link.width.max index display_mode")
	add_fields("display_attached display_active persistence_mode addressing_mode accounting.mode")
	add_fields("accounting.buffer_size driver_model.current driver_model.pending vbios_version")
	add_fields("inforom.img/inforom.image inforom.oem inforom.ecc inforom.pwr/inforom.power")
	add_fields("inforom.checksum_validation gpu_recovery_action gom.current/gpu_operation_mode.current")
	add_fields("gom.pending/gpu_operation_mode.pending fan.speed pstate")
	add_fields("supported active gpu_idle applications_clocks_setting sw_power_cap hw_slowdown " \
		"hw_thermal_slowdown hw_power_brake_slowdown sw_thermal_slowdown sync_boost",
		"clocks_event_reasons.", "clocks_throttle_reasons.")
	add_fields("sw_power_cap sync_boost sw_thermal_slowdown hw_thermal_slowdown hw_power_brake_slowdown",
		"clocks_event_reasons_counters.")
	add_fields("memory.total memory.reserved memory.used memory.free compute_mode compute_cap")
	add_fields("gpu memory encoder decoder jpeg ofa", "utilization.")
	add_fields("sessionCount averageFps averageLatency", "encoder.stats.")
	add_fields("dramEncryption.mode.current dramEncryption.mode.pending ecc.mode.current ecc.mode.pending")
	ecc_kinds = "device_memory dram register_file l1_cache l2_cache texture_memory cbu sram total"
	add_fields(ecc_kinds, "ecc.errors.corrected.volatile.")
	add_fields(ecc_kinds, "ecc.errors.corrected.aggregate.")
	add_fields(ecc_kinds, "ecc.errors.uncorrected.volatile.")
	add_fields(ecc_kinds, "ecc.errors.uncorrected.aggregate.")
	add_fields("volatile.sram.parity volatile.sram.secded aggregate.sram.parity aggregate.sram.secded " \
		"aggregate.sram.thresholdExceeded aggregate.sram.l2 aggregate.sram.sm aggregate.sram.mcu " \
		"aggregate.sram.pcie aggregate.sram.other", "ecc.errors.uncorrected.")
	add_fields("single_bit_ecc.count/retired_pages.sbe double_bit.count/retired_pages.dbe pending",
		"retired_pages.")
	add_fields("correctable/remapped_rows.sbe correctable_inactive uncorrectable/remapped_rows.dbe " \
		"uncorrectable_inactive pending failure histogram.max histogram.high histogram.partial " \
		"histogram.low histogram.none", "remapped_rows.")
	add_fields("temperature.gpu temperature.gpu.tlimit temperature.memory power.management power.draw")
	add_fields("power.draw.average/gpu.power.draw.average power.draw.instant/gpu.power.draw.instant")
	add_fields("power.limit/gpu.power.requested_limit enforced.power.limit/gpu.power.current_limit")
	add_fields("power.default_limit/gpu.power.default_limit power.min_limit/gpu.power.min_limit")
	add_fields("power.max_limit/gpu.power.max_limit module.power.draw.average module.power.draw.instant")
	add_fields("module.power.limit/module.power.requested_limit")
	add_fields("module.enforced.power.limit/module.power.current_limit module.power.default_limit")
	add_fields("module.power.min_limit module.power.max_limit")
	add_fields("delayed_power_smoothing_supported primary_power_floor secondary_power_floor " \
		"min_primary_floor_activation_offset min_primary_floor_activation_point window_multiplier " \
		"curr_profile.secondary_power_floor curr_profile.primary_floor_act_window_multiplier " \
		"curr_profile.primary_floor_tar_window_multiplier curr_profile.primary_floor_act_offset " \
		"admin_override.secondary_power_floor admin_override.primary_floor_act_window_multiplier " \
		"admin_override.primary_floor_tar_window_multiplier admin_override.primary_floor_act_offset",
		"power_smoothing.")
	add_fields("current.graphics/clocks.gr current.sm/clocks.sm current.memory/clocks.mem " \
		"current.video/clocks.video applications.graphics/clocks.applications.gr " \
		"applications.memory/clocks.applications.mem " \
		"default_applications.graphics/clocks.default_applications.gr " \
		"default_applications.memory/clocks.default_applications.mem max.graphics/clocks.max.gr " \
		"max.sm/clocks.max.sm max.memory/clocks.max.mem", "clocks.")
	add_fields("mig.mode.current mig.mode.pending gsp.mode.current gsp.mode.default c2c.mode")
	add_fields("total used free", "protected_memory.")
	add_fields("state status cliqueId clusterUuid health.summary health.bandwidth " \
		"health.route_recovery_in_progress health.route_unhealthy health.access_timeout_recovery " \
		"health.incorrect_configuration health.partition_assigned", "fabric.")
	add_fields("chassis_serial_number slot_number tray_index host_id peer_type module_id gpu_fabric_guid",
		"platform.")
	add_fields("hostname")
}

# A value as the data file has it; N/A for a key it lacks.
function val(r, key) { return (r, key) in g ? g[r, key] : "N/A" }
function na(v) { return v == "N/A" ? "[N/A]" : v }
function unit(u) { return nounits ? "" : u }
function with_unit(v, u) { return v == "N/A" ? "[N/A]" : v unit(u) }
function free_mib(r) { return g[r, "memory_total_mib"] - g[r, "memory_reserved_mib"] - g[r, "memory_used_mib"] }

# Default unless opaque-config settings made it another (data files of older plugins have no such key).
function compute_mode(r) { return (r, "compute_mode") in g ? g[r, "compute_mode"] : "Default" }

# Value of query field c (a name, not an alias) for record r; [N/A] for what the data files do not model.
function csv_value(r, c) {
	if (c == "timestamp") return stamp
	if (c == "driver_version") return g[r, "driver_version"]
	if (c == "count") return ng
	if (c == "index") return pos[r]
	if (c == "name") return g[r, "name"]
	if (c == "serial") return g[r, "serial"]
	if (c == "uuid") return g[r, "uuid"]
	if (c == "pci.bus_id") return g[r, "bus_id"]
	if (c == "pci.domain") return "0x" substr(g[r, "bus_id"], 5, 4)
	if (c == "pci.bus") return "0x" substr(g[r, "bus_id"], 10, 2)
	if (c == "pci.device") return "0x" substr(g[r, "bus_id"], 13, 2)
	if (c == "pci.device_id") return g[r, "pci_device_id"]
	if (c == "pci.sub_device_id") return na(g[r, "pci_subsystem_id"])
	if (c == "vbios_version") return na(val(r, "vbios_version"))
	if (c == "display_mode") return "[Requested functionality has been deprecated]"
	if (c == "display_active" || c == "accounting.mode") return "Disabled"
	if (c == "persistence_mode") return g[r, "persistence_mode"]
	if (c == "addressing_mode") return na(val(r, "addressing_mode"))
	if (c == "pstate") return g[r, "pstate"]
	if (c == "compute_mode") return compute_mode(r)
	if (c == "compute_cap") return g[r, "compute_cap"]
	if (c == "ecc.mode.current" || c == "ecc.mode.pending") return g[r, "ecc_mode"]
	if (c == "mig.mode.current" || c == "mig.mode.pending") return na(g[r, "mig_mode"])
	if (c == "temperature.gpu") return g[r, "temperature_c"]
	if (c == "memory.total") return g[r, "memory_total_mib"] unit(" MiB")
	if (c == "memory.reserved") return g[r, "memory_reserved_mib"] unit(" MiB")
	if (c == "memory.used") return g[r, "memory_used_mib"] unit(" MiB")
	if (c == "memory.free") return free_mib(r) unit(" MiB")
	if (c == "utilization.gpu" || c == "utilization.memory") return g[r, "utilization_pct"] unit(" %")
	if (c ~ /^utilization\./) return "0" unit(" %") # encoders, decoders, JPEG, OFA: idle, as in -q
	if (c ~ /^protected_memory\./) return "0" unit(" MiB") # confidential computing is off, as in -q
	if (c ~ /^power\.draw/) return with_unit(g[r, "power_draw_w"], " W")
	# Datacenter GPUs run at their maximum limit by default (H200: 700 W all three).
	if (c == "power.limit" || c == "enforced.power.limit" || c == "power.max_limit")
		return with_unit(g[r, "power_limit_w"], " W")
	if (c == "clocks.current.sm") return with_unit(val(r, "clocks_sm_mhz"), " MHz")
	if (c == "clocks.max.sm") return with_unit(val(r, "clocks_max_sm_mhz"), " MHz")
	if (c ~ /^fabric\./ && (r, "fabric_state") in g) return na(fabric_value(r, substr(c, 8)))
	return "[N/A]"
}

# Units of the captured fields, extended to their families.
function header_unit(c) {
	if (c ~ /^(protected_)?memory\./) return " [MiB]"
	if (c ~ /^utilization\./ || c == "fan.speed") return " [%]"
	if (c ~ /^clocks\./) return " [MHz]"
	if (c ~ /power\.(draw|limit|default_limit|min_limit|max_limit)/) return " [W]"
	return ""
}

# "%d W" in the table, the number rounded; N/A takes the place of the number and the W.
function table_watts(v, width) {
	return v == "N/A" ? sprintf("%" width "s ", "N/A") : sprintf("%" width ".0fW", v)
}

# The table abbreviates the exclusive modes.
function table_compute_mode(m) { return m == "Exclusive_Process" ? "E. Process" : m }

# A `-q` line: 4 spaces per level, the key left-justified to column 54, " : ", the value.
function kv(level, key, value) {
	printf "%s%-" (54 - 4 * level) "s : %s\n", substr("            ", 1, 4 * level), key, value
}

function mib(v) { return v == "N/A" ? v : v " MiB" }

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
			g[r, "utilization_pct"], table_compute_mode(compute_mode(r))
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

# Whether the `-q` report shows the sections of -d type d (all without -d).
function shows(d) { return display == "" || index("," display ",", "," d ",") > 0 }

# `-q` [-d ...]: the sections in the real report order, whatever the order of the -d types.
function report(i, r) {
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
		print "GPU " g[r, "bus_id"]
		if (display == "") identity(r)
		if (shows("MEMORY")) memory(r)
		if (shows("COMPUTE")) kv(1, "Compute Mode", compute_mode(r))
		if (display == "") utilization(r)
		if (shows("ECC")) ecc_report(r)
		if (display == "") readings(r)
		print ""
	}
}

function identity(r, b) {
	b = g[r, "bus_id"]
	kv(1, "Product Name", g[r, "name"])
	kv(1, "Product Brand", g[r, "brand"])
	kv(1, "Product Architecture", g[r, "architecture"])
	kv(1, "Persistence Mode", g[r, "persistence_mode"])
	kv(1, "Addressing Mode", val(r, "addressing_mode"))
	print "    MIG Mode"
	kv(2, "Current", g[r, "mig_mode"])
	kv(2, "Pending", g[r, "mig_mode"])
	kv(1, "Serial Number", g[r, "serial"])
	kv(1, "GPU UUID", g[r, "uuid"])
	kv(1, "Minor Number", g[r, "minor"])
	kv(1, "VBIOS Version", val(r, "vbios_version"))
	print "    PCI"
	kv(2, "Bus", "0x" substr(b, 10, 2))
	kv(2, "Device", "0x" substr(b, 13, 2))
	kv(2, "Domain", "0x" substr(b, 5, 4))
	kv(2, "Device Id", g[r, "pci_device_id"])
	kv(2, "Bus Id", b)
	kv(2, "Sub System Id", g[r, "pci_subsystem_id"])
	kv(1, "Fan Speed", "N/A")
	kv(1, "Performance State", g[r, "pstate"])
}

function memory(r, total, used) {
	print "    FB Memory Usage"
	kv(2, "Total", g[r, "memory_total_mib"] " MiB")
	kv(2, "Reserved", g[r, "memory_reserved_mib"] " MiB")
	kv(2, "Used", g[r, "memory_used_mib"] " MiB")
	kv(2, "Free", free_mib(r) " MiB")
	total = val(r, "bar1_total_mib")
	used = val(r, "bar1_used_mib")
	print "    BAR1 Memory Usage"
	kv(2, "Total", mib(total))
	kv(2, "Used", mib(used))
	kv(2, "Free", total == "N/A" || used == "N/A" ? "N/A" : mib(total - used))
	print "    Conf Compute Protected Memory Usage" # confidential computing is off
	kv(2, "Total", "0 MiB")
	kv(2, "Used", "0 MiB")
	kv(2, "Free", "0 MiB")
}

function utilization(r) {
	print "    Utilization"
	kv(2, "GPU", g[r, "utilization_pct"] " %")
	kv(2, "Memory", g[r, "utilization_pct"] " %")
	kv(2, "Encoder", "0 %")
	kv(2, "Decoder", "0 %")
	kv(2, "JPEG", "0 %")
	kv(2, "OFA", "0 %")
}

# No ECC error was ever counted; without ECC there are no counters.
function ecc_report(r, count, flag, i) {
	count = g[r, "ecc_mode"] == "Enabled" ? "0" : "N/A"
	flag = count == "0" ? "No" : "N/A"
	print "    ECC Mode"
	kv(2, "Current", g[r, "ecc_mode"])
	kv(2, "Pending", g[r, "ecc_mode"])
	print "    ECC Errors"
	for (i = 1; i <= 2; i++) {
		print "        " (i == 1 ? "Volatile" : "Aggregate")
		kv(3, "SRAM Correctable", count)
		kv(3, "SRAM Uncorrectable Parity", count)
		kv(3, "SRAM Uncorrectable SEC-DED", count)
		kv(3, "DRAM Correctable", count)
		kv(3, "DRAM Uncorrectable", count)
	}
	kv(3, "SRAM Threshold Exceeded", flag)
	print "        Aggregate Uncorrectable SRAM Sources"
	kv(3, "SRAM L2", count)
	kv(3, "SRAM SM", count)
	kv(3, "SRAM Microcontroller", count)
	kv(3, "SRAM PCIE", count)
	kv(3, "SRAM Other", count)
	kv(2, "Channel Repair Pending", flag)
	kv(2, "TPC Repair Pending", flag)
	kv(2, "Unrepairable Memory", flag)
}

function readings(r) {
	print "    Temperature"
	kv(2, "GPU Current Temp", g[r, "temperature_c"] " C")
	print "    GPU Power Readings"
	kv(2, "Average Power Draw", watts_q(g[r, "power_draw_w"]))
	kv(2, "Current Power Limit", watts_q(g[r, "power_limit_w"]))
	if ((r, "fabric_state") in g) fabric(r)
	kv(1, "Processes", "None")
}

function watts_q(v) { return v == "N/A" ? v : v " W" }

# A GPU whose data file has fabric_* keys (its fabric info, the fakeplugin.dev/fabric-state fault applied;
# none where the model's is unknown): field f of the fabric.* query fields (without "fabric."). Health rows
# are fabric_health_<row>, N/A when absent.
function fabric_value(r, f) {
	if (f == "state") return g[r, "fabric_state"]
	if (f == "status") return g[r, "fabric_status"]
	if (f == "cliqueId") return g[r, "fabric_clique_id"]
	if (f == "clusterUuid") return g[r, "fabric_cluster_uuid"]
	return val(r, "fabric_health_" substr(f, 8))
}

# `-q`: the Fabric section, as the real report prints it after the clocks, before Processes.
function fabric(r) {
	print "    Fabric"
	kv(2, "State", fabric_value(r, "state"))
	kv(2, "Status", fabric_value(r, "status"))
	kv(2, "CliqueId", fabric_value(r, "cliqueId"))
	kv(2, "ClusterUUID", fabric_value(r, "clusterUuid"))
	print "        Health"
	kv(3, "Summary", fabric_value(r, "health.summary"))
	kv(3, "Bandwidth", fabric_value(r, "health.bandwidth"))
	kv(3, "Route Recovery in progress", fabric_value(r, "health.route_recovery_in_progress"))
	kv(3, "Route Unhealthy", fabric_value(r, "health.route_unhealthy"))
	kv(3, "Access Timeout Recovery", fabric_value(r, "health.access_timeout_recovery"))
	kv(3, "Incorrect Configuration", fabric_value(r, "health.incorrect_configuration"))
	kv(3, "Partition Assigned", fabric_value(r, "health.partition_assigned"))
}

function csv(i, j, k, r, f, line) {
	k = split(fields, f, ",")
	# Every field is checked before anything is printed, as the real tool does.
	for (j = 1; j <= k; j++) if (!(f[j] in name_of)) bad_field(f[j])
	if (!noheader) {
		line = ""
		for (j = 1; j <= k; j++) line = line (j > 1 ? ", " : "") name_of[f[j]] header_unit(name_of[f[j]])
		print line
	}
	for (i = 1; i <= m; i++) {
		line = ""
		for (j = 1; j <= k; j++) line = line (j > 1 ? ", " : "") csv_value(sel[i], name_of[f[j]])
		print line
	}
}

# The `topo -m` cell between GPUs a and b: NVLink between GPUs of one NVLink model (not with -mp), else
# the PCIe path: one pcieRoot is one bridge (PIX), or the host bridge itself when they sit on its root bus
# (PHB); one NUMA node (or an unknown one, as a VM with one node) is NODE; two NUMA nodes are SYS.
function topo_cell(a, b, root, node_a, node_b) {
	if (a == b) return " X "
	if (mode == "topo" && val(a, "nvlinks") + 0 > 0 && val(a, "nvlinks") == val(b, "nvlinks") &&
		g[a, "name"] == g[b, "name"])
		return "NV" val(a, "nvlinks")
	root = val(a, "pcie_root")
	if (root != "N/A" && root == val(b, "pcie_root"))
		return substr(root, 9, 2) == tolower(substr(g[a, "bus_id"], 10, 2)) ? "PHB" : "PIX"
	node_a = val(a, "numa_node")
	node_b = val(b, "numa_node")
	return node_a != "N/A" && node_b != "N/A" && node_a != node_b ? "SYS" : "NODE"
}

# `topo -m`: a tab-separated matrix, its header underlined (ESC[4m ... ESC[0m), an empty column before the
# GPU NUMA ID (N/A on boards whose memory is no NUMA node of its own), then the legend; -mp has no NV# line.
function topo(i, j, line) {
	line = "\t\033[4m"
	for (i = 1; i <= ng; i++) line = line "GPU" (i - 1) "\t"
	print line "CPU Affinity\tNUMA Affinity\tGPU NUMA ID\033[0m"
	for (i = 1; i <= ng; i++) {
		line = "GPU" (i - 1)
		for (j = 1; j <= ng; j++) line = line "\t" topo_cell(order[i], order[j])
		print line "\t" val(order[i], "cpu_affinity") "\t" val(order[i], "numa_affinity") "\t\t" val(order[i], "gpu_numa_id")
	}
	print ""
	print "Legend:"
	print ""
	print "  X    = Self"
	print "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"
	print "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"
	print "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"
	print "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"
	print "  PIX  = Connection traversing at most a single PCIe bridge"
	if (mode == "topo") print "  NV#  = Connection traversing a bonded set of # NVLinks"
}

function help_query(i) {
	print "List of valid properties to query for the switch \"--query-gpu\":"
	print ""
	for (i = 1; i <= nknown; i++) print "\"" known[i] "\"" (i in alias ? " or \"" alias[i] "\"" : "")
}

END {
	if (mode == "help_query") {
		help_query()
		exit 0
	}
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
	if (mode == "topo" || mode == "topo_pci") {
		topo()
		exit 0
	}
	select_gpus()
	if (mode == "csv") csv()
	else if (mode == "full") report()
	else summary()
}
