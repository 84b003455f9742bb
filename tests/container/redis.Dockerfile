# Stand-in for the redis:7-bookworm image of docker/compose.yaml in the
# container suite, built on the same local debootstrapped base as redlockd
# (no registry): Debian's redis-server 7, run from /data like the official
# image. tests/container/redis-entrypoint.sh adds a unix socket when
# REDIS_SOCKET is set (the test override runs the nodes without a network).
#
#   podman build -f tests/container/redis.Dockerfile tests/container
ARG DEBIAN_IMAGE=localhost/debian:bookworm-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -m 0777 /data
COPY redis-entrypoint.sh /usr/local/bin/redis-entrypoint
WORKDIR /data
ENTRYPOINT ["/usr/local/bin/redis-entrypoint"]
CMD ["redis-server"]
