#!/usr/bin/env python3
"""The real workload updater's timings and goals, from WORK/updater.txt (hack/bench/updater.sh):
the lines "updater vX: ..." that tests/integration/updater.rs prints.

usage: updater_report.py WORK
Exits non-zero when a goal is missed, for each version:
- the control (no guard) shows migrations: its line is there (the test itself fails unless every
  VM is migrated), the first within 60 s of the upgrade;
- after `post`, the first migration of the wave within 35 s: KubeVirt's own requeue is 30 s,
  and the restore's change of the CR enqueues a sync at once.
"""
import re
import sys

AFTER_POST_S = 35
CONTROL_S = 60

DURATION = r"([0-9.]+)(ns|µs|us|ms|s)"
UNIT = {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
CONTROL = re.compile(r"^updater (v\S+): without the guard, the first migration " + DURATION
                     + r" after the upgrade, (\d+) at first, all (\d+) after " + DURATION)
POST = re.compile(r"^updater (v\S+): after post, the first migration " + DURATION + r", all (\d+) after " + DURATION)


def seconds(value, unit):
    return float(value) * UNIT[unit]


control, post = {}, {}
for line in open(f"{sys.argv[1]}/updater.txt"):
    if m := CONTROL.match(line):
        v, f, fu, first_pass, n, a, au = m.groups()
        control[v] = (seconds(f, fu), int(first_pass), int(n), seconds(a, au))
    elif m := POST.match(line):
        v, f, fu, n, a, au = m.groups()
        post[v] = (seconds(f, fu), int(n), seconds(a, au))

versions = sorted(set(control) | set(post), key=lambda v: [int(x) for x in v[1:].split(".")])
print("\nthe real workload updater (KubeVirt's virt-controller; tests/integration/updater.rs: 8 running "
      "VMIs on 3 nodes, the upgrade = virt-controller restarted with a new launcher image and the CR's rollout)")
print(f"{'KubeVirt':<10}{'no guard: first s':>19}{'first pass':>12}{'all s':>8}"
      f"{'after post: first s':>21}{'all s':>8}")
targets = []
for v in versions:
    c, p = control.get(v), post.get(v)
    cs = f"{c[0]:>19.1f}{c[1]:>12}{c[3]:>8.1f}" if c else f"{'-':>19}{'-':>12}{'-':>8}"
    ps = f"{p[0]:>21.1f}{p[2]:>8.1f}" if p else f"{'-':>21}{'-':>8}"
    print(f"{v:<10}{cs}{ps}")
    targets.append((f"{v}: without the guard, the upgrade starts workload-update migrations (first <= {CONTROL_S} s)",
                    c is not None and c[1] > 0 and c[0] <= CONTROL_S,
                    f"first {c[0]:.1f} s, {c[1]} at first, all {c[2]} after {c[3]:.1f} s" if c else "no line"))
    targets.append((f"{v}: after post (the restore), the first migration of the wave <= {AFTER_POST_S} s",
                    p is not None and p[0] <= AFTER_POST_S,
                    f"{p[0]:.1f} s, all {p[1]} after {p[2]:.1f} s" if p else "no line"))
print("\nupdater targets:")
for name, passed, got in targets:
    print(f"  {'PASS' if passed else 'FAIL'}  {name}: {got}")
sys.exit(0 if targets and all(p for _, p, _ in targets) else 1)
