//! Upgrade in place: the previous release of the operator, installed with Helm, is upgraded to
//! this checkout's chart and images while operations run and a burst of commits arrives.
//!
//! The previous release is the commit named in tests/previous-release, built by
//! tests/previous-release.sh (its binaries run as the images
//! `test.local/pulumi-{operator,runner}-previous`, its chart from that commit). Stacks of the
//! chaos workload (git `Delete`, git `Retain`, Program) start minute-long operations under it;
//! then, as the documented upgrade does, the CRDs are applied and `helm upgrade` rolls the
//! Deployment while new commits arrive. It asserts that:
//! - the old and the new operator pod ran side by side during the rollout, and the Lease
//!   passed from the old pod to the new one and to nothing else;
//! - every operation in flight at the upgrade (started by the old version, with the old
//!   runner) ended Succeeded, its end recorded while the new version led;
//! - no two operations of one Stack ever ran at once and no trigger succeeded twice (the
//!   invariants of tests/e2e_chaos.rs), no Update was left without an end, no stack lock was
//!   left, and no retained workspace was lost;
//! - every Stack reached the burst's last revision under the new version, which did not
//!   restart, and destroyed them all.
//!
//! Ignored: it sets the kustomize-installed operator aside while it runs, so tests/run.sh runs
//! it last, after tests/previous-release.sh.
//!
//!     UPGRADE_STACKS=9 cargo test --test helm_upgrade -- --ignored --nocapture

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::helm::{chart, helm_ok, KustomizeOperatorAside};
use test_support::workload::{
    apply_round, apply_round_sleeping, assert_invariants, assert_no_update_stranded, env_or, kind,
    observe, wait_converged, Kind, Observations,
};
use test_support::{kubectl, kubectl_result, repo_root, wait_until, StackFixture};

const RELEASE: &str = "upgrade-po";
const NAMESPACE: &str = "pulumi-operator-upgrade";
/// The Lease of the release (`<release fullname>-leader`).
const LEASE: &str = "upgrade-po-pulumi-operator-leader";
/// How long the operations in flight at the upgrade run: longer than the rollout.
const IN_FLIGHT_SECONDS: u32 = 60;
/// What the previous release's images are called on the local cluster (tests/local-cluster.sh).
const PREVIOUS_IMAGES: &str = "-previous";

/// The previous release's directory (bin/, chart/, commit), built by tests/previous-release.sh.
fn previous_release() -> std::path::PathBuf {
    let out = Command::new(repo_root().join("tests/previous-release.sh"))
        .arg("--print")
        .output()
        .expect("run tests/previous-release.sh --print");
    assert!(
        out.status.success(),
        "the previous release is not built; build it with: tests/previous-release.sh"
    );
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The release's operator pods: (name, image, phase).
fn operator_pods() -> Vec<(String, String, String)> {
    let (_, out, _) = kubectl_result(&[
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/instance={RELEASE}"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image} {.status.phase}{\"\\n\"}{end}",
    ]);
    out.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            Some((
                parts.next()?.to_string(),
                parts.next()?.to_string(),
                parts.next()?.to_string(),
            ))
        })
        .collect()
}

/// `name=<Complete status>/<Failed status>` of every Update of `ns`.
fn update_ends(ns: &str) -> BTreeMap<String, String> {
    let (_, out, _) = kubectl_result(&[
        "-n",
        ns,
        "get",
        "updates",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Complete\")].status}/{.status.conditions[?(@.type==\"Failed\")].status}{\"\\n\"}{end}",
    ]);
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

/// What the rollout looked like, polled from the API server.
#[derive(Clone, Default, Debug)]
struct Rollout {
    /// An old and a new operator pod seen Running at the same time.
    side_by_side: Option<(String, String)>,
    /// Every operator pod seen, old (the previous release's image) or new.
    old_pods: Vec<String>,
    new_pods: Vec<String>,
    /// The Lease's holders, in the order seen.
    holders: Vec<String>,
    /// When the Lease first named a new pod, from the upgrade's start.
    new_leader_after: Option<Duration>,
    /// The holder of the Lease when each in-flight Update was first seen ended, and how it
    /// ended (`<Complete>/<Failed>`: `True/True` failed).
    ended_under: BTreeMap<String, (String, String)>,
}

/// Polls the release's pods, its Lease and the in-flight Updates until `stop`.
fn watch_rollout(
    ns: String,
    in_flight: Vec<String>,
    stop: Arc<AtomicBool>,
) -> (Arc<Mutex<Rollout>>, std::thread::JoinHandle<()>) {
    let rollout = Arc::new(Mutex::new(Rollout::default()));
    let r = rollout.clone();
    let started = Instant::now();
    let handle = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let pods = operator_pods();
            let (_, holder, _) = kubectl_result(&[
                "-n",
                NAMESPACE,
                "get",
                "lease",
                LEASE,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ]);
            let holder = holder.trim().to_string();
            let ends = update_ends(&ns);
            let Ok(mut r) = r.lock() else { return };
            for (name, image, _) in &pods {
                let seen = if image.contains(PREVIOUS_IMAGES) {
                    &mut r.old_pods
                } else {
                    &mut r.new_pods
                };
                if !seen.contains(name) {
                    seen.push(name.clone());
                }
            }
            let running = |old: bool| {
                pods.iter()
                    .find(|(_, image, phase)| {
                        image.contains(PREVIOUS_IMAGES) == old && phase == "Running"
                    })
                    .map(|(name, _, _)| name.clone())
            };
            if let (Some(old), Some(new), None) = (running(true), running(false), &r.side_by_side) {
                r.side_by_side = Some((old, new));
            }
            if !holder.is_empty() && r.holders.last() != Some(&holder) {
                r.holders.push(holder.clone());
            }
            if r.new_leader_after.is_none() && r.new_pods.contains(&holder) {
                r.new_leader_after = Some(started.elapsed());
            }
            for name in &in_flight {
                match ends.get(name) {
                    Some(end) if end.starts_with("True/") && !r.ended_under.contains_key(name) => {
                        r.ended_under
                            .insert(name.clone(), (holder.clone(), end.clone()));
                    }
                    _ => {}
                }
            }
            drop(r);
            std::thread::sleep(Duration::from_millis(250));
        }
    });
    (rollout, handle)
}

