//! A hostile tenant's corpus: Stacks, Programs, Updates and Workspaces that are invalid or
//! malicious (overflowing durations, SSRF annotations, path traversal, local repositories,
//! privilege escalation through templates, the operator's own namespace and identity, forged
//! termination messages, huge values), with canary secret values planted in every
//! secret-bearing field. The operator must stay up (no panic, no restart), give every bad
//! object a clear reason (or the API server refuses it), not loop, make no request to the
//! SSRF listener, and never let a canary out of its Secret.

use serde_json::Value;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use test_support::{kubectl, kubectl_result, wait_until, StackFixture, OPERATOR_NAMESPACE};

/// Canary values: each lives in exactly one Secret and must never be seen anywhere else.
const CANARIES: &[(&str, &str)] = &[
    ("token", "cnry-token-5c1f9d2e"),
    ("password", "cnry-password-7a3b0c41"),
    ("config", "cnry-config-e4d2a9f0"),
    ("env", "cnry-env-1b8c6d3e"),
    ("access", "cnry-access-9f2e7a15"),
    ("appkey", "cnry-appkey-3d5f8b20"),
    ("db", "cnry-db-admin-6e0a4c97"),
];

/// A loopback listener that counts connections (the SSRF target).
fn listener() -> (u16, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    std::thread::spawn(move || {
        for mut stream in l.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
        }
    });
    (port, seen)
}

fn operator_restarts() -> i64 {
    let out = kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=pulumi-operator",
        "-o",
        "jsonpath={range .items[*]}{.status.containerStatuses[0].restartCount}{\" \"}{end}",
    ]);
    out.split_whitespace()
        .filter_map(|n| n.parse::<i64>().ok())
        .sum()
}

fn operator_pods() -> String {
    kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=pulumi-operator",
        "-o",
        "jsonpath={.items[*].metadata.uid}",
    ])
}

/// What one operation costs in reconciles, all controllers together: its Update, Job and pod
/// each change state several times, and each change reconciles the Update and its Stack.
/// Measured on the local cluster at about 23 (`pulumi_operator_reconciles_total` against
/// `pulumi_operator_updates_total`); a margin for a loaded machine.
const RECONCILES_PER_OPERATION: u64 = 30;

/// The namespace's Updates: name → the Stack they belong to.
fn stack_updates(ns: &str) -> std::collections::BTreeMap<String, String> {
    kubectl(&[
        "-n",
        ns,
        "get",
        "updates.auto.pulumi.com",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.pulumi\\.com/stack-name}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|l| {
        let mut parts = l.split_whitespace();
        Some((parts.next()?.to_string(), parts.next().unwrap_or("-").to_string()))
    })
    .collect()
}

/// One hostile object and what must become of it.
struct Case {
    name: String,
    yaml: String,
    /// `None`: the API server may refuse it or the operator must give it a reason.
    namespace: Option<String>,
}

fn conditions_reason(obj: &Value) -> Option<String> {
    let conditions = obj["status"]["conditions"].as_array()?;
    // A Stalled or failed condition with a reason, or a finished Update with one.
    for c in conditions {
        let t = c["type"].as_str().unwrap_or_default();
        let status = c["status"].as_str().unwrap_or_default();
        let reason = c["reason"].as_str().unwrap_or_default();
        let message = c["message"].as_str().unwrap_or_default();
        let telling = matches!(
            (t, status),
            ("Stalled", "True")
                | ("Failed", "True")
                | ("Complete", "True")
                | ("Ready", "False")
                | ("Ready", "True")
        ) || (t == "Reconciling" && status == "True" && !reason.is_empty());
        if telling && !reason.is_empty() && !message.is_empty() {
            return Some(format!("{t}/{reason}: {message}"));
        }
    }
    None
}

