# Debian with iptables and conntrack: the base of the kube-proxy and flanneld images.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      iptables conntrack iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
