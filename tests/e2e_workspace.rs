//! `workspaceReclaimPolicy` end to end on the local test cluster (the operator in-cluster, the
//! node agent standing in for the kubelet, for `kubectl exec` and for a volume provisioner):
//!
//! - `Delete` (the default): after a successful update nothing of the stack runs — no pod,
//!   StatefulSet or claim (`kubectl get pods,statefulsets,pvc -l pulumi.com/stack-name=...`);
//! - `Retain`: a StatefulSet keeps a workspace pod with the program at the deployed revision
//!   and the stack selected (`kubectl exec ... -- cat /share/workspace/Pulumi.yaml`,
//!   `pulumi stack ls`), whose cache (PULUMI_HOME) the next update's Job reads; it is kept
//!   after a failed update;
//! - switching the policy on a live Stack converges both ways.

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use pulumi_operator_api::{Stack, Workspace};
use std::time::{Duration, Instant};
use test_support::{
    kubectl, kubectl_result, wait_for, wait_until, GitRepo, GitServer, StackNamespace,
};

const T: Duration = Duration::from_secs(120);

fn program(value: &str) -> String {
    format!(
        "name: wsapp\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: {value}\noutputs:\n  value: ${{rec.value}}\n"
    )
}

/// A program whose update reads a file of the stack's cache (PULUMI_HOME): it succeeds only
/// when the update Job mounts the retained workspace's cache.
fn program_reading_the_cache(file: &str) -> String {
    format!(
        "name: wsapp\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: second\noutputs:\n  value: ${{rec.value}}\n  fromCache:\n    fn::readFile: /share/.pulumi/{file}\n"
    )
}

const FAILING: &str = "name: wsapp\nruntime: yaml\nresources:\n  broken:\n    type: standin:index:Fail\n    properties:\n      message: this program fails on purpose\n";

struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Fixture {
    sn: StackNamespace,
    repo: GitRepo,
    server: GitServer,
    _root: TempDir,
}

impl Fixture {
    async fn new(prefix: &str) -> Fixture {
        let sn = StackNamespace::new(prefix).await;
        let root = std::env::temp_dir().join(format!("e2e-ws-git-{}", sn.ns.name));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let repo = GitRepo::new(&root, "app");
        let server = GitServer::start(&root);
        Fixture {
            sn,
            repo,
            server,
            _root: TempDir(root),
        }
    }

    fn ns(&self) -> &str {
        &self.sn.ns.name
    }

    /// A Stack tracking `main`; `policy` is the `workspaceReclaimPolicy` line (or nothing).
    fn apply_stack(&self, name: &str, policy: Option<&str>) {
        self.apply_named_stack(name, "dev", policy)
    }

    /// The same, with the Pulumi stack's name.
    fn apply_named_stack(&self, name: &str, stack: &str, policy: Option<&str>) {
        let policy = policy
            .map(|p| format!("  workspaceReclaimPolicy: {p}\n"))
            .unwrap_or_default();
        self.sn.ns.apply(&format!(
            r#"apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: {name}
spec:
  stack: {stack}
  projectRepo: {url}/app.git
  branch: main
  backend: {backend}
  serviceAccountName: pulumi
  envRefs:
    PULUMI_CONFIG_PASSPHRASE:
      type: Secret
      secret: {{name: passphrase, key: passphrase}}
{policy}"#,
            url = self.server.url,
            backend = self.sn.backend_url,
        ));
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.sn.ns.kubectl(args)
    }

    fn stacks(&self) -> Api<Stack> {
        Api::namespaced(self.sn.ns.client.clone(), self.ns())
    }

    /// Waits until the Stack is Ready at its generation, with `commit` deployed.
    async fn wait_deployed(&self, name: &str, commit: &str) -> Stack {
        let stacks = self.stacks();
        wait_for(T, &format!("{name} to be Ready at {commit}"), || async {
            stacks.get(name).await.ok().filter(|s| {
                ready(s)
                    && s.status
                        .as_ref()
                        .and_then(|x| x.last_update.as_ref())
                        .and_then(|l| l.last_successful_commit.as_deref())
                        == Some(commit)
            })
        })
        .await
    }

    fn sync_now(&self, name: &str) {
        let value = format!("{:?}", Instant::now());
        self.kubectl(&[
            "annotate",
            "stack",
            name,
            &format!(
                "pulumi.com/reconciliation-request={}",
                value.replace([' ', '.'], "")
            ),
            "--overwrite",
        ]);
    }

