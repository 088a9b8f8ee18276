//! The process as a user meets it: pipes closed under it, retries against a server that is not
//! there, and what a failed connection says. Only the last test needs the API server.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use workload_update_guard::error::exit;

use crate::support::*;

/// A fresh directory under the system's temp dir (these tests need no control plane), removed
/// when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "wug-process-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// A kubeconfig for `server` (the certificate is never reached).
    fn kubeconfig(&self, server: &str) -> PathBuf {
        let path = self.0.join("kubeconfig");
        insecure_kubeconfig(&path, server);
        path
    }

    fn termination(&self) -> PathBuf {
        self.0.join("termination-log")
    }

    fn summary(&self) -> Value {
        let text = std::fs::read_to_string(self.termination()).expect("a termination message");
        serde_json::from_str(&text).expect("the termination message is JSON")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port where nothing listens (bound, then released).
fn dead_server() -> String {
    format!("https://127.0.0.1:{}", free_port())
}

/// The binary with exactly `env`, the kubeconfig and the termination-message file.
fn guard(scratch: &Scratch, kubeconfig: &std::path::Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("KUBECONFIG", kubeconfig)
        .env("TERMINATION_MESSAGE_PATH", scratch.termination())
        .envs(env.iter().copied());
    cmd
}

/// `cmd 2>&1 | head -1`: stdout and stderr into one pipe, whose reader takes one line and goes.
fn spawn_into_head_1(mut cmd: Command) -> (Child, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    let child = cmd
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    // The parent's copies of the write end are gone with `cmd`: only the child holds one.
    drop(cmd);
    let mut line = String::new();
    BufReader::new(reader).read_line(&mut line).unwrap();
    (child, line)
}

/// `cmd 2>&1 | true`: stdout and stderr into a pipe that nobody reads, from the start.
fn run_into_closed_pipe(mut cmd: Command) -> i32 {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    cmd.stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .status()
        .unwrap()
        .code()
        .expect("an exit code, not a signal")
}

/// The delays of the retries, from the WARN lines.
fn retry_delays(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter_map(|l| l.split("retry_in_ms=").nth(1))
        .map(|n| n.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

/// `PHASE=status workload-update-guard 2>&1 | head -1` against a server that is not there: the
/// retries' log lines meet a broken pipe, and the run still ends at its deadline with exit 4
/// and its termination message, not with a panic.
#[test]
fn a_log_reader_that_goes_away_never_stops_the_run() {
    let scratch = Scratch::new();
    let kubeconfig = scratch.kubeconfig(&dead_server());
    let cmd = guard(
        &scratch,
        &kubeconfig,
        &[("PHASE", "status"), ("DEADLINE_SECONDS", "2")],
    );
    let (mut child, first) = spawn_into_head_1(cmd);
    assert!(first.contains("starting"), "{first}");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(i32::from(exit::TRANSIENT)), "{status}");
    let summary = scratch.summary();
    assert_eq!(summary["exitCode"], json!(exit::TRANSIENT));
    assert!(
        summary["error"]
            .as_str()
            .unwrap()
            .starts_with("deadline of 2s exceeded while retrying"),
        "{summary}"
    );
}

/// Two processes that fail together do not retry in lockstep: their jitter is seeded per
/// process. Each delay stays within the documented bounds (100 ms doubling to 1 s, plus up to
/// as much again).
#[test]
fn two_processes_retrying_together_sleep_different_sequences() {
    let server = dead_server();
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let scratch = Scratch::new();
            let kubeconfig = scratch.kubeconfig(&server);
            let child = guard(
                &scratch,
                &kubeconfig,
                &[("PHASE", "status"), ("DEADLINE_SECONDS", "3")],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
            (scratch, child)
        })
        .collect();
    let delays: Vec<Vec<u64>> = runs
        .into_iter()
        .map(|(_scratch, child)| {
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(i32::from(exit::TRANSIENT)));
            retry_delays(&String::from_utf8_lossy(&out.stderr))
        })
        .collect();
    eprintln!("retry delays (ms): {:?} and {:?}", delays[0], delays[1]);
    for d in &delays {
        assert!(d.len() >= 4, "{d:?}");
        for (i, wait) in d.iter().enumerate() {
            let base = (100u64 << i.min(4)).min(1000);
            assert!(*wait >= base && *wait <= 2 * base, "attempt {i}: {d:?}");
        }
    }
    let n = delays[0].len().min(delays[1].len());
    assert_ne!(delays[0][..n], delays[1][..n]);
}

