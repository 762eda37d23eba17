//! The Stack controller's reconcile against a mocked API server, for a Stack covered by a
//! StackPolicy whose pack has no revision yet: waiting for a pack that is still being resolved
//! is `Reconciling` (`WaitingForPolicyPack`, with one Normal Event when the wait begins), never
//! `Stalled`; a pack that failed to resolve does not wait: the operation is created, fails for
//! it (`PolicyPackFailed`) and stalls the Stack.

use crate::runtime::context::{Context, Stores};
use crate::runtime::index;
use crate::stack::policy_check::REASON_WAITING_FOR_POLICY_PACK;
use http::{Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::watcher;
use pulumi_operator_api::policy::{
    PolicyPackGitSource, PolicyPackSpec, PolicyPackStatus, StackPolicy, StackPolicySpec,
    StackPolicyStatus,
};
use pulumi_operator_api::{names, Stack, StackStatus};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// One request the reconcile made: method, path (without the query) and JSON body.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    path: String,
    body: Value,
}

fn stack(status: Option<StackStatus>) -> Stack {
    let mut s: Stack = serde_json::from_value(json!({
        "apiVersion": "pulumi.com/v1", "kind": "Stack",
        "metadata": {"name": "web", "namespace": "apps", "uid": "stack-uid", "generation": 1,
                     "resourceVersion": "7", "finalizers": [names::FINALIZER]},
        "spec": {"stack": "dev", "projectRepo": "https://git.example/app.git",
                 "commit": "b".repeat(40), "backend": "file:///state"}
    }))
    .unwrap();
    s.status = status;
    s
}

fn namespace() -> k8s_openapi::api::core::v1::Namespace {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "apps", "labels": {"kubernetes.io/metadata.name": "apps"}}
    }))
    .unwrap()
}

/// A StackPolicy covering every namespace, with one pack tracking a branch, and what its
/// status says of that pack for the current generation.
fn policy(pack: PolicyPackStatus) -> StackPolicy {
    let mut p = StackPolicy::new(
        "limits",
        StackPolicySpec {
            packs: vec![PolicyPackSpec {
                name: "k8s-limits".into(),
                git: Some(PolicyPackGitSource {
                    url: "https://git.example/packs.git".into(),
                    commit: None,
                    branch: Some("main".into()),
                    dir: None,
                    git_auth: None,
                }),
                ..Default::default()
            }],
            namespace_selector: LabelSelector::default(),
            stack_selector: None,
        },
    );
    p.metadata.generation = Some(1);
    p.status = Some(StackPolicyStatus {
        observed_generation: Some(1),
        packs: vec![pack],
        ..Default::default()
    });
    p
}

/// The pack as the StackPolicy controller writes it while its branch is being read.
fn being_resolved() -> PolicyPackStatus {
    PolicyPackStatus {
        name: "k8s-limits".into(),
        ..Default::default()
    }
}

fn failed_to_resolve() -> PolicyPackStatus {
    PolicyPackStatus {
        name: "k8s-limits".into(),
        error: Some("cannot read branch \"main\": repository not found".into()),
        ..Default::default()
    }
}

fn store<K>(objects: Vec<K>) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store::<K>();
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(o));
    }
    reader
}

/// What the mocked API server answers: a status write returns the Stack with that status,
/// other writes what was sent, a read of the ServiceAccount the account; anything else 404.
fn answer(call: &Call, stored: &Value) -> (u16, Value) {
    match call.method.as_str() {
        "POST" => (201, call.body.clone()),
        "PATCH" if call.path.ends_with("/stacks/web/status") => {
            let mut s = stored.clone();
            s["status"] = call.body["status"].clone();
            s["metadata"]["resourceVersion"] = "8".into();
            (200, s)
        }
        "PATCH" => (200, call.body.clone()),
        "GET" if call.path.contains("/serviceaccounts/") => (
            200,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "pulumi", "namespace": "apps"}}),
        ),
        _ => (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "reason": "NotFound", "code": 404, "message": "not found"}),
        ),
    }
}

/// A context whose client talks to the mocked API server, with `policy` in the policy cache.
fn mocked(stack: &Stack, policy: StackPolicy) -> (Arc<Context>, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let recorded = calls.clone();
    let stored = serde_json::to_value(stack).unwrap();
    let service = tower::service_fn(move |request: Request<Body>| {
        let recorded = recorded.clone();
        let stored = stored.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let call = Call {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            };
            recorded.lock().unwrap().push(call.clone());
            let (code, answer) = answer(&call, &stored);
            Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
        }
    });
    let client = kube::Client::new(service, "default");
    let config = <crate::runtime::config::Config as clap::Parser>::try_parse_from([
        "op",
        "--runner-image",
        "runner:test",
    ])
    .unwrap();
    let stores = Stores {
        stacks: store(vec![stack.clone()]),
        updates: store(vec![]),
        programs: store(vec![]),
        workspaces: store(vec![]),
        jobs: store(vec![]),
        pods: store(vec![]),
        pods_by_update: index::Index::new(|_| None),
        pods_by_stack: index::Index::new(|_| None),
        updates_by_stack: index::Index::new(|_| None),
        policies: store(vec![policy]),
        namespaces: store(vec![namespace()]),
    };
    let ctx = Context::new(
        client,
        config,
        Arc::new(crate::runtime::metrics::Metrics::default()),
        stores,
        &CancellationToken::new(),
    );
    (Arc::new(ctx), calls)
}

