//! The run's deadline for requests, and the one polling helper.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until, timeout_at};

use super::Cluster;
use crate::error::Error;

const POLL_INTERVAL: Duration = Duration::from_millis(250);
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// `DEADLINE_SECONDS`: the bound of the run's requests and their retries. Its clock stops while a
/// [`Cluster::poll`] sleeps: a wait has its own bound. `Default`: never passes (a test client's).
#[derive(Debug, Clone, Default)]
pub struct Deadline(Arc<Mutex<Option<Clock>>>);

#[derive(Debug)]
struct Clock {
    /// `DEADLINE_SECONDS`, named by the first retry's WARN line.
    bound: Duration,
    at: Instant,
    stopped: Option<Instant>,
}

impl Deadline {
    pub fn new(bound: Duration) -> Self {
        let at = Instant::now() + bound;
        Self(Arc::new(Mutex::new(Some(Clock {
            bound,
            at,
            stopped: None,
        }))))
    }

    fn clock(&self) -> MutexGuard<'_, Option<Clock>> {
        self.0.lock().expect("not poisoned")
    }

    pub fn bound(&self) -> Option<Duration> {
        self.clock().as_ref().map(|c| c.bound)
    }

    /// Returns when the deadline has passed (never while its clock is stopped).
    pub async fn passed(&self) {
        loop {
            let at = self
                .clock()
                .as_ref()
                .filter(|c| c.stopped.is_none())
                .map(|c| c.at);
            match at {
                Some(at) if at <= Instant::now() => return,
                Some(at) => sleep_until(at).await,
                None => sleep(Duration::from_millis(250)).await,
            }
        }
    }

    pub(super) fn restart(&self) {
        if let Some(c) = self.clock().as_mut() {
            c.at = Instant::now() + c.bound;
        }
    }

    /// Sleeps `d` with the clock stopped; it moves on by the time slept.
    async fn sleep_apart(&self, d: Duration) {
        struct Resume<'a>(&'a Deadline);
        impl Drop for Resume<'_> {
            fn drop(&mut self) {
                if let Some(c) = self.0.clock().as_mut()
                    && let Some(since) = c.stopped.take()
                {
                    c.at += since.elapsed();
                }
            }
        }
        if let Some(c) = self.clock().as_mut() {
            c.stopped = Some(Instant::now());
        }
        let _resume = Resume(self);
        sleep(d).await;
    }
}

/// What one read of a [`Cluster::poll`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll<T> {
    Ready(T),
    /// Not yet: what is seen, for the progress lines and the message when the bound passes.
    Pending(String),
}

impl Cluster {
    /// The waiting loop's pause, the deadline's clock stopped. `true`: woken by a watch.
    pub async fn pause(&self, d: Duration, wake: &mut tokio::sync::mpsc::Receiver<()>) -> bool {
        tokio::select! {
            _ = self.deadline.sleep_apart(d) => false,
            w = wake.recv() => w.is_some(),
        }
    }

    /// The armed `post` reads for days: each read (and the restore) gets the whole deadline for its
    /// retries (an API server restarted by the upgrade), not what the reads before it left.
    pub fn restart_deadline(&self) {
        self.deadline.restart();
    }

    /// `main` bounds a whole run with it; the resident guard, which must outlive an API server's
    /// outage, bounds each read and each act with it, and reads again later.
    pub async fn deadline_passed(&self) -> Error {
        self.deadline.passed().await;
        Error::Deadline {
            seconds: self.deadline.bound().unwrap_or_default().as_secs(),
            last: self.last_error.get(),
        }
    }

    /// The one polling helper, for at most `bound`; `progress` is told at the first "not yet"
    /// and every `PROGRESS_EVERY`. The run's deadline counts the reads, not the sleeps.
    /// `Ok(Err(last))`: the bound passed, with what was last seen.
    pub async fn poll<T>(
        &self,
        bound: Duration,
        mut read: impl AsyncFnMut() -> Result<Poll<T>, Error>,
        mut progress: impl FnMut(Duration, &str),
    ) -> Result<Result<T, String>, Error> {
        let start = Instant::now();
        let end = start + bound;
        let mut said: Option<Instant> = None;
        let mut last = "nothing read yet".to_string();
        let errors_before = self.last_error.peek();
        loop {
            match timeout_at(end, read()).await {
                Ok(Ok(Poll::Ready(t))) => return Ok(Ok(t)),
                Ok(Ok(Poll::Pending(seen))) => last = seen,
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    let failing = self
                        .last_error
                        .peek()
                        .filter(|e| Some(e) != errors_before.as_ref());
                    let failing = failing.map(|e| format!(" (reads were failing: {e})"));
                    return Ok(Err(last + &failing.unwrap_or_default()));
                }
            }
            let now = Instant::now();
            if now >= end {
                return Ok(Err(last));
            }
            if said.is_none_or(|t| now - t >= PROGRESS_EVERY) {
                said = Some(now);
                progress(now - start, &last);
            }
            self.deadline
                .sleep_apart(POLL_INTERVAL.min(end - now))
                .await;
            if Instant::now() >= end {
                return Ok(Err(last));
            }
        }
    }
}
