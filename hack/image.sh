#!/usr/bin/env bash
# The guard's image from this repository's Dockerfile, with no container registry: buildah
# (Debian's package) builds the Dockerfile's `prebuilt` binary on its `debian-base`, a base
# assembled from this Debian 12 host's packages. By default only that one runtime image; with
# --test-images also what the node and the e2e tests need: a pause image from a tiny static C
# program, the guard with test-only failpoints, and the pinned static kubectl. Every image is
# written as a docker-archive that `ctr images import` takes, and `push` sends the runtime image
# to a registry. With --previous: the previous release (hack/previous-release), for the tests
# that upgrade the guard in place.
#
# What the build needs from the network: only crates.io (cargo fetches the locked crates, once,
# into ~/.cargo; none with a warm cache or `cargo vendor`). No container registry: no base image
# is pulled (the base is this host's glibc, libgcc and CA bundle), and the kubectl image's binary
# is hack/control-plane.sh's (built from the Go module proxy). `push` needs only the registry.
set -euo pipefail

usage() {
  cat >&2 <<USAGE
usage: hack/image.sh COMMAND

  build          build the guard's runtime image into target/image/ (one release build)
  build --test-images
                 also the images the e2e tests' node needs: the guard with failpoints, the
                 pause image and the pinned kubectl (what hack/test.sh builds)
  build guard    what the demo's node runs: the guard's image and the pause image
  build --previous
                 the previous release (the commit in hack/previous-release, taken with git
                 archive): its binary (a debug build sharing target/'s dependencies), its image
                 ($(previous_image 2>/dev/null || echo "its version's tag")), and its manifests
                 and chart in target/previous/ (src/, chart/); what the upgrade-in-place tests
                 install first (hack/test.sh builds it)
  push REF [--creds USER:PASSWORD] [--authfile FILE] [--cert-dir DIR] [--tls-verify=false]
       [--previous]
                 push the built runtime image to REF (REGISTRY/REPO[:TAG]; the tag defaults to
                 the version, $VERSION) with buildah, and print REF@sha256:DIGEST on stdout: the
                 reference to give hack/job.sh --image (tag or digest). Credentials: --creds, or
                 \$IMAGE_PUSH_CREDS, or an auth file (--authfile, \$REGISTRY_AUTH_FILE, or
                 podman/buildah's default). A registry with a private CA: --cert-dir DIR with
                 the CA as DIR/ca.crt (as /etc/containers/certs.d/HOST:PORT/). --previous:
                 the previous release's image (build --previous), its version the default tag
                 (the tests' guard upgraded from a digest-pinned install)
  version        print the version (Cargo.toml's: the tag)
  import SOCKET  import the images built into containerd's k8s.io namespace at SOCKET (the
                 guard's and the pause image must be there; the test images if built)
  list           print the image names, one a line (the previous release's last)
  previous-image print the previous release's image name
USAGE
}

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$REPO_ROOT/target/image"
VERSION="$(bash "$REPO_ROOT/hack/version.sh")"
# Fully qualified: the kubelet asks for `workload-update-guard:VERSION`, which CRI normalises so.
GUARD="docker.io/library/workload-update-guard:$VERSION"
GUARD_FAILPOINTS="docker.io/library/workload-update-guard:$VERSION-failpoints"
PAUSE="registry.k8s.io/pause:wug"
KUBECTL="docker.io/library/wug-kubectl:${KUBE_VERSION:-$(bash "$REPO_ROOT/hack/control-plane.sh" default-version)}"
log() { echo "image: $*" >&2; }
die() { echo "image: ERROR: $*" >&2; exit 1; }

# The previous release: hack/previous-release's commit, and its image, tagged with that commit's
# version; while that is still this tree's version (before a release's bump), with the suffix
# -previous, so that the two images never share a tag in the node's containerd.
PREVIOUS_DIR="$REPO_ROOT/target/previous"
previous_commit() {
  local c
  c="$(grep -v '^#' "$REPO_ROOT/hack/previous-release" | grep -E '^[0-9a-f]{40}$' || true)"
  [[ "$(wc -l <<<"$c")" == 1 && -n "$c" ]] || die "hack/previous-release: expected one commit hash (40 hex digits)"
  git -C "$REPO_ROOT" cat-file -e "$c^{commit}" 2>/dev/null \
    || die "the previous release's commit $c is not in this clone (a shallow clone? git fetch --unshallow)"
  echo "$c"
}
previous_image() {
  local commit version
  commit="$(previous_commit)" || exit 1
  version="$(git -C "$REPO_ROOT" show "$commit:Cargo.toml" | sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' | head -1)"
  [[ -n "$version" ]] || die "no version in $commit's Cargo.toml"
  [[ "$version" != "$VERSION" ]] || version="$version-previous"
  echo "docker.io/library/workload-update-guard:$version"
}

buildah_() { # buildah with its own storage under target/image, nothing in /var/lib/containers
  buildah --root "$OUT/storage" --runroot "$OUT/run" --storage-driver vfs "$@"
}

base() { # target/image/base: what distroless/cc-debian12 holds that the binary needs
  local b="$OUT/base" lib
  rm -rf "$b"
  mkdir -p "$b/etc/ssl/certs" "$b/lib64" "$b/lib/x86_64-linux-gnu" "$b/tmp"
  # The binary's shared libraries, from Debian's libc6 and libgcc-s1 (glibc's NSS `files` and
  # `dns` are built into libc.so.6 since 2.34).
  for lib in $(ldd "$OUT/bin/usr/local/bin/workload-update-guard" | awk '$3 ~ /^\// {print $3}'); do
    cp -L "$lib" "$b/lib/x86_64-linux-gnu/"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$b/lib64/"
  cp -L /etc/ssl/certs/ca-certificates.crt "$b/etc/ssl/certs/" # Debian's ca-certificates
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$b/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$b/etc/group"
  printf 'hosts: files dns\n' > "$b/etc/nsswitch.conf"
  chmod 1777 "$b/tmp"
}

archive() { # archive IMAGE FILE
  rm -f "$2"
  buildah_ push --quiet "$1" "docker-archive:$2:$1" >/dev/null
}

guard() { # guard NAME: the Dockerfile with the release binary built here
  local name="$1" start=$SECONDS
  (cd "$REPO_ROOT" && cargo build --release --locked) || die "cargo build failed"
  if grep -q after-write-managedchart "$REPO_ROOT/target/release/workload-update-guard"; then
    die "the shipped binary has failpoints compiled in"
  fi
  image_of "$name" "$REPO_ROOT/target/release/workload-update-guard" "$REPO_ROOT/Dockerfile"
  log "$name: $(du -k "$OUT/$(file_of "$name")" | cut -f1) KiB archive in $((SECONDS - start)) s"
}

# The test image, the guard with failpoints: a debug build on the dependencies `cargo test` built
# (`--examples`, of which there are none, gives them its features: see `previous`), stripped,
# not a second release build, whose fat LTO link alone costs about 80 CPU-s more. The e2e tests
# that run it check the pod's hardening and the answer to SIGTERM, not the release profile.
# cargo links it to target/debug/workload-update-guard too, and any `cargo test` links the tests'
# one back there, at once if one runs beside (.ci/run's background build did, between this build
# and its copy: a bare CI run's image had no failpoints). So the copy is of the build's own file
# in deps/, whose name carries the hash of its features: the newest with the failpoints compiled
# in that is no test harness.
guard_failpoints() {
  local name="$GUARD_FAILPOINTS" start=$SECONDS bin="$OUT/failpoints/workload-update-guard" built=""
  (cd "$REPO_ROOT" && cargo build --locked --bin workload-update-guard --examples --features failpoints) \
    || die "cargo build --features failpoints failed"
  local f
  while IFS= read -r f; do
    [[ "$f" != *.d && -x "$f" ]] || continue
    if grep -q pause-after-write "$f" && ! grep -q -- --test-threads "$f"; then built="$f"; break; fi
  done < <(ls -t "$REPO_ROOT"/target/debug/deps/workload_update_guard-*)
  [[ -n "$built" ]] || die "the failpoints build left no binary in target/debug/deps"
  mkdir -p "$(dirname "$bin")"
  cp "$built" "$bin"
  strip "$bin"
  grep -q pause-after-write "$bin" || die "the test binary has no failpoints compiled in"
  image_of "$name" "$bin" "$REPO_ROOT/Dockerfile"
  log "$name: $(du -k "$OUT/$(file_of "$name")" | cut -f1) KiB archive in $((SECONDS - start)) s"
}

# fresh NAME INPUTS...: whether NAME's archive was built from exactly these files (their sha256,
# and the name, in NAME's stamp), so that a build asked for twice (.ci/run's background, then
# hack/test.sh) is made once. `stamp` writes the stamp once the archive is made.
inputs_of() { echo "$1"; sha256sum "${@:2}" | cut -d' ' -f1; }
fresh() {
  local archive
  archive="$OUT/$(file_of "$1")"
  [[ -f "$archive" && -f "$archive.inputs" ]] && [[ "$(inputs_of "$@")" == "$(cat "$archive.inputs")" ]]
}
stamp() { inputs_of "$@" > "$OUT/$(file_of "$1").inputs"; }

image_of() { # image_of NAME BINARY DOCKERFILE: the Dockerfile's prebuilt binary on debian-base
  if fresh "$1" "$2" "$3"; then
    log "$1: the archive is of this binary and Dockerfile already"
    return 0
  fi
  rm -f "$OUT/$(file_of "$1").inputs"
  rm -rf "${OUT:?}/bin"
  install -D "$2" "$OUT/bin/usr/local/bin/workload-update-guard"
  base
  buildah_ bud --quiet --layers=false --build-arg BINARY=prebuilt --build-arg BASE=debian-base \
    -f "$3" -t "$1" "$REPO_ROOT" >/dev/null || die "buildah bud failed"
  archive "$1" "$OUT/$(file_of "$1")"
  stamp "$1" "$2" "$3"
}

# The previous release from its commit's source: a debug build, not the release profile's fat LTO
# (minutes on 2 cores for one link), into this tree's target/ so that the dependencies built for
# `cargo test` (same profile, same features: `--examples`, of which there are none, turns on the
# dev-dependencies' features as `cargo test` does) are reused and only the crate is compiled.
# Stripped: the image holds the same code as the release's, without its debug information.
previous() {
  local commit name src="$PREVIOUS_DIR/src" start=$SECONDS bin
  commit="$(previous_commit)" || exit 1
  name="$(previous_image)" || exit 1
  if [[ "$(cat "$PREVIOUS_DIR/commit" 2>/dev/null)" == "$commit" && -f "$PREVIOUS_DIR/image" \
        && -f "$OUT/$(file_of "$name")" ]]; then
    log "$name (the previous release, ${commit:0:7}): built already"
    return 0
  fi
  rm -rf "$PREVIOUS_DIR"
  mkdir -p "$src"
  git -C "$REPO_ROOT" archive "$commit" Cargo.toml Cargo.lock build.rs Dockerfile src manifests \
    | tar -x -C "$src" || die "git archive $commit failed"
  cp -a "$src/manifests/chart" "$PREVIOUS_DIR/chart"
  # Until a release's version bump, both trees are the same package (name, version, and a path
  # cargo hashes relative to each tree's root): the profile override of the crate alone (no
  # debug information: it is stripped anyway) gives the previous one its own artifacts, so that
  # neither build takes the other's for fresh. The binary's name is this tree's too: it is
  # copied out at once, and cargo's next build of this tree links this tree's back.
  # The dependencies with this tree's debug level (its Cargo.toml's [profile.dev]), whatever the
  # previous release's Cargo.toml says: else cargo builds them all again.
  local dev_debug
  dev_debug="$(awk '/^\[/ { dev = ($0 == "[profile.dev]") } dev && $1 == "debug" { print $3 }' "$REPO_ROOT/Cargo.toml")"
  (cd "$src" && WORKLOAD_UPDATE_GUARD_COMMIT="${commit:0:7}" CARGO_TARGET_DIR="$REPO_ROOT/target" \
    cargo build --locked --bin workload-update-guard --examples --config "profile.dev.debug=${dev_debug:-true}" \
      --config 'profile.dev.package.workload-update-guard.debug=0') || die "cargo build of $commit failed"
  bin="$PREVIOUS_DIR/workload-update-guard"
  cp "$REPO_ROOT/target/debug/workload-update-guard" "$bin"
  strip "$bin"
  "$bin" --version | grep -q "${commit:0:7}" || die "the built binary is not $commit's: $("$bin" --version)"
  image_of "$name" "$bin" "$src/Dockerfile"
  echo "$name" > "$PREVIOUS_DIR/image"
  echo "$commit" > "$PREVIOUS_DIR/commit"
  log "$name (the previous release, ${commit:0:7}): $(du -k "$OUT/$(file_of "$name")" | cut -f1) KiB archive, chart in $PREVIOUS_DIR/chart, in $((SECONDS - start)) s"
}

scratch_image() { # scratch_image NAME FILE [ENTRYPOINT...]: one static binary on scratch
  local name="$1" file="$2" c
  fresh "$name" "$file" && return 0
  rm -f "$OUT/$(file_of "$name").inputs"
  c="$(buildah_ from scratch)"
  buildah_ copy --quiet "$c" "$file" "/$(basename "$file")" >/dev/null
  buildah_ config --entrypoint "$(jq -cn '$ARGS.positional' --args "/$(basename "$file")" "${@:3}")" \
    --user 65532:65532 "$c"
  buildah_ commit --quiet "$c" "$name" >/dev/null
  buildah_ rm "$c" >/dev/null
  archive "$name" "$OUT/$(file_of "$name")"
  stamp "$name" "$file"
}

file_of() { local n="${1##*/}"; echo "${n//:/_}.tar"; }

# One build or push at a time: they share buildah's storage and target/image's files (.ci/run
# builds the images in its background while hack/test.sh may ask for them); the second waits,
# then finds the archives fresh.
one_at_a_time() {
  mkdir -p "$OUT"
  exec 9>"$OUT/image.lock"
  flock 9 || die "cannot lock $OUT/image.lock"
}

build() { # build [--test-images | guard | --previous]
  local what="${1:-runtime}"
  case "$what" in
    runtime | guard | --test-images | --previous) ;;
    *) usage; exit 2 ;;
  esac
  one_at_a_time
  command -v buildah >/dev/null || die "buildah is required (apt-get install buildah)"
  command -v gcc >/dev/null || die "gcc is required for the pause image (apt-get install gcc libc6-dev)"
  mkdir -p "$OUT"
  if [[ "$what" == --previous ]]; then
    previous
    cleanup_storage
    return 0
  fi
  [[ "$what" != --test-images ]] || guard_failpoints
  guard "$GUARD"
  if [[ "$what" == runtime ]]; then
    cleanup_storage
    return 0
  fi
  # The pause image: sleeps until SIGTERM/SIGINT.
  cat > "$OUT/pause.c" <<'C'
#include <signal.h>
#include <unistd.h>
static void done(int s) { (void)s; _exit(0); }
int main(void) { signal(SIGTERM, done); signal(SIGINT, done); for (;;) pause(); }
C
  gcc -static -Os -s -o "$OUT/pause" "$OUT/pause.c" || die "gcc -static failed (is libc6-dev installed?)"
  scratch_image "$PAUSE" "$OUT/pause"
  # The pinned kubectl (a static Go binary) for the e2e "upgrade" Job.
  [[ "$what" != --test-images ]] || scratch_image "$KUBECTL" "$(bash "$REPO_ROOT/hack/control-plane.sh" bin-dir)/kubectl"
  cleanup_storage
}

cleanup_storage() { # only the archives are kept
  buildah_ rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$OUT/storage" "$OUT/run"
}

push() { # push REF [OPTIONS]: the runtime image's archive, through buildah, to REF
  local ref="${1:-}" opts=() creds="${IMAGE_PUSH_CREDS:-}" digest archive image="$GUARD" tag="$VERSION"
  [[ -n "$ref" && "$ref" != -* ]] || { usage; exit 2; }
  shift
  one_at_a_time
  while (( $# )); do
    case "$1" in
      --previous)
        image="$(previous_image)" || exit 1
        tag="${image##*:}" tag="${tag%-previous}"
        shift ;;
      --creds) creds="${2:?--creds needs USER:PASSWORD}"; shift 2 ;;
      --authfile | --cert-dir) opts+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
      --tls-verify=*) opts+=("$1"); shift ;;
      *) die "push: unknown option '$1'" ;;
    esac
  done
  # A tag unless REF has one (a ':' after the last '/') or a digest.
  [[ "${ref##*/}" == *:* || "$ref" == *@* ]] || ref="$ref:$tag"
  [[ "$ref" != *@* ]] || die "push: give REGISTRY/REPO[:TAG], not a digest: the digest is printed"
  archive="$OUT/$(file_of "$image")"
  [[ -f "$archive" ]] || die "no $archive: run hack/image.sh build$([[ "$image" == "$GUARD" ]] || echo ' --previous') first"
  command -v buildah >/dev/null || die "buildah is required (apt-get install buildah)"
  [[ -z "$creds" ]] || opts+=(--creds "$creds")
  mkdir -p "$OUT"
  buildah_ pull --quiet "docker-archive:$archive" >/dev/null || die "cannot load $archive"
  rm -f "$OUT/push.digest"
  if ! buildah_ push --quiet --digestfile "$OUT/push.digest" "${opts[@]}" "$image" "docker://$ref" >&2; then
    cleanup_storage
    die "pushing $image to $ref failed (see buildah's message above)"
  fi
  cleanup_storage
  digest="$(cat "$OUT/push.digest")"
  [[ "$digest" == sha256:* ]] || die "buildah wrote no digest for $ref"
  log "pushed $image to $ref ($digest)"
  echo "$ref@$digest"
}