/// The Updates whose operation pods run now, once one runs for each git Stack (the Program
/// Stacks' operations are short): (Update, its pod's images).
async fn operations_in_flight(ns: &str, stacks: usize) -> Vec<(String, String)> {
    let git_stacks = (0..stacks).filter(|i| kind(*i) != Kind::Program).count();
    let mut found = Vec::new();
    wait_until(
        Duration::from_secs(180),
        "an operation running for every git Stack under the previous release",
        || {
            let (_, out, _) = kubectl_result(&[
                "-n",
                ns,
                "get",
                "pods",
                "-l",
                "auto.pulumi.com/update-name",
                "--field-selector=status.phase=Running",
                "-o",
                "jsonpath={range .items[*]}{.metadata.labels.pulumi\\.com/stack-name} {.metadata.labels.auto\\.pulumi\\.com/update-name} {.spec.initContainers[*].image},{.spec.containers[*].image}{\"\\n\"}{end}",
            ]);
            let running: Vec<(String, String, String)> = out
                .lines()
                .filter_map(|l| {
                    let mut p = l.splitn(3, ' ');
                    Some((
                        p.next()?.to_string(),
                        p.next()?.to_string(),
                        p.next().unwrap_or_default().to_string(),
                    ))
                })
                .collect();
            let stacks_running: std::collections::BTreeSet<&str> =
                running.iter().map(|(s, _, _)| s.as_str()).collect();
            let enough = (0..stacks)
                .filter(|i| kind(*i) != Kind::Program)
                .all(|i| stacks_running.contains(format!("s{i}").as_str()));
            if enough {
                found = running
                    .into_iter()
                    .filter(|(stack, _, _)| {
                        stack
                            .strip_prefix('s')
                            .and_then(|i| i.parse::<usize>().ok())
                            .is_some_and(|i| kind(i) != Kind::Program)
                    })
                    .map(|(_, update, images)| (update, images))
                    .collect();
            }
            let done = enough && found.len() >= git_stacks;
            async move { done }
        },
    )
    .await;
    found
}

