//! `pulumi-runner fetch` (and `bootstrap`, `--version`) end to end, without Kubernetes.

mod common;

use common::*;
use pulumi_operator_api::plan::{FailureReason, Operation, Outcome, Source};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const V1: &str = "name: app\nruntime: yaml\ndescription: v1\n";
const V2: &str = "name: app\nruntime: yaml\ndescription: v2\n";

fn git_source(url: &str, commit: Option<&str>, reference: Option<&str>, shallow: bool) -> Source {
    Source::Git {
        url: url.into(),
        commit: commit.map(Into::into),
        reference: reference.map(Into::into),
        shallow,
        dir: Some("app".into()),
    }
}

fn two_commits(w: &World) -> (Repo, String, String) {
    let repo = Repo::new(&w.path("git"), "prog");
    let a = repo.commit(&[("app/Pulumi.yaml", V1), ("README", "a")], "A");
    let b = repo.commit(&[("app/Pulumi.yaml", V2)], "B");
    (repo, a, b)
}

fn project_text(w: &World) -> String {
    std::fs::read_to_string(w.workspace().join("Pulumi.yaml")).expect("workspace Pulumi.yaml")
}

fn head_of_checkout(w: &World) -> String {
    git(&w.path("share/source"), &["rev-parse", "HEAD"])
}

#[test]
fn version_flag_still_works() {
    let out = Command::new(runner_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("pulumi-runner {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bootstrap_copies_itself_executable() {
    let w = World::new();
    let dest = w.path("share/pulumi-runner");
    let out = Command::new(runner_bin())
        .args(["bootstrap", dest.to_str().unwrap(), "--result-file"])
        .arg(w.path("result.json"))
        .output()
        .unwrap();
    let ran = w.ran(out);
    ran.assert_ok();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    let out = Command::new(&dest).arg("--version").output().unwrap();
    assert!(out.status.success());
}

#[test]
fn git_fetch_checks_out_exactly_the_commit() {
    let w = World::new();
    let (repo, a, b) = two_commits(&w);
    let url = repo.file_url();

    // Commit A (not the branch head), full history.
    let p = plan(Operation::Up, Some(git_source(&url, Some(&a), None, false)));
    let ran = w.run("fetch", &p, &[]);
    ran.assert_ok();
    assert_eq!(project_text(&w), V1);
    assert_eq!(head_of_checkout(&w), a);
    assert_eq!(ran.result.project.as_ref().unwrap().name, "app");
    assert!(ran.result.message.contains(&a), "{:?}", ran.result);
    // The workspace is a symlink into the source, as in PKO.
    let link = std::fs::read_link(w.workspace()).unwrap();
    assert_eq!(link, w.path("share/source/app"));

    // Shallow: depth 1 at A.
    let p = plan(Operation::Up, Some(git_source(&url, Some(&a), None, true)));
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(project_text(&w), V1);
    assert_eq!(head_of_checkout(&w), a);
    assert!(
        w.path("share/source/.git/shallow").exists(),
        "not a shallow clone"
    );
    assert_eq!(
        git(&w.path("share/source"), &["rev-list", "--count", "HEAD"]),
        "1"
    );

    // Commit B, shallow.
    let p = plan(Operation::Up, Some(git_source(&url, Some(&b), None, true)));
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(project_text(&w), V2);

    // A reference only: the branch head.
    let p = plan(
        Operation::Up,
        Some(git_source(&url, None, Some("main"), true)),
    );
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(head_of_checkout(&w), b);

    // A tag, and a full reference name.
    git(&repo.work, &["tag", "v1", &a]);
    git(
        &repo.work,
        &["push", "-q", repo.bare.to_str().unwrap(), "v1"],
    );
    let p = plan(
        Operation::Up,
        Some(git_source(&url, None, Some("v1"), true)),
    );
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(head_of_checkout(&w), a);
    let p = plan(
        Operation::Up,
        Some(git_source(&url, None, Some("refs/heads/main"), false)),
    );
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(head_of_checkout(&w), b);
    // Neither: the remote's default branch.
    let p = plan(Operation::Up, Some(git_source(&url, None, None, false)));
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(head_of_checkout(&w), b);

    // A plain path works too.
    let p = plan(
        Operation::Up,
        Some(git_source(
            repo.bare.to_str().unwrap(),
            Some(&a),
            None,
            false,
        )),
    );
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(project_text(&w), V1);
}

#[test]
fn git_fetch_failures_name_the_url_and_commit() {
    let w = World::new();
    let (repo, a, _) = two_commits(&w);
    let missing = "0123456789abcdef0123456789abcdef01234567";
    let p = plan(
        Operation::Up,
        Some(git_source(&repo.file_url(), Some(missing), None, true)),
    );
    let ran = w.run("fetch", &p, &[]);
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains(missing),
        "{}",
        ran.result.message
    );
    assert!(
        ran.result.message.contains("prog.git"),
        "{}",
        ran.result.message
    );

    let p = plan(
        Operation::Up,
        Some(Source::Git {
            url: repo.file_url(),
            commit: Some(a),
            reference: None,
            shallow: false,
            dir: Some("nope".into()),
        }),
    );
    let ran = w.run("fetch", &p, &[]);
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("nope"),
        "{}",
        ran.result.message
    );
}