    /// `kubectl get pods,statefulsets,pvc -l pulumi.com/stack-name=<stack>`: what of the stack
    /// is running or holds storage (finished Job pods are not running).
    fn running(&self, stack: &str) -> Vec<String> {
        let selector = format!("pulumi.com/stack-name={stack}");
        let out = self.kubectl(&[
            "get",
            "pods,statefulsets,pvc",
            "-l",
            &selector,
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name} {.status.phase}{\"\\n\"}{end}",
        ]);
        out.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .filter(|l| {
                !(l.starts_with("Pod/") && (l.ends_with(" Succeeded") || l.ends_with(" Failed")))
            })
            .map(str::to_string)
            .collect()
    }

    async fn workspace(&self, name: &str) -> Workspace {
        Api::<Workspace>::namespaced(self.sn.ns.client.clone(), self.ns())
            .get(name)
            .await
            .unwrap()
    }

    /// Waits for the retained workspace pod to be ready and the Workspace to report it.
    async fn wait_workspace_ready(&self, name: &str) {
        let api: Api<Workspace> = Api::namespaced(self.sn.ns.client.clone(), self.ns());
        let pod = format!("{name}-workspace-0");
        wait_until(T, "the retained workspace to be Ready", || async {
            api.get(name).await.ok().is_some_and(|w| {
                let st = w.status.unwrap_or_default();
                st.address.as_deref() == Some(pod.as_str())
                    && st.conditions.iter().flatten().any(|c| {
                        c.type_ == "Ready" && c.status == "True" && c.reason == "Succeeded"
                    })
            })
        })
        .await;
    }

    /// Runs a command in the workspace pod's `pulumi` container.
    fn exec(&self, stack: &str, command: &str) -> String {
        self.kubectl(&[
            "exec",
            &format!("{stack}-workspace-0"),
            "-c",
            "pulumi",
            "--",
            "sh",
            "-c",
            command,
        ])
    }
}

fn ready(s: &Stack) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        && s.status.as_ref().and_then(|x| x.observed_generation) == s.metadata.generation
}

/// `Delete` (the default): after the update nothing runs and no storage is held.
#[tokio::test]
async fn delete_policy_leaves_nothing_running() {
    let f = Fixture::new("wsdelete").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program("one"))], "one");
    f.apply_stack("app", None);
    f.wait_deployed("app", &sha).await;
    let running = f.running("app");
    assert!(running.is_empty(), "still running or held: {running:?}");
    // The update's Job ran (and its pod finished); no StatefulSet was ever made.
    assert!(!f
        .kubectl(&[
            "get",
            "jobs",
            "-l",
            "pulumi.com/stack-name=app",
            "-o",
            "name"
        ])
        .trim()
        .is_empty());
    let ws = f.workspace("app").await;
    assert_eq!(ws.status.unwrap_or_default().address, None);
}

