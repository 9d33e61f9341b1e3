/*
 * fakeplugin's libnvidia-ml.so.1: NVML answered from a description of the container's GPUs.
 *
 * nvmlInit reads the description (description.c: the directory $FAKEPLUGIN_NVML_DESCRIPTION names,
 * else DEFAULT_DIR) once per process, under a mutex; from then on it is read only, and a handle is a
 * pointer into it, so no handle ever dangles, even after nvmlShutdown. A missing or malformed
 * description fails nvmlInit with NVML_ERROR_DRIVER_NOT_LOADED (what NVML says on a node without its
 * kernel driver) and one line on stderr naming the file; nothing here exits, aborts or writes out of
 * bounds. Every symbol of symbols.txt not defined here is a stub (build.py) answering
 * NVML_ERROR_NOT_SUPPORTED, or NVML_ERROR_UNINITIALIZED before nvmlInit.
 *
 * Live values (description.c `live_read`): utilisation, memory used, temperature and power come from each
 * device's live state file when it has one, else the description's idle values; a lost GPU answers
 * NVML_ERROR_GPU_IS_LOST on the calls whose nvml.h doc comment lists that code; a new XID in it is an
 * nvmlEventTypeXidCriticalError event for the event sets the device is registered with. A bad live file
 * answers NVML_ERROR_UNKNOWN and one stderr line per device.
 *
 * Semantics follow the doc comments of NVIDIA/go-nvml v0.13.3-0 gen/nvml/nvml.h.
 */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "description.h"
#include "nvml.h"

#define DESCRIPTION_ENV "FAKEPLUGIN_NVML_DESCRIPTION"
#define DEFAULT_DIR "/run/fakeplugin/nvml"

/* The only mutable state: the description (written once, under lock, before `loaded` is set) and
 * the init count. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct description desc;
static int loaded;
static unsigned int refcount;

/* ---- init ------------------------------------------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags; /* NO_GPUS and the others change nothing: a description has a GPU */
    nvmlReturn_t result = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!loaded) {
        const char *dir = getenv(DESCRIPTION_ENV);
        if (dir == NULL || dir[0] == '\0')
            dir = DEFAULT_DIR;
        char why[PATH_MAX + 160];
        if (description_load(dir, &desc, why, sizeof why) == 0)
            loaded = 1;
        else {
            fprintf(stderr, "fakeplugin NVML: no GPUs: description %s\n", why);
            result = NVML_ERROR_DRIVER_NOT_LOADED;
        }
    }
    if (result == NVML_SUCCESS)
        refcount++;
    pthread_mutex_unlock(&lock);
    return result;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    if (refcount > 0) /* more shutdowns than inits are no error (nvml.h) */
        refcount--;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

static int initialized(void) {
    pthread_mutex_lock(&lock);
    int result = refcount > 0;
    pthread_mutex_unlock(&lock);
    return result;
}

/* Used by the stubs (hidden: not exported): what NVML answers for a call it does not support. */
__attribute__((visibility("hidden"))) nvmlReturn_t fakeplugin_nvml_unsupported(void);
nvmlReturn_t fakeplugin_nvml_unsupported(void) {
    return initialized() ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_UNINITIALIZED;
}

/* The strings of nvidia-ml-py 13.615.71 (pynvml.py NVMLError._errcode_to_string) where it has one; the
 * others (success, and codes newer than its table) are ours, not verified against NVIDIA's library. */
const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "Requested vgpu operation not available with ECC enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset type not supported";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    }
    return "Unknown Error";
}

/* ---- system ----------------------------------------------------------------------------------- */

static nvmlReturn_t copy_text(char *out, unsigned int length, const char *text) {
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(text);
    if ((size_t)length <= n)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, text, n + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return initialized() ? copy_text(version, length, desc.system.driver_version) : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return initialized() ? copy_text(version, length, desc.system.nvml_version) : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = (int)desc.system.cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

/* ---- handles ---------------------------------------------------------------------------------- */

static int in(const struct nvmlDevice_st *array, unsigned int count, const struct nvmlDevice_st *h) {
    uintptr_t first = (uintptr_t)array, at = (uintptr_t)h;
    return at >= first && at < first + count * sizeof *array && (at - first) % sizeof *array == 0;
}

/* The device behind a handle the caller passed; NVML's answer when there is none. */
static nvmlReturn_t device_of(nvmlDevice_t handle, const struct nvmlDevice_st **out) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!in(desc.gpus, desc.gpu_count, handle) && !in(desc.migs, desc.mig_count, handle))
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = handle;
    return NVML_SUCCESS;
}

/* A full GPU, or a MIG device's parent: where identity and board values live. */
static const struct nvmlDevice_st *gpu_of(const struct nvmlDevice_st *d) { return d->is_mig ? d->parent : d; }

