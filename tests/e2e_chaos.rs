//! Chaos: the operator killed with SIGKILL at random moments, and Updates, Jobs' pods and
//! Workspaces deleted mid-flight, while Stacks (git and Program sources, `Delete` and `Retain`,
//! with and without refresh) go through several revisions and are finally destroyed. Sized to
//! run in a few minutes; a longer run by hand:
//!
//!     CHAOS_STACKS=12 CHAOS_ROUNDS=8 cargo test --test e2e_chaos -- --nocapture
//!
//! (12 Stacks × (8 revisions + destroy) ≈ 100+ operations). It asserts that no two operations
//! of one Stack ever ran at once (seen from a single ordered watch of their pods), that no
//! trigger succeeded twice, that every Stack ends at its last revision with the right
//! `lastUpdate`, that no retained workspace or cache claim was deleted, and that no stack is
//! left locked; it prints the counts.

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use pulumi_operator_api::Stack;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::workload::{
    env_or, git_program, kind, observe, program_object, seed_from_env, stack_object, Kind,
    Observations, Rng,
};
use test_support::{
    kill_operator, kubectl, last_update, output_value, stack_ready, wait_until, StackFixture,
};

#[derive(Default, Debug)]
struct Chaos {
    operator_kills: usize,
    pods_deleted: usize,
    updates_deleted: usize,
    workspaces_deleted: usize,
}

/// One random act of chaos against the namespace (only operator kills once `deletions` is
/// off).
async fn strike(ns: &str, stacks: usize, rng: &mut Rng, counts: &mut Chaos, deletions: bool) {
    let index = rng.below(stacks as u64) as usize;
    let target = format!("s{index}");
    let roll = rng.below(100);
    if roll < 55 || !deletions {
        kill_operator().await;
        counts.operator_kills += 1;
        return;
    }
    let running = kubectl(&[
        "-n",
        ns,
        "get",
        "pods",
        "-l",
        &format!("pulumi.com/stack-name={target},auto.pulumi.com/update-name"),
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.auto\\.pulumi\\.com/update-name}{\"\\n\"}{end}",
    ]);
    let Some((pod, update)) = running.lines().next().and_then(|l| l.split_once(' ')) else {
        return;
    };
    if roll < 75 {
        kubectl(&["-n", ns, "delete", "pod", pod, "--wait=false"]);
        counts.pods_deleted += 1;
    } else if roll < 90 {
        kubectl(&["-n", ns, "delete", "update", update, "--wait=false"]);
        counts.updates_deleted += 1;
    } else if kind(index) != Kind::GitRetain {
        // Only Workspaces of `Delete` stacks: deleting a retained one resets its cache, as a
        // user would do on purpose.
        kubectl(&["-n", ns, "delete", "workspace", &target, "--wait=false"]);
        counts.workspaces_deleted += 1;
    }
}

