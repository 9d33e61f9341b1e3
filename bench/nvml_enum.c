/*
 * bench/nvml.py's consumer: nvmlInit, then a full enumeration of the container's GPUs and their MIG devices
 * (the calls a device plugin or go-nvlib makes: count, handles, name, UUID, PCI info, memory, MIG mode,
 * MIG handles and their UUID, name, memory), `rounds` times. Prints one JSON line: the first nvmlInit's
 * microseconds (it reads the description), one enumeration's median microseconds, and its number of calls.
 * Declares the few NVML functions it calls itself (prototypes as NVIDIA's nvml.h has them), links to
 * libnvidia-ml.so.1 by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void *handle;
int nvmlInit_v2(void);
int nvmlDeviceGetCount_v2(unsigned int *);
int nvmlDeviceGetHandleByIndex_v2(unsigned int, handle *);
int nvmlDeviceGetName(handle, char *, unsigned int);
int nvmlDeviceGetUUID(handle, char *, unsigned int);
int nvmlDeviceGetPciInfo_v3(handle, void *);
int nvmlDeviceGetMemoryInfo(handle, void *);
int nvmlDeviceGetMigMode(handle, unsigned int *, unsigned int *);
int nvmlDeviceGetMaxMigDeviceCount(handle, unsigned int *);
int nvmlDeviceGetMigDeviceHandleByIndex(handle, unsigned int, handle *);

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static unsigned int enumerate(void) {
    char text[96], pci[68], memory[24];
    unsigned int count = 0, calls = 1, current, pending, migs;
    nvmlDeviceGetCount_v2(&count);
    for (unsigned int i = 0; i < count; i++) {
        handle gpu, mig;
        nvmlDeviceGetHandleByIndex_v2(i, &gpu);
        nvmlDeviceGetName(gpu, text, sizeof text);
        nvmlDeviceGetUUID(gpu, text, sizeof text);
        nvmlDeviceGetPciInfo_v3(gpu, pci);
        nvmlDeviceGetMemoryInfo(gpu, memory);
        nvmlDeviceGetMigMode(gpu, &current, &pending);
        migs = 0;
        nvmlDeviceGetMaxMigDeviceCount(gpu, &migs);
        calls += 7;
        for (unsigned int m = 0; m < migs; m++) {
            calls++;
            if (nvmlDeviceGetMigDeviceHandleByIndex(gpu, m, &mig) != 0)
                continue;
            nvmlDeviceGetUUID(mig, text, sizeof text);
            nvmlDeviceGetName(mig, text, sizeof text);
            nvmlDeviceGetMemoryInfo(mig, memory);
            calls += 3;
        }
    }
    return calls;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    if (rounds < 1 || rounds > 100000)
        return 2;
    double t0 = now_us();
    int rc = nvmlInit_v2();
    double init = now_us() - t0;
    if (rc != 0) {
        fprintf(stderr, "nvmlInit_v2: %d\n", rc);
        return 1;
    }
    double *times = calloc((size_t)rounds, sizeof *times);
    if (times == NULL)
        return 1;
    unsigned int calls = 0;
    for (int r = 0; r < rounds; r++) {
        double start = now_us();
        calls = enumerate();
        times[r] = now_us() - start;
    }
    qsort(times, (size_t)rounds, sizeof *times, by_value);
    printf("{\"init_us\": %.1f, \"enumeration_us\": %.1f, \"calls\": %u}\n", init, times[rounds / 2], calls);
    free(times);
    return 0;
}