/* The device's live state into `live`: `*have` 0 when it has none; NVML_ERROR_UNKNOWN (and one stderr
 * line per device) when its file is bad. */
static nvmlReturn_t live_of(const struct nvmlDevice_st *d, struct live *live, int *have) {
    char why[LIVE_PATH_SIZE + 80];
    int read = live_read(d, live, why, sizeof why);
    *have = read == 1;
    if (read >= 0)
        return NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    int first = !d->live_warned;
    ((struct nvmlDevice_st *)d)->live_warned = 1; /* the only field written after init */
    pthread_mutex_unlock(&lock);
    if (first)
        fprintf(stderr, "fakeplugin NVML: live state %s\n", why);
    return NVML_ERROR_UNKNOWN;
}

/* The device behind a handle with its live state; NVML_ERROR_GPU_IS_LOST when it is lost. */
static nvmlReturn_t live_device_of(nvmlDevice_t handle, const struct nvmlDevice_st **out, struct live *live,
                                   int *have) {
    nvmlReturn_t found = device_of(handle, out);
    if (found == NVML_SUCCESS)
        found = live_of(*out, live, have);
    if (found == NVML_SUCCESS && *have && live->lost)
        return NVML_ERROR_GPU_IS_LOST;
    return found;
}

/* A device call whose nvml.h doc comment lists NVML_ERROR_GPU_IS_LOST: `live`, `have_live` its state. */
#define DEVICE(handle, out) \
    const struct nvmlDevice_st *dev; \
    struct live live; \
    int have_live; \
    nvmlReturn_t found = live_device_of(handle, &dev, &live, &have_live); \
    if (found != NVML_SUCCESS) \
        return found; \
    if ((out) == NULL) \
        return NVML_ERROR_INVALID_ARGUMENT

/* A device call whose doc comment does not list it (a lost GPU still answers). */
#define ANY_DEVICE(handle, out) \
    const struct nvmlDevice_st *dev; \
    nvmlReturn_t found = device_of(handle, &dev); \
    if (found != NVML_SUCCESS) \
        return found; \
    if ((out) == NULL) \
        return NVML_ERROR_INVALID_ARGUMENT

/* A handle call's answer for the device found: GPU_IS_LOST when it is lost. */
static nvmlReturn_t hand_out(struct nvmlDevice_st *found, nvmlDevice_t *device) {
    const struct nvmlDevice_st *dev;
    struct live live;
    int have;
    nvmlReturn_t result = live_device_of(found, &dev, &live, &have);
    if (result == NVML_SUCCESS)
        *device = found;
    return result;
}

/* A full GPU's call: MIG devices answer NOT_SUPPORTED. */
#define FULL_GPU(handle, out) \
    DEVICE(handle, out); \
    if (dev->is_mig) \
        return NVML_ERROR_NOT_SUPPORTED

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = desc.gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= desc.gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    return hand_out(&desc.gpus[index], device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < desc.gpu_count; i++)
        if (strcmp(desc.gpus[i].uuid, uuid) == 0)
            return hand_out(&desc.gpus[i], device);
    for (unsigned int i = 0; i < desc.mig_count; i++)
        if (strcmp(desc.migs[i].uuid, uuid) == 0)
            return hand_out(&desc.migs[i], device);
    return NVML_ERROR_NOT_FOUND;
}

/* domain, bus, device of an NVML bus ID: "%x:%x:%x.%x", "%x:%x:%x" (domain 0: "%x:%x.%x"). */
static int pci_address(const char *text, unsigned int *domain, unsigned int *bus, unsigned int *device) {
    unsigned int a, b, c, d;
    char extra;
    if (sscanf(text, "%x:%x:%x.%x%c", &a, &b, &c, &d, &extra) == 4 ||
        sscanf(text, "%x:%x:%x%c", &a, &b, &c, &extra) == 3) {
        *domain = a, *bus = b, *device = c;
        return 0;
    }
    if (sscanf(text, "%x:%x.%x%c", &b, &c, &d, &extra) == 3) {
        *domain = 0, *bus = b, *device = c;
        return 0;
    }
    return -1;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    unsigned int domain, bus, slot;
    if (pciBusId == NULL || device == NULL || pci_address(pciBusId, &domain, &bus, &slot) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < desc.gpu_count; i++) {
        unsigned int d, b, s;
        if (pci_address(desc.gpus[i].bus_id, &d, &b, &s) == 0 && d == domain && b == bus && s == slot)
            return hand_out(&desc.gpus[i], device);
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ---- identity --------------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE(device, name);
    return copy_text(name, length, dev->name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE(device, uuid);
    return copy_text(uuid, length, dev->uuid);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    FULL_GPU(device, serial);
    return copy_text(serial, length, dev->serial);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    FULL_GPU(device, index);
    *index = dev->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    DEVICE(device, minor);
    *minor = gpu_of(dev)->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, unsigned int *type) {
    DEVICE(device, type);
    *type = gpu_of(dev)->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch) {
    ANY_DEVICE(device, arch);
    *arch = gpu_of(dev)->architecture;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEVICE(device, major);
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)gpu_of(dev)->cc_major;
    *minor = (int)gpu_of(dev)->cc_minor;
    return NVML_SUCCESS;
}

/* The fields every version of nvmlPciInfo_t has at these offsets: the legacy bus ID (4-digit
 * domain) and the numbers. */
static nvmlReturn_t pci_prefix(nvmlDevice_t device, nvmlPciInfo_t *pci, const struct nvmlDevice_st **gpu) {
    DEVICE(device, pci);
    const struct nvmlDevice_st *g = gpu_of(dev);
    unsigned int domain, bus, slot;
    if (pci_address(g->bus_id, &domain, &bus, &slot) != 0)
        return NVML_ERROR_UNKNOWN;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", domain & 0xffffu, bus & 0xffu,
             slot & 0xffu);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = slot;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    *gpu = g;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    const struct nvmlDevice_st *gpu;
    nvmlReturn_t result = pci_prefix(device, pci, &gpu);
    if (result == NVML_SUCCESS)
        snprintf(pci->busId, sizeof pci->busId, "%s", gpu->bus_id);
    return result;
}

