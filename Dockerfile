# syntax=docker/dockerfile:1
# With registries:  docker build --build-arg GIT_COMMIT="$(git rev-parse --short HEAD)" -t workload-update-guard:VERSION .
# (the build stage has no .git: GIT_COMMIT is the commit `--version` prints; `unknown` without it)
# Without any (hack/image.sh, buildah): the binary built on the host and a base assembled from
# Debian's packages (glibc, libgcc, CA certificates, a passwd entry for 65532), both put in
# target/image/ by that script:
#   buildah bud --build-arg BINARY=prebuilt --build-arg BASE=debian-base -t workload-update-guard:VERSION .
# Either way the runtime is the same: a glibc binary on a Debian 12 base, no shell, UID 65532.
ARG BINARY=build
ARG BASE=gcr.io/distroless/cc-debian12:nonroot

# Multi-stage: dependencies are compiled in their own layer, cached until Cargo.toml/Cargo.lock change.
FROM rust:1.95-slim-bookworm AS build
ARG GIT_COMMIT=unknown
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
RUN mkdir src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && cargo build --release --locked \
 && rm -rf src
COPY src ./src
# Make sure cargo sees the real sources as newer than the dependency-layer stubs.
RUN touch src/main.rs src/lib.rs \
 && WORKLOAD_UPDATE_GUARD_COMMIT="$GIT_COMMIT" cargo build --release --locked \
 && install -D target/release/workload-update-guard /out/usr/local/bin/workload-update-guard

# The binary hack/image.sh built on the host (cargo build --release --locked; build.rs reads
# the commit from the host's git checkout).
FROM scratch AS prebuilt
COPY target/image/bin/ /out/

# What distroless/cc-debian12 holds that the binary needs, from this Debian 12 host's packages.
FROM scratch AS debian-base
COPY target/image/base/ /

# checkov:skip=CKV_DOCKER_7: BINARY names a stage of this file (build or prebuilt), not an image
FROM ${BINARY} AS binary

# distroless/cc: glibc and CA roots, no shell, no package manager; runs as UID 65532.
# checkov:skip=CKV_DOCKER_2: a run-to-completion Job has no health to check; its exit code is the verdict
FROM ${BASE}
COPY --from=binary /out/ /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/workload-update-guard"]
