//! The phases, each in the file of its name: [`pre`] suspends before an upgrade, [`post`]
//! restores after it, [`status`] reports, [`watch`] (the resident guard) runs `pre` and `post`
//! itself when the upgrades call for them. docs/design.md, "Each phase's way", lists each one's
//! steps from `main` to its first write.

pub mod post;
mod post_record;
pub mod pre;
pub mod status;
mod steps;
pub mod watch;

use std::io::Write as Output;

use crate::context::Run;
use crate::error::Error;
use crate::outcome::Done;
use crate::upgrades::View;
use crate::vocabulary::{Objects, Phase};

/// What the resident guard's pass read, handed to the phase it runs, which reads none of it
/// again: the two objects and Harvester's upgrades (for `pre`, the releases on offer too).
pub struct Read {
    pub objects: Objects,
    pub view: View,
}

/// Runs the configured phase. `Some`: `status`'s verdict, for the termination message; `watch`
/// runs until SIGTERM.
pub async fn run(run: &mut Run<'_>, out: &mut impl Output) -> Result<Option<String>, Error> {
    match run.cfg.intent.phase {
        Phase::Pre => pre::pre(run, out, None).await.map(|()| None),
        Phase::Post => post::post(run, out, None).await.map(|()| None),
        Phase::Status => status::status(run, out).await.map(Some),
        Phase::Watch => watch::resident_guard(run.cfg, run.cluster, out)
            .await
            .map(|()| None),
    }
}

/// The phase's objects (the KubeVirt CR, the ManagedChart), read now or as the pass read them: a
/// missing one is an error (exit 6), or with `ALLOW_MISSING` a step that writes nothing.
async fn objects(run: &mut Run<'_>, read: Option<Objects>) -> Result<Objects, Error> {
    let mut objects = Objects::default();
    for target in run.cfg.intent.targets() {
        let object = match &read {
            Some(read) => read.get(target.kind).cloned(),
            None => run.cluster.get(&target).await?,
        };
        match object {
            Some(obj) => objects.set(target.kind, Some(obj)),
            None => {
                let missing = Done::missing(run.cfg.allow_missing, target, "nothing was written");
                run.push(missing?);
            }
        }
    }
    Ok(objects)
}