/// `Retain`: the workspace pod holds the deployed revision with the stack selected, the next
/// update's Job reads what the workspace put in the cache, and a failed update keeps it.
#[tokio::test]
async fn retained_workspace_is_ready_to_exec_and_shares_its_cache() {
    let f = Fixture::new("wsretain").await;
    let sha1 = f
        .repo
        .commit(&[("Pulumi.yaml", &program("first"))], "first");
    f.apply_stack("app", Some("Retain"));
    f.wait_deployed("app", &sha1).await;
    f.wait_workspace_ready("app").await;

    // The StatefulSet, its pod and its claim carry the stack's label.
    let running = f.running("app");
    assert!(
        running.iter().any(|l| l == "StatefulSet/app-workspace"),
        "{running:?}"
    );
    assert!(
        running.iter().any(|l| l == "Pod/app-workspace-0 Running"),
        "{running:?}"
    );
    assert!(
        running
            .iter()
            .any(|l| l == "PersistentVolumeClaim/cache-app-workspace-0 Bound"),
        "{running:?}"
    );

    // kubectl exec finds the program at the deployed revision and the stack selected.
    let project = f.exec("app", "cat /share/workspace/Pulumi.yaml");
    assert!(project.contains("value: first"), "{project}");
    let ls = f.exec("app", "pulumi stack ls");
    assert!(ls.lines().any(|l| l.starts_with("dev*")), "{ls}");
    // The cache is PULUMI_HOME, on the claim.
    let home = f.exec("app", "echo $PULUMI_HOME; ls -A $PULUMI_HOME");
    assert!(
        home.starts_with("/share/.pulumi\n") && home.contains("workspaces"),
        "{home}"
    );

    // Something only the workspace pod writes into the cache...
    f.exec(
        "app",
        "echo written-in-the-workspace > /share/.pulumi/marker",
    );
    // ...is read by the program of the next update, in its Job.
    let sha2 = f.repo.commit(
        &[("Pulumi.yaml", &program_reading_the_cache("marker"))],
        "second",
    );
    f.sync_now("app");
    let s = f.wait_deployed("app", &sha2).await;
    let outputs = s.status.unwrap().outputs.unwrap();
    assert_eq!(outputs["fromCache"], "written-in-the-workspace\n");
    let update = f
        .stacks()
        .get("app")
        .await
        .unwrap()
        .status
        .unwrap()
        .last_update
        .unwrap()
        .name
        .unwrap();
    let job = Api::<Job>::namespaced(f.sn.ns.client.clone(), f.ns())
        .get(&update)
        .await
        .unwrap();
    let volumes = job.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert!(volumes.iter().any(|v| v
        .persistent_volume_claim
        .as_ref()
        .is_some_and(|c| c.claim_name == "cache-app-workspace-0")));

    // The workspace follows to the new revision (a new pod; the cache survives it).
    f.wait_workspace_ready("app").await;
    wait_until(T, "the workspace pod at the new revision", || async {
        kubectl_result(&[
            "-n",
            f.ns(),
            "exec",
            "app-workspace-0",
            "-c",
            "pulumi",
            "--",
            "cat",
            "/share/workspace/Pulumi.yaml",
        ])
        .1
        .contains("fn::readFile")
    })
    .await;
    assert_eq!(
        f.exec("app", "cat /share/.pulumi/marker"),
        "written-in-the-workspace\n"
    );

    // A failed update keeps the workspace, at the failing revision, for debugging.
    let sha3 = f.repo.commit(&[("Pulumi.yaml", FAILING)], "broken");
    f.sync_now("app");
    let stacks = f.stacks();
    wait_until(T, "the update of the broken program to fail", || async {
        stacks.get("app").await.ok().is_some_and(|s| {
            s.status.and_then(|st| st.last_update).is_some_and(|l| {
                l.last_attempted_commit.as_deref() == Some(sha3.as_str())
                    && l.state.as_ref().map(|s| s.as_str()) == Some("failed")
            })
        })
    })
    .await;
    f.wait_workspace_ready("app").await;
    wait_until(T, "the workspace pod at the failing revision", || async {
        kubectl_result(&[
            "-n",
            f.ns(),
            "exec",
            "app-workspace-0",
            "-c",
            "pulumi",
            "--",
            "cat",
            "/share/workspace/Pulumi.yaml",
        ])
        .1
        .contains("standin:index:Fail")
    })
    .await;
    assert!(f
        .running("app")
        .iter()
        .any(|l| l == "Pod/app-workspace-0 Running"));
}

/// Switching the policy of a live Stack converges both ways.
#[tokio::test]
async fn switching_the_reclaim_policy_converges_both_ways() {
    let f = Fixture::new("wsswitch").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program("one"))], "one");
    f.apply_stack("app", None);
    f.wait_deployed("app", &sha).await;
    assert!(f.running("app").is_empty());

    // Delete → Retain: the StatefulSet, its pod and its claim appear.
    f.kubectl(&[
        "patch",
        "stack",
        "app",
        "--type=merge",
        "-p",
        r#"{"spec":{"workspaceReclaimPolicy":"Retain"}}"#,
    ]);
    f.wait_workspace_ready("app").await;
    wait_until(T, "the StatefulSet, its pod and its claim", || async {
        let r = f.running("app");
        r.iter().any(|l| l.starts_with("StatefulSet/app-workspace"))
            && r.iter().any(|l| l == "Pod/app-workspace-0 Running")
            && r.iter()
                .any(|l| l == "PersistentVolumeClaim/cache-app-workspace-0 Bound")
    })
    .await;
    f.wait_deployed("app", &sha).await;

    // Retain → Delete: the StatefulSet and its pod go at once; the claim once no pod
    // references it (a finished update pod that mounted the cache keeps it until its Update is
    // deleted, by ttlAfterCompleted or, here, by hand).
    f.kubectl(&[
        "patch",
        "stack",
        "app",
        "--type=merge",
        "-p",
        r#"{"spec":{"workspaceReclaimPolicy":"Delete"}}"#,
    ]);
    f.wait_deployed("app", &sha).await;
    wait_until(T, "the StatefulSet and its pod to go", || async {
        let r = f.running("app");
        !r.iter()
            .any(|l| l.starts_with("StatefulSet/") || l.starts_with("Pod/"))
    })
    .await;
    let api: Api<Workspace> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    wait_until(T, "the Workspace to drop its address", || async {
        api.get("app")
            .await
            .ok()
            .is_some_and(|w| w.status.unwrap_or_default().address.is_none())
    })
    .await;
    kubectl(&[
        "-n",
        f.ns(),
        "delete",
        "updates",
        "-l",
        "pulumi.com/stack-name=app",
        "--wait=true",
    ]);
    wait_until(
        Duration::from_secs(150),
        "nothing left running or held",
        || async { f.running("app").is_empty() },
    )
    .await;

    // And back to Retain once more.
    f.kubectl(&[
        "patch",
        "stack",
        "app",
        "--type=merge",
        "-p",
        r#"{"spec":{"workspaceReclaimPolicy":"Retain"}}"#,
    ]);
    f.wait_workspace_ready("app").await;
    let project = f.exec("app", "cat /share/workspace/Pulumi.yaml");
    assert!(project.contains("value: one"), "{project}");
}

