#!/usr/bin/env python3
"""Creates VirtualMachineInstanceMigrations (or VirtualMachineInstances) on the bench's API server,
fast: POSTs from a few threads on kept-alive TLS connections, not a process and a TLS handshake
per object (10,000 took about 30 s on the bench's 2 shared cores).

usage: create_migrations.py DIR NAMESPACE FROM TO UNDER_WAY
       create_migrations.py --vmis DIR NAMESPACE COUNT OUTDATED
  DIR        the control plane's state dir (api.port, ca.crt, admin.crt, admin.key)
  FROM, TO   objects vmim-FROM .. vmim-(TO-1): a user's migrations, 2 KiB each as stored
  UNDER_WAY  and this many workload-update ones (KubeVirt's annotation and name prefix), phase
             Running (0: none)
  --vmis     COUNT VMIs vm-0000 .. (the migrations' vmiName), about 10 KiB each as stored, as
             virt-handler leaves a running one: phase Running on node-0..2, the LiveMigratable
             condition (False for every tenth, DisksNotLiveMigratable); the first OUTDATED carry
             KubeVirt's label kubevirt.io/outdatedLauncherImage

The padding is an annotation: KubeVirt's own CRDs (hack/control-plane.sh) have structural schemas,
and the API server prunes an unknown field of the spec (a `spec.padding` was stored as nothing:
the migrations were 0.6 KiB). Only the standard library: the bench needs nothing installed for it.
"""
import datetime
import http.client
import json
import os
import ssl
import sys
import threading

THREADS = 8
# The body is about 1.6 KiB with the padding; the server adds the uid, timestamps and
# managedFields: roughly 2 KiB as stored, the size of the measurement (an estimate).
PADDING = 1450
# A VMI as virt-handler leaves it is 10 to 20 KiB (its spec, status, managedFields): the low end.
VMI_PADDING = 8500
PADDED = "bench.workload-update-guard/padding"

VMIS = sys.argv[1] == "--vmis"
args = sys.argv[2:] if VMIS else sys.argv[1:]
directory, namespace, *numbers = args[0], args[1], *map(int, args[2:])
port = open(os.path.join(directory, "api.port")).read().strip()
context = ssl.create_default_context(cafile=os.path.join(directory, "ca.crt"))
context.load_cert_chain(os.path.join(directory, "admin.crt"), os.path.join(directory, "admin.key"))
plural = "virtualmachineinstances" if VMIS else "virtualmachineinstancemigrations"
base = f"/apis/kubevirt.io/v1/namespaces/{namespace}/{plural}"


def request(conn, method, path, body, content_type="application/json"):
    conn.request(method, path, body=json.dumps(body), headers={"Content-Type": content_type})
    response = conn.getresponse()
    data = response.read()
    if response.status not in (200, 201, 409):
        raise SystemExit(f"{method} {path}: HTTP {response.status}: {data[:300]!r}")


def migration(name, vmi, annotated):
    meta = {"name": name, "labels": {"kubevirt.io/vmi-name": vmi},
            "annotations": {PADDED: "x" * PADDING}}
    if annotated:
        meta["annotations"]["kubevirt.io/workloadUpdateMigration"] = ""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": meta, "spec": {"vmiName": vmi}}


NOW = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def vmi(i, outdated):
    """A running VMI (the CRD has no status subresource: the status goes with the POST)."""
    name = f"vm-{i:04d}"
    labels = {"kubevirt.io/nodeName": f"node-{i % 3}"}
    if outdated:
        labels["kubevirt.io/outdatedLauncherImage"] = ""
    migratable = {"type": "LiveMigratable", "status": "True"}
    if i % 10 == 9:
        migratable = {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
                      "message": "cannot migrate VMI: PVC rootdisk is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "labels": labels, "annotations": {PADDED: "x" * VMI_PADDING}},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}},
            "status": {"phase": "Running", "nodeName": f"node-{i % 3}",
                       "conditions": [{"type": "Ready", "status": "True"}, migratable],
                       "phaseTransitionTimestamps": [{"phase": "Running", "phaseTransitionTimestamp": NOW}]}}


def work(items, failures):
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", int(port), context=context)
        for item in items:
            if VMIS:
                request(conn, "POST", base, vmi(*item))
                continue
            name, vmi_name, annotated = item
            request(conn, "POST", base, migration(name, vmi_name, annotated))
            if annotated:
                request(conn, "PATCH", f"{base}/{name}/status", {"status": {"phase": "Running"}},
                        "application/merge-patch+json")
        conn.close()
    except BaseException as e:  # reported by the main thread: a thread's exit says nothing
        failures.append(e)


if VMIS:
    count, outdated = numbers
    items = [(i, i < outdated) for i in range(count)]
else:
    first, end, under_way = numbers
    items = [(f"vmim-{i:06d}", f"vm-{i % 2000:04d}", False) for i in range(first, end)]
    items += [(f"kubevirt-workload-update-bench{i}", f"vm-{i:04d}", True) for i in range(under_way)]
failures = []
threads = [threading.Thread(target=work, args=(items[t::THREADS], failures)) for t in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failures:
    raise SystemExit(f"create_migrations: {failures[0]}")
