"""A consumer of NVML's event API, as NVIDIA's device plugin and DRA driver use it (pynvml, PyPI
nvidia-ml-py): init, an event set, every GPU registered for XID critical errors, then "ready" on stdout and
one wait of argv[1] milliseconds; prints the event (or the error code) as one JSON line."""

from __future__ import annotations

import json
import sys

import pynvml


def main(timeout_ms: int) -> None:
    pynvml.nvmlInit()
    events = pynvml.nvmlEventSetCreate()
    for i in range(pynvml.nvmlDeviceGetCount()):
        pynvml.nvmlDeviceRegisterEvents(
            pynvml.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, events
        )
    print("ready", flush=True)
    try:
        data = pynvml.nvmlEventSetWait_v2(events, timeout_ms)
    except pynvml.NVMLError as e:
        print(json.dumps({"error": e.value}))
        return
    finally:
        pynvml.nvmlEventSetFree(events)
    print(json.dumps({
        "uuid": pynvml.nvmlDeviceGetUUID(data.device),
        "type": data.eventType,
        "xid": data.eventData,
        "gpu_instance_id": data.gpuInstanceId,
        "compute_instance_id": data.computeInstanceId,
    }))  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]))
