#!/usr/bin/env python3
"""What the guard saves in a whole upgrade, from the lines "whole upgrade VERSION CASE: ..." that
tests/integration/updater/whole_upgrade.rs prints (hack/bench/upgrade.sh collects them).

usage: upgrade_report.py UPGRADE_TXT
Prints a markdown table per version and VM count, and exits non-zero when a target is missed:
- guarded: 0 workload-update migrations during the upgrade, and at the restore no more than
  the running VMIs the drains did not move (here 0: every running VMI is migratable);
- the saving (the control's workload-update migrations, which the guard prevents) equals the
  running (migratable) VMIs: one migration per VM per upgrade;
- the guard's record of each upgrade (guarded, and the control, where it only records) equals
  the test's own count of the objects: workload-update (during, and after the restore),
  evacuation, the VMs shut down (1), and saved (guarded: the control's wave; control: 0).
"""
import re
import sys

LINE = re.compile(
    r"^whole upgrade (v\S+) (\S+): vms (\d+) running (\d+) workload_update (\d+) evacuation (\d+) "
    r"restore (\d+) drains (\S+) nodes_phase ([0-9.]+) outdated (\S+)"
    r"(?: record workload_update (\d+) evacuation (\d+) after_restore (\d+) shut_down (\d+) saved (\d+))?$")

runs = {}
for line in open(sys.argv[1]):
    m = LINE.match(line.strip())
    if not m:
        continue
    version, case, vms, running, wu, evac, restore, drains, phase, outdated = m.groups()[:10]
    record = m.groups()[10:]
    runs[(version, int(vms), case)] = {
        "running": int(running), "wu": int(wu), "evac": int(evac), "restore": int(restore),
        "drains": [float(d) for d in drains.split(",")], "phase": float(phase),
        "outdated": outdated,
        "record": None if record[0] is None else dict(zip(
            ("wu", "evac", "after", "shut_down", "saved"), map(int, record))),
    }

if not runs:
    print("no figures: the whole-upgrade tests printed no line")
    sys.exit(1)

missed = []
for version, vms in sorted({(v, n) for v, n, _ in runs}):
    print(f"## KubeVirt {version}, {vms} VMIs on 3 nodes (1 cannot live-migrate: shut down at its pre-drain)")
    print()
    print("| case | workload-update | evacuation | migrations per running VM | at the restore | "
          "drain of each node (s) | node phase (s) | outdated after each node |")
    print("|---|---:|---:|---:|---:|---|---:|---|")
    for case in ("guarded", "control", "wave-and-drains"):
        r = runs.get((version, vms, case))
        if r is None:
            missed.append(f"{version} {vms}: no {case} run")
            continue
        per_vm = (r["wu"] + r["evac"] + r["restore"]) / r["running"]
        drains = ", ".join(f"{d:.1f}" for d in r["drains"])
        print(f"| {case} | {r['wu']} | {r['evac']} | {per_vm:.2f} | {r['restore']} | {drains} | "
              f"{r['phase']:.1f} | {r['outdated']} |")
    print()
    guarded, control = runs.get((version, vms, "guarded")), runs.get((version, vms, "control"))
    wave = runs.get((version, vms, "wave-and-drains"))
    if guarded:
        ok = guarded["wu"] == 0 and guarded["restore"] == 0
        print(f"- target: guarded, 0 workload-update migrations during the upgrade and 0 at the restore: "
              f"{'met' if ok else 'MISSED'}")
        if not ok:
            missed.append(f"{version} {vms}: guarded {guarded['wu']} during, {guarded['restore']} at the restore")
    if guarded and control:
        saving = control["wu"]
        ok = saving == control["running"]
        print(f"- target: the saving equals the running VMIs: {saving} migrations saved for "
              f"{control['running']} running VMIs: {'met' if ok else 'MISSED'}")
        if not ok:
            missed.append(f"{version} {vms}: saving {saving} != {control['running']}")
    for case, run in (("guarded", guarded), ("control", control)):
        rec = run and run["record"]
        if not run:
            continue
        if not rec:
            missed.append(f"{version} {vms}: no record of the {case} run")
            continue
        saved = control["wu"] if case == "guarded" and control else 0
        count = {"wu": run["wu"], "evac": run["evac"], "after": run["restore"], "shut_down": 1,
                 "saved": saved}
        ok = rec == count
        print(f"- target: the guard's record of the {case} upgrade equals the count: record "
              f"{rec['wu']} workload-update + {rec['after']} after the restore, {rec['evac']} evacuation, "
              f"{rec['shut_down']} shut down, {rec['saved']} saved; counted {count['wu']} + "
              f"{count['after']}, {count['evac']}, {count['shut_down']}, {count['saved']}: "
              f"{'met' if ok else 'MISSED'}")
        if not ok:
            missed.append(f"{version} {vms}: the {case} record {rec} != the count {count}")
    if guarded and wave:
        print(f"- the first node's drain: guarded {guarded['drains'][0]:.1f} s, with the wave beside it "
              f"{wave['drains'][0]:.1f} s (measured, not gated)")
    print()

if missed:
    print("MISSED: " + "; ".join(missed))
    sys.exit(1)
print("every target met")
