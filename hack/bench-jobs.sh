#!/usr/bin/env bash
# The guard's Job against its floor, on the real node of hack/node.sh: the e2e test
# timing_guard_job_against_empty_job runs the status Job and an empty Job with the same pod spec
# (it only runs `--version`) in turns, five of each, and writes the breakdown of each step to
# target/e2e-figures.txt. This prints it and checks the target: the guard's Job within 1.3x of the
# empty one (medians of Job created -> Complete). Needs what the e2e tests need (hack/node.sh
# build, hack/image.sh build --test-images).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
figures=target/e2e-figures.txt
# Never the figures of an earlier run.
rm -f "$figures"
out="$(cargo test --test e2e timing::timing_guard_job_against_empty_job -- --exact --ignored 2>&1)" \
  || { echo "$out" | tail -40 >&2; echo "bench-jobs: the timing test failed" >&2; exit 1; }
grep -q '^test result: ok\. 1 passed' <<<"$out" \
  || { echo "$out" | tail -5 >&2; echo "bench-jobs: the timing test did not run" >&2; exit 1; }
[[ -f "$figures" ]] || { echo "bench-jobs: no $figures: the test wrote no figures" >&2; exit 1; }
sed -n '/^Job latency/,/^job-latency-ratio/p' "$figures"
ratio="$(sed -n 's/^job-latency-ratio \([0-9.]*\).*/\1/p' "$figures")"
[[ -n "$ratio" ]] || { echo "bench-jobs: no ratio in $figures" >&2; exit 1; }
if awk -v r="$ratio" 'BEGIN { exit !(r <= 1.3) }'; then
  echo "bench-jobs: ratio $ratio <= 1.3: ok"
else
  echo "bench-jobs: ratio $ratio > 1.3: target missed" >&2
  exit 1
fi
