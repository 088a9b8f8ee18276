//! The guard's Job against its floor: an empty Job with the same pod spec (the same image, token
//! mount, security context, podFailurePolicy) whose container exits 0 at once (`--version`),
//! side by side in one run, with the breakdown of each. A measurement, not a test: ignored in the
//! e2e suite, it is run by `hack/bench-jobs.sh` (`--ignored`), which checks the ratio.
//!
//! The objects' own timestamps (creationTimestamp, the conditions' lastTransitionTime, the
//! container's startedAt/finishedAt) have a resolution of one second, too coarse for steps of a
//! tenth of one. So the steps are the moments the same transitions of the same objects reach a
//! watch (`kubectl get -w`, milliseconds; both watches started before the runs), and, for the
//! container, containerd's timestamps of its first and last output line (nanoseconds).

use std::io::BufReader;
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::node::*;

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// `kubectl get RESOURCE -w` in harvester-system: every event, with the time it arrived.
struct Watch {
    rx: Receiver<(f64, Value)>,
    children: Vec<Child>,
    events: Vec<(f64, Value)>,
}

impl Watch {
    fn start(resources: &[&str]) -> Watch {
        let (tx, rx) = channel();
        let mut children = Vec::new();
        for r in resources {
            let mut child = node()
                .kubectl()
                .args([
                    "-n",
                    NS,
                    "get",
                    r,
                    "-w",
                    "--output-watch-events",
                    "-o",
                    "json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            let tx = tx.clone();
            let kind = if *r == "jobs" { "Job" } else { "Pod" };
            std::thread::spawn(move || {
                for event in serde_json::Deserializer::from_reader(out).into_iter::<Value>() {
                    let Ok(event) = event else { break };
                    let mut object = event["object"].clone();
                    object["kind"] = json!(kind);
                    if tx.send((now_ms(), object)).is_err() {
                        break;
                    }
                }
            });
            children.push(child);
        }
        Watch {
            rx,
            children,
            events: Vec::new(),
        }
    }

    /// The arrival time of the first event (so far or to come) whose object satisfies `pred`.
    fn first(&mut self, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> f64 {
        if let Some((t, _)) = self.events.iter().find(|(_, o)| pred(o)) {
            return *t;
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (t, o) = self
                .rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("{what}: no such event in {timeout:?}"));
            let hit = pred(&o);
            self.events.push((t, o));
            if hit {
                return t;
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn is_job(o: &Value, name: &str) -> bool {
    o["kind"] == "Job" && o["metadata"]["name"] == name
}

fn is_pod_of(o: &Value, job: &str) -> bool {
    o["kind"] == "Pod" && o["metadata"]["labels"]["job-name"] == job
}

/// The times of one run, in ms since the epoch.
struct Run {
    create: f64,
    job: f64,
    pod: f64,
    scheduled: f64,
    first_output: f64,
    last_output: f64,
    succeeded: f64,
    complete: f64,
}

impl Run {
    /// The steps, in ms: Job → pod created, → scheduled, → the container's first output,
    /// → its last output, → the pod Succeeded, → the Job Complete; and the total, Job → Complete.
    fn steps(&self) -> [f64; 7] {
        [
            self.pod - self.job,
            self.scheduled - self.pod,
            self.first_output - self.scheduled,
            self.last_output - self.first_output,
            self.succeeded - self.last_output,
            self.complete - self.succeeded,
            self.complete - self.job,
        ]
    }
}

const STEPS: [&str; 7] = [
    "Job -> pod created (Job controller)",
    "pod created -> scheduled (scheduler)",
    "scheduled -> first output (kubelet: sandbox, network, container start)",
    "first -> last output (the container's own run)",
    "last output -> pod Succeeded (kubelet status)",
    "pod Succeeded -> Job Complete (Job controller)",
    "total: Job -> Complete",
];

/// containerd's timestamps of the Job's first and last output lines, in ms since the epoch.
fn output_times(job: &str) -> (f64, f64) {
    let logs = k(&["-n", NS, "logs", &format!("job/{job}"), "--timestamps"]);
    let times: Vec<f64> = logs
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_microsecond() as f64 / 1000.0)
        .collect();
    assert!(!times.is_empty(), "no output from {job}: {logs}");
    (times[0], *times.last().unwrap())
}

fn run_one(watch: &mut Watch, job: &Value) -> Run {
    let name = job["metadata"]["name"].as_str().unwrap().to_string();
    let create = now_ms();
    k_stdin(&["create", "-f", "-"], &job.to_string());
    let timeout = Duration::from_secs(60);
    let complete = watch.first(&format!("{name} Complete"), timeout, |o| {
        is_job(o, &name)
            && o["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Complete" && c["status"] == "True")
    });
    let job_seen = watch.first("the Job", timeout, |o| is_job(o, &name));
    let pod = watch.first("its pod", timeout, |o| is_pod_of(o, &name));
    let scheduled = watch.first("its pod scheduled", timeout, |o| {
        is_pod_of(o, &name) && o["spec"]["nodeName"].is_string()
    });
    let succeeded = watch.first("its pod Succeeded", timeout, |o| {
        is_pod_of(o, &name) && o["status"]["phase"] == "Succeeded"
    });
    let (first_output, last_output) = output_times(&name);
    Run {
        create,
        job: job_seen,
        pod,
        scheduled,
        first_output,
        last_output,
        succeeded,
        complete,
    }
}

fn median_of(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The guard's status Job (as `hack/job.sh render status` gives it) and the empty Job, in turns,
/// five of each; the median of each step and of the total; their ratio.
#[test]
#[ignore = "a measurement: hack/bench-jobs.sh runs it and checks the ratio"]
fn timing_guard_job_against_empty_job() {
    let _turn = turn();
    harvester_state();
    let rendered = job_sh_render(&["status"]);
    let base = rendered
        .iter()
        .find(|o| o["kind"] == "Job")
        .unwrap()
        .clone();
    let mut watch = Watch::start(&["jobs", "pods"]);
    // Both watches are up (their initial lists arrived) before the first run.
    std::thread::sleep(Duration::from_secs(1));
    let runs = 5;
    let (mut guard, mut empty) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let mut g = base.clone();
        g["metadata"]["name"] = json!(format!("wug-timing-guard-{i}"));
        guard.push(run_one(&mut watch, &g));
        let mut e = base.clone();
        e["metadata"]["name"] = json!(format!("wug-timing-empty-{i}"));
        e["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--version"]);
        empty.push(run_one(&mut watch, &e));
    }
    drop(watch);
    let med =
        |runs: &[Run], i: usize| median_of(&runs.iter().map(|r| r.steps()[i]).collect::<Vec<_>>());
    figure(&format!(
        "Job latency, median of {runs} each, ms: the guard's status Job | the empty Job (same pod spec, --version)"
    ));
    for (i, step) in STEPS.iter().enumerate() {
        figure(&format!(
            "  {step}: {:.0} | {:.0}",
            med(&guard, i),
            med(&empty, i)
        ));
    }
    let kubectl_create =
        |runs: &[Run]| median_of(&runs.iter().map(|r| r.job - r.create).collect::<Vec<_>>());
    figure(&format!(
        "  (kubectl create -> the Job seen: {:.0} | {:.0})",
        kubectl_create(&guard),
        kubectl_create(&empty)
    ));
    let totals = |runs: &[Run]| {
        runs.iter()
            .map(|r| format!("{:.0}", r.steps()[6]))
            .collect::<Vec<_>>()
            .join(" ")
    };
    figure(&format!(
        "  totals: guard {} | empty {}",
        totals(&guard),
        totals(&empty)
    ));
    let ratio = med(&guard, 6) / med(&empty, 6);
    figure(&format!(
        "job-latency-ratio {ratio:.2} (guard Job / empty Job, medians of Job -> Complete; target <= 1.3)"
    ));
    delete_jobs();
}
