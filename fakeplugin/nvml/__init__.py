"""NVML inside the container: the mock `libnvidia-ml.so.1`, the project's one native component.

- `nvml.c`, `nvml.h`: the library, in C (libc only). It answers NVML from a description of the
  container's GPUs, with NVML's own error codes for everything it does not emulate.
- `description.c`, `description.h`: the description's reader: one file per device of the container
  (fakeplugin.drivers.gpu.prepare.nvmldata writes them) in one directory, and each device's live state
  beside its file (fakeplugin.telemetry.nvmllive writes it): load-model readings, XID, lost.
- `symbols.txt`: every function NVIDIA's nvml.h declares (hack/nvml-symbols.py writes it from
  NVIDIA/go-nvml's header at a tag), all exported, the ones nvml.c lacks as NOT_SUPPORTED stubs.
- `build.py`: compiles it with the system's compiler into the build cache, once per source.

Here: where the library looks for its description (`DESCRIPTION_ENV`, `DESCRIPTION_CONTAINER_DIR`), for
the CDI edits that mount it and for running a command as a container of the local cluster.
"""

# What nvml.c reads (its #defines; tests/test_nvml.py holds them equal): the description's directory,
# where CDI mounts each device's file in a container, unless this variable names another.
DESCRIPTION_ENV = "FAKEPLUGIN_NVML_DESCRIPTION"
DESCRIPTION_CONTAINER_DIR = "/run/fakeplugin/nvml"
