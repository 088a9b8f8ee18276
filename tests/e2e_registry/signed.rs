//! The image signed and verified as docs/chart.md's "Verifying the image" writes it, with a key in
//! place of the release's keyless identity: the guard's image pushed to the tests' registry,
//! signed by its digest with the pinned cosign (`hack/cosign.sh`, the release's version), the
//! Sigstore bundle written beside; `cosign verify` by digest and by tag passes, and the bundle
//! verifies with no network at all (`cosign verify-blob-attestation` in `unshare --net`). Then a
//! tampered image: another image pushed under the same tag fails `cosign verify` of that tag
//! (the signed digest still passes), the bundle does not verify for the other digest, and a
//! bundle whose signature was altered does not verify.
//!
//! No Sigstore service is reached: cosign runs in the node's network namespace, which has no
//! route out (`hack/node.sh exec`), reaching the registry on its own address there; signing
//! without a transparency log (`--tlog-upload=false` and no signing config: v3 deprecates the flag
//! for a signing config without a log, but with a signing config it fetches Sigstore's trusted
//! root from TUF, common.go's "Fetch a trusted root when ... using a signing config") and
//! verifying with `--insecure-ignore-tlog`, the key being the trust (cosign v3.1.3,
//! cmd/cosign/cli/signcommon/common.go `LoadTrustedMaterialAndSigningConfig` and
//! cmd/cosign/cli/verify/common.go `verifyOfflineWithKey`: no TUF fetch with a key and no tlog).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::Value;

use crate::node::*;
use crate::registry::RegistryUp;
use crate::support::{output_ok, repo_root};

/// The key pair's password (cosign reads COSIGN_PASSWORD instead of prompting).
const PASSWORD: &str = "sign-me-7Kz";
/// The predicate type of an image's signature in cosign v3's bundle format (pkg/types,
/// `CosignSignPredicateType`).
const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";

/// `hack/cosign.sh ARGS`: its stdout, or a panic that says what to run.
fn cosign_script(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/cosign.sh"))
        .args(args)
        .output()
        .expect("run hack/cosign.sh");
    assert!(
        out.status.success(),
        "the signing test needs the pinned cosign, and `hack/cosign.sh {}` failed (run `bash \
         hack/cosign.sh build`; it needs Go, see hack/setup.sh): {}\nThis test never skips.",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The pinned cosign, built (or waited for, if a build is under way: its lock) or reused.
fn cosign_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        cosign_script(&["build"]);
        let bin = PathBuf::from(cosign_script(&["path"]));
        assert!(
            bin.is_file(),
            "no cosign at {}: run `bash hack/cosign.sh build`",
            bin.display()
        );
        bin
    })
}

/// What a cosign run said.
struct Said {
    ok: bool,
    out: String,
}

