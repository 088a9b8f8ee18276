# syntax=docker/dockerfile:1
# Build: docker build -t workload-update-guard:0.1.0 .
# Multi-stage: dependencies are compiled in their own layer, cached until Cargo.toml/Cargo.lock change.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src
COPY src ./src
# Make sure cargo sees the real sources as newer than the dependency-layer stubs.
RUN touch src/main.rs src/lib.rs \
 && cargo build --release --locked

# distroless/cc: glibc and CA roots, no shell, no package manager; runs as UID 65532.
# checkov:skip=CKV_DOCKER_2: a run-to-completion Job has no health to check; its exit code is the verdict
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/workload-update-guard /usr/local/bin/workload-update-guard
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/workload-update-guard"]
