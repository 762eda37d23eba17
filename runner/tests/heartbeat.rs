//! The runner's side of the fencing heartbeat (runner/src/heartbeat.rs), end to end through
//! the real `pulumi-runner run` binary, without Kubernetes and without the real Pulumi CLI:
//!
//! - `ApiStandIn` stands in for the Kubernetes API server: a plain-HTTP server on loopback
//!   that serves only the `coordination.k8s.io/v1` Lease endpoints of one namespace (create,
//!   get, replace) with the API server's optimistic concurrency (a replace whose
//!   `resourceVersion` is not the current one is a 409 Conflict). The runner reaches it through
//!   a kubeconfig (`KUBECONFIG`) whose server is `http://127.0.0.1:PORT`. A [`Behaviour`] makes it
//!   answer the create and then leave every renewal unanswered (a node cut off from the API
//!   server), or change the holder before the first renewal (the operator revoking the Lease).
//! - `FAKE_PULUMI` stands in for the `pulumi` CLI (first on PATH): its `up` runs until told
//!   to stop (ignoring SIGINT, or exiting on it) and records the SIGINT it gets; its other
//!   commands succeed at once. The real CLI is not needed to show that the runner stops
//!   whatever `pulumi` process group it started, and the test then runs on any machine.

mod common;

use pulumi_operator_api::plan::{FailureReason, HeartbeatPlan, Operation, Outcome, RunResult};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LEASE: &str = "st-up-1-heartbeat";
const POD: &str = "pod-under-test";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
/// The test's periods: renew every 1 s, expire after 3 s, 2 s to stop.
const RENEW: u64 = 1;
const EXPIRE: u64 = 3;
const GRACE: u64 = 2;

const FAKE_PULUMI: &str = r#"#!/bin/sh
# Stands in for the pulumi CLI (see tests/heartbeat.rs).
[ "$1" = "--non-interactive" ] && shift
echo "$*" >> "$FAKE_DIR/invocations"
case "$1" in
  version) echo "v3.259.0" ;;
  up)
    trap 'echo SIGINT >> "$FAKE_DIR/sigint"; [ "$FAKE_ON_SIGINT" = exit ] && exit 130' INT
    echo $$ > "$FAKE_DIR/pid.tmp" && mv "$FAKE_DIR/pid.tmp" "$FAKE_DIR/pid"
    end=$(( $(date +%s) + ${FAKE_UP_SECONDS:-600} ))
    while [ "$(date +%s)" -lt "$end" ]; do sleep 0.1; done
    echo "update done" ;;
  stack)
    case "$2" in output) echo '{}' ;; history) echo '[]' ;; esac ;;
esac
exit 0
"#;

/// How the stand-in API server treats the Lease.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Behaviour {
    /// As the API server would.
    Healthy,
    /// The create answered, then every renewal left unanswered (the node is cut off).
    CutOffAfterCreate,
    /// The operator changes the holder just before the first renewal arrives.
    TakenOver,
    /// The create is refused: the serviceaccount may not create Leases.
    Forbidden,
}

#[derive(Default)]
struct State {
    lease: Option<Value>,
    version: u64,
    /// (when, method, path, body) of every request, in order.
    requests: Vec<(Instant, String, String, Value)>,
    /// When the operator's take-over was applied.
    revoked_at: Option<Instant>,
}

struct ApiStandIn {
    port: u16,
    state: Arc<Mutex<State>>,
}

impl ApiStandIn {
    fn start(behaviour: Behaviour, existing_holder: Option<&str>) -> ApiStandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mut state = State::default();
        if let Some(holder) = existing_holder {
            state.version = 1;
            state.lease = Some(stored(lease_body(holder), 1));
        }
        let state = Arc::new(Mutex::new(state));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let state = Arc::clone(&shared);
                std::thread::spawn(move || serve_connection(conn, behaviour, &state));
            }
        });
        ApiStandIn { port, state }
    }

    fn requests(&self, method: &str) -> Vec<(Instant, Value)> {
        let state = self.state.lock().expect("state");
        state
            .requests
            .iter()
            .filter(|(_, m, _, _)| m == method)
            .map(|(at, _, _, body)| (*at, body.clone()))
            .collect()
    }

    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let file = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: \
             http://127.0.0.1:{}\nusers:\n- name: runner\n  user:\n    token: t\ncontexts:\n- \
             name: standin\n  context:\n    cluster: standin\n    user: runner\n    namespace: \
             default\ncurrent-context: standin\n",
            self.port
        );
        std::fs::write(&file, text).expect("kubeconfig");
        file
    }
}