fn calls_of(calls: &Arc<Mutex<Vec<Call>>>) -> Vec<Call> {
    calls.lock().unwrap().clone()
}

/// The status the reconcile wrote last.
fn written(calls: &[Call]) -> StackStatus {
    let write = calls
        .iter()
        .rev()
        .find(|c| c.method == "PATCH" && c.path.ends_with("/stacks/web/status"))
        .unwrap_or_else(|| panic!("no status write: {calls:#?}"));
    serde_json::from_value(write.body["status"].clone()).unwrap()
}

fn condition<'a>(
    st: &'a StackStatus,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    st.conditions.iter().flatten().find(|c| c.type_ == kind)
}

/// The reasons of the Events the reconcile published.
fn events(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/events"))
        .map(|c| c.body["reason"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn created_updates(calls: &[Call]) -> usize {
    calls
        .iter()
        .filter(|c| c.method == "POST" && c.path.ends_with("/updates"))
        .count()
}

#[tokio::test]
async fn a_stack_waiting_for_a_pack_being_resolved_is_reconciling_not_stalled() {
    let new = stack(None);
    let (ctx, calls) = mocked(&new, policy(being_resolved()));
    let action = super::reconcile::reconcile(Arc::new(new), ctx)
        .await
        .expect("the reconcile succeeds");
    // The policy's status change reconciles the Stack again (`stacks_of_policies`): no timer.
    assert_eq!(action, Action::await_change());
    let calls = calls_of(&calls);
    assert_eq!(
        created_updates(&calls),
        0,
        "ran without its pack: {calls:#?}"
    );
    let st = written(&calls);
    let rec = condition(&st, names::CONDITION_RECONCILING).expect("Reconciling");
    assert_eq!(rec.status, "True");
    assert_eq!(rec.reason, REASON_WAITING_FOR_POLICY_PACK);
    assert!(
        rec.message
            .contains("policy pack \"k8s-limits\" of StackPolicy \"limits\""),
        "{}",
        rec.message
    );
    assert!(
        rec.message.contains("still being resolved"),
        "{}",
        rec.message
    );
    let ready = condition(&st, names::CONDITION_READY).expect("Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason, names::REASON_NOT_READY_IN_PROGRESS);
    assert!(
        condition(&st, names::CONDITION_STALLED).is_none(),
        "{st:#?}"
    );
    assert_eq!(events(&calls), [REASON_WAITING_FOR_POLICY_PACK]);

    // Reconciled again while it still waits: no new Event, and nothing new to write.
    let waiting = stack(Some(st));
    let (ctx, calls) = mocked(&waiting, policy(being_resolved()));
    let action = super::reconcile::reconcile(Arc::new(waiting), ctx)
        .await
        .expect("the reconcile succeeds");
    assert_eq!(action, Action::await_change());
    let calls = calls_of(&calls);
    assert!(events(&calls).is_empty(), "{calls:#?}");
    assert_eq!(created_updates(&calls), 0);
}

#[tokio::test]
async fn a_pack_that_failed_to_resolve_does_not_wait_its_operation_fails_and_stalls() {
    let new = stack(None);
    let (ctx, calls) = mocked(&new, policy(failed_to_resolve()));
    super::reconcile::reconcile(Arc::new(new), ctx)
        .await
        .expect("the reconcile succeeds");
    let calls = calls_of(&calls);
    // The operation is created: the Update controller refuses to run it without its pack
    // (`PolicyPackFailed`), and absorbing that failure stalls the Stack (below).
    assert_eq!(created_updates(&calls), 1, "{calls:#?}");
    assert!(!events(&calls).contains(&REASON_WAITING_FOR_POLICY_PACK.to_string()));
    let st = written(&calls);
    let rec = condition(&st, names::CONDITION_RECONCILING).expect("Reconciling");
    assert_eq!(rec.reason, names::REASON_STACK_PROCESSING);

    let mut st = st;
    let update: pulumi_operator_api::Update = serde_json::from_value(json!({
        "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
        "metadata": {"name": "web-1", "namespace": "apps"},
        "spec": {"type": "up"},
        "status": {"message": "policy pack \"k8s-limits\" of StackPolicy \"limits\" cannot read branch \"main\": repository not found; the operation does not run without it",
                   "conditions": [{"type": "Failed", "status": "True", "reason": "PolicyPackFailed",
                                   "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    crate::stack::status::absorb(&mut st, &update, None, &now);
    crate::stack::status::mark_result(&mut st, 1, &now);
    let stalled = condition(&st, names::CONDITION_STALLED).expect("Stalled");
    assert_eq!(stalled.reason, "PolicyPackFailed");
    assert!(
        stalled.message.contains("repository not found"),
        "{}",
        stalled.message
    );
    assert!(condition(&st, names::CONDITION_RECONCILING).is_none());
}
