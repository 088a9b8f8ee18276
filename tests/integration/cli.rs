//! The command line and the Job contract, without a cluster where none is needed.

use std::process::Command;

use serde_json::Value;
use workload_update_guard::config::variables;
use workload_update_guard::error::exit;

use crate::support::*;

#[test]
fn help_and_version_need_no_configuration() {
    let help = Command::new(BIN)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8(help.stdout).unwrap();
    for (var, _, _) in variables() {
        assert!(text.contains(var), "--help lists {var}");
    }
    assert!(text.contains("Exit codes"));
    let version = Command::new(BIN)
        .arg("--version")
        .env_clear()
        .output()
        .unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    assert_eq!(version, workload_update_guard::build::version());
    // The commit the checkout is at (build.rs reads it again when HEAD moves).
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(repo_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string());
    let commit = head.unwrap_or_else(|| "unknown".to_string());
    if std::env::var_os("WORKLOAD_UPDATE_GUARD_COMMIT").is_none() {
        assert_eq!(
            version,
            format!(
                "workload-update-guard {} (commit {commit})\n",
                env!("CARGO_PKG_VERSION")
            )
        );
    }
    assert!(text.starts_with(&version), "{text}");
    let bad = Command::new(BIN).arg("pre").env_clear().output().unwrap();
    assert_eq!(bad.status.code(), Some(i32::from(exit::CONFIG)));
}

#[test]
fn a_configuration_error_still_writes_the_termination_message() {
    let term = tempfile_dir().join("termination-log");
    let out = Command::new(BIN)
        .env_clear()
        .env("PHASE", "during")
        .env("TERMINATION_MESSAGE_PATH", &term)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(i32::from(exit::CONFIG)));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr,
        "error: PHASE=\"during\" is invalid: expected one of pre, post, status, watch\n"
    );
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&term).unwrap()).unwrap();
    assert_eq!(summary["exitCode"], i64::from(exit::CONFIG));
    assert!(summary["error"].as_str().unwrap().contains("PHASE"));
}

/// Even at the most verbose log level, the ServiceAccount token never reaches the logs.
#[tokio::test]
async fn logs_never_contain_the_token() {
    let (_, ns) = new_harvester("secrets", serde_json::json!(["LiveMigrate"])).await;
    kubectl_ok(&["-n", &ns, "create", "serviceaccount", "nobody"]);
    let token = sa_token(&ns, "nobody");
    for format in ["text", "json"] {
        let mut env = env_for(&ns, "pre");
        env.insert("RUST_LOG".into(), "trace".into());
        env.insert("LOG_FORMAT".into(), format.into());
        let run = run_bin(&token_kubeconfig(&token), env).await;
        assert_eq!(run.code, i32::from(exit::PERMANENT), "{run:?}");
        assert!(run.stderr.len() > 1000, "trace logging is on");
        // Neither the token nor any sizeable piece of it (its signature part).
        let signature = token.rsplit('.').next().unwrap();
        for text in [
            &run.stderr,
            &run.stdout,
            &run.summary.as_ref().unwrap().to_string(),
        ] {
            assert!(
                !text.contains(&token) && !text.contains(&signature[..20]),
                "token leaked"
            );
        }
    }
}

/// The demo, the benchmark and the tests compare states with one normalizer.
#[test]
fn one_snapshot_normalizer() {
    let jq = std::fs::read_to_string(repo_root().join("hack/snapshot.jq")).unwrap();
    let line = jq.lines().find(|l| l.starts_with("del(")).unwrap();
    let fields: Vec<&str> = line
        .split(".metadata.")
        .skip(1)
        .map(|f| f.trim_end_matches([',', ' ', ')']))
        .collect();
    assert_eq!(fields, SERVER_FIELDS);
}
