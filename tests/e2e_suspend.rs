//! `spec.suspend` end to end, on the local cluster: a suspended Stack given a new commit, a
//! reconciliation request and a drift schedule starts nothing until it is resumed, and then
//! exactly one operation; suspending and resuming alone starts nothing; suspending during an
//! operation lets it finish; a suspended `destroyOnFinalize` Stack is still destroyed when
//! deleted.

use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use pulumi_operator_api::{Stack, StackUpdateStateMessage, Update, UpdateType};
use std::collections::BTreeSet;
use std::time::Duration;
use test_support::{kubectl, last_update, stack_ready, wait_until, StackFixture};

const T: Duration = Duration::from_secs(180);
const DRIFT_CHECK_ANNOTATION: &str = "pulumi.com/drift-check";

fn program(value: &str, seconds: u32) -> String {
    format!(
        "name: suspendapp\nruntime: yaml\nresources:\n  nap:\n    type: standin:index:Sleep\n    properties:\n      seconds: {seconds}\n  rec:\n    type: standin:index:Record\n    properties:\n      value: {value}\noutputs:\n  value: ${{rec.value}}\n"
    )
}

async fn set_suspend(f: &StackFixture, suspend: bool) {
    f.stacks()
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"suspend": suspend}})),
        )
        .await
        .expect("patch spec.suspend");
}

async fn request_sync(f: &StackFixture, value: &str) {
    f.stacks()
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                "pulumi.com/reconciliation-request": value
            }}})),
        )
        .await
        .expect("annotate the Stack");
}

fn condition(s: &Stack, type_: &str) -> Option<(String, String, String)> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn suspended(s: &Stack) -> bool {
    condition(s, "Suspended").is_some_and(|(status, _, _)| status == "True")
}

fn idle(s: &Stack) -> bool {
    s.status
        .as_ref()
        .is_some_and(|st| st.current_update.is_none())
}

async fn updates(f: &StackFixture) -> Vec<Update> {
    let api: Api<Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    api.list(&ListParams::default())
        .await
        .expect("list Updates")
        .items
}

async fn update_names(f: &StackFixture) -> BTreeSet<String> {
    updates(f).await.iter().map(|u| u.name_any()).collect()
}

/// The Updates that are not drift checks, by name, among `names`.
async fn operations_among(f: &StackFixture, names: &BTreeSet<String>) -> Vec<Update> {
    updates(f)
        .await
        .into_iter()
        .filter(|u| names.contains(&u.name_any()))
        .filter(|u| !u.annotations().contains_key(DRIFT_CHECK_ANNOTATION))
        .collect()
}

fn events(f: &StackFixture, reason: &str) -> String {
    kubectl(&[
        "-n",
        f.ns(),
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.kind=Stack,reason={reason}"),
        "-o",
        "jsonpath={.items[*].message}",
    ])
}

