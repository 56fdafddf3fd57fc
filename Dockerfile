# AHP Gateway container image.
#
#   docker build -t ahp-gateway .
#   docker run --rm -p 8080:8080 -p 9464:9464 ahp-gateway
#
# BASE_IMAGE is used by every stage. It must be a glibc (Debian based) CPython 3.11 image with pip:
# the CEL engine only ships manylinux_2_28 wheels, so musl (Alpine) bases do not work. Pin it by
# digest in release builds (--build-arg BASE_IMAGE=python:3.11.14-slim-bookworm@sha256:...).
ARG BASE_IMAGE=python:3.11.14-slim-bookworm

# ---------------------------------------------------------------------------------------------
# Stage 1: wheels for the project and every runtime dependency, plus the container default
# configuration. Nothing from this stage reaches the final image except what is copied below.
FROM ${BASE_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
COPY . .

# The container default configuration is the bundled default with both listeners on all
# interfaces (a loopback listener is unreachable from outside a container). Off loopback an
# unauthenticated listener must be explicit (`inbound.allowUnauthenticated`, logged as
# UNAUTHENTICATED at start): this default is for trying the image; production mounts a
# configuration with `inbound.auth` (the Helm chart defaults to bearer tokens from a Secret). The
# policy library sits next to it, where the default's relative `policies/` path points.
# The policy backend's hot path is compiled by mypyc (setup.py; the facts of a new command 2-2.5x
# faster, docs/design/performance.md "The compiled build"): a C compiler, and Python's headers where
# the base lacks them, in this stage only. --build-arg AHP_GATEWAY_MYPYC=0 builds it interpreted.
ARG AHP_GATEWAY_MYPYC=1
# hadolint ignore=DL3008,SC2086
RUN if [ "$AHP_GATEWAY_MYPYC" = 1 ]; then \
      headers="$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"; \
      extra=""; [ -f "$headers/Python.h" ] || extra="python3-dev"; \
      apt-get update -qq \
      && apt-get install -y -qq --no-install-recommends gcc libc6-dev $extra >/dev/null \
      && rm -rf /var/lib/apt/lists/*; \
    fi

RUN AHP_GATEWAY_MYPYC="$AHP_GATEWAY_MYPYC" python -m pip wheel --no-cache-dir --wheel-dir /wheels . \
 && mkdir -p /rootfs/etc/ahp-gateway \
 && cp -R policies /rootfs/etc/ahp-gateway/policies \
 && { echo "# Container default: the bundled default configuration, listening on all interfaces."; \
      sed -e '/^#/d' -e 's/host: 127\.0\.0\.1/host: 0.0.0.0/g' gateway/data/gateway.default.yaml; \
      echo "inbound: {allowUnauthenticated: true}   # trying the image only: mount a config with inbound.auth"; \
    } > /rootfs/etc/ahp-gateway/gateway.yaml \
 && chmod -R a+rX,go-w /rootfs

# ---------------------------------------------------------------------------------------------
# Stage 2: runtime. Installs only the wheels built above; no compiler, no wheel files, no pip
# cache. Runs as an unprivileged user and writes nothing outside /tmp, so it works with a
# read-only root filesystem.
FROM ${BASE_IMAGE} AS runtime

LABEL org.opencontainers.image.title="AHP Gateway" \
      org.opencontainers.image.description="Policy-as-code reverse proxy for the Agent Hooks Protocol (AHP)" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Wheels are bind-mounted from the build stage, so they never land in an image layer.
# Byte code is compiled here, at install time: at run time the file system is read-only.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --root-user-action=ignore --no-index --find-links=/wheels /wheels/*.whl \
 && groupadd --gid 65532 ahp \
 && useradd --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin ahp

COPY --from=build /rootfs/ /

# Fail the build when the container default configuration is not valid or not reachable.
RUN ahp-gateway check --config /etc/ahp-gateway/gateway.yaml > /dev/null \
 && python -c "import sys, yaml; c = yaml.safe_load(open('/etc/ahp-gateway/gateway.yaml')); \
sys.exit(0 if c['listen']['host'] == c['admin']['host'] == '0.0.0.0' else 'listeners must bind 0.0.0.0')"

USER 65532:65532
WORKDIR /tmp

# 8080: AHP (harness traffic); 9464: admin (/healthz, /readyz, /metrics).
EXPOSE 8080 9464

HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=2)"]

ENTRYPOINT ["ahp-gateway"]
CMD ["serve", "--config", "/etc/ahp-gateway/gateway.yaml"]