#[tokio::test]
#[ignore = "sets the kustomize-installed operator aside while it runs: tests/run.sh runs it last"]
async fn helm_upgrade_from_the_previous_release_while_operations_run() {
    let stacks = env_or("UPGRADE_STACKS", 6).max(3);
    let previous = previous_release();
    let commit = std::fs::read_to_string(previous.join("commit")).unwrap_or_default();
    println!("upgrade: from {} with {stacks} Stacks", commit.trim());
    let _aside = KustomizeOperatorAside::new(RELEASE, NAMESPACE).await;
    let previous_chart = previous.join("chart").to_string_lossy().into_owned();
    helm_ok(&[
        "install",
        RELEASE,
        &previous_chart,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        "image.registry=test.local,image.repository=pulumi-operator-previous",
        "--set",
        "runnerImage.registry=test.local,runnerImage.repository=pulumi-runner-previous",
        "--wait",
        "--timeout",
        "3m",
    ]);
    let before = operator_pods();
    assert!(
        !before.is_empty()
            && before
                .iter()
                .all(|(_, image, _)| image.contains(PREVIOUS_IMAGES)),
        "the previous release's operator is not what runs: {before:?}"
    );

    let f = StackFixture::create("upgrade", false).await;
    let ns = f.ns().to_string();
    let obs = Arc::new(Mutex::new(Observations::default()));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let stop_retained = Arc::new(AtomicBool::new(false));
    observe(
        f.sn.ns.client.clone(),
        &ns,
        obs.clone(),
        stop_watch.clone(),
        stop_retained.clone(),
    );

    // Operations start under the previous release, with its runner.
    apply_round_sleeping(&f, stacks, 1, IN_FLIGHT_SECONDS);
    let in_flight = operations_in_flight(&ns, stacks).await;
    for (update, images) in &in_flight {
        assert!(
            images.contains("pulumi-runner-previous"),
            "{update} was not started by the previous release: its pod runs {images}"
        );
    }
    let in_flight: Vec<String> = in_flight.into_iter().map(|(u, _)| u).collect();

    // The upgrade as documented: the CRDs first (Helm never upgrades them), then the chart,
    // while a burst of commits arrives.
    let stop_rollout = Arc::new(AtomicBool::new(false));
    let (rollout, rollout_watch) =
        watch_rollout(ns.clone(), in_flight.clone(), stop_rollout.clone());
    let upgrade_started = Instant::now();
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &format!("{}/crds", chart()),
    ]);
    let upgrade = std::thread::spawn(|| {
        helm_ok(&[
            "upgrade",
            RELEASE,
            &chart(),
            "--namespace",
            NAMESPACE,
            "--reset-values",
            "--wait",
            "--timeout",
            "3m",
        ])
    });
    apply_round(&f, stacks, 2);
    wait_until(
        Duration::from_secs(180),
        "the new version to take the Lease",
        || {
            let led = rollout
                .lock()
                .map(|r| r.new_leader_after.is_some())
                .unwrap_or(false);
            async move { led }
        },
    )
    .await;
    let sha = apply_round(&f, stacks, 3);
    upgrade.join().expect("helm upgrade");
    let upgrade_took = upgrade_started.elapsed();
    wait_until(
        Duration::from_secs(u64::from(IN_FLIGHT_SECONDS) + 180),
        "every operation in flight at the upgrade to end",
        || {
            let ended = rollout.lock().map(|r| r.ended_under.len()).unwrap_or(0);
            let all = in_flight.len();
            async move { ended >= all }
        },
    )
    .await;
    wait_converged(&f, stacks, "round-3", &sha, 600).await;
    stop_rollout.store(true, Ordering::Relaxed);
    let _ = rollout_watch.join();
    assert_no_update_stranded(&ns);

    let r = rollout.lock().expect("rollout").clone();
    println!(
        "upgrade: helm upgrade {:.0}s; old pods {:?}, new pods {:?}; side by side {:?}; \
         Lease holders {:?}, a new one {:.1}s after the upgrade began; in flight {:?}",
        upgrade_took.as_secs_f64(),
        r.old_pods,
        r.new_pods,
        r.side_by_side,
        r.holders,
        r.new_leader_after.unwrap_or_default().as_secs_f64(),
        r.ended_under
    );
    assert!(
        r.side_by_side.is_some(),
        "the old and new operator never ran side by side (pods {:?} then {:?})",
        r.old_pods,
        r.new_pods
    );
    let first_new = r
        .holders
        .iter()
        .position(|h| r.new_pods.contains(h))
        .expect("a new pod led");
    assert!(
        r.holders[..first_new]
            .iter()
            .all(|h| r.old_pods.contains(h))
            && r.holders[first_new..]
                .iter()
                .all(|h| r.new_pods.contains(h)),
        "the Lease did not pass once from the old pods to the new ones: {:?}",
        r.holders
    );
    for (update, (holder, end)) in &r.ended_under {
        assert!(
            !end.ends_with("/True"),
            "{update}, in flight at the upgrade, failed"
        );
        assert!(
            r.new_pods.contains(holder),
            "{update}, in flight at the upgrade, ended while {holder} led, not the new version"
        );
    }
    let restarts = kubectl(&[
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        &format!("app.kubernetes.io/instance={RELEASE}"),
        "-o",
        "jsonpath={.items[*].status.containerStatuses[*].restartCount}",
    ]);
    assert!(
        restarts.split_whitespace().all(|n| n == "0"),
        "the new operator restarted: {restarts}"
    );

    // Destroy under the new version.
    stop_retained.store(true, Ordering::Relaxed);
    for i in 0..stacks {
        kubectl(&[
            "-n",
            &ns,
            "delete",
            "stack",
            &format!("s{i}"),
            "--wait=false",
        ]);
    }
    wait_until(
        Duration::from_secs(300),
        "every Stack destroyed and gone",
        || async {
            kubectl(&["-n", &ns, "get", "stacks", "-o", "name"])
                .trim()
                .is_empty()
        },
    )
    .await;
    stop_watch.store(true, Ordering::Relaxed);
    assert_invariants(&obs, &f);
}