/// A refused connection says so, in the retry's log line and in the termination message.
#[test]
fn a_refused_connection_says_so() {
    let scratch = Scratch::new();
    let server = dead_server();
    let kubeconfig = scratch.kubeconfig(&server);
    let out = guard(
        &scratch,
        &kubeconfig,
        &[("PHASE", "pre"), ("DEADLINE_SECONDS", "1")],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(i32::from(exit::TRANSIENT)));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let refused = "tcp connect error: Connection refused";
    let warn = stderr
        .lines()
        .find(|l| l.contains("WARN"))
        .expect("a retry's line");
    assert!(warn.contains(refused), "{stderr}");
    let error = scratch.summary()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains(&server) && error.contains(refused),
        "{error}"
    );
    let last = stderr.lines().last().unwrap();
    assert!(last.contains("ERROR") && last.contains(refused), "{last}");
}

/// A name that does not resolve says it is DNS. The lookup runs for real, in a network
/// namespace of its own with only a loopback that is down, so no query can leave this host
/// (`unshare --net`, as root or with an unprivileged user namespace).
#[test]
fn an_unresolvable_name_says_it_is_dns() {
    let scratch = Scratch::new();
    let kubeconfig = scratch.kubeconfig("https://does-not-exist.invalid:6443");
    let inner = guard(
        &scratch,
        &kubeconfig,
        &[("PHASE", "status"), ("DEADLINE_SECONDS", "1")],
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--map-root-user", "--net", "--"])
        .arg(inner.get_program())
        .env_clear()
        .envs(
            inner
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.unwrap().to_owned())),
        );
    let out = cmd
        .output()
        .expect("this test needs unshare(1) (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(i32::from(exit::TRANSIENT)),
        "{stderr}"
    );
    let error = scratch.summary()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("does-not-exist.invalid")
            && error.contains("dns error: failed to lookup address information"),
        "{error}"
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains("dns error")),
        "{stderr}"
    );
}

/// A report that stdout does not take ends the run with exit 3 and a termination message that
/// says so: `status` and a dry run's patches. A run whose only output is its log (`pre`)
/// finishes its work and exits 0, the JSON log's last line included.
#[tokio::test]
async fn a_report_that_cannot_be_written_exits_3_and_a_log_that_cannot_exits_0() {
    let (client, ns) = new_harvester("pipes", json!(["LiveMigrate"])).await;
    let kubeconfig = control_plane().kubeconfig();
    let env = |phase: &'static str, extra: &[(&'static str, &'static str)]| {
        let mut env: Vec<(String, String)> = env_for(&ns, phase).into_iter().collect();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    };
    let run = |env: Vec<(String, String)>| {
        let scratch = Scratch::new();
        let mut cmd = guard(&scratch, &kubeconfig, &[]);
        cmd.envs(env);
        let code = run_into_closed_pipe(cmd);
        (code, scratch.summary())
    };
    for extra in [&[][..], &[("LOG_FORMAT", "json")][..]] {
        let (code, summary) = run(env("status", extra));
        assert_eq!(code, i32::from(exit::PERMANENT), "{summary}");
        assert_eq!(summary["exitCode"], json!(exit::PERMANENT));
        let error = summary["error"].as_str().unwrap();
        assert!(
            error.starts_with("cannot write the report to stdout") && error.contains("Broken pipe"),
            "{error}"
        );
    }
    let (code, summary) = run(env("pre", &[("DRY_RUN", "true")]));
    assert_eq!(code, i32::from(exit::PERMANENT), "{summary}");
    assert!(
        summary["error"]
            .as_str()
            .unwrap()
            .starts_with("cannot write the report to stdout"),
        "{summary}"
    );
    assert_eq!(kubevirt_methods(&client, &ns).await, json!(["LiveMigrate"]));

    let (code, summary) = run(env("pre", &[("LOG_FORMAT", "json")]));
    assert_eq!(code, i32::from(exit::SUCCESS), "{summary}");
    assert_eq!(summary["exitCode"], json!(exit::SUCCESS));
    assert_eq!(kubevirt_methods(&client, &ns).await, json!([]));
}
