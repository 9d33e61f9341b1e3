# A minimal workload image: busybox alone (Debian's static build), no bash, no mawk, no coreutils —
# what the kind e2e runs our CDI-mounted nvidia-smi in, besides plain Debian.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE} AS debian
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends busybox-static

FROM scratch
COPY --from=debian /bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CMD ["sh"]
