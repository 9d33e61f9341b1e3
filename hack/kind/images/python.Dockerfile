# A Python base for our Dockerfile (--build-arg PYTHON_IMAGE=...) built from Debian's packages, for
# machines that reach Debian and PyPI but no image registry. The build context holds this machine's
# CA bundle (ca-certificates.crt): pip in the build trusts what the host trusts (an egress proxy's CA).
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-pip ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
