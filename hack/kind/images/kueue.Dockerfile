# Kueue's manager as Kueue's own image has it (its Dockerfile: distroless static, `/manager`, user
# 65532), on the local Debian base: the build context holds the static binary of
# `hack/build-k8s.sh --only kueue` as `kueue`. Built by hack/kind/tool-image.sh.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
COPY kueue /manager
# Numeric: the chart's runAsNonRoot needs a user the kubelet can check without /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/manager"]
