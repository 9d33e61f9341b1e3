/*
 * Reads a container's description: every `*.nvml` file of a directory, one per device the container
 * got (Prepare mounts each device's file, so a container sees exactly its own), in name order.
 *
 * A file: `key=value` lines, `#` comments; the system keys (format, driver, NVML and CUDA driver
 * versions, the same in every file), then a `[gpu]` section, and for a MIG device a `[mig]` section
 * after its GPU's. A GPU several files describe (one per MIG device on it) is one GPU. The result:
 * GPUs in minor order, each GPU's MIG devices together in placement order.
 *
 * Every line is at most MAX_LINE bytes, every text printable ASCII within its NVML buffer, every
 * number a decimal (or 0x hex) that fits its field; anything else is an error naming file and line.
 *
 * Each file has a live state beside it, `<name>.live/state` for `<name>.nvml` (a directory, so a
 * container's bind mount of it sees each new state the writer renames into place): `key=value` lines of
 * the same kind, read on every call that reports it (`live_read`).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "description.h"

#define FORMAT 1
#define SUFFIX ".nvml"
#define MAX_FILES (MAX_GPUS + MAX_MIGS)
#define MAX_LINE 256
#define LIVE_SUFFIX ".live/state"
#define MAX_LIVE_LINES 32

enum section { SYSTEM, GPU, MIG, LIVE };
enum kind { TEXT, U32, U64 };

struct field {
    enum section section;
    const char *key;
    enum kind kind;
    size_t offset, size;
};

#define FIELD(section, type, key, kind, member) \
    {section, key, kind, offsetof(type, member), sizeof(((type *)0)->member)}
#define SYS(key, kind, member) FIELD(SYSTEM, struct system, key, kind, member)
#define DEV(key, kind, member) FIELD(GPU, struct nvmlDevice_st, key, kind, member)
#define MIGF(key, kind, member) FIELD(MIG, struct nvmlDevice_st, key, kind, member)
#define LIV(key, kind, member) FIELD(LIVE, struct live, key, kind, member)

static const struct field fields[] = {
    SYS("format", U32, format),
    SYS("driver_version", TEXT, driver_version),
    SYS("nvml_version", TEXT, nvml_version),
    SYS("cuda_driver_version", U32, cuda_driver_version),
    DEV("name", TEXT, name),
    DEV("uuid", TEXT, uuid),
    DEV("serial", TEXT, serial),
    DEV("bus_id", TEXT, bus_id),
    DEV("pci_device_id", U32, pci_device_id),
    DEV("pci_subsystem_id", U32, pci_subsystem_id),
    DEV("minor", U32, minor),
    DEV("memory_total", U64, memory_total),
    DEV("memory_reserved", U64, memory_reserved),
    DEV("cc_major", U32, cc_major),
    DEV("cc_minor", U32, cc_minor),
    DEV("architecture", U32, architecture),
    DEV("brand", U32, brand),
    DEV("power_limit_mw", U32, power_limit_mw),
    DEV("power_usage_mw", U32, power_usage_mw),
    DEV("temperature_c", U32, temperature_c),
    DEV("mig_capable", U32, mig_capable),
    DEV("mig_mode", U32, mig_mode),
    DEV("max_mig_devices", U32, max_mig_devices),
    MIGF("name", TEXT, name),
    MIGF("uuid", TEXT, uuid),
    MIGF("memory_total", U64, memory_total),
    MIGF("gpu_instance_id", U32, gpu_instance_id),
    MIGF("compute_instance_id", U32, compute_instance_id),
    MIGF("placement_start", U32, placement_start),
    LIV("format", U32, format),
    LIV("utilization_gpu", U32, utilization_gpu),
    LIV("utilization_memory", U32, utilization_memory),
    LIV("memory_used", U64, memory_used),
    LIV("temperature_c", U32, temperature_c),
    LIV("power_usage_mw", U32, power_usage_mw),
    LIV("xid", U64, xid),
    LIV("lost", U32, lost),
};

/* What the files say before it is put in order: each GPU once, MIG devices with their GPU's slot. */
struct parsed {
    struct system system; /* the first file's */
    unsigned int gpu_count, mig_count;
    struct nvmlDevice_st gpus[MAX_GPUS];
    struct nvmlDevice_st migs[MAX_MIGS];
    unsigned int mig_gpu[MAX_MIGS];
};

