# syntax=docker/dockerfile:1
#
# fairgate: one static-ish Rust binary on a distroless runtime.
#
#   docker build -t fairgate:dev .
#   docker run --rm -p 8080:8080 -p 9090:9090 \
#     -v "$PWD/deploy/compose:/etc/fairgate:ro" \
#     -e FAIRGATE_JWT_SECRET -e REDIS_PASSWORD fairgate:dev
#
# The image expects its policy at /etc/fairgate/fairgate.yaml: mount a
# DIRECTORY there (a Kubernetes ConfigMap volume, a compose bind mount), not a
# single file, so that edits arrive by atomic swap and fairgate reloads them.
# The repository's config/ (the demo and the annotated example) is copied to
# /usr/share/fairgate/config for reference; `fairgate demo` needs no file.
#
# Health: the runtime image has no shell and no curl, so there is no
# HEALTHCHECK. Probe the admin listener over HTTP from outside instead
# (admin.listen must then be 0.0.0.0:9090, not loopback):
#   liveness   GET :9090/healthz   200 while the process answers
#   readiness  GET :9090/readyz    200 when serving; not 200 while starting
#                                  or draining, nor (on_unavailable: deny)
#                                  while Redis is down
# deploy/kubernetes/deployment.yaml and deploy/compose.yaml do exactly that.
#
# Shutdown: SIGTERM stops accepting, lets in-flight requests finish for up
# to server.shutdown_grace, releases slot leases and exits 0; give the
# orchestrator a longer grace period than that.

# ---- build -----------------------------------------------------------------
FROM rust:1-bookworm AS build

# Pingora builds zlib-ng with cmake. The version is whatever the Rust image's
# Debian release ships; it only runs at build time, so it is not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src/ src/
# Cargo.toml declares the `micro` bench: cargo refuses a manifest whose
# targets are missing, even for `--bin fairgate` (scripts/docker-context
# builds exactly this context in CI).
COPY benches/ benches/
# The one patched Pingora crate ([patch.crates-io] in Cargo.toml).
COPY vendor/ vendor/
COPY lua/ lua/
# config/demo.yaml is compiled into the binary (the `demo` command).
COPY config/ config/

# Cache mounts keep the registry and target/ between builds; the binary is
# copied out of the cached target/ so that it lands in the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin fairgate \
 && install -D -m 0755 target/release/fairgate /out/fairgate

# ---- runtime ---------------------------------------------------------------
# glibc, libgcc, CA certificates (upstream TLS, JWKS over https) and a
# non-root user (65532), nothing else: no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="fairgate" \
      org.opencontainers.image.description="A fair, multi-tenant rate-limiting reverse proxy on Pingora" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=build /out/fairgate /usr/local/bin/fairgate
COPY config/ /usr/share/fairgate/config/

# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /etc/fairgate

# 8080: the gateway (server.listen); 8443: the gateway over TLS
# (server.tls.listen); 9090: admin /healthz /readyz /metrics.
EXPOSE 8080 8443 9090
STOPSIGNAL SIGTERM

ENTRYPOINT ["fairgate"]
CMD ["serve", "-c", "/etc/fairgate/fairgate.yaml"]
