# kwok's controller as kwok's own image has it (images/kwok/Dockerfile of sigs.k8s.io/kwok: the binary at
# /usr/local/bin/kwok, the entrypoint), on the local Debian base: the build context holds the static
# binary of `hack/build-k8s.sh --only kwok` as `kwok`. Built by hack/kind/tool-image.sh.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
COPY kwok /usr/local/bin/kwok
ENTRYPOINT ["/usr/local/bin/kwok"]
