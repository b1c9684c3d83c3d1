# Multi-stage build of the `klaxon` binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin klaxon

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 klaxon
COPY --from=build /src/target/release/klaxon /usr/local/bin/klaxon
USER klaxon
EXPOSE 9464
ENTRYPOINT ["klaxon"]
CMD ["run"]
