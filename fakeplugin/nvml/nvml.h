/*
 * The part of NVML's ABI the mock implements: return codes, constants and the structs it fills.
 *
 * Names, values, struct layouts and prototypes are NVIDIA's, as NVIDIA/go-nvml v0.13.3-0
 * (commit 4ecf9856) gen/nvml/nvml.h declares them (NVML_API_VERSION 13); the static assertions
 * below hold the layouts to the offsets that header gives on LP64 (x86-64, arm64).
 */
#ifndef FAKEPLUGIN_NVML_H
#define FAKEPLUGIN_NVML_H

#include <stddef.h>

typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_TEMPERATURE_GPU 0
#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

/* NVML_STRUCT_VERSION(Memory, 2): sizeof | version << 24 */
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlEventSet_st *nvmlEventSet_t;

#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL

typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* What nvmlEventSetWait (v1) fills: nvmlEventData_t before the instance IDs. [I] from the v2 struct: NVML
 * added the IDs with nvmlEventSetWait_v2. */
typedef struct nvmlEventData_v1_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
} nvmlEventData_v1_t;

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(offsetof(nvmlPciInfo_t, domain) == 16, "nvmlPciInfo_t.domain");
_Static_assert(offsetof(nvmlPciInfo_t, pciSubSystemId) == 32, "nvmlPciInfo_t.pciSubSystemId");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t.busId");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(offsetof(nvmlMemory_v2_t, total) == 8, "nvmlMemory_v2_t.total");
_Static_assert(offsetof(nvmlMemory_v2_t, used) == 32, "nvmlMemory_v2_t.used");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2");
_Static_assert(sizeof(nvmlUtilization_t) == 8, "nvmlUtilization_t");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");
_Static_assert(offsetof(nvmlEventData_t, gpuInstanceId) == 24, "nvmlEventData_t.gpuInstanceId");

#endif
