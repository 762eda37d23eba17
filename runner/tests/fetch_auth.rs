//! `pulumi-runner fetch` with git credentials from the fetch container's environment (PKO's
//! `GIT_*` names): SSH keys against a real OpenSSH server (with `known_hosts`, accept-new, a
//! passphrase, a wrong key) and a GitHub App whose installation token comes from a loopback
//! stand-in of GitHub's API. Credentials never appear in the result or the output.

mod common;

use common::*;
use pulumi_operator_api::plan::{FailureReason, Operation, Source};

const V1: &str = "name: app\nruntime: yaml\ndescription: v1\n";

fn git_source(url: &str, commit: &str) -> Source {
    Source::Git {
        url: url.into(),
        commit: Some(commit.into()),
        reference: None,
        shallow: true,
        dir: Some("app".into()),
    }
}

fn assert_hidden(ran: &Ran, secrets: &[&str]) {
    for s in secrets {
        for line in s.lines().filter(|l| l.len() > 8 && !l.starts_with("-----")) {
            assert!(
                !ran.stdout.contains(line),
                "leaked in stdout: {}",
                ran.stdout
            );
            assert!(
                !ran.stderr.contains(line),
                "leaked in stderr: {}",
                ran.stderr
            );
            assert!(
                !ran.result.message.contains(line),
                "leaked in result: {}",
                ran.result.message
            );
        }
    }
}

#[test]
fn git_fetch_over_ssh() {
    let w = World::new();
    let repo = Repo::new(&w.path("git"), "prog");
    let a = repo.commit(&[("app/Pulumi.yaml", V1)], "A");
    let sshd = test_support::SshServer::start(&w.path("sshd"));
    let keys = w.path("keys");
    let (key, public) = test_support::ssh_key_pair(&keys, "deploy", "");
    let (locked, locked_pub) = test_support::ssh_key_pair(&keys, "locked", "runner pass");
    let (stranger, _) = test_support::ssh_key_pair(&keys, "stranger", "");
    sshd.authorize(&public);
    sshd.authorize(&locked_pub);
    let url = sshd.url(&repo.bare);
    let p = plan(Operation::Up, Some(git_source(&url, &a)));
    let known_hosts = sshd.known_hosts();

    // The key with the server's known_hosts.
    let ran = w.run(
        "fetch",
        &p,
        &[
            ("GIT_SSH_PRIVATE_KEY", &key),
            ("GIT_SSH_KNOWN_HOSTS", &known_hosts),
        ],
    );
    ran.assert_ok();
    assert!(
        ran.stderr.contains("with credentials (SSH key)"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        std::fs::read_to_string(w.workspace().join("Pulumi.yaml")).unwrap(),
        V1
    );
    assert_hidden(&ran, &[&key]);

    // Without known_hosts the host key is accepted on first use; a passphrase (GIT_PASSWORD,
    // as in PKO) unlocks an encrypted key.
    let ran = w.run(
        "fetch",
        &p,
        &[
            ("GIT_SSH_PRIVATE_KEY", &locked),
            ("GIT_PASSWORD", "runner pass"),
        ],
    );
    ran.assert_ok();
    assert_hidden(&ran, &[&locked, "runner pass"]);

    // A key the server does not know: refused at once (no retries), clearly.
    let ran = w.run("fetch", &p, &[("GIT_SSH_PRIVATE_KEY", &stranger)]);
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("SSH server rejected the key"),
        "{}",
        ran.result.message
    );
    assert!(!ran.stderr.contains("retrying"), "{}", ran.stderr);
    assert_hidden(&ran, &[&stranger]);

    // A host key that does not match known_hosts.
    let wrong = format!(
        "[127.0.0.1]:{} {}",
        sshd.port,
        public
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let ran = w.run(
        "fetch",
        &p,
        &[
            ("GIT_SSH_PRIVATE_KEY", &key),
            ("GIT_SSH_KNOWN_HOSTS", &wrong),
        ],
    );
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("host key does not match"),
        "{}",
        ran.result.message
    );

    // The temporary key files are gone after each fetch.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name().to_string_lossy().starts_with("git-ssh-")
                && std::fs::read_to_string(e.path().join("id"))
                    .is_ok_and(|k| k.trim() == key.trim())
        })
        .collect();
    assert!(leftovers.is_empty(), "key files left behind: {leftovers:?}");
}

#[test]
fn git_fetch_with_a_github_app() {
    let w = World::new();
    let repo = Repo::new(&w.path("git"), "prog");
    let a = repo.commit(&[("app/Pulumi.yaml", V1)], "A");
    let (private_key, public_key) = test_support::rsa_key_pair(&w.path("keys"), "app");
    let token = "ghs_runnertoken0123456789";
    let api = test_support::GitHubApiStandIn::start(public_key, "4242", "777", token);
    let server =
        test_support::LoggedGitServer::start(&w.path("git"), &["--token", token, "--quiet"]);
    let url = format!("{}/prog.git", server.url);
    let p = plan(Operation::Up, Some(git_source(&url, &a)));
    let env = |app: &'static str, installation: &'static str| {
        vec![
            ("GIT_GITHUB_APP_ID", app.to_string()),
            ("GIT_GITHUB_APP_INSTALLATION_ID", installation.to_string()),
            ("GIT_GITHUB_APP_PRIVATE_KEY", private_key.clone()),
            ("GITHUB_API_URL", format!("{}/", api.url)),
        ]
    };
    let run = |vars: Vec<(&str, String)>| {
        let pairs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        w.run("fetch", &p, &pairs)
    };
    let ran = run(env("4242", "777"));
    ran.assert_ok();
    assert_eq!(api.issued.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_hidden(&ran, &[&private_key, token]);

    // A JWT for another app is refused by the API: the message says so, without secrets.
    let ran = run(env("999", "777"));
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("HTTP 401"),
        "{}",
        ran.result.message
    );
    assert!(
        api.refused
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.contains("iss is 999")),
        "{:?}",
        api.refused
    );
    assert_hidden(&ran, &[&private_key, token]);

    // An unknown installation.
    let ran = run(env("4242", "778"));
    ran.assert_failed(FailureReason::SourceUnavailable);
    assert!(
        ran.result.message.contains("HTTP 404"),
        "{}",
        ran.result.message
    );
}
