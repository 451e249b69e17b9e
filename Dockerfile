# lessee in a container (docs/containers.md).
#
#   docker build -t lessee .
#   docker run -d --name lessee --stop-timeout 3600 \
#       --cap-drop ALL --cap-add SETUID --cap-add SETGID --cap-add CHOWN \
#       --cap-add DAC_OVERRIDE --cap-add KILL --security-opt no-new-privileges \
#       -e LESSEE_API_URL=https://orchestrator.example.com \
#       -e LESSEE_API_TOKEN_FILE=/run/secrets/lessee/token \
#       -v /srv/lessee/token:/run/secrets/lessee/token:ro \
#       -v /srv/lessee/lessee.conf:/etc/lessee/lessee.conf:ro \
#       lessee
#
# lessee runs as PID 1: it reaps every orphan its runs leave (no --init
# needed), drains on SIGTERM and falls back to epoll where the runtime's
# seccomp profile forbids io_uring (Docker's default does).
#
# The daemon is root with five capabilities, its runs are lessee-run (uid
# 10002) with none: a run cannot read the token file (root's, chmod 0600 or
# 0400), the spool or the daemon's memory (docs/operations.md, "Security").
# Root, because dropping each run to another user takes CAP_SETUID/CAP_SETGID,
# and Docker and Kubernetes give a non-root container user no capabilities.

ARG DEBIAN_IMAGE=debian:bookworm-slim

# ---- build: the same steps as on a Debian 12 host ------------------------------
FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
COPY . .
# make deps (scripts/deps.sh, the one list of build packages) installs them;
# make itself never installs packages.
RUN apt-get update \
    && make deps \
    && make -j"$(nproc)" \
    && rm -rf /var/lib/apt/lists/*

# ---- runtime: the shared libraries lessee links, nothing else --------------------
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        libcurl4 liburing2 libcjson1 libsystemd0 libmicrohttpd12 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# The user every workflow without user= runs as (worker.run_user), with a
# fixed numeric uid/gid.  spool_dir and run_dir are the defaults
# (/var/lib/lessee/spool, /var/cache/lessee/runs: on disk, not a tmpfs), the
# daemon's: the spool unreadable by runs, the run directories traversable to
# each run's own.  Mount volumes there for a read-only root file system.  The
# shipped lessee.conf runs no workflow: mount your own (see the docker run
# above).  lessee is a daemon (lessee(8)): in sbin, as make install puts it.
RUN groupadd --system --gid 10002 lessee-run \
    && useradd --system --uid 10002 --gid lessee-run --home-dir /nonexistent \
        --no-create-home --shell /usr/sbin/nologin lessee-run \
    && install -d -m 0755 /var/lib/lessee \
    && install -d -m 0700 /var/lib/lessee/spool \
    && install -d -m 0711 /var/cache/lessee /var/cache/lessee/runs
COPY --from=build /src/build/default/lessee /usr/local/sbin/lessee
COPY conf/lessee.conf /etc/lessee/lessee.conf
# The status endpoint must be reachable from outside the container's network
# namespace (probes, Prometheus).  It has no authentication: publish it only
# to what should see it.
ENV LESSEE_STATUS_LISTEN=0.0.0.0:9464
# Runs never share the daemon's uid; an empty value would (lessee warns).
ENV LESSEE_WORKER_RUN_USER=lessee-run
EXPOSE 9464
WORKDIR /var/lib/lessee
# Root, for the capabilities above; the runs are lessee-run.  Give it only
# those five (--cap-drop ALL --cap-add ...), as docs/kubernetes.yaml does.
USER 0:0
# SIGTERM drains: no new claims, the runs in flight finish and are reported
# (worker.drain_timeout bounds it).  Give `docker stop` a timeout above
# drain_timeout, or it SIGKILLs the runs after 10 s.
STOPSIGNAL SIGTERM
# The daemon's own client asks its /healthz (found from the same configuration
# and environment): no curl in the image.  Answered by the event loop itself,
# so it fails when the loop is wedged; an API outage does not make it fail.
HEALTHCHECK --interval=30s --timeout=10s --start-period=15s --retries=3 \
    CMD ["/usr/local/sbin/lessee", "status", "--healthz"]
ENTRYPOINT ["/usr/local/sbin/lessee"]
