//! The phases, each in the file of its name: [`pre`] suspends before an upgrade, [`post`]
//! restores after it, [`status`] reports, [`watch`] (the resident guard) runs `pre` and `post`
//! itself when the upgrades call for them. docs/design.md, "Each phase's way", lists each one's
//! steps from `main` to its first write.

pub mod post;
pub mod pre;
pub mod status;
mod steps;
pub mod watch;

use std::io::Write as Output;

use crate::context::Run;
use crate::error::Error;
use crate::outcome::Done;
use crate::vocabulary::{Objects, Phase};

/// Runs the configured phase. `Some`: `status`'s verdict, for the termination message; `watch`
/// runs until SIGTERM.
pub async fn run(run: &mut Run<'_>, out: &mut impl Output) -> Result<Option<String>, Error> {
    match run.cfg.intent.phase {
        Phase::Pre => pre::pre(run, out).await.map(|()| None),
        Phase::Post => post::post(run, out).await.map(|()| None),
        Phase::Status => status::status(run, out).await.map(Some),
        Phase::Watch => watch::resident_guard(run.cfg, run.cluster, out)
            .await
            .map(|()| None),
    }
}

/// The phase's objects (the KubeVirt CR, the ManagedChart): a missing one is an error (exit 6),
/// or with `ALLOW_MISSING` a step that writes nothing.
async fn read_objects(run: &mut Run<'_>) -> Result<Objects, Error> {
    let mut objects = Objects::default();
    for target in run.cfg.intent.targets() {
        match run.cluster.get(&target).await? {
            Some(obj) => objects.set(target.kind, Some(obj)),
            None => {
                let missing = Done::missing(run.cfg.allow_missing, target, "nothing was written");
                run.push(missing?);
            }
        }
    }
    Ok(objects)
}
