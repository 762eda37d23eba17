//! Program sources with git authentication, and shared branch polling, end to end on the local
//! test cluster (the operator in-cluster, Jobs running the runner and the Pulumi stand-in):
//!
//! - a private repository over HTTP with basic auth, a token, and the deprecated
//!   `gitAuthSecret`, polled by the operator and cloned by the Jobs; wrong credentials and a
//!   missing Secret give clear statuses; no credential reaches a status, an event, the
//!   operator's log, a Job spec or a pod's log;
//! - the same over SSH, served by a real OpenSSH `sshd` run by the test;
//! - a GitHub App, its installation token obtained from a loopback stand-in of GitHub's API
//!   (which verifies the JWT's signature) through the `pulumi.com/github-api-url` annotation;
//! - many Stacks (50; E2E_POLL_STACKS sets it) tracking one branch cause one ls-remote per interval, counted by the git
//!   server and by the operator's `pulumi_operator_git_ls_remote_total`;
//! - repositories at internal hosts (the metadata address, `localhost`, loopback spelled in
//!   octal) are refused without being contacted (`NotAllowed`), while the tests' git server
//!   address, which the test install allows (`GIT_ALLOWED_INTERNAL_HOSTS`), works.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use pulumi_operator_api::Stack;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use test_support::{
    kubectl, kubectl_result, wait_for, GitRepo, LoggedGitServer, StackNamespace,
    OPERATOR_NAMESPACE, TEST_PASSPHRASE,
};

const T: Duration = Duration::from_secs(180);

/// A trivial program: one record, one output.
const PROGRAM: &str = "name: e2e\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: fetched\noutputs:\n  value: ${rec.value}\n";

struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A namespace prepared for Stacks and a repository (`app.git`) with one commit.
struct Fixture {
    sn: StackNamespace,
    repo: GitRepo,
    sha: String,
    root: PathBuf,
    _scratch: Scratch,
}

impl Fixture {
    async fn new(prefix: &str) -> Fixture {
        let sn = StackNamespace::new(prefix).await;
        let root = std::env::temp_dir().join(format!("e2e-src-{}", sn.ns.name));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        // Pods run as other users on this machine: they must read the repositories.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let repo = GitRepo::new(&root, "app");
        let sha = repo.commit(&[("Pulumi.yaml", PROGRAM)], "program");
        Fixture {
            sn,
            repo,
            sha,
            root: root.clone(),
            _scratch: Scratch(root),
        }
    }

    fn ns(&self) -> &str {
        &self.sn.ns.name
    }

    /// A Stack in PKO's shape; `extra` holds more spec lines (indented by two spaces).
    fn stack_yaml(&self, name: &str, stack: &str, url: &str, source: &str, extra: &str) -> String {
        format!(
            r#"apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: {name}
spec:
  stack: {stack}
  projectRepo: {url}
  {source}
  backend: {backend}
  serviceAccountName: pulumi
  envRefs:
    PULUMI_CONFIG_PASSPHRASE:
      type: Secret
      secret: {{name: passphrase, key: passphrase}}
{extra}"#,
            backend = self.sn.backend_url,
        )
    }

