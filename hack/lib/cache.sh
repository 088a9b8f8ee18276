# shellcheck shell=bash
# Sourced by the scripts that build a pinned tool from the Go module proxy into the cache
# (hack/control-plane.sh, node.sh, kubevirt.sh, helm.sh, promtool.sh, registry.sh). The sourcing
# script defines `die`.

# The cache root, shared by every such script (CP_CACHE_DIR overrides it).
# shellcheck disable=SC2034 # the sourcing scripts read it
CACHE_ROOT="${CP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/workload-update-guard/control-plane}"

# The flags of every Go build here. -trimpath: no local paths in the binaries. No DWARF from the
# compiler (-gcflags=all=-dwarf=false): every link strips it anyway (-s -w), and without it the
# compiler does about a tenth less (Kubernetes v1.35.4's three binaries, measured: 433 CPU-s, 383
# without). The binaries are the same code.
# shellcheck disable=SC2034 # the sourcing scripts read it
GO_BUILD_FLAGS=(-trimpath -gcflags=all=-dwarf=false)

# need_go WHAT: go on PATH (Debian's, or /usr/local/go's: hack/setup.sh), or die naming WHAT.
need_go() {
  command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
  command -v go >/dev/null || die "go is required to $1 (hack/setup.sh installs it)"
}

# cached WHAT DIR CHECK...: 0, saying "reusing DIR", when CHECK... passes; else takes DIR's build
# lock (one build at a time: .ci/run builds in the background what hack/test.sh then asks for, and
# parallel test binaries ask at once), checks again (a build beside it may have finished
# meanwhile), and returns 1 holding the lock (fd 9, until the script exits): the caller builds.
cached() {
  local what="$1" dir="$2"
  shift 2
  if "$@"; then echo "$what: reusing $dir" >&2; return 0; fi
  mkdir -p "$dir"
  exec 9>"$dir/build.lock"
  flock 9
  if "$@"; then
    exec 9>&-
    echo "$what: reusing $dir (built meanwhile)" >&2
    return 0
  fi
  return 1
}

# kube_ldflags VERSION MINOR: the -ldflags that stamp a Kubernetes binary's version the way
# Kubernetes' own build does (hack/lib/version.sh): component-base for the binaries' --version and
# /version, client-go for kubectl's user agent.
kube_ldflags() {
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$2"
    ldflags+=" -X $pkg.gitTreeState=clean"
  done
  echo "$ldflags"
}
