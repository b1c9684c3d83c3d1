# syntax=docker/dockerfile:1
# Multi-stage build of the `klaxon` binary (and `klaxon-bench`, the benchmark harness `klaxon bench` runs) into a
# small image: distroless (glibc + libgcc + CA certificates, no
# shell, no package manager, no curl), the binary without debug info (`[profile.release]`, see Cargo.toml), and
# a healthcheck through `klaxon probe` instead of curl. The runtime runs as uid/gid 10001 (the Kubernetes
# manifests in deploy/kubernetes pin the same ids) and listens on 0.0.0.0:9464 for /metrics, /healthz, /readyz.
# Images are pinned by version; bump them deliberately.
FROM rust:1.95.0-bookworm AS build
WORKDIR /src
# Only what the build needs (no target/, no .git): keeps the context small and the layer cache stable.
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY crates crates
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin klaxon --bin klaxon-bench \
    && cp target/release/klaxon target/release/klaxon-bench /usr/local/bin/ \
    # The profile already leaves out debug info; drop the symbol table too (backtraces keep file:line only with
    # `cargo build --profile profiling`, which is for perf on a workstation, not for the image).
    && strip --strip-all /usr/local/bin/klaxon /usr/local/bin/klaxon-bench

# cc-debian12: glibc and libgcc_s, which a Rust binary links against; TLS is rustls (no OpenSSL needed), and the
# image's CA certificates serve Slack, Telegram, SMTP and webhooks.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /usr/local/bin/klaxon /usr/local/bin/klaxon
# `klaxon bench …` runs the klaxon-bench next to klaxon
COPY --from=build /usr/local/bin/klaxon-bench /usr/local/bin/klaxon-bench
# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
# Inside a container the operations endpoint must be reachable from outside (the binary defaults to loopback);
# `klaxon probe` asks it on loopback.
ENV KLAXON_HTTP_ADDR=0.0.0.0:9464
EXPOSE 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["klaxon", "probe"]
# Klaxon finishes or hands back its in-flight work and exits 0 within 10 s of SIGTERM.
STOPSIGNAL SIGTERM
ENTRYPOINT ["klaxon"]
CMD ["run"]