/// The check: a new commit, a reconciliation request and a drift schedule start
/// nothing while suspended; the resume starts exactly one `up`, which takes both; a second
/// suspend and resume with nothing new starts nothing.
#[tokio::test]
async fn a_suspended_stack_starts_nothing_until_resumed_then_exactly_one_operation() {
    let f = StackFixture::new("suspend").await;
    let first = f.repo.commit(&[("Pulumi.yaml", &program("one", 0))], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        "branch: main\n  resyncFrequencySeconds: 3",
        "  driftDetection:\n    schedules: [\"* * * * *\"]\n",
    ));
    f.wait_stack_for(T, "app", "the first update Ready", |s| {
        stack_ready(s) && last_update(s).last_successful_commit.as_deref() == Some(first.as_str())
    })
    .await;

    set_suspend(&f, true).await;
    // A drift check that had started finishes: suspending never interrupts an operation.
    let s = f
        .wait_stack_for(T, "app", "Suspended=True and nothing in flight", |s| {
            suspended(s) && idle(s)
        })
        .await;
    let (_, reason, _) = condition(&s, "Suspended").expect("Suspended condition");
    assert_eq!(reason, "Suspended");
    assert!(
        events(&f, "Suspended").contains("spec.suspend is true"),
        "no Suspended Event"
    );
    let table = kubectl(&["-n", f.ns(), "get", "stack", "app"]);
    assert!(
        table.contains("SUSPENDED") && table.contains("true"),
        "{table}"
    );
    let metric = format!(
        "pulumi_operator_stack_state{{namespace=\"{}\",name=\"app\",state=\"suspended\"}} 1",
        f.ns()
    );
    let metrics = test_support::operator_metrics();
    assert!(
        metrics.lines().any(|l| l == metric),
        "no {metric} in\n{metrics}"
    );
    // Let an operation that was being created when the suspend landed show up first.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = update_names(&f).await;

    let second = f.repo.commit(&[("Pulumi.yaml", &program("two", 0))], "v2");
    request_sync(&f, "sync-while-suspended").await;
    // Past a drift slot (every minute) and many resync periods (3 s).
    tokio::time::sleep(Duration::from_secs(75)).await;
    assert_eq!(
        update_names(&f).await,
        before,
        "a suspended Stack started an operation"
    );
    let s = f.stack("app").await;
    assert_eq!(
        last_update(&s).last_successful_commit.as_deref(),
        Some(first.as_str())
    );
    let (_, _, message) = condition(&s, "Suspended").expect("Suspended condition");
    assert!(
        message.contains("sync request \"sync-while-suspended\""),
        "{message}"
    );
    assert!(
        condition(&s, "Reconciling").is_none(),
        "a suspended Stack is not in progress: {:?}",
        s.status
    );

    set_suspend(&f, false).await;
    let resumed = f
        .wait_stack_for(T, "app", "the new commit and the request deployed", |s| {
            let last = last_update(s);
            stack_ready(s)
                && idle(s)
                && last.last_successful_commit.as_deref() == Some(second.as_str())
                && last.reconcile_request.as_deref() == Some("sync-while-suspended")
        })
        .await;
    assert!(!suspended(&resumed), "{:?}", resumed.status);
    assert!(events(&f, "Resumed").contains("spec.suspend is false"));
    // Let a second operation, if one were wrongly due, start.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let new: BTreeSet<String> = update_names(&f)
        .await
        .difference(&before)
        .cloned()
        .collect();
    let operations = operations_among(&f, &new).await;
    assert_eq!(
        operations.len(),
        1,
        "exactly one operation after the resume: {:?}",
        operations.iter().map(|u| u.name_any()).collect::<Vec<_>>()
    );
    assert_eq!(operations[0].spec.update_type, Some(UpdateType::Up));

    // Suspending and resuming with nothing new is not a change.
    let before = update_names(&f).await;
    set_suspend(&f, true).await;
    f.wait_stack_for(T, "app", "Suspended=True again", suspended)
        .await;
    set_suspend(&f, false).await;
    f.wait_stack_for(T, "app", "resumed", |s| !suspended(s) && stack_ready(s))
        .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let new: BTreeSet<String> = update_names(&f)
        .await
        .difference(&before)
        .cloned()
        .collect();
    let operations = operations_among(&f, &new).await;
    assert!(
        operations.is_empty(),
        "a resume with nothing new ran {:?}",
        operations.iter().map(|u| u.name_any()).collect::<Vec<_>>()
    );
}

/// Suspending while an `up` runs lets it finish and starts nothing after it, not even for a
/// sync request; deleting the still suspended `destroyOnFinalize` Stack destroys it.
#[tokio::test]
async fn suspending_during_an_operation_lets_it_finish_and_deletion_still_destroys() {
    let f = StackFixture::new("suspendrun").await;
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &program("slow", 20))], "v1");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  destroyOnFinalize: true\n",
    ));
    let current = |s: &Stack| {
        s.status
            .as_ref()
            .and_then(|s| s.current_update.as_ref())
            .and_then(|c| c.name.clone())
    };
    let running = f
        .wait_stack_for(T, "app", "the first update running", |s| {
            current(s).is_some()
        })
        .await;
    let update = current(&running).unwrap_or_default();
    set_suspend(&f, true).await;
    let done = f
        .wait_stack_for(T, "app", "the running update finished", |s| {
            idle(s) && last_update(s).name.as_deref() == Some(update.as_str())
        })
        .await;
    assert_eq!(
        last_update(&done).state,
        Some(StackUpdateStateMessage::Succeeded),
        "{:?}",
        done.status
    );
    assert!(suspended(&done), "{:?}", done.status);
    let before = update_names(&f).await;
    request_sync(&f, "ignored-while-suspended").await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(update_names(&f).await, before, "nothing new starts");

    f.stacks()
        .delete("app", &Default::default())
        .await
        .expect("delete the Stack");
    let api: Api<Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let destroyed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    wait_until(T, "the suspended Stack destroyed and gone", || {
        let api = api.clone();
        let stacks = f.stacks();
        let destroyed = destroyed.clone();
        async move {
            if let Ok(list) = api.list(&ListParams::default()).await {
                if list
                    .items
                    .iter()
                    .any(|u| u.spec.update_type == Some(UpdateType::Destroy))
                {
                    destroyed.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            stacks.get_opt("app").await.ok().flatten().is_none()
        }
    })
    .await;
    assert!(
        destroyed.load(std::sync::atomic::Ordering::SeqCst),
        "no destroy ran for the deleted suspended Stack"
    );
}