# import SOCKET: every image built. The e2e tests' own images (failpoints, kubectl) are optional:
# the demo's node runs without them, so their absence is one informational line, none with
# IMAGE_IMPORT_QUIET=1 (the demo sets it).
import() {
  local sock="${1:?usage: import SOCKET}" name skipped=() previous=()
  [[ ! -f "$PREVIOUS_DIR/image" ]] || previous=("$(cat "$PREVIOUS_DIR/image")")
  for name in "$GUARD" "$PAUSE" "$GUARD_FAILPOINTS" "$KUBECTL" "${previous[@]}"; do
    if [[ ! -f "$OUT/$(file_of "$name")" ]]; then
      # The demo's node needs only the first two (hack/image.sh build guard).
      [[ "$name" == "$GUARD" || "$name" == "$PAUSE" ]] \
        && die "no $OUT/$(file_of "$name"): run hack/image.sh build guard (or build --test-images)"
      skipped+=("$name")
      continue
    fi
    ctr --address "$sock" -n k8s.io images import "$OUT/$(file_of "$name")" >/dev/null \
      || die "importing $name failed"
  done
  if (( ${#skipped[@]} )) && [[ "${IMAGE_IMPORT_QUIET:-}" != 1 ]]; then
    log "imported the guard's and the pause image; the e2e tests' images (${skipped[*]}) are not built, which only the e2e tests need (hack/image.sh build --test-images builds them)"
  fi
}

cmd="${1:-}"; shift || true
case "$cmd" in
  build) build "$@" ;;
  push) push "$@" ;;
  version) echo "$VERSION" ;;
  import) import "$@" ;;
  list)
    printf '%s\n' "$GUARD" "$GUARD_FAILPOINTS" "$PAUSE" "$KUBECTL"
    previous_image 2>/dev/null || true # none outside a git clone with the commit
    ;;
  previous-image) previous_image ;;
  -h|--help|help) usage ;;
  *) usage; exit 2 ;;
esac