fn lease_body(holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": "default"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": EXPIRE},
    })
}

/// The Lease as stored, at `version`.
fn stored(mut lease: Value, version: u64) -> Value {
    lease["metadata"]["resourceVersion"] = json!(version.to_string());
    lease["metadata"]["uid"] = json!("lease-uid");
    lease
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": message, "reason": reason, "code": code});
    (code, body)
}

/// One request: (method, path, body), or `None` at the end of the connection.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, Value)> {
    let mut line = String::new();
    reader.read_line(&mut line).ok().filter(|n| *n > 0)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok().filter(|n| *n > 0)?;
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some((
        method,
        path,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    ))
}

fn serve_connection(conn: TcpStream, behaviour: Behaviour, state: &Mutex<State>) {
    let mut writer = conn.try_clone().expect("clone");
    let mut reader = BufReader::new(conn);
    while let Some((method, path, body)) = read_request(&mut reader) {
        let reply = {
            let mut state = state.lock().expect("state");
            state
                .requests
                .push((Instant::now(), method.clone(), path.clone(), body.clone()));
            answer(&mut state, behaviour, &method, &path, body)
        };
        let Some((code, body)) = reply else {
            // Unanswered: the connection stays open, as to an unreachable server.
            std::thread::sleep(Duration::from_secs(120));
            return;
        };
        let text = body.to_string();
        let head = format!(
            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            text.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(text.as_bytes()).is_err()
        {
            return;
        }
    }
}

/// The stand-in's answer; `None`: no answer.
fn answer(
    state: &mut State,
    behaviour: Behaviour,
    method: &str,
    path: &str,
    body: Value,
) -> Option<(u16, Value)> {
    let this = format!("{LEASES}/{LEASE}");
    match (method, path.split('?').next().unwrap_or("")) {
        ("POST", p) if p == LEASES => Some(create(state, behaviour, body)),
        ("GET", p) if p == this => Some(match &state.lease {
            Some(lease) => (200, lease.clone()),
            None => status(404, "NotFound", "leases not found"),
        }),
        ("PUT", p) if p == this => replace(state, behaviour, body),
        _ => Some(status(404, "NotFound", "not served by the stand-in")),
    }
}

fn create(state: &mut State, behaviour: Behaviour, body: Value) -> (u16, Value) {
    if behaviour == Behaviour::Forbidden {
        return status(
            403,
            "Forbidden",
            "leases.coordination.k8s.io is forbidden: User \"system:serviceaccount:team-a:runner\" \
             cannot create resource \"leases\" in API group \"coordination.k8s.io\" in the \
             namespace \"default\"",
        );
    }
    if state.lease.is_some() {
        return status(
            409,
            "AlreadyExists",
            "leases \"st-up-1-heartbeat\" already exists",
        );
    }
    state.version += 1;
    let lease = stored(body, state.version);
    state.lease = Some(lease.clone());
    (201, lease)
}

fn replace(state: &mut State, behaviour: Behaviour, body: Value) -> Option<(u16, Value)> {
    match behaviour {
        Behaviour::CutOffAfterCreate => return None,
        Behaviour::TakenOver if state.revoked_at.is_none() => {
            // The operator's revoke: the holder changes (a new resourceVersion).
            state.version += 1;
            state.lease = Some(stored(lease_body("the-operator"), state.version));
            state.revoked_at = Some(Instant::now());
        }
        _ => {}
    }
    let current = state.version.to_string();
    if body["metadata"]["resourceVersion"].as_str() != Some(current.as_str()) {
        return Some(status(409, "Conflict", "the object has been modified"));
    }
    state.version += 1;
    let lease = stored(body, state.version);
    state.lease = Some(lease.clone());
    Some((200, lease))
}

/// What one run of `pulumi-runner run` showed.
struct Run {
    result: RunResult,
    stderr: String,
    invocations: Vec<String>,
    /// When the stand-in `pulumi up` got its SIGINT, and when it was gone.
    sigint_at: Option<Instant>,
    dead_at: Option<Instant>,
}

/// Whether `pid` is gone (or a zombie: dead, not yet waited for).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Runs `pulumi-runner run` on an `up` with the stand-ins, watching the stand-in Pulumi.
fn run(api: &ApiStandIn, heartbeat: bool, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = api.kubeconfig(dir.path());
    let hb = heartbeat.then(|| HeartbeatPlan {
        renew_every_seconds: RENEW,
        expire_after_seconds: EXPIRE,
        stop_grace_seconds: GRACE,
        ..HeartbeatPlan::new(LEASE)
    });
    let mut env = env.to_vec();
    let kubeconfig = kubeconfig.to_string_lossy().into_owned();
    env.push(("KUBECONFIG", &kubeconfig));
    run_with(hb, &env, |_| ())
}

/// As [`run`], with the plan's heartbeat `hb`; `started` is called with the stand-in Pulumi's
/// directory once the runner is running.
fn run_with(hb: Option<HeartbeatPlan>, env: &[(&str, &str)], started: impl FnOnce(&Path)) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let (bin, fake, share) = (
        dir.path().join("bin"),
        dir.path().join("fake"),
        dir.path().join("share"),
    );
    for d in [&bin, &fake, &share.join("workspace")] {
        std::fs::create_dir_all(d).expect("dir");
    }
    std::fs::write(
        share.join("workspace/Pulumi.yaml"),
        "name: proj\nruntime: yaml\n",
    )
    .expect("project");
    let pulumi = bin.join("pulumi");
    std::fs::write(&pulumi, FAKE_PULUMI).expect("fake pulumi");
    let mut perms = std::fs::metadata(&pulumi).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&pulumi, perms).expect("chmod");
    let mut plan = common::plan(Operation::Up, None);
    plan.outputs_labels
        .insert("pulumi.com/stack-name".into(), "st".into());
    plan.heartbeat = hb;
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, serde_json::to_string(&plan).expect("plan")).expect("plan file");
    let (result_file, stderr_file) = (dir.path().join("result.json"), dir.path().join("stderr"));
    let mut child = Command::new(common::runner_bin())
        .args(["run", "--plan"])
        .arg(&plan_file)
        .arg("--share")
        .arg(&share)
        .arg("--result-file")
        .arg(&result_file)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", dir.path())
        .env("POD_NAME", POD)
        .env("FAKE_DIR", &fake)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_file).expect("stderr file"))
        .spawn()
        .expect("start the runner");
    started(&fake);
    let (sigint_at, dead_at) = watch(&mut child, &fake);
    let result = std::fs::read_to_string(&result_file).expect("result");
    Run {
        result: RunResult::from_termination_message(&result).expect("a result"),
        stderr: std::fs::read_to_string(&stderr_file).unwrap_or_default(),
        invocations: std::fs::read_to_string(fake.join("invocations"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect(),
        sigint_at,
        dead_at,
    }
}

/// Polls until the runner exits: when the stand-in Pulumi got SIGINT, when it was gone.
fn watch(child: &mut std::process::Child, fake: &Path) -> (Option<Instant>, Option<Instant>) {
    let start = Instant::now();
    let (mut sigint_at, mut dead_at) = (None, None);
    loop {
        let pid = std::fs::read_to_string(fake.join("pid")).ok();
        if sigint_at.is_none() && fake.join("sigint").exists() {
            sigint_at = Some(Instant::now());
        }
        if dead_at.is_none() && pid.as_deref().is_some_and(|p| gone(p.trim())) {
            dead_at = Some(Instant::now());
        }
        if child.try_wait().expect("wait").is_some() {
            return (sigint_at, dead_at);
        }
        if start.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("the runner did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[test]
fn pulumi_is_stopped_when_the_lease_cannot_be_renewed() {
    let api = ApiStandIn::start(Behaviour::CutOffAfterCreate, None);
    // The stand-in Pulumi ignores SIGINT: only the SIGKILL after the grace stops it.
    let ran = run(&api, true, &[]);
    let created = api.requests("POST");
    assert_eq!(created.len(), 1, "{}", ran.stderr);
    let created_at = created[0].0;
    let lease = &created[0].1;
    assert_eq!(lease["spec"]["holderIdentity"], POD);
    assert_eq!(lease["metadata"]["labels"]["pulumi.com/stack-name"], "st");
    assert_eq!(lease["metadata"]["ownerReferences"][0]["kind"], "Update");
    assert!(!api.requests("PUT").is_empty(), "no renewal was tried");
    let sigint = ran.sigint_at.expect("pulumi got no SIGINT");
    let dead = ran.dead_at.expect("pulumi never stopped");
    // Signalled at the deadline (the create's start + 3 s, plus at most a tick), not before.
    let signalled = secs(sigint - created_at);
    assert!(
        (2.5..=EXPIRE as f64 + 1.0).contains(&signalled),
        "SIGINT after {signalled:.2}s"
    );
    // SIGINT first, then SIGKILL once the grace is over (it ignores SIGINT), all within
    // expire + grace + 2 s.
    let killed = secs(dead - sigint);
    assert!(
        killed >= GRACE as f64 - 0.5,
        "killed {killed:.2}s after SIGINT"
    );
    let total = secs(dead - created_at);
    eprintln!(
        "SIGINT {signalled:.2}s after the create, dead {killed:.2}s later\n{}",
        ran.stderr
    );
    assert!(
        total <= (EXPIRE + GRACE + 2) as f64,
        "dead {total:.2}s after the create"
    );
    assert_eq!(ran.result.outcome, Outcome::Failed);
    assert_eq!(
        ran.result.reason,
        Some(FailureReason::HeartbeatLost),
        "{}",
        ran.stderr
    );
    assert!(
        ran.result
            .message
            .contains(&format!("{LEASE} could not be renewed for {EXPIRE}s")),
        "{}",
        ran.result.message
    );
    // Nothing ran after the stopped update (`pulumi version` runs side by side with the
    // operation, so it may be recorded after it).
    assert!(
        ran.invocations
            .iter()
            .rfind(|l| *l != "version")
            .is_some_and(|l| l.starts_with("up ")),
        "{:?}",
        ran.invocations
    );
}

#[test]
fn pulumi_is_stopped_at_once_when_the_operator_takes_the_lease_over() {
    let api = ApiStandIn::start(Behaviour::TakenOver, None);
    let ran = run(&api, true, &[("FAKE_ON_SIGINT", "exit")]);
    let revoked = api
        .state
        .lock()
        .expect("state")
        .revoked_at
        .expect("no renewal came");
    // The renewal's 409, the read that shows another holder, then the watchdog at once.
    let gets = api.requests("GET");
    assert!(
        !gets.is_empty(),
        "the Lease was not read after the conflict: {}",
        ran.stderr
    );
    let sigint = ran.sigint_at.expect("pulumi got no SIGINT");
    let after = secs(sigint - revoked);
    eprintln!("SIGINT {after:.2}s after the take-over\n{}", ran.stderr);
    assert!(after < 1.0, "SIGINT {after:.2}s after the take-over");
    let dead = ran.dead_at.expect("pulumi never stopped");
    assert!(secs(dead - sigint) < 1.0, "it exits on SIGINT");
    assert_eq!(
        ran.result.reason,
        Some(FailureReason::HeartbeatLost),
        "{}",
        ran.stderr
    );
    assert!(
        ran.result
            .message
            .contains("was taken over by the operator"),
        "{}",
        ran.result.message
    );
}

#[test]
fn renewals_keep_an_operation_longer_than_the_expiry_running_and_an_own_lease_is_kept() {
    // The Lease exists and is this pod's (an earlier create whose answer was lost).
    let api = ApiStandIn::start(Behaviour::Healthy, Some(POD));
    let ran = run(&api, true, &[("FAKE_UP_SECONDS", "5")]);
    assert_eq!(
        ran.result.outcome,
        Outcome::Succeeded,
        "{:?}\n{}",
        ran.result,
        ran.stderr
    );
    assert!(ran.sigint_at.is_none());
    assert!(
        ran.stderr.contains("is this pod's; keeping it"),
        "{}",
        ran.stderr
    );
    let renewals = api.requests("PUT");
    assert!(renewals.len() >= 3, "{} renewals in 5 s", renewals.len());
    for (n, (_, body)) in renewals.iter().enumerate() {
        // Each with the resourceVersion the one before got: never a blind write.
        assert_eq!(
            body["metadata"]["resourceVersion"],
            json!((n + 1).to_string())
        );
        assert_eq!(body["spec"]["holderIdentity"], POD);
        assert!(body["spec"]["renewTime"].is_string());
    }
}

#[test]
fn a_lease_held_by_another_pod_fails_before_pulumi_runs() {
    let api = ApiStandIn::start(Behaviour::Healthy, Some("pod-of-another-attempt"));
    let ran = run(&api, true, &[]);
    assert_eq!(
        ran.result.reason,
        Some(FailureReason::HeartbeatLost),
        "{}",
        ran.stderr
    );
    assert!(
        ran.result
            .message
            .contains("is held by pod-of-another-attempt"),
        "{}",
        ran.result.message
    );
    assert!(
        ran.invocations.is_empty(),
        "pulumi ran: {:?}",
        ran.invocations
    );
    assert!(api.requests("PUT").is_empty());
}

#[test]
fn a_forbidden_lease_names_the_missing_permission_before_pulumi_runs() {
    let api = ApiStandIn::start(Behaviour::Forbidden, None);
    let ran = run(&api, true, &[]);
    assert_eq!(
        ran.result.reason,
        Some(FailureReason::PermissionDenied),
        "{}",
        ran.stderr
    );
    assert!(
        ran.result.message.contains(
            "missing permission to create, get and update on leases.coordination.k8s.io in \
             namespace default for serviceaccount team-a/runner"
        ),
        "{}",
        ran.result.message
    );
    assert!(
        ran.invocations.is_empty(),
        "pulumi ran: {:?}",
        ran.invocations
    );
}

#[test]
fn without_a_heartbeat_the_runner_talks_to_no_api_server() {
    let api = ApiStandIn::start(Behaviour::Healthy, None);
    let ran = run(&api, false, &[("FAKE_UP_SECONDS", "0")]);
    assert_eq!(
        ran.result.outcome,
        Outcome::Succeeded,
        "{:?}\n{}",
        ran.result,
        ran.stderr
    );
    assert!(api.state.lock().expect("state").requests.is_empty());
    assert!(ran.invocations.iter().any(|l| l.starts_with("up ")));
}

/// The API server of the local test cluster as a pod sees it: (host, port, CA bundle).
fn cluster_api(dir: &Path) -> (String, String, std::path::PathBuf) {
    let server = test_support::kubectl(&[
        "config",
        "view",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.server}",
    ]);
    let authority = server.trim().trim_start_matches("https://").to_string();
    let (host, port) = authority.rsplit_once(':').expect("host:port");
    let ca = test_support::kubectl(&[
        "-n",
        "default",
        "get",
        "configmap",
        "kube-root-ca.crt",
        "-o",
        "jsonpath={.data.ca\\.crt}",
    ]);
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, ca).expect("CA bundle");
    (host.to_string(), port.to_string(), ca_file)
}

/// The runner's fence proven by a pod-bound token, against the local cluster's real API server
/// (no stand-in): a pod that never runs (held by a scheduling gate) is the token's pod; the
/// runner reviews the token every second while the stand-in Pulumi runs, and once the pod is
/// deleted the API server rejects the token and the runner stops Pulumi at once.
#[test]
fn pulumi_is_stopped_when_the_api_server_says_its_pod_was_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (host, port, ca) = cluster_api(dir.path());
    let pod = format!("fence-probe-{}", std::process::id());
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: default}}\nspec:\n  schedulingGates: [{{name: e2e.example/never}}]\n  containers: [{{name: c, image: none}}]\n"
    );
    let (ok, out, err) = test_support::kubectl_stdin(&["apply", "-f", "-"], &manifest);
    assert!(ok, "the probe pod: {out}{err}");
    let uid = test_support::kubectl(&[
        "-n",
        "default",
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let token = test_support::kubectl(&[
        "-n",
        "default",
        "create",
        "token",
        "default",
        "--bound-object-kind=Pod",
        &format!("--bound-object-name={pod}"),
        &format!("--bound-object-uid={}", uid.trim()),
        "--duration=10m",
    ]);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token.trim()).expect("token");
    let hb = HeartbeatPlan {
        renew_every_seconds: RENEW,
        expire_after_seconds: 30,
        stop_grace_seconds: GRACE,
        ..HeartbeatPlan::of_token(
            token_file.to_string_lossy().into_owned(),
            ca.to_string_lossy().into_owned(),
        )
    };
    let mut deleted_at = None;
    let ran = run_with(
        Some(hb),
        &[
            ("KUBERNETES_SERVICE_HOST", &host),
            ("KUBERNETES_SERVICE_PORT", &port),
            ("FAKE_ON_SIGINT", "exit"),
        ],
        |fake| {
            let start = Instant::now();
            while !fake.join("pid").exists() && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(50));
            }
            // A few reviews succeed first: the fence does not stop a live pod's Pulumi.
            std::thread::sleep(Duration::from_secs(4));
            assert!(
                !fake.join("sigint").exists(),
                "pulumi stopped while its pod lived"
            );
            test_support::kubectl(&["-n", "default", "delete", "pod", &pod, "--wait=true"]);
            deleted_at = Some(Instant::now());
        },
    );
    let deleted_at = deleted_at.expect("the pod was deleted");
    let sigint = ran.sigint_at.expect("pulumi got no SIGINT");
    let after = secs(sigint.saturating_duration_since(deleted_at));
    eprintln!(
        "SIGINT {after:.1}s after the pod's deletion\n{}",
        ran.stderr
    );
    // The API server may answer from its 10 s cache of successful authentications.
    assert!(
        after <= 10.0 + RENEW as f64 + 2.0,
        "SIGINT {after:.1}s after the deletion"
    );
    assert_eq!(ran.result.reason, Some(FailureReason::HeartbeatLost));
    assert!(
        ran.result.message.contains("its pod was deleted"),
        "{}",
        ran.result.message
    );
    assert!(
        ran.stderr.contains("proving this pod alive"),
        "{}",
        ran.stderr
    );
}