/* Where the reader of one file stands. */
struct reader {
    struct parsed *p;
    struct system system;
    enum section section;
    void *record;
    unsigned int gpu; /* the slot of the file's GPU, once it has one */
    char live[LIVE_PATH_SIZE]; /* the file's live state ("": none) */
};

/* A decimal, or a hexadecimal after "0x", and nothing else; 0 when it fits `max`. */
static int parse_number(const char *text, unsigned long long max, unsigned long long *out) {
    int hex = strncmp(text, "0x", 2) == 0;
    const char *digits = hex ? text + 2 : text;
    size_t n = strlen(digits);
    if (n == 0 || strspn(digits, hex ? "0123456789abcdefABCDEF" : "0123456789") != n)
        return -1;
    errno = 0;
    unsigned long long value = strtoull(digits, NULL, hex ? 16 : 10);
    if (errno != 0 || value > max)
        return -1;
    *out = value;
    return 0;
}

static int set_field(void *record, enum section section, const char *key, const char *value) {
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const struct field *f = &fields[i];
        if (f->section != section || strcmp(f->key, key) != 0)
            continue;
        char *at = (char *)record + f->offset;
        unsigned long long number;
        switch (f->kind) {
        case TEXT: /* printable ASCII: consumers decode it as UTF-8 */
            if (strlen(value) >= f->size)
                return -1;
            for (const char *c = value; *c != '\0'; c++)
                if (*c < 0x20 || *c > 0x7e)
                    return -1;
            memcpy(at, value, strlen(value) + 1);
            return 0;
        case U32:
            if (parse_number(value, UINT_MAX, &number) != 0)
                return -1;
            *(unsigned int *)(void *)at = (unsigned int)number;
            return 0;
        case U64:
            if (parse_number(value, ULLONG_MAX, &number) != 0)
                return -1;
            *(unsigned long long *)(void *)at = number;
            return 0;
        }
    }
    return -1;
}

/* The file's GPU section ends: a GPU an earlier file described stays that one (the last slot, just
 * filled, is given back). */
static void end_gpu(struct reader *r) {
    struct parsed *p = r->p;
    if (r->section != GPU)
        return;
    for (unsigned int i = 0; i + 1 < p->gpu_count; i++)
        if (strcmp(p->gpus[i].uuid, p->gpus[r->gpu].uuid) == 0) {
            memset(&p->gpus[--p->gpu_count], 0, sizeof p->gpus[0]);
            r->gpu = i;
            return;
        }
}

/* One line; NULL when taken, else why not. */
static const char *take_line(struct reader *r, char *line) {
    struct parsed *p = r->p;
    if (line[0] == '\0' || line[0] == '#')
        return NULL;
    if (strcmp(line, "[gpu]") == 0) {
        if (r->section != SYSTEM)
            return "a second [gpu] in one file";
        if (p->gpu_count == MAX_GPUS)
            return "too many GPUs";
        r->gpu = p->gpu_count++;
        r->section = GPU;
        r->record = &p->gpus[r->gpu];
        memcpy(p->gpus[r->gpu].live, r->live, sizeof r->live);
        p->gpus[r->gpu].live_memory = 1;
        return NULL;
    }
    if (strcmp(line, "[mig]") == 0) {
        if (r->section == SYSTEM)
            return "[mig] before [gpu]";
        if (p->mig_count == MAX_MIGS)
            return "too many MIG devices";
        end_gpu(r);
        struct nvmlDevice_st *m = &p->migs[p->mig_count];
        m->is_mig = 1;
        memcpy(m->live, r->live, sizeof r->live);
        m->live_memory = 1;
        p->gpus[r->gpu].live_memory = 0; /* its file's memory is the MIG device's */
        p->mig_gpu[p->mig_count++] = r->gpu;
        r->section = MIG;
        r->record = m;
        return NULL;
    }
    char *eq = strchr(line, '=');
    if (eq == NULL)
        return "a line that is neither key=value nor a section";
    *eq = '\0';
    if (set_field(r->record, r->section, line, eq + 1) != 0)
        return "an unknown key or a bad value";
    return NULL;
}