/// The test git HTTP server (tests/git-http-server.py); killed on drop.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Server {
    fn start(root: &Path, auth: &[&str]) -> Server {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/git-http-server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg("--root")
            .arg(root)
            .args(auth)
            .arg("--quiet")
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 git-http-server.py");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let url = first.trim().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{first:?}");
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn git_fetch_over_http_with_credentials() {
    let w = World::new();
    let (_repo, a, _b) = two_commits(&w);
    let server = Server::start(
        &w.path("git"),
        &[
            "--user",
            "alice",
            "--password",
            "s3cret-pw",
            "--token",
            "tok-123",
        ],
    );
    let url = format!("{}/prog.git", server.url);

    // Shallow fetch of a commit that is not a branch head: by SHA over protocol v2.
    let p = plan(Operation::Up, Some(git_source(&url, Some(&a), None, true)));
    let ran = w.run(
        "fetch",
        &p,
        &[("GIT_USERNAME", "alice"), ("GIT_PASSWORD", "s3cret-pw")],
    );
    ran.assert_ok();
    assert_eq!(project_text(&w), V1);
    assert_eq!(head_of_checkout(&w), a);
    assert!(
        !ran.stderr.contains("every branch"),
        "fell back to a full fetch:\n{}",
        ran.stderr
    );
    assert_eq!(
        git(&w.path("share/source"), &["rev-list", "--count", "HEAD"]),
        "1"
    );

    // A token.
    let ran = w.run("fetch", &p, &[("GIT_TOKEN", "tok-123")]);
    ran.assert_ok();

    // Without credentials: a clear failure, no secrets in it.
    let ran = w.run("fetch", &p, &[]);
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("requires authentication"),
        "{}",
        ran.result.message
    );
    assert!(!ran.stderr.contains("retrying"), "{}", ran.stderr);

    // Wrong credentials: rejected, not retried.
    let ran = w.run(
        "fetch",
        &p,
        &[("GIT_USERNAME", "alice"), ("GIT_PASSWORD", "nope-pw")],
    );
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("rejected"),
        "{}",
        ran.result.message
    );
    assert!(
        !ran.result.message.contains("nope-pw"),
        "{}",
        ran.result.message
    );
    assert!(ran.result.message.contains(&url), "{}", ran.result.message);
    assert!(ran.result.message.contains(&a), "{}", ran.result.message);

    // Credentials in the URL never reach the message.
    let with_creds = url.replace("http://", "http://alice:wrong-pw@");
    let p = plan(
        Operation::Up,
        Some(git_source(&with_creds, Some(&a), None, true)),
    );
    let ran = w.run("fetch", &p, &[]);
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        !ran.result.message.contains("wrong-pw"),
        "{}",
        ran.result.message
    );
    assert!(!ran.stderr.contains("wrong-pw"), "{}", ran.stderr);
}

#[test]
fn program_and_project_info_sources() {
    let w = World::new();
    let file = w.file("program.yaml", "name: prog\nruntime: yaml\nresources: {}\n");
    let p = plan(
        Operation::Up,
        Some(Source::Program {
            file: file.to_string_lossy().into_owned(),
        }),
    );
    let ran = w.run("fetch", &p, &[]);
    ran.assert_ok();
    assert_eq!(
        project_text(&w),
        "name: prog\nruntime: yaml\nresources: {}\n"
    );
    assert_eq!(ran.result.project.as_ref().unwrap().name, "prog");

    let p = plan(
        Operation::Destroy,
        Some(Source::ProjectInfo {
            name: "legacy".into(),
            runtime: "nodejs".into(),
        }),
    );
    let ran = w.run("fetch", &p, &[]);
    ran.assert_ok();
    let info = ran.result.project.as_ref().unwrap();
    assert_eq!(
        (info.name.as_str(), info.runtime.as_str()),
        ("legacy", "nodejs")
    );

    let p = plan(
        Operation::Up,
        Some(Source::Program {
            file: "/nonexistent/program.yaml".into(),
        }),
    );
    w.run("fetch", &p, &[])
        .assert_failed(FailureReason::SourceUnavailable);
}

#[test]
fn local_source_is_linked() {
    let w = World::new();
    let dir = w.path("files");
    let p = plan(
        Operation::Up,
        Some(Source::Local {
            dir: dir.to_string_lossy().into_owned(),
        }),
    );
    w.run("fetch", &p, &[]).assert_ok();
    assert_eq!(std::fs::read_link(w.workspace()).unwrap(), dir);
}

/// Serves one body over HTTP for `requests` requests; returns the URL.
fn serve_bytes(body: Vec<u8>, requests: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/artifact.tar.gz", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let mut req = Vec::new();
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/gzip\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    url
}

fn artifact() -> Vec<u8> {
    let enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(enc);
    let data = V1.as_bytes();
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, "app/Pulumi.yaml", data).unwrap();
    b.into_inner().unwrap().finish().unwrap()
}

#[test]
fn flux_artifact_is_verified_and_unpacked() {
    let w = World::new();
    let body = artifact();
    use sha2::Digest;
    let digest = format!(
        "sha256:{}",
        pulumi_runner::fetch::flux::hex(&sha2::Sha256::digest(&body))
    );
    let url = serve_bytes(body, 2);
    let source = |digest: &str| Source::Flux {
        url: url.clone(),
        digest: digest.into(),
        dir: Some("app".into()),
    };
    let ran = w.run("fetch", &plan(Operation::Up, Some(source(&digest))), &[]);
    ran.assert_ok();
    assert_eq!(ran.result.outcome, Outcome::Succeeded);
    assert_eq!(project_text(&w), V1);

    let wrong = format!("sha256:{}", "0".repeat(64));
    let ran = w.run("fetch", &plan(Operation::Up, Some(source(&wrong))), &[]);
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("digest mismatch"),
        "{}",
        ran.result.message
    );
}
