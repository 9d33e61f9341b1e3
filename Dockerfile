# fakeplugin's container image: `fakeplugin serve` is what the Helm chart's DaemonSet runs.
#
#   docker build -t fakeplugin:dev .
#
# The install steps live in hack/image-build-steps.sh; tests/test_image.py runs this file's build-stage
# RUN lines without Docker, so keep every build step in that script. Everything under fakeplugin/ is package
# data, the targets of its links too (examples/, hack/): copy them, or the smoke step fails naming them.
ARG PYTHON_IMAGE=python:3.12.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# A C compiler for the mock NVML library (Debian's gcc; this stage only), a layer of its own that
# changes only with the build steps.
COPY hack/image-build-steps.sh hack/
RUN hack/image-build-steps.sh compiler
COPY pyproject.toml README.md ./
COPY protos/ protos/
COPY hack/gen-protos.sh hack/build-k8s.sh hack/
COPY hack/fakecri/ hack/fakecri/
COPY hack/karpenter/ hack/karpenter/
COPY examples/ examples/
COPY fakeplugin/ fakeplugin/
RUN hack/image-build-steps.sh wheels /src /wheels \
 && hack/image-build-steps.sh install /wheels /opt/fakeplugin \
 && hack/image-build-steps.sh smoke /opt/fakeplugin /src
# The mock NVML library (fakeplugin/nvml), in the virtual environment the final stage copies (no compiler
# there): the chart's `serve --nvml-library` (charts/fakeplugin, nvml.enabled) serves it to workloads.
RUN hack/image-build-steps.sh nvml /opt/fakeplugin /opt/fakeplugin/nvml

FROM ${PYTHON_IMAGE}
# fakeplugin.__version__ (tests/test_version.py holds them equal)
ARG VERSION=0.2.0
LABEL org.opencontainers.image.title="fakeplugin" \
      org.opencontainers.image.description="A hardware-free stand-in for NVIDIA's Kubernetes DRA GPU driver (gpu.nvidia.com)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# Same base image and path as the build stage, so the virtual environment works as copied.
COPY --from=build /opt/fakeplugin /opt/fakeplugin
ENV PATH=/opt/fakeplugin/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Non-root for everything but the kubelet plugin: `fakeplugin serve` writes the kubelet's root-owned
# host directories and /var/run/cdi, so the chart runs that container as root (runAsUser: 0).
USER 65532:65532
ENTRYPOINT ["fakeplugin"]
CMD ["--help"]