#[tokio::test]
async fn a_hostile_tenant_cannot_take_the_operator_down_or_read_secrets() {
    let f = StackFixture::new("hostile").await;
    let ns = f.ns().to_string();
    let good = f.repo.commit(
        &[(
            "Pulumi.yaml",
            "name: e2e\nruntime: yaml\nconfig:\n  pw: {type: string, secret: true}\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: x}\noutputs:\n  pw: ${pw}\n",
        )],
        "v1",
    );
    // A program whose failure message carries a secret config value (redaction).
    let leaky = f.repo.commit(
        &[(
            "Pulumi.yaml",
            "name: e2e\nruntime: yaml\nconfig:\n  pw: {type: string, secret: true}\nresources:\n  boom:\n    type: standin:index:Fail\n    properties:\n      message: the password is ${pw}\n",
        )],
        "leaky",
    );
    let restarts_before = operator_restarts();
    let pods_before = operator_pods();
    let (port, ssrf_hits) = listener();
    // A repository that never answers (a tenant may point at any git server: that is not
    // the SSRF case, which is the operator calling an API with its own credentials).
    let (dead_repo_port, _) = listener();

    let mut secret =
        String::from("apiVersion: v1\nkind: Secret\nmetadata: {name: canaries}\nstringData:\n");
    for (k, v) in CANARIES {
        secret.push_str(&format!("  {k}: {v}\n"));
    }
    secret.push_str(
        "  sshkey: |\n    -----BEGIN OPENSSH PRIVATE KEY-----\n    cnry-sshline-0d9e8f7a6b5c\n    -----END OPENSSH PRIVATE KEY-----\n  appid: \"12345\"\n  installid: \"67890\"\n  username: tenant\n",
    );
    secret.push_str("---\napiVersion: v1\nkind: Secret\nmetadata: {name: db-admin}\nstringData:\n  password: cnry-db-admin-6e0a4c97\n");
    f.sn.ns.apply(&secret);

    // Each Stack on a Pulumi stack of its own: on one shared stack their operations would take
    // turns at its lock, and a canary could fail on the lock instead of on its program.
    let base = |name: &str, source: &str, extra: &str| f.own_stack_yaml(name, source, extra);
    let commit = format!("commit: {good}");
    let mut cases: Vec<Case> = Vec::new();
    let mut add = |name: &str, yaml: String| {
        cases.push(Case {
            name: name.to_string(),
            yaml,
            namespace: None,
        })
    };

    // 1. Durations that overflow or make no sense.
    for (i, d) in [
        "340282366920938463463374607431.9s",
        "340282366920938463463374607431.999999999h",
        "99999999999999999999999999999999999999h",
        "1e400h",
        "-1h",
        "NaNh",
        "1..5h",
        "2562048h",
        "9223372036854775807ns1h",
        "",
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("dur-{i}"),
            base(
                &format!("dur-{i}"),
                &commit,
                &format!("  prerequisites:\n  - name: other\n    requirement:\n      succeededWithinDuration: \"{d}\"\n"),
            ),
        );
    }
    for (i, ttl) in ["340282366920938463463374607431.9s", "-5m", "forever"]
        .iter()
        .enumerate()
    {
        add(
            &format!("ttl-{i}"),
            base(
                &format!("ttl-{i}"),
                &commit,
                &format!("  updateTemplate:\n    spec:\n      ttlAfterCompleted: \"{ttl}\"\n"),
            ),
        );
    }
    for (i, extra) in [
        "  resyncFrequencySeconds: 9223372036854775807\n  continueResyncOnCommitMatch: true\n",
        "  resyncFrequencySeconds: -9223372036854775808\n",
        "  retryMaxBackoffDurationSeconds: 9223372036854775807\n",
        "  retryMaxBackoffDurationSeconds: -1\n",
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("num-{i}"),
            base(&format!("num-{i}"), &commit, extra),
        );
    }

    // 2. SSRF: a GitHub API on loopback, plain http or not; local and command transports.
    for (i, api) in [
        format!("http://127.0.0.1:{port}/x?"),
        format!("https://127.0.0.1:{port}/x"),
        format!("https://localhost:{port}/api/v3"),
        format!("https://api.github.com@127.0.0.1:{port}/"),
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("ssrf-{i}"),
            format!(
                r#"apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: ssrf-{i}
  annotations: {{pulumi.com/github-api-url: "{api}"}}
spec:
  stack: dev
  projectRepo: https://github.com/org/private
  branch: main
  gitAuth:
    githubApp:
      appID: {{type: Secret, secret: {{name: canaries, key: appid}}}}
      installationID: {{type: Secret, secret: {{name: canaries, key: installid}}}}
      privateKey: {{type: Secret, secret: {{name: canaries, key: appkey}}}}
"#
            ),
        );
    }
    for (i, repo) in [
        "file:///etc".to_string(),
        "/var/run/secrets/kubernetes.io/serviceaccount".to_string(),
        "ext::sh -c touch% /tmp/pwned".to_string(),
        format!("http://127.0.0.1:{dead_repo_port}/repo.git"),
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("repo-{i}"),
            format!(
                "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {{name: repo-{i}}}\nspec:\n  stack: dev\n  projectRepo: \"{repo}\"\n  branch: main\n  gitAuth:\n    basicAuth:\n      userName: {{type: Secret, secret: {{name: canaries, key: username}}}}\n      password: {{type: Secret, secret: {{name: canaries, key: password}}}}\n"
            ),
        );
    }
    // 3. Path traversal.
    for (i, dir) in ["../../../../etc", "/etc", "a/../../b", "..", "x/.."]
        .iter()
        .enumerate()
    {
        add(
            &format!("dir-{i}"),
            base(
                &format!("dir-{i}"),
                &commit,
                &format!("  repoDir: \"{dir}\"\n"),
            ),
        );
    }
    for (i, stack) in ["../../etc/passwd", "a/b/c/d/e", "", "organization/../../x"]
        .iter()
        .enumerate()
    {
        add(
            &format!("stackname-{i}"),
            base(&format!("stackname-{i}"), &commit, "").replace(
                &format!("  stack: stackname-{i}\n"),
                &format!("  stack: \"{stack}\"\n"),
            ),
        );
    }
    // 4. Privilege through templates.
    for (i, template) in [
        "      podTemplate:\n        spec:\n          hostNetwork: true\n          hostPID: true\n",
        "      podTemplate:\n        spec:\n          containers:\n          - name: pulumi\n            securityContext: {privileged: true}\n",
        "      podTemplate:\n        spec:\n          volumes:\n          - name: host\n            hostPath: {path: /}\n          containers:\n          - name: pulumi\n            volumeMounts: [{name: host, mountPath: /host}]\n",
        "      serviceAccountName: default\n      podTemplate:\n        spec:\n          serviceAccount: pulumi-operator\n          automountServiceAccountToken: true\n",
        "      podTemplate:\n        spec:\n          nodeName: some-node\n          tolerations: [{operator: Exists}]\n",
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("esc-{i}"),
            base(
                &format!("esc-{i}"),
                &commit,
                &format!("  workspaceTemplate:\n    spec:\n{template}"),
            ),
        );
    }
    // 5. Cross-namespace and missing references.
    add(
        "xns-0",
        base("xns-0", &commit, "  envRefs:\n    X: {type: Secret, secret: {name: pulumi-operator-token, key: token}}\n"),
    );
    add(
        "xns-1",
        base(
            "xns-1",
            "",
            "  programRef: {name: \"../kube-system/program\"}\n",
        )
        .replace("  projectRepo: ", "  # projectRepo: "),
    );
    add(
        "xns-2",
        base(
            "xns-2",
            &commit,
            "  envSecrets: [\"../kube-system/admin\", \"\"]\n",
        ),
    );
    add(
        "xns-3",
        base("xns-3", "", "  fluxSource:\n    sourceRef: {apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: \"../../flux-system/x\"}\n")
            .replace("  projectRepo: ", "  # projectRepo: "),
    );
    // 6. Huge and oddly typed values.
    let huge = "z".repeat(300 * 1024);
    add(
        "huge-0",
        base(
            "huge-0",
            &commit,
            &format!("  config:\n    big: \"{huge}\"\n"),
        ),
    );
    let mut many = String::from("  config:\n");
    for k in 0..2000 {
        many.push_str(&format!("    k{k}: v{k}\n"));
    }
    add("huge-1", base("huge-1", &commit, &many));
    add(
        "type-0",
        base(
            "type-0",
            &commit,
            "  config:\n    nested: {a: [1, {b: null}, [[]]], c: 1.5e308}\n",
        ),
    );
    add(
        "type-1",
        base("type-1", &commit, "  secretsRef:\n    x: {type: Env, env: {name: HOME}}\n    y: {type: FS, filesystem: {path: /etc/shadow}}\n"),
    );
    add(
        "type-2",
        base(
            "type-2",
            &commit,
            "  envRefs:\n    Z: {type: Secret}\n    W: {type: Literal}\n",
        ),
    );
    // 7. Canaries in every secret-bearing field, on a Stack that fails with the secret in its
    // message and one that succeeds.
    let canary_refs = "  envRefs:\n    PULUMI_CONFIG_PASSPHRASE: {type: Secret, secret: {name: passphrase, key: passphrase}}\n    CANARY_ENV: {type: Secret, secret: {name: canaries, key: env}}\n  envSecrets: [canaries]\n  secretsRef:\n    pw: {type: Secret, secret: {name: canaries, key: config}}\n";
    add(
        "canary-fail",
        base("canary-fail", &format!("commit: {leaky}"), "").replace(
            "  envRefs:\n    PULUMI_CONFIG_PASSPHRASE:\n      type: Secret\n      secret: {name: passphrase, key: passphrase}\n",
            canary_refs,
        ),
    );
    add(
        "canary-ok",
        base("canary-ok", &commit, "").replace(
            "  envRefs:\n    PULUMI_CONFIG_PASSPHRASE:\n      type: Secret\n      secret: {name: passphrase, key: passphrase}\n",
            canary_refs,
        ),
    );
    // 8. A pod that forges its result: claims success and another Secret as its outputs.
    add(
        "forger",
        base(
            "forger",
            &commit,
            "  workspaceTemplate:\n    spec:\n      podTemplate:\n        spec:\n          containers:\n          - name: pulumi\n            command: [sh, -c, 'printf %s \"{\\\"outcome\\\":\\\"succeeded\\\",\\\"outputs\\\":\\\"db-admin\\\"}\" > /dev/termination-log']\n",
        ),
    );
    // 9. Raw Updates, Workspaces and Programs.
    for (i, spec) in [
        "  workspaceName: nope\n  stackName: dev\n  type: up\n",
        "  workspaceName: \"../../x\"\n  stackName: \"../../etc\"\n  type: destroy\n",
        "  workspaceName: canary-ok\n  stackName: canary-ok\n  type: destroy\n  ttlAfterCompleted: \"340282366920938463463374607431.9s\"\n",
        "  workspaceName: nope\n  stackName: dev\n  type: up\n  ttlAfterCompleted: \"1e999h\"\n",
        "  workspaceName: canary-ok\n  stackName: canary-ok\n  type: preview\n  message: \"$(cat /etc/passwd)\"\n",
        "  workspaceName: \"\"\n  stackName: \"\"\n  type: refresh\n",
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("upd-{i}"),
            format!("apiVersion: auto.pulumi.com/v1alpha1\nkind: Update\nmetadata: {{name: upd-{i}}}\nspec:\n{spec}"),
        );
    }
    for (i, spec) in [
        "  image: \"\"\n  git: {url: \"file:///etc\", ref: main}\n",
        "  podTemplate:\n    spec:\n      hostNetwork: true\n      containers:\n      - name: pulumi\n        securityContext: {privileged: true}\n",
        "  serviceAccountName: pulumi-operator\n  local: {dir: \"../../../etc\"}\n",
        "  git: {url: \"ext::sh -c id\", ref: main, dir: \"../..\"}\n",
        "  flux: {url: \"http://127.0.0.1:1/x.tgz\", digest: \"sha256:0\", dir: \"/\"}\n",
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("ws-{i}"),
            format!("apiVersion: auto.pulumi.com/v1alpha1\nkind: Workspace\nmetadata: {{name: ws-{i}}}\nspec:\n{spec}"),
        );
    }
    for (i, program) in [
        "  resources:\n    r:\n      type: \"../../evil\"\n".to_string(),
        format!("  outputs:\n    big: \"{}\"\n", "p".repeat(200 * 1024)),
        "  resources: {}\n  variables: {a: ${a}}\n".to_string(),
        "  packages: {evil: \"https://127.0.0.1:1/plugin.tgz\"}\n".to_string(),
        // Renders past what the operation's ConfigMap can hold (1 MiB).
        format!("  outputs:\n    big: \"{}\"\n", "p".repeat(1100 * 1024)),
    ]
    .iter()
    .enumerate()
    {
        add(
            &format!("prog-{i}"),
            format!("apiVersion: pulumi.com/v1\nkind: Program\nmetadata: {{name: prog-{i}}}\nprogram:\n{program}"),
        );
        add(
            &format!("progstack-{i}"),
            base(
                &format!("progstack-{i}"),
                "",
                &format!("  programRef: {{name: prog-{i}}}\n"),
            )
            .replace("  projectRepo: ", "  # projectRepo: "),
        );
    }
    // 10. The operator's own namespace and identity.
    cases.push(Case {
        name: "own-ns".into(),
        yaml: format!(
            "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {{name: hostile-own-ns}}\nspec:\n  stack: dev\n  projectRepo: {url}\n  commit: {good}\n  backend: {backend}\n  serviceAccountName: pulumi-operator\n",
            url = f.url(),
            backend = f.sn.backend_url
        ),
        namespace: Some(OPERATOR_NAMESPACE.into()),
    });

    assert!(cases.len() >= 60, "the corpus has {} objects", cases.len());

    // Apply each on its own: a refusal by the API server is a fine outcome.
    let mut refused = Vec::new();
    let mut accepted = Vec::new();
    for c in &cases {
        let ns = c.namespace.clone().unwrap_or_else(|| ns.clone());
        let (ok, _, err) =
            test_support::kubectl_stdin(&["-n", &ns, "apply", "--server-side", "-f", "-"], &c.yaml);
        if ok {
            accepted.push(c);
        } else {
            assert!(
                !err.trim().is_empty(),
                "{}: refused without a reason",
                c.name
            );
            refused.push((c.name.clone(), err));
        }
    }
    eprintln!(
        "{} objects: {} accepted, {} refused by the API server",
        cases.len(),
        accepted.len(),
        refused.len()
    );

    // Every accepted object gets a reason (or, for a fine one, reaches an end).
    let kinds =
        "stacks.pulumi.com,updates.auto.pulumi.com,workspaces.auto.pulumi.com,programs.pulumi.com";
    let no_reason = || {
        let mut missing = Vec::new();
        for c in &accepted {
            let ns = c.namespace.clone().unwrap_or_else(|| ns.clone());
            let (kind, name) = match c.yaml.lines().find(|l| l.starts_with("kind: ")) {
                Some("kind: Update") => ("updates.auto.pulumi.com", c.name.clone()),
                Some("kind: Workspace") => ("workspaces.auto.pulumi.com", c.name.clone()),
                Some("kind: Program") => continue,
                _ if c.namespace.is_some() => ("stacks.pulumi.com", "hostile-own-ns".into()),
                _ => ("stacks.pulumi.com", c.name.clone()),
            };
            let (ok, out, _) = kubectl_result(&["-n", &ns, "get", kind, &name, "-o", "json"]);
            let obj: Value = if ok {
                serde_json::from_str(&out).unwrap_or_default()
            } else {
                Value::Null
            };
            if conditions_reason(&obj).is_none() {
                missing.push(c.name.clone());
            }
        }
        missing
    };
    wait_until(
        Duration::from_secs(400),
        "a reason on every hostile object",
        || async {
            let missing = no_reason();
            if !missing.is_empty() {
                eprintln!("still without a reason: {missing:?}");
            }
            missing.is_empty()
        },
    )
    .await;

    // The program too large for an operation is refused before any operation, saying why.
    let big = kubectl(&["-n", &ns, "get", "stack", "progstack-4", "-o", "json"]);
    assert!(
        big.contains("\"SpecInvalid\"") && big.contains("more than the 1000000"),
        "{}",
        &big[..big.len().min(3000)]
    );

    // No hot loop: over a quiet minute, reconciles stay bounded. Stacks whose operations fail
    // are retried with backoff (10 s, 30 s, 90 s, ...), so an operation may still start and
    // finish in that minute, and each costs the reconciles of its Update, Job and pods. A loop
    // shows as reconciles that no operation explains, or as a Stack retrying faster than its
    // backoff.
    let metrics0 = test_support::operator_metrics();
    let updates0 = stack_updates(&ns);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let metrics1 = test_support::operator_metrics();
    let updates1 = stack_updates(&ns);
    const RECONCILES: &str = "pulumi_operator_reconciles_total";
    let reconciles = test_support::metric_total(&metrics1, RECONCILES)
        .saturating_sub(test_support::metric_total(&metrics0, RECONCILES));
    // By controller, for whoever reads a failure: the counter's series before and after.
    let series = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(RECONCILES))
            .map(str::to_string)
            .collect()
    };
    let (before, after) = (series(&metrics0), series(&metrics1));
    let finished =
        test_support::metric_total(&metrics1, "pulumi_operator_updates_total").saturating_sub(
            test_support::metric_total(&metrics0, "pulumi_operator_updates_total"),
        );
    let mut started_per_stack = std::collections::BTreeMap::<String, u32>::new();
    for (name, stack) in updates1.iter().filter(|(n, _)| !updates0.contains_key(*n)) {
        eprintln!("operation started in the quiet minute: {stack}/{name}");
        *started_per_stack.entry(stack.clone()).or_insert(0) += 1;
    }
    let unexplained = reconciles.saturating_sub(RECONCILES_PER_OPERATION * finished);
    let per_object = unexplained as f64 / accepted.len() as f64;
    eprintln!(
        "reconciles in a quiet minute: {reconciles} by controller {after:?} (before {before:?}); \
         {finished} operations finished, {} started; {unexplained} unexplained \
         ({per_object:.2} per object)",
        started_per_stack.values().sum::<u32>()
    );
    assert!(
        per_object < 3.0,
        "reconciles kept going: {reconciles} in 60 s for {} objects, {finished} operations",
        accepted.len()
    );
    // Retries wait 10 s, then 30 s, then 90 s: a Stack young enough to be in its first cooldowns
    // can start three operations in a minute, never more.
    for (stack, started) in &started_per_stack {
        assert!(
            *started <= 3,
            "{stack} started {started} operations in a quiet minute: its backoff did not hold"
        );
    }

    // The operator stayed up.
    assert_eq!(
        operator_restarts(),
        restarts_before,
        "the operator restarted"
    );
    assert_eq!(
        operator_pods(),
        pods_before,
        "the operator pod was replaced"
    );
    let log = kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "logs",
        "deployment/pulumi-operator",
        "--tail=-1",
    ]);
    assert!(!log.contains("panicked"), "the operator panicked:\n{log}");
    // The SSRF listener saw nothing.
    assert_eq!(
        ssrf_hits.load(Ordering::SeqCst),
        0,
        "the operator called the SSRF listener"
    );

    // The operator's namespace and identity were refused with a reason.
    let own = kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "stack",
        "hostile-own-ns",
        "-o",
        "json",
    ]);
    assert!(own.contains("NotAllowed"), "{own}");
    let own_jobs = kubectl(&["-n", OPERATOR_NAMESPACE, "get", "jobs", "-o", "name"]);
    assert!(
        own_jobs.trim().is_empty(),
        "a Job ran in the operator's namespace: {own_jobs}"
    );
    kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "patch",
        "stack",
        "hostile-own-ns",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":[]}}"#,
    ]);
    kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "delete",
        "stack",
        "hostile-own-ns",
        "--wait=false",
    ]);

    // The forged result published nothing of db-admin.
    let forger = kubectl(&["-n", &ns, "get", "stack", "forger", "-o", "json"]);
    assert!(!forger.contains("cnry-db-admin"), "{forger}");

    // No canary anywhere outside its Secret.
    let mut everything = String::new();
    everything.push_str(&log);
    everything.push_str(&kubectl(&["-n", &ns, "get", kinds, "-o", "json"]));
    everything.push_str(&kubectl(&["-n", &ns, "get", "events", "-o", "json"]));
    everything.push_str(&kubectl(&[
        "-n",
        &ns,
        "get",
        "jobs,pods,statefulsets",
        "-o",
        "json",
    ]));
    everything.push_str(&kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "events",
        "-o",
        "json",
    ]));
    let jobs = kubectl(&["-n", &ns, "get", "jobs", "-o", "name"]);
    for job in jobs.lines() {
        let (_, out, err) = kubectl_result(&["-n", &ns, "logs", job, "--all-containers"]);
        everything.push_str(&out);
        everything.push_str(&err);
    }
    let mut leaked = Vec::new();
    for (_, v) in CANARIES {
        if everything.contains(v) {
            leaked.push(*v);
        }
    }
    if everything.contains("cnry-sshline") {
        leaked.push("ssh key line");
    }
    for (k, v) in CANARIES {
        // Encoded forms: base64 of the whole value.
        let b64 = base64_encode(v.as_bytes());
        if everything.contains(&b64) {
            leaked.push(k);
        }
    }
    let context: Vec<String> = leaked
        .iter()
        .filter_map(|c| {
            everything.find(c).map(|at| {
                let from = at.saturating_sub(200);
                let to = (at + 200).min(everything.len());
                everything.get(from..to).unwrap_or_default().to_string()
            })
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "canaries leaked: {leaked:?}\n{context:#?}"
    );
}

fn base64_encode(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