#[tokio::test]
async fn chaos_kills_and_deletions_never_duplicate_or_lose_an_operation() {
    let stacks = env_or("CHAOS_STACKS", 6).max(3);
    let rounds = env_or("CHAOS_ROUNDS", 4).max(1);
    let seed = seed_from_env("CHAOS_SEED");
    println!("chaos: {stacks} stacks, {rounds} revisions each, seed {seed}");
    let started = Instant::now();
    let f = StackFixture::new("chaos").await;
    let ns = f.ns().to_string();
    // Every Pulumi process per stack, from the host: no two at once, whatever is killed.
    let pulumis = test_support::processes::ProcessObserver::start();
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

    // Chaos runs in the background while revisions are applied.
    let stop_chaos = Arc::new(AtomicBool::new(false));
    // Deletions make operations fail; they stop with the last revision so that no Stack
    // reaches its failure limit on the final generation.
    let deletions = Arc::new(AtomicBool::new(true));
    let chaos = {
        let stop = stop_chaos.clone();
        let deletions = deletions.clone();
        let ns = ns.clone();
        tokio::spawn(async move {
            let mut rng = Rng(seed);
            let mut counts = Chaos::default();
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(1500 + rng.below(3000))).await;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let delete = deletions.load(Ordering::Relaxed);
                strike(&ns, stacks, &mut rng, &mut counts, delete).await;
            }
            counts
        })
    };

    let mut rng = Rng(seed.rotate_left(17) | 1);
    let mut sha = String::new();
    for round in 1..=rounds {
        sha = f.repo.commit(
            &[("Pulumi.yaml", &git_program(round, 2))],
            &format!("round {round}"),
        );
        for i in 0..stacks {
            if kind(i) == Kind::Program {
                f.sn.ns.apply(&program_object(&format!("prog-{i}"), round));
            }
            f.sn.ns.apply(&stack_object(&f, i, &sha));
        }
        // Let some operations start, but not necessarily finish, before the next revision.
        tokio::time::sleep(Duration::from_millis(6000 + rng.below(8000))).await;
    }
    deletions.store(false, Ordering::Relaxed);
    let expected = format!("round-{rounds}");
    let api: Api<Stack> = f.stacks();
    let converged = |s: &Stack, i: usize| {
        stack_ready(s)
            && output_value(s) == expected
            && (kind(i) == Kind::Program
                || last_update(s).last_successful_commit.as_deref() == Some(sha.as_str()))
            && last_update(s).generation == s.metadata.generation
    };
    let deadline = Duration::from_secs(600);
    let wait_start = Instant::now();
    loop {
        let mut pending = Vec::new();
        for i in 0..stacks {
            match api.get(&format!("s{i}")).await {
                Ok(s) if converged(&s, i) => {}
                Ok(s) => pending.push(format!(
                    "s{i}: ready={} output={:?} last={:?}",
                    stack_ready(&s),
                    output_value(&s),
                    last_update(&s)
                )),
                Err(e) => pending.push(format!("s{i}: {e}")),
            }
        }
        if pending.is_empty() {
            break;
        }
        if wait_start.elapsed() > Duration::from_secs(60) {
            // Late in the run, chaos stops so that backoffs cannot outlast the deadline.
            stop_chaos.store(true, Ordering::Relaxed);
        }
        assert!(
            wait_start.elapsed() < deadline,
            "stacks did not converge: {pending:#?}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop_chaos.store(true, Ordering::Relaxed);
    let counts = chaos.await.unwrap_or_default();
    let retained_before: Vec<Option<String>> = futures::future::join_all(
        (0..stacks)
            .filter(|i| kind(*i) == Kind::GitRetain)
            .map(|i| {
                let sts: Api<StatefulSet> = Api::namespaced(f.sn.ns.client.clone(), &ns);
                async move {
                    sts.get_opt(&format!("s{i}-workspace"))
                        .await
                        .ok()
                        .flatten()
                        .and_then(|s| s.metadata.uid)
                }
            }),
    )
    .await;
    assert!(
        retained_before.iter().all(Option::is_some),
        "every Retain stack has its workspace"
    );

    // Destroy everything, with one more operator kill in the middle. Retained workspaces go
    // with their Stacks now: stop watching for their deletion.
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
    tokio::time::sleep(Duration::from_secs(2)).await;
    kill_operator().await;
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
    let locks = f.lock_files();

    let o = obs.lock().map(|o| {
        (
            o.overlaps.clone(),
            o.succeeded
                .iter()
                .filter(|(_, names)| names.len() > 1)
                .map(|(t, n)| format!("{t}: {n:?}"))
                .collect::<Vec<_>>(),
            o.updates_by_type
                .iter()
                .map(|(k, v)| format!("{k}={}", v.len()))
                .collect::<Vec<_>>(),
            o.failed_updates.len(),
            o.pods_seen.len(),
            o.retained_deleted.clone(),
        )
    });
    let (overlaps, duplicates, by_type, failed, pods, retained_deleted) = o.expect("observations");
    let operations: usize = by_type
        .iter()
        .filter_map(|x| x.split_once('=').and_then(|(_, n)| n.parse::<usize>().ok()))
        .sum();
    println!(
        "chaos: {operations} operations ({}), {failed} failed by chaos, {pods} pods; {counts:?}; {:.0}s",
        by_type.join(", "),
        started.elapsed().as_secs_f64()
    );
    assert!(
        overlaps.is_empty(),
        "two operations of one Stack ran at once: {overlaps:#?}"
    );
    assert!(
        duplicates.is_empty(),
        "a trigger succeeded more than once: {duplicates:#?}"
    );
    // Retained workspaces go only with their Stacks at the end (the watch stopped before).
    assert!(
        retained_deleted.is_empty(),
        "retained workspaces or cache claims were deleted while their Stacks lived: {retained_deleted:?}"
    );
    assert_eq!(locks, 0, "no stack is left locked");
    assert_eq!(
        pulumis.overlaps_in(&f.sn.backend_url),
        Vec::<String>::new(),
        "two Pulumi processes of one stack ran at once"
    );
}
