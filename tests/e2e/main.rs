//! End-to-end tests: the shipped manifests, applied with `kubectl apply -k`, run the guard's
//! image as Jobs on a real single-node cluster (`hack/node.sh`: kubelet on containerd + runc,
//! bridge CNI, kube-proxy, the Job controller and the scheduler), the way an operator runs them.
//!
//! If the node cannot be built or started, every test FAILS with the script's message, at once.
//! Nothing is skipped. The tests share the node and the fixed names of `manifests/`
//! (harvester-system, fleet-local), so they take turns (`node::turn`).

mod armed;
mod byhand;
mod chart;
mod hold;
mod inplace;
mod jobs;
mod node;
mod policy;
#[path = "../support/mod.rs"]
mod support;
mod timing;
mod upgrade;