/* One line into `line` without its newline: 1, or 0 at the end of the file; `why` says if the line
 * is too long or holds a NUL byte. */
static int read_line(FILE *f, char *line, size_t size, const char **why) {
    size_t n = 0;
    int c;
    *why = NULL;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0')
            *why = "a NUL byte";
        else if (n + 1 == size)
            *why = "a line too long";
        if (*why != NULL)
            return 1;
        line[n++] = (char)c;
    }
    line[n] = '\0';
    return c != EOF || n > 0;
}

/* What one file's system keys must be, the first file deciding for the others. */
static const char *take_system(struct parsed *p, const struct system *s, int first) {
    if (s->format != FORMAT)
        return "no \"format=1\" line";
    if (s->driver_version[0] == '\0')
        return "no driver_version";
    if (first)
        p->system = *s;
    else if (s->cuda_driver_version != p->system.cuda_driver_version ||
             strcmp(s->driver_version, p->system.driver_version) != 0 ||
             strcmp(s->nvml_version, p->system.nvml_version) != 0)
        return "versions other than the first file's";
    return NULL;
}

/* The live state path of the description file `path`: beside it, ".nvml" replaced; "" when that is too
 * long (the description's idle values hold). */
static void live_path(const char *path, char *live) {
    size_t n = strlen(path), cut = strlen(SUFFIX);
    live[0] = '\0';
    if (n > cut && strcmp(path + n - cut, SUFFIX) == 0 && n - cut + sizeof LIVE_SUFFIX <= LIVE_PATH_SIZE)
        snprintf(live, LIVE_PATH_SIZE, "%.*s%s", (int)(n - cut), path, LIVE_SUFFIX);
}

static int read_file(struct parsed *p, const char *path, int first, char *why, size_t why_size) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, why_size, "%s: cannot read it: %s", path, strerror(errno));
        return -1;
    }
    struct reader r = {.p = p, .section = SYSTEM};
    r.record = &r.system;
    live_path(path, r.live);
    char line[MAX_LINE];
    unsigned int number = 0;
    const char *problem = NULL;
    while (problem == NULL && read_line(f, line, sizeof line, &problem)) {
        number++;
        if (problem == NULL)
            problem = take_line(&r, line);
    }
    if (problem == NULL && ferror(f))
        problem = "a read error";
    fclose(f);
    if (problem != NULL) {
        snprintf(why, why_size, "%s: line %u: %s", path, number, problem);
        return -1;
    }
    end_gpu(&r);
    if (r.section == SYSTEM)
        problem = "no [gpu]";
    else
        problem = take_system(p, &r.system, first);
    if (problem != NULL) {
        snprintf(why, why_size, "%s: %s", path, problem);
        return -1;
    }
    return 0;
}

/* What the merged description must hold; NULL when it does. */
static const char *check(const struct description *d) {
    for (unsigned int i = 0; i < d->gpu_count; i++) {
        const struct nvmlDevice_st *g = &d->gpus[i];
        if (g->name[0] == '\0' || g->uuid[0] == '\0' || g->bus_id[0] == '\0')
            return "a [gpu] without name, uuid or bus_id";
        if (g->mig_capable > 1 || g->mig_mode > g->mig_capable || (g->mig_count > 0 && g->mig_mode != 1))
            return "a [gpu] whose MIG keys and devices disagree";
        if (g->mig_count > MAX_MIGS_PER_GPU)
            return "too many MIG devices on one GPU";
    }
    for (unsigned int i = 0; i < d->mig_count; i++)
        if (d->migs[i].name[0] == '\0' || d->migs[i].uuid[0] == '\0')
            return "a [mig] without name or uuid";
    return NULL;
}