/* Older callers' structs may end after pciSubSystemId: only the common prefix is written. */
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    const struct nvmlDevice_st *gpu;
    return pci_prefix(device, pci, &gpu);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return nvmlDeviceGetPciInfo_v2(device, pci);
}

/* ---- memory and readings ---------------------------------------------------------------------- */

/* A GPU's reserved memory is the driver's; a MIG device reports its profile's memory, all free. */
static unsigned long long reserved(const struct nvmlDevice_st *d) { return d->is_mig ? 0 : d->memory_reserved; }

/* Memory the load uses (not the reserve), at most what the reserve leaves. */
static unsigned long long used(const struct nvmlDevice_st *d, const struct live *live, int have_live) {
    unsigned long long usable = d->memory_total > reserved(d) ? d->memory_total - reserved(d) : 0;
    unsigned long long load = have_live && d->live_memory ? live->memory_used : 0;
    return load < usable ? load : usable;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE(device, memory);
    memory->total = dev->memory_total;
    memory->used = reserved(dev) + used(dev, &live, have_live); /* v1: used includes the reserved memory */
    memory->free = dev->memory_total > memory->used ? dev->memory_total - memory->used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE(device, memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = dev->memory_total;
    memory->reserved = reserved(dev);
    memory->used = used(dev, &live, have_live);
    memory->free = dev->memory_total > memory->reserved + memory->used
                       ? dev->memory_total - memory->reserved - memory->used
                       : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    FULL_GPU(device, limit);
    if (dev->power_limit_mw == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *limit = dev->power_limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *limit) {
    return nvmlDeviceGetPowerManagementLimit(device, limit);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    FULL_GPU(device, power);
    if (dev->power_usage_mw == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *power = have_live ? live.power_usage_mw : dev->power_usage_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    FULL_GPU(device, temp);
    if (sensor != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = have_live ? live.temperature_c : dev->temperature_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    FULL_GPU(device, utilization);
    utilization->gpu = have_live ? live.utilization_gpu : 0; /* idle without a live state */
    utilization->memory = have_live ? live.utilization_memory : 0;
    return NVML_SUCCESS;
}

/* No process runs on an emulated GPU: every version of the call reports none. */
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *count) {
    DEVICE(device, count);
    *count = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, void *infos) {
    (void)infos;
    return no_processes(device, count);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count, void *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count, void *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, void *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *count, void *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *count, void *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

/* ---- MIG -------------------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    ANY_DEVICE(device, currentMode);
    if (dev->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (pendingMode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = dev->mig_mode;
    *pendingMode = dev->mig_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ANY_DEVICE(device, count);
    *count = dev->is_mig || !dev->mig_mode ? 0 : dev->max_mig_devices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    ANY_DEVICE(device, migDevice);
    if (dev->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!dev->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!dev->mig_mode || index >= dev->max_mig_devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= dev->mig_count)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &desc.migs[dev->first_mig + index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    ANY_DEVICE(migDevice, device);
    if (!dev->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = dev->parent;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    ANY_DEVICE(device, isMigDevice);
    *isMigDevice = (unsigned int)dev->is_mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    ANY_DEVICE(device, id);
    if (!dev->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = dev->gpu_instance_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    ANY_DEVICE(device, id);
    if (!dev->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = dev->compute_instance_id;
    return NVML_SUCCESS;
}

/* ---- events ----------------------------------------------------------------------------------- */

/* An event set: the devices registered with it and the XID (and lost state) each last reported, so a
 * change in its live state is an event. Sets live in a fixed table: a handle is checked like a device's. */
#define MAX_SETS 16
#define MAX_REGISTRATIONS 256
#define POLL_MS 100

struct registration {
    const struct nvmlDevice_st *device;
    unsigned long long mask, xid;
    unsigned int lost;
};

struct nvmlEventSet_st {
    int in_use;
    unsigned int count;
    struct registration entries[MAX_REGISTRATIONS];
};

static struct nvmlEventSet_st sets[MAX_SETS];

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t result = NVML_ERROR_INSUFFICIENT_RESOURCES;
    pthread_mutex_lock(&lock);
    for (unsigned int i = 0; i < MAX_SETS && result != NVML_SUCCESS; i++)
        if (!sets[i].in_use) {
            memset(&sets[i], 0, sizeof sets[i]);
            sets[i].in_use = 1;
            *set = &sets[i];
            result = NVML_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    return result;
}

/* Whether `set` is a set in use; call under the lock. */
static int set_ok(nvmlEventSet_t set) {
    uintptr_t first = (uintptr_t)sets, at = (uintptr_t)set;
    return at >= first && at < first + sizeof sets && (at - first) % sizeof sets[0] == 0 && set->in_use;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    pthread_mutex_lock(&lock);
    int ok = set_ok(set);
    if (ok)
        set->in_use = 0;
    pthread_mutex_unlock(&lock);
    return ok ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    DEVICE(device, eventTypes);
    *eventTypes = nvmlEventTypeXidCriticalError; /* the only event emulated */
    return NVML_SUCCESS;
}

/* Events of other types may be asked for: they never come. A device registered again gets the new mask. */
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set) {
    DEVICE(device, set);
    nvmlReturn_t result = NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&lock);
    if (set_ok(set)) {
        unsigned int i = 0;
        while (i < set->count && set->entries[i].device != dev)
            i++;
        result = i < MAX_REGISTRATIONS ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_RESOURCES;
        if (result == NVML_SUCCESS) { /* events before registering are not recorded (nvml.h) */
            struct registration *r = &set->entries[i];
            r->device = dev;
            r->mask = eventTypes;
            r->xid = have_live ? live.xid : 0;
            r->lost = 0;
            set->count += i == set->count;
        }
    }
    pthread_mutex_unlock(&lock);
    return result;
}

/* One look at the set's devices: SUCCESS with `data` for a new XID, GPU_IS_LOST once per device lost,
 * TIMEOUT for nothing new; INVALID_ARGUMENT once the set is freed. */
static nvmlReturn_t poll_set(nvmlEventSet_t set, nvmlEventData_t *data) {
    nvmlReturn_t result = NVML_ERROR_TIMEOUT;
    pthread_mutex_lock(&lock);
    if (!set_ok(set))
        result = NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; result == NVML_ERROR_TIMEOUT && i < set->count; i++) {
        struct registration *r = &set->entries[i];
        struct live live;
        char why[LIVE_PATH_SIZE + 80];
        if (live_read(r->device, &live, why, sizeof why) != 1)
            continue; /* no state, or a bad one (device calls report it) */
        if (live.lost && !r->lost) {
            r->lost = 1;
            result = NVML_ERROR_GPU_IS_LOST;
        } else if (live.xid != r->xid) {
            r->xid = live.xid;
            if (live.xid != 0 && (r->mask & nvmlEventTypeXidCriticalError)) {
                data->device = (nvmlDevice_t)r->device;
                data->eventType = nvmlEventTypeXidCriticalError;
                data->eventData = live.xid;
                data->gpuInstanceId = r->device->is_mig ? r->device->gpu_instance_id : 0xFFFFFFFFu;
                data->computeInstanceId = r->device->is_mig ? r->device->compute_instance_id : 0xFFFFFFFFu;
                result = NVML_SUCCESS;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return result;
}

static unsigned long long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000 + (unsigned long long)t.tv_nsec / 1000000;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long deadline = now_ms() + timeoutms;
    for (;;) {
        nvmlReturn_t result = poll_set(set, data);
        unsigned long long now = now_ms();
        if (result != NVML_ERROR_TIMEOUT || now >= deadline)
            return result;
        unsigned long long wait = deadline - now < POLL_MS ? deadline - now : POLL_MS;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)wait * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* The v1 event data ends after eventData: only that much is written. */
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t *data, unsigned int timeoutms) {
    if (data == NULL)
        return initialized() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    nvmlEventData_t full;
    nvmlReturn_t result = nvmlEventSetWait_v2(set, &full, timeoutms);
    if (result == NVML_SUCCESS)
        memcpy(data, &full, sizeof *data);
    return result;
}
