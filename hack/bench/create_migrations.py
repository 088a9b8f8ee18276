#!/usr/bin/env python3
"""Creates VirtualMachineInstanceMigrations on the bench's API server, fast: POSTs from a few
threads on kept-alive TLS connections, not a process and a TLS handshake per object (10,000 took
about 30 s on the bench's 2 shared cores).

usage: create_migrations.py DIR NAMESPACE FROM TO UNDER_WAY
  DIR        the control plane's state dir (api.port, ca.crt, admin.crt, admin.key)
  FROM, TO   objects vmim-FROM .. vmim-(TO-1): a user's migrations, 2 KiB each as stored
  UNDER_WAY  and this many workload-update ones (KubeVirt's annotation and name prefix), phase
             Running (0: none)

The padding is an annotation: KubeVirt's own CRDs (hack/control-plane.sh) have structural schemas,
and the API server prunes an unknown field of the spec (a `spec.padding` was stored as nothing:
the migrations were 0.6 KiB). Only the standard library: the bench needs nothing installed for it.
"""
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
PADDED = "bench.workload-update-guard/padding"

directory, namespace, first, end, under_way = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
port = open(os.path.join(directory, "api.port")).read().strip()
context = ssl.create_default_context(cafile=os.path.join(directory, "ca.crt"))
context.load_cert_chain(os.path.join(directory, "admin.crt"), os.path.join(directory, "admin.key"))
base = f"/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstancemigrations"


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


def work(items, failures):
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", int(port), context=context)
        for name, vmi, annotated in items:
            request(conn, "POST", base, migration(name, vmi, annotated))
            if annotated:
                request(conn, "PATCH", f"{base}/{name}/status", {"status": {"phase": "Running"}},
                        "application/merge-patch+json")
        conn.close()
    except BaseException as e:  # reported by the main thread: a thread's exit says nothing
        failures.append(e)


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