/// A pod that cannot reach the API server never runs Pulumi: the runner says so and fails.
#[test]
fn pulumi_never_runs_when_the_pod_cannot_prove_itself_alive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = closed.local_addr().expect("addr").port().to_string();
    drop(closed);
    let (token, ca) = (dir.path().join("token"), dir.path().join("ca.crt"));
    std::fs::write(&token, "not-a-token").expect("token");
    std::fs::write(&ca, "").expect("ca");
    let hb = HeartbeatPlan {
        renew_every_seconds: RENEW,
        expire_after_seconds: EXPIRE,
        stop_grace_seconds: GRACE,
        ..HeartbeatPlan::of_token(
            token.to_string_lossy().into_owned(),
            ca.to_string_lossy().into_owned(),
        )
    };
    let ran = run_with(
        Some(hb),
        &[
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", &port),
        ],
        |_| (),
    );
    assert_eq!(
        ran.result.reason,
        Some(FailureReason::HeartbeatLost),
        "{}",
        ran.stderr
    );
    assert!(
        !ran.invocations.iter().any(|i| i.starts_with("up")),
        "pulumi up ran: {:?}",
        ran.invocations
    );
    assert!(
        ran.result.message.contains("Pulumi did not run"),
        "{}",
        ran.result.message
    );
}