/// The lines of a container's log with their timestamps (seconds since the epoch).
fn timed_log(ns: &str, pod: &str, container: &str) -> Vec<(f64, String)> {
    let out = kubectl(&["-n", ns, "logs", pod, "-c", container, "--timestamps"]);
    out.lines()
        .filter_map(|l| {
            let (ts, text) = l.split_once(' ')?;
            let t: jiff::Timestamp = ts.parse().ok()?;
            Some((t.as_millisecond() as f64 / 1000.0, text.to_string()))
        })
        .collect()
}

/// Seconds between the runner's line starting with `step` and its next line.
fn step_seconds(log: &[(f64, String)], step: &str) -> Option<f64> {
    let i = log.iter().position(|(_, l)| l.contains(step))?;
    Some(log.get(i + 1)?.0 - log[i].0)
}

fn stats(v: &[f64]) -> String {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return "-".into();
    }
    format!(
        "median {:.3}s  min {:.3}s  max {:.3}s  (n={})",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1],
        v.len()
    )
}

/// Not a check — a measurement (run it with `--ignored --nocapture`): the same program is
/// updated N times by a `Delete` and by a `Retain` Stack; for every update Job it reports the
/// `fetch` init container, the runner's `pulumi install` step and the whole `pulumi`
/// container, from the log timestamps, and what the Job found in PULUMI_HOME.
#[tokio::test]
#[ignore]
async fn measure_update_jobs_with_and_without_the_cache() {
    let n: usize = std::env::var("MEASURE_UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let f = Fixture::new("wsmeasure").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &program("same"))], "one");
    f.apply_named_stack("del", "del", None);
    f.apply_named_stack("ret", "ret", Some("Retain"));
    f.wait_deployed("del", &sha).await;
    f.wait_deployed("ret", &sha).await;
    f.wait_workspace_ready("ret").await;
    let stacks = f.stacks();
    let mut fetch: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut install = fetch.clone();
    let mut total = fetch.clone();
    for i in 0..n {
        for name in ["del", "ret"] {
            let before = stacks
                .get(name)
                .await
                .unwrap()
                .status
                .unwrap()
                .last_update
                .unwrap()
                .name;
            f.kubectl(&[
                "annotate",
                "stack",
                name,
                &format!("pulumi.com/reconciliation-request=measure-{i}"),
                "--overwrite",
            ]);
            let s = wait_for(T, "the next update", || async {
                stacks.get(name).await.ok().filter(|s| {
                    ready(s)
                        && s.status
                            .as_ref()
                            .and_then(|x| x.last_update.as_ref())
                            .map(|l| l.name.clone())
                            != Some(before.clone())
                })
            })
            .await;
            // Read the logs at once: the bounded Update history prunes old Jobs.
            let job = s.status.unwrap().last_update.unwrap().name.unwrap();
            let pod = kubectl(&[
                "-n",
                f.ns(),
                "get",
                "pods",
                "-l",
                &format!("job-name={job}"),
                "-o",
                "jsonpath={.items[0].metadata.name}",
            ]);
            let stack = name.to_string();
            let fl = timed_log(f.ns(), &pod, "fetch");
            if let (Some(a), Some(b)) = (fl.first(), fl.last()) {
                fetch.entry(stack.clone()).or_default().push(b.0 - a.0);
            }
            let pl = timed_log(f.ns(), &pod, "pulumi");
            if let Some(d) = step_seconds(&pl, "running pulumi --non-interactive install") {
                install.entry(stack.clone()).or_default().push(d);
            }
            if let (Some(a), Some(b)) = (pl.first(), pl.last()) {
                total.entry(stack).or_default().push(b.0 - a.0);
            }
        }
    }
    let cache = f.exec(
        "ret",
        "du -sb $PULUMI_HOME; find $PULUMI_HOME -type f | head -20",
    );
    println!("\n=== {n} updates per policy, same commit (log timestamps of each update Job) ===");
    for (label, m) in [
        ("fetch init container", &fetch),
        ("pulumi install step", &install),
        ("pulumi container", &total),
    ] {
        for (stack, v) in m {
            let policy = if stack == "ret" { "Retain" } else { "Delete" };
            println!("{label:22} {policy:7} {}", stats(v));
        }
    }
    println!("PULUMI_HOME of the retained workspace (what a Retain Job reuses):\n{cache}");
}
