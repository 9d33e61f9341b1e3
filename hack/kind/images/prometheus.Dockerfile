# Prometheus for the kind path: the static server binary hack/kind/tool-image.sh builds from its Go module
# (Kubernetes service discovery alone), on the local Debian base: the build context holds it as
# `prometheus`. Its data directory is the pod's volume.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
COPY prometheus /usr/bin/prometheus
# nobody, numeric: runAsNonRoot needs a user the kubelet can check without /etc/passwd.
USER 65534:65534
ENTRYPOINT ["/usr/bin/prometheus"]
