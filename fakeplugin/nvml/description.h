/*
 * The description of a container's GPUs the mock NVML library answers from, and its reader
 * (description.c). The format: docs/emulation.md, "NVML in the container".
 */
#ifndef FAKEPLUGIN_NVML_DESCRIPTION_H
#define FAKEPLUGIN_NVML_DESCRIPTION_H

#include <stddef.h>

#include "nvml.h"

#define MAX_GPUS 128 /* the inventory's most GPUs per node */
#define MAX_MIGS_PER_GPU 8
#define MAX_MIGS (MAX_GPUS * MAX_MIGS_PER_GPU)
#define LIVE_PATH_SIZE 512

/* A GPU or a MIG device; an nvmlDevice_t points at one. */
struct nvmlDevice_st {
    int is_mig;
    unsigned int index; /* a GPU's NVML index; a MIG device's index on its parent */
    struct nvmlDevice_st *parent;
    unsigned int first_mig, mig_count; /* a GPU's MIG devices: migs[first_mig, first_mig + mig_count) */
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned int pci_device_id, pci_subsystem_id, minor;
    unsigned int cc_major, cc_minor, architecture, brand;
    unsigned long long memory_total, memory_reserved;
    unsigned int power_limit_mw, power_usage_mw; /* 0: not known, NOT_SUPPORTED */
    unsigned int temperature_c, mig_capable, mig_mode, max_mig_devices;
    unsigned int gpu_instance_id, compute_instance_id, placement_start;
    /* The device's live state file (`live_read`), "" when there is none; `live_memory`: its memory_used is
     * this device's (not for a MIG device's parent, whose file is its first MIG device's). */
    char live[LIVE_PATH_SIZE];
    int live_memory;
    int live_warned; /* a bad live file was reported on stderr (once per device), under the init lock */
};

/* A device's live state: what the load and faults make of it now (fakeplugin.telemetry.nvmllive writes it). */
struct live {
    unsigned int format, utilization_gpu, utilization_memory, temperature_c, power_usage_mw, lost;
    unsigned long long memory_used, xid;
};

/* What every file of a description says alike. */
struct system {
    unsigned int format, cuda_driver_version;
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    char nvml_version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
};

struct description {
    struct system system;
    unsigned int gpu_count, mig_count;
    struct nvmlDevice_st gpus[MAX_GPUS]; /* in minor order */
    struct nvmlDevice_st migs[MAX_MIGS]; /* each GPU's together, in placement order */
};

/* Reads every `*.nvml` file of `dir` into `d`: 0, or -1 with why (naming the file) in `why`. */
__attribute__((visibility("hidden"))) int description_load(const char *dir, struct description *d, char *why,
                                                          size_t why_size);

/* The live state of `d`: 1 when read, 0 when it has none (no file: the description's idle values hold),
 * -1 with why (naming the file) when the file is bad. */
__attribute__((visibility("hidden"))) int live_read(const struct nvmlDevice_st *d, struct live *out, char *why,
                                                   size_t why_size);

#endif