    fn secret(&self, name: &str, data: &[(&str, &str)]) {
        let mut args = vec![
            "-n".to_string(),
            self.ns().to_string(),
            "create".into(),
            "secret".into(),
            "generic".into(),
            name.into(),
        ];
        let files = self.root.join(format!("secret-{name}"));
        std::fs::create_dir_all(&files).unwrap();
        for (k, v) in data {
            // From files: values with newlines (keys) stay intact and stay out of argv.
            let f = files.join(k);
            std::fs::write(&f, v).unwrap();
            args.push(format!("--from-file={k}={}", f.display()));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl(&args);
        let _ = std::fs::remove_dir_all(files);
    }

    fn stacks(&self) -> Api<Stack> {
        Api::namespaced(self.sn.ns.client.clone(), self.ns())
    }

    async fn wait_stack(&self, name: &str, what: &str, check: impl Fn(&Stack) -> bool) -> Stack {
        let stacks = self.stacks();
        let got = wait_for(T, what, || async {
            stacks.get(name).await.ok().filter(|s| check(s))
        })
        .await;
        eprintln!("{name}: {what}");
        got
    }

    async fn wait_ready(&self, name: &str) -> Stack {
        let s = self
            .wait_stack(name, "Ready", |s| {
                condition(s, "Ready").is_some_and(|c| c.0 == "True")
            })
            .await;
        let last = s.status.as_ref().unwrap().last_update.clone().unwrap();
        assert_eq!(
            last.last_successful_commit.as_deref(),
            Some(self.sha.as_str())
        );
        s
    }

    async fn wait_stalled(&self, name: &str, reason: &str, text: &str) -> String {
        let s = self
            .wait_stack(name, &format!("Stalled {reason} ({text})"), |s| {
                condition(s, "Stalled")
                    .is_some_and(|c| c.0 == "True" && c.1 == reason && c.2.contains(text))
            })
            .await;
        condition(&s, "Stalled").unwrap().2
    }

    /// Everything a user or a log collector sees, which must never hold a credential: Stacks,
    /// Workspaces, Updates, Jobs, pods (specs and status), events, the logs of every Job, and
    /// the operator's log.
    fn visible(&self) -> String {
        let mut all = kubectl(&[
            "-n",
            self.ns(),
            "get",
            "stacks,workspaces,updates,jobs,pods,events",
            "-o",
            "json",
        ]);
        let jobs = kubectl(&["-n", self.ns(), "get", "jobs", "-o", "name"]);
        for job in jobs.lines() {
            let (_, out, err) = kubectl_result(&["-n", self.ns(), "logs", job, "--all-containers"]);
            all.push_str(&out);
            all.push_str(&err);
        }
        all.push_str(&operator_logs());
        all
    }

    fn assert_never_visible(&self, secrets: &[&str]) {
        let seen = self.visible();
        for s in secrets {
            for part in secret_parts(s) {
                assert!(
                    !seen.contains(part),
                    "a credential is visible (…{}…)",
                    &part[..part.len().min(6)]
                );
            }
        }
    }
}

/// The non-trivial lines of a secret value (for keys: the base64 body lines).
fn secret_parts(s: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = s
        .lines()
        .map(str::trim)
        .filter(|l| l.len() >= 8 && !l.starts_with("-----"))
        .collect();
    if parts.is_empty() {
        parts.push(s.trim());
    }
    parts
}

fn operator_logs() -> String {
    let (_, out, _) = kubectl_result(&[
        "-n",
        OPERATOR_NAMESPACE,
        "logs",
        "deployment/pulumi-operator",
        "--all-containers",
        "--tail=-1",
    ]);
    out
}

/// (status, reason, message) of a condition.
fn condition(s: &Stack, kind: &str) -> Option<(String, String, String)> {
    s.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn last_update_message(s: &Stack) -> String {
    s.status
        .as_ref()
        .and_then(|x| x.last_update.as_ref())
        .and_then(|l| l.message.clone())
        .unwrap_or_default()
}

fn events_for(ns: &str, name: &str) -> String {
    kubectl(&[
        "-n",
        ns,
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "json",
    ])
}

fn auth(kind: &str) -> String {
    match kind {
        "basic" => "  gitAuth:\n    basicAuth:\n      userName: {type: Secret, secret: {name: git-basic, key: username}}\n      password: {type: Secret, secret: {name: git-basic, key: password}}\n".into(),
        "token" => "  gitAuth:\n    accessToken: {type: Secret, secret: {name: git-token, key: token}}\n".into(),
        other => other.to_string(),
    }
}

const PASSWORD: &str = "pw-e2e-9f8e7d6c5b";
const TOKEN: &str = "tok-e2e-a1b2c3d4e5f6";
const WRONG: &str = "wrong-pw-e2e-31415926";

#[tokio::test]
async fn private_repository_over_http_with_basic_auth_tokens_and_the_legacy_secret() {
    let f = Fixture::new("git-http").await;
    let server = LoggedGitServer::start(
        &f.root,
        &[
            "--user",
            "alice",
            "--password",
            PASSWORD,
            "--token",
            TOKEN,
            "--quiet",
        ],
    );
    let url = format!("{}/app.git", server.url);
    f.secret(
        "git-basic",
        &[("username", "alice"), ("password", PASSWORD)],
    );
    f.secret("git-token", &[("token", &format!("{TOKEN}\n"))]);
    f.secret("git-legacy", &[("accessToken", TOKEN)]);
    f.secret("git-wrong", &[("username", "alice"), ("password", WRONG)]);
    let sha = f.sha.clone();
    let stacks = [
        f.stack_yaml(
            "basic",
            "basic",
            &url,
            "branch: main\n  resyncFrequencySeconds: 2",
            &auth("basic"),
        ),
        f.stack_yaml("token", "token", &url, "branch: main", &auth("token")),
        f.stack_yaml(
            "legacy",
            "legacy",
            &url,
            &format!("commit: {sha}"),
            "  gitAuthSecret: git-legacy\n",
        ),
        f.stack_yaml(
            "legacy-branch",
            "legacy-branch",
            &url,
            "branch: main",
            "  gitAuthSecret: git-legacy\n",
        ),
        f.stack_yaml(
            "wrong-branch",
            "wrong-branch",
            &url,
            "branch: main",
            "  gitAuthSecret: git-wrong\n",
        ),
        f.stack_yaml(
            "wrong-commit",
            "wrong-commit",
            &url,
            &format!("commit: {sha}"),
            "  gitAuthSecret: git-wrong\n",
        ),
        f.stack_yaml("anonymous", "anonymous", &url, "branch: main", ""),
        f.stack_yaml(
            "missing",
            "missing",
            &url,
            "branch: main",
            "  gitAuth:\n    accessToken: {type: Secret, secret: {name: git-later, key: token}}\n",
        ),
        f.stack_yaml(
            "missing-key",
            "missing-key",
            &url,
            "branch: main",
            "  gitAuth:\n    accessToken: {type: Secret, secret: {name: git-token, key: nope}}\n",
        ),
    ];
    f.sn.ns.apply(&stacks.join("---\n"));

    for name in ["basic", "token", "legacy", "legacy-branch"] {
        f.wait_ready(name).await;
    }
    // The Workspace holds Secret references only; the Job's fetch container gets them as
    // GIT_* secretKeyRefs (PKO's names).
    let ws = kubectl(&["-n", f.ns(), "get", "workspace", "basic", "-o", "json"]);
    let ws: serde_json::Value = serde_json::from_str(&ws).unwrap();
    assert_eq!(
        ws["spec"]["git"]["auth"],
        serde_json::json!({"username": {"name": "git-basic", "key": "username"},
                           "password": {"name": "git-basic", "key": "password"}})
    );
    let basic = f.stacks().get("basic").await.unwrap();
    let job_name = basic.status.unwrap().last_update.unwrap().name.unwrap();
    let job = kubectl(&["-n", f.ns(), "get", "job", &job_name, "-o", "json"]);
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    let fetch = &job["spec"]["template"]["spec"]["initContainers"][1];
    assert_eq!(fetch["name"], "fetch");
    let env = fetch["env"].to_string();
    assert!(
        env.contains(r#"{"name":"GIT_USERNAME","valueFrom":{"secretKeyRef":{"key":"username","name":"git-basic"}}}"#),
        "{env}"
    );

    // Wrong credentials: the operator's ls-remote says so (branch), and so does the Job's
    // clone (commit).
    let message = f
        .wait_stalled(
            "wrong-branch",
            "SourceUnavailable",
            "rejected the credentials",
        )
        .await;
    assert!(message.contains(&url), "{message}");
    let s = f
        .wait_stack("wrong-commit", "its clone to fail", |s| {
            last_update_message(s).contains("rejected the credentials")
        })
        .await;
    assert!(
        last_update_message(&s).contains(&url),
        "{}",
        last_update_message(&s)
    );
    f.wait_stalled("anonymous", "SourceUnavailable", "requires authentication")
        .await;

    // A missing Secret or key is an invalid spec (PKO), with an event.
    let message = f.wait_stalled("missing", "SpecInvalid", "git-later").await;
    assert_eq!(
        message,
        "spec.gitAuth.accessToken: Secret \"git-later\" not found"
    );
    let message = f.wait_stalled("missing-key", "SpecInvalid", "no key").await;
    assert_eq!(
        message,
        "spec.gitAuth.accessToken: Secret \"git-token\" has no key \"nope\""
    );
    let events = events_for(f.ns(), "missing");
    assert!(
        events.contains("StackConfigInvalid") && events.contains("git-later"),
        "{events}"
    );
    // Creating the Secret lets the Stack proceed (Secrets are not watched: within 30 s).
    f.secret("git-later", &[("token", TOKEN)]);
    f.wait_ready("missing").await;

    // Polling goes on with the credentials: a pushed commit is deployed.
    let second = f.repo.commit(
        &[(
            "Pulumi.yaml",
            &PROGRAM.replace("value: fetched", "value: again"),
        )],
        "v2",
    );
    f.wait_stack("basic", "the pushed commit deployed", |s| {
        s.status
            .as_ref()
            .and_then(|x| x.last_update.as_ref())
            .and_then(|l| l.last_successful_commit.as_deref())
            == Some(second.as_str())
    })
    .await;

    f.assert_never_visible(&[PASSWORD, TOKEN, WRONG, TEST_PASSPHRASE]);
}

#[tokio::test]
async fn private_repository_over_ssh() {
    // ssh runs in the operator's pod (uid 65532) and the Jobs' fetch containers (uid 1000);
    // their images have passwd entries, this machine may not.
    test_support::ensure_passwd_entry(65532, "nonroot");
    test_support::ensure_passwd_entry(1000, "pulumi");
    let f = Fixture::new("git-ssh").await;
    let sshd = test_support::SshServer::start(&f.root.join("sshd"));
    let keys = f.root.join("keys");
    let (key, public) = test_support::ssh_key_pair(&keys, "deploy", "");
    let passphrase = "correct horse battery staple";
    let (locked, locked_pub) = test_support::ssh_key_pair(&keys, "locked", passphrase);
    let (stranger, _) = test_support::ssh_key_pair(&keys, "stranger", "");
    sshd.authorize(&public);
    sshd.authorize(&locked_pub);
    let url = sshd.url(&f.repo.bare);
    let known_hosts = sshd.known_hosts();
    f.secret("deploy-key", &[("id", &key), ("known_hosts", &known_hosts)]);
    f.secret("locked-key", &[("id", &locked), ("passphrase", passphrase)]);
    f.secret("stranger-key", &[("id", &stranger)]);
    f.secret(
        "legacy-ssh",
        &[("sshPrivateKey", &key), ("known_hosts", &known_hosts)],
    );
    let ssh = |secret: &str, pass: bool| {
        let mut s = format!(
            "  gitAuth:\n    sshAuth:\n      sshPrivateKey: {{type: Secret, secret: {{name: {secret}, key: id}}}}\n"
        );
        if pass {
            s.push_str(&format!(
                "      password: {{type: Secret, secret: {{name: {secret}, key: passphrase}}}}\n"
            ));
        }
        s
    };
    let sha = f.sha.clone();
    f.sn.ns.apply(
        &[
            f.stack_yaml(
                "ssh",
                "ssh",
                &url,
                "branch: main",
                &ssh("deploy-key", false),
            ),
            f.stack_yaml(
                "ssh-pass",
                "ssh-pass",
                &url,
                "branch: main",
                &ssh("locked-key", true),
            ),
            f.stack_yaml(
                "ssh-legacy",
                "ssh-legacy",
                &url,
                &format!("commit: {sha}"),
                "  gitAuthSecret: legacy-ssh\n",
            ),
            f.stack_yaml(
                "ssh-stranger",
                "ssh-stranger",
                &url,
                "branch: main",
                &ssh("stranger-key", false),
            ),
        ]
        .join("---\n"),
    );
    for name in ["ssh", "ssh-pass", "ssh-legacy"] {
        f.wait_ready(name).await;
    }
    let message = f
        .wait_stalled("ssh-stranger", "SourceUnavailable", "rejected the key")
        .await;
    assert!(message.contains("Permission denied"), "{message}");
    // The fetch container also gets the Secret's known_hosts (optional).
    let ssh_stack = f.stacks().get("ssh").await.unwrap();
    let job_name = ssh_stack.status.unwrap().last_update.unwrap().name.unwrap();
    let job = kubectl(&["-n", f.ns(), "get", "job", &job_name, "-o", "json"]);
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    let env = job["spec"]["template"]["spec"]["initContainers"][1]["env"].to_string();
    assert!(
        env.contains(r#"{"name":"GIT_SSH_KNOWN_HOSTS","valueFrom":{"secretKeyRef":{"key":"known_hosts","name":"deploy-key","optional":true}}}"#),
        "{env}"
    );
    assert!(sshd.log().contains("Accepted publickey"), "{}", sshd.log());
    f.assert_never_visible(&[&key, &locked, &stranger, passphrase]);
}

#[tokio::test]
async fn github_app_installation_token() {
    let f = Fixture::new("git-app").await;
    let (private_key, public_key) = test_support::rsa_key_pair(&f.root.join("keys"), "app");
    let token = "ghs_e2eInstallationToken0123456789";
    let api = test_support::GitHubApiStandIn::start(public_key, "4242", "777", token);
    let server = LoggedGitServer::start(&f.root, &["--token", token, "--quiet"]);
    let url = format!("{}/app.git", server.url);
    f.secret(
        "app",
        &[
            ("appID", "4242\n"),
            ("installationID", "777"),
            ("privateKey", &private_key),
        ],
    );
    f.secret(
        "other-app",
        &[
            ("appID", "999"),
            ("installationID", "777"),
            ("privateKey", &private_key),
        ],
    );
    let app = |secret: &str| {
        format!(
            "  gitAuth:\n    githubApp:\n      appID: {{type: Secret, secret: {{name: {secret}, key: appID}}}}\n      \
             installationID: {{type: Secret, secret: {{name: {secret}, key: installationID}}}}\n      \
             privateKey: {{type: Secret, secret: {{name: {secret}, key: privateKey}}}}\n"
        )
    };
    let annotated = |yaml: String| {
        yaml.replacen(
            "metadata:\n",
            &format!(
                "metadata:\n  annotations:\n    pulumi.com/github-api-url: {}\n",
                api.url
            ),
            1,
        )
    };
    f.sn.ns.apply(
        &[
            annotated(f.stack_yaml("app", "app", &url, "branch: main", &app("app"))),
            annotated(f.stack_yaml("other", "other", &url, "branch: main", &app("other-app"))),
        ]
        .join("---\n"),
    );
    f.wait_ready("app").await;
    // One exchange for the operator's ls-remote, one for the Job's clone (at least).
    assert!(api.issued.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    let message = f
        .wait_stalled("other", "SourceUnavailable", "HTTP 401")
        .await;
    assert!(message.contains("GitHub App token exchange"), "{message}");
    let ws = kubectl(&["-n", f.ns(), "get", "workspace", "app", "-o", "json"]);
    let ws: serde_json::Value = serde_json::from_str(&ws).unwrap();
    assert_eq!(
        ws["metadata"]["annotations"]["pulumi.com/github-api-url"],
        api.url.as_str()
    );
    assert_eq!(
        ws["spec"]["git"]["auth"]["githubApp"]["privateKey"],
        serde_json::json!({"name": "app", "key": "privateKey"})
    );
    f.assert_never_visible(&[&private_key, token]);
}

/// The operator pods' `pulumi_operator_git_ls_remote_total`, summed over results, by pod.
fn ls_remote_counts() -> Vec<(String, u64)> {
    test_support::operator_metrics_by_pod()
        .into_iter()
        .map(|(uid, text)| {
            let total = test_support::metric_total(&text, "pulumi_operator_git_ls_remote_total");
            (uid, total)
        })
        .collect()
}

#[tokio::test]
async fn many_stacks_tracking_one_branch_share_one_ls_remote_per_interval() {
    // 50 by default: every Stack first deploys with the real Pulumi CLI (a few CPU seconds
    // each on these 2 cores); E2E_POLL_STACKS=200 measures the figure docs/api.md quotes.
    let n: usize = std::env::var("E2E_POLL_STACKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let interval = 3u64;
    let f = Fixture::new("poll").await;
    let server = LoggedGitServer::start(&f.root, &[]);
    let url = format!("{}/app.git", server.url);
    let started = Instant::now();
    let docs: Vec<String> = (0..n)
        .map(|i| {
            f.stack_yaml(
                &format!("s{i}"),
                &format!("poll-{i}"),
                &url,
                "branch: main",
                &format!("  resyncFrequencySeconds: {interval}\n"),
            )
        })
        .collect();
    // In chunks: one kubectl apply per 50 Stacks.
    for chunk in docs.chunks(50) {
        f.sn.ns.apply(&chunk.join("---\n"));
    }
    let stacks = f.stacks();
    let sha = f.sha.clone();
    wait_for(
        Duration::from_secs(600),
        "every Stack to be Ready",
        || async {
            let list = stacks.list(&ListParams::default()).await.ok()?;
            let ready = list
                .items
                .iter()
                .filter(|s| condition(s, "Ready").is_some_and(|c| c.0 == "True"))
                .filter(|s| {
                    s.status
                        .as_ref()
                        .and_then(|x| x.last_update.as_ref())
                        .and_then(|l| l.last_successful_commit.as_deref())
                        == Some(sha.as_str())
                })
                .count();
            (ready == n).then_some(())
        },
    )
    .await;
    eprintln!("{n} Stacks Ready after {:?}", started.elapsed());
    // Every Update's Job is done: nothing but the operator reads the repository from here on.
    let pods: Api<Pod> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    wait_for(
        Duration::from_secs(120),
        "the Jobs' pods to finish",
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .all(|p| {
                    matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded") | Some("Failed")
                    )
                })
                .then_some(())
        },
    )
    .await;

    // A measurement window; the operator may be restarted by someone else meanwhile, so a
    // window in which the operator pods changed is measured again.
    let window = Duration::from_secs(10 * interval);
    let mut attempts = 0;
    let (calls, counted) = loop {
        attempts += 1;
        let m0 = ls_remote_counts();
        let c0 = server.advertisements("app.git", "200");
        tokio::time::sleep(window).await;
        let c1 = server.advertisements("app.git", "200");
        let m1 = ls_remote_counts();
        let same_pods = m0.iter().map(|p| &p.0).eq(m1.iter().map(|p| &p.0));
        if same_pods && !m0.is_empty() {
            let counted: u64 =
                m1.iter().map(|p| p.1).sum::<u64>() - m0.iter().map(|p| p.1).sum::<u64>();
            break ((c1 - c0) as u64, counted);
        }
        assert!(
            attempts < 4,
            "the operator kept restarting during the measurement"
        );
        eprintln!("the operator restarted during the window; measuring again");
    };
    let polls = window.as_secs() / interval;
    eprintln!(
        "{n} Stacks polling every {interval}s: {calls} ls-remote calls seen by the git server and \
         {counted} counted by the operator in {}s (one per interval: ~{polls}; unshared: ~{})",
        window.as_secs(),
        n as u64 * polls
    );
    assert!(calls >= 1, "the branch was not polled at all");
    assert!(
        calls <= polls + 2,
        "{calls} ls-remote calls in {}s for one branch polled every {interval}s",
        window.as_secs()
    );
    // The metric counts real calls: at least ours (other tests may poll other branches).
    assert!(counted >= calls, "metric {counted} < {calls} calls seen");
    assert!(
        counted < n as u64,
        "metric {counted}: looks like one call per Stack"
    );
}

/// A password in a refused repository URL: it must not reach the Stack's status or Events.
const SSRF_PASSWORD: &str = "pw-ssrf-2718281828";

#[tokio::test]
async fn repositories_at_internal_hosts_are_refused_without_being_contacted() {
    let f = Fixture::new("ssrf").await;
    let server = LoggedGitServer::start(&f.root, &[]);
    let port = server.port();
    // (Stack, URL, the host the message names, why it is refused). `localhost` has a git
    // server listening behind it: the test install allows the address 127.0.0.1, not the name.
    let cases = [
        (
            "metadata",
            "http://169.254.169.254/latest/x.git".to_string(),
            "\"169.254.169.254\"",
            "link-local",
        ),
        (
            "localhost",
            format!("http://tenant:{SSRF_PASSWORD}@localhost:{port}/app.git"),
            "\"localhost\"",
            "loopback name",
        ),
        (
            "octal",
            "git@0177.0.0.2:org/app.git".to_string(),
            "\"127.0.0.2\"",
            "loopback address",
        ),
    ];
    let docs: Vec<String> = cases
        .iter()
        .map(|(name, url, _, _)| f.stack_yaml(name, name, url, "branch: main", ""))
        .collect();
    f.sn.ns.apply(&docs.join("---\n"));
    for (name, _, host, why) in &cases {
        let message = f.wait_stalled(name, "NotAllowed", host).await;
        assert!(message.contains(why), "{name}: {message}");
        assert!(
            message.contains("GIT_ALLOWED_INTERNAL_HOSTS"),
            "{name}: {message}"
        );
        assert!(!message.contains(SSRF_PASSWORD), "{name}: {message}");
        let events = wait_for(T, &format!("{name}: a NotAllowed Event"), || async {
            let events = events_for(f.ns(), name);
            (events.contains("\"NotAllowed\"") && events.contains("is refused")).then_some(events)
        })
        .await;
        assert!(
            !events.contains(SSRF_PASSWORD),
            "{name}: the password is in an Event"
        );
    }
    // Nothing reached the git server behind `localhost`, and the operator says why in its log.
    assert!(
        server.requests().is_empty(),
        "the refused repository was contacted: {:?}",
        server.requests()
    );
    let logs = operator_logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("repository not allowed") && l.contains("localhost")),
        "no log line for the refused repository"
    );
    assert!(
        !logs.contains(SSRF_PASSWORD),
        "the password is in the operator's log"
    );
    // The same repository at the address the test install allows is read and deployed: the
    // refusal above is the host's, not the server's.
    let url = format!("{}/app.git", server.url);
    f.sn.ns
        .apply(&f.stack_yaml("allowed", "allowed", &url, "branch: main", ""));
    f.wait_ready("allowed").await;
    assert!(server.advertisements("app.git", "200") >= 1);
}