fn said(out: Output) -> Said {
    Said {
        ok: out.status.success(),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// cosign with its home in `work` (no ~/.sigstore, ~/.docker of the host's) and the key's password;
/// `how` runs it (in the node's namespace, or in one with no network). Files by absolute path:
/// entering the node's mount namespace moves the working directory to its root (setns(2)).
fn cosign(work: &Path, how: &[&str], args: &[&str]) -> Said {
    let mut c = Command::new(how[0]);
    c.args(&how[1..])
        .arg(cosign_bin())
        .args(args)
        .current_dir(work)
        .env("HOME", work)
        .env("TUF_ROOT", work.join("tuf"))
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("COSIGN_YES", "true");
    said(c.output().unwrap())
}

#[test]
fn the_signed_image_verifies_by_key_and_offline_and_a_tampered_one_does_not() {
    let _turn = turn();
    let bin = cosign_bin();
    let start = Instant::now();
    let reg = RegistryUp::start(None);
    let (tag, digest) = reg.push(&[]);
    let work = node().dir.join("signed");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let node_sh = repo_root().join("hack/node.sh");
    let node_dir = node().dir.to_str().unwrap().to_string();
    // In the node's network namespace: the registry at its own address, nothing else reachable.
    let in_node = ["bash", node_sh.to_str().unwrap(), "exec", &node_dir];
    let no_network = ["unshare", "--net"];
    let ca = format!("{}/ca.crt", reg.vars["CA_DIR"]);
    let repo = format!("{}/wug/workload-update-guard", reg.vars["REGISTRY"]);
    let signed = format!("{repo}@{digest}");

    let path = |file: &str| work.join(file).to_str().unwrap().to_string();
    let (key, public) = (path("cosign.key"), path("cosign.pub"));
    let made = cosign(&work, &no_network, &["generate-key-pair"]);
    assert!(
        std::fs::metadata(&public).is_ok(),
        "no {public}: {}",
        made.out
    );
    assert!(made.ok, "cosign generate-key-pair: {}", made.out);
    let sign_start = Instant::now();
    let sign = cosign(
        &work,
        &in_node,
        &[
            "sign",
            "--key",
            &key,
            "--tlog-upload=false",
            "--use-signing-config=false",
            "--bundle",
            &path("signed.sigstore.json"),
            "--registry-cacert",
            &ca,
            &signed,
        ],
    );
    let sign_took = sign_start.elapsed();
    assert!(sign.ok, "cosign sign: {}", sign.out);

    // Online: by the digest, and by the tag (which names that digest, for now).
    let verify = |image: &str| {
        cosign(
            &work,
            &in_node,
            &[
                "verify",
                "--key",
                &public,
                "--insecure-ignore-tlog=true",
                "--registry-cacert",
                &ca,
                image,
            ],
        )
    };
    let verify_start = Instant::now();
    let by_digest = verify(&signed);
    let verify_took = verify_start.elapsed();
    assert!(by_digest.ok, "cosign verify by digest: {}", by_digest.out);
    let claims: Value = serde_json::from_str(
        by_digest
            .out
            .lines()
            .find(|l| l.starts_with('['))
            .unwrap_or_else(|| panic!("no JSON claims: {}", by_digest.out)),
    )
    .unwrap();
    assert_eq!(
        claims[0]["critical"]["image"]["docker-manifest-digest"], digest,
        "{claims:#}"
    );
    let by_tag = verify(&format!("{repo}:{tag}"));
    assert!(by_tag.ok, "cosign verify by tag: {}", by_tag.out);

    // Offline: the bundle alone, for this digest, with no network at all.
    let hex = digest.strip_prefix("sha256:").unwrap();
    let verify_bundle = |bundle: &str, hex: &str| {
        cosign(
            &work,
            &no_network,
            &[
                "verify-blob-attestation",
                "--key",
                &public,
                "--insecure-ignore-tlog=true",
                "--bundle",
                bundle,
                "--type",
                SIGN_PREDICATE,
                "--digest",
                hex,
                "--digestAlg",
                "sha256",
            ],
        )
    };
    let offline = verify_bundle(&path("signed.sigstore.json"), hex);
    assert!(
        offline.ok && offline.out.contains("Verified OK"),
        "cosign verify-blob-attestation, offline: {}",
        offline.out
    );

    // Tampered: another image (the previous release's) pushed under the same tag.
    let other = output_ok({
        let mut c = Command::new("bash");
        c.arg(repo_root().join("hack/image.sh"))
            .arg("push")
            .arg(format!(
                "{}/wug/workload-update-guard:{tag}",
                reg.vars["PUSH"]
            ))
            .arg("--previous")
            .arg("--cert-dir")
            .arg(&reg.vars["CA_DIR"]);
        c
    });
    let other_digest = other.trim().rsplit_once('@').unwrap().1.to_string();
    assert_ne!(
        other_digest, digest,
        "the previous release's image is another"
    );
    let swapped = verify(&format!("{repo}:{tag}"));
    assert!(
        !swapped.ok && swapped.out.contains("no signatures found"),
        "cosign verify of a tag now naming an unsigned image: {}",
        swapped.out
    );
    let still = verify(&signed);
    assert!(still.ok, "the signed digest after the swap: {}", still.out);
    let wrong_digest = verify_bundle(
        &path("signed.sigstore.json"),
        other_digest.strip_prefix("sha256:").unwrap(),
    );
    assert!(
        !wrong_digest.ok
            && wrong_digest
                .out
                .contains("provided artifact digest does not match any digest in statement"),
        "the bundle for another digest: {}",
        wrong_digest.out
    );

    // Tampered: the bundle's signature altered (one byte of the DSSE envelope's signature).
    let mut bundle: Value =
        serde_json::from_str(&std::fs::read_to_string(work.join("signed.sigstore.json")).unwrap())
            .unwrap();
    let sig = bundle["dsseEnvelope"]["signatures"][0]["sig"]
        .as_str()
        .unwrap_or_else(|| panic!("no DSSE signature in the bundle: {bundle:#}"))
        .to_string();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = Value::from(format!("{flipped}{}", &sig[1..]));
    std::fs::write(
        work.join("altered.sigstore.json"),
        serde_json::to_string(&bundle).unwrap(),
    )
    .unwrap();
    let altered = verify_bundle(&path("altered.sigstore.json"), hex);
    assert!(
        !altered.ok && altered.out.contains("could not verify envelope"),
        "a bundle with an altered signature: {}",
        altered.out
    );

    figure(&format!(
        "signed: {} sign by digest {:.1} s, verify {:.1} s; the whole test {:.1} s",
        bin.parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .unwrap_or_default()
            .to_string_lossy(),
        sign_took.as_secs_f64(),
        verify_took.as_secs_f64(),
        start.elapsed().as_secs_f64()
    ));
}
