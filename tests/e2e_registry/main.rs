//! The registry's end-to-end tests (the image through a mirror; the chart through a registry
//! that needs a login; the release's image copied by digest into one), on a node of its own: it
//! removes images from the node's store and stops the registry under it, and in a full run the
//! shared node of `tests/e2e` was left without its imported images for every later test (the
//! pause image included), so this binary starts its own node (`hack/node.sh`, the same script)
//! and takes it down when it ends. Like `tests/e2e`, it FAILS if the node cannot be built or
//! started.

mod airgap;
mod copy;
mod login;
#[allow(dead_code)]
#[path = "../e2e/node.rs"]
mod node;
mod pinned;
mod registry;
mod release;
mod signed;
#[path = "../support/mod.rs"]
mod support;