/* `p` into `d`: GPUs by minor, each one's MIG devices after the last, by placement. */
static void arrange(const struct parsed *p, struct description *d) {
    unsigned int order[MAX_GPUS];
    for (unsigned int i = 0; i < p->gpu_count; i++) {
        unsigned int j = i;
        for (; j > 0 && p->gpus[order[j - 1]].minor > p->gpus[i].minor; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    d->system = p->system;
    for (unsigned int k = 0; k < p->gpu_count; k++) {
        struct nvmlDevice_st *g = &d->gpus[d->gpu_count++];
        *g = p->gpus[order[k]];
        g->index = k;
        g->first_mig = d->mig_count;
        for (unsigned int m = 0; m < p->mig_count; m++) {
            if (p->mig_gpu[m] != order[k])
                continue;
            unsigned int j = d->mig_count++;
            for (; j > g->first_mig && d->migs[j - 1].placement_start > p->migs[m].placement_start; j--)
                d->migs[j] = d->migs[j - 1];
            d->migs[j] = p->migs[m];
        }
        g->mig_count = d->mig_count - g->first_mig;
        for (unsigned int i = 0; i < g->mig_count; i++) {
            d->migs[g->first_mig + i].index = i;
            d->migs[g->first_mig + i].parent = g;
        }
    }
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names of the directory's description files, sorted; their count, or -1 with why. */
static int list(const char *dir, char **names, char *why, size_t why_size) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        snprintf(why, why_size, "%s: cannot read it: %s", dir, strerror(errno));
        return -1;
    }
    int count = 0, full = 0;
    struct dirent *e;
    while (!full && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || n <= strlen(SUFFIX) || strcmp(e->d_name + n - strlen(SUFFIX), SUFFIX) != 0)
            continue;
        full = count == MAX_FILES || (names[count] = strdup(e->d_name)) == NULL;
        count += !full;
    }
    closedir(d);
    if (full || count == 0) {
        snprintf(why, why_size, "%s: %s", dir, full ? "too many files" : "no *" SUFFIX " file");
        for (int i = 0; i < count; i++)
            free(names[i]);
        return -1;
    }
    qsort(names, (size_t)count, sizeof names[0], by_name);
    return count;
}

int description_load(const char *dir, struct description *d, char *why, size_t why_size) {
    char **names = calloc(MAX_FILES, sizeof *names);
    struct parsed *p = calloc(1, sizeof *p);
    int count = -1;
    if (names == NULL || p == NULL)
        snprintf(why, why_size, "%s: no memory to read it", dir);
    else
        count = list(dir, names, why, why_size);
    int result = count < 0 ? -1 : 0;
    for (int i = 0; i < count; i++) {
        char path[PATH_MAX];
        if (result == 0 && snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) {
            snprintf(why, why_size, "%s: a path too long", dir);
            result = -1;
        }
        if (result == 0)
            result = read_file(p, path, i == 0, why, why_size);
        free(names[i]);
    }
    if (result == 0) {
        memset(d, 0, sizeof *d);
        arrange(p, d);
        const char *problem = check(d);
        if (problem != NULL) {
            snprintf(why, why_size, "%s: %s", dir, problem);
            result = -1;
        }
    }
    free(names);
    free(p);
    return result;
}

int live_read(const struct nvmlDevice_st *d, struct live *out, char *why, size_t why_size) {
    if (d->live[0] == '\0')
        return 0;
    FILE *f = fopen(d->live, "r");
    if (f == NULL) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        snprintf(why, why_size, "%s: cannot read it: %s", d->live, strerror(errno));
        return -1;
    }
    memset(out, 0, sizeof *out);
    char line[MAX_LINE];
    unsigned int number = 0;
    const char *problem = NULL;
    while (problem == NULL && read_line(f, line, sizeof line, &problem)) {
        char *eq = strchr(line, '=');
        if (problem != NULL || line[0] == '\0' || line[0] == '#')
            continue;
        if (++number > MAX_LIVE_LINES)
            problem = "too many lines";
        else if (eq == NULL)
            problem = "a line that is not key=value";
        else {
            *eq = '\0';
            if (set_field(out, LIVE, line, eq + 1) != 0)
                problem = "an unknown key or a bad value";
        }
    }
    if (problem == NULL && ferror(f))
        problem = "a read error";
    fclose(f);
    if (problem == NULL && (out->format != FORMAT || out->utilization_gpu > 100 || out->utilization_memory > 100 ||
                            out->lost > 1))
        problem = "no \"format=1\" line, or a value out of range";
    if (problem != NULL) {
        snprintf(why, why_size, "%s: %s", d->live, problem);
        return -1;
    }
    return 1;
}
