# syntax=docker/dockerfile:1
# Multi-stage build of the `klaxon` binary. The runtime image runs as uid/gid 10001 (the Kubernetes manifests in
# deploy/kubernetes pin the same ids) and listens on 0.0.0.0:9464 for /metrics, /healthz and /readyz.
FROM rust:1-bookworm AS build
WORKDIR /src
# Only what the build needs (no target/, no .git): keeps the context small and the layer cache stable.
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY crates crates
COPY lua lua
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin klaxon \
    && cp target/release/klaxon /usr/local/bin/klaxon

FROM debian:bookworm-slim
# curl is for docker-compose.yml's healthcheck; ca-certificates for TLS to Slack, Telegram, SMTP and webhooks.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 klaxon \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin klaxon
COPY --from=build /usr/local/bin/klaxon /usr/local/bin/klaxon
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
# Inside a container the operations endpoint must be reachable from outside (the binary defaults to loopback).
ENV KLAXON_HTTP_ADDR=0.0.0.0:9464
EXPOSE 9464
# Klaxon finishes or hands back its in-flight work and exits 0 within 10 s of SIGTERM.
STOPSIGNAL SIGTERM
ENTRYPOINT ["klaxon"]
CMD ["run"]
