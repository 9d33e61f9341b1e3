# Prometheus for the kind path: Debian's server binary (package `prometheus`, the one the local cluster runs),
# on the local Debian base of the same suite: the build context holds this machine's /usr/bin/prometheus as
# `prometheus`. Its data directory is the pod's volume. Built by hack/kind/tool-image.sh.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
COPY prometheus /usr/bin/prometheus
# nobody, numeric: runAsNonRoot needs a user the kubelet can check without /etc/passwd.
USER 65534:65534
ENTRYPOINT ["/usr/bin/prometheus"]
