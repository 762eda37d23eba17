//! The Update controller's reconcile against a mocked API server (a tower service answering as
//! the API server would, as kube-rs's controller-rs tests its reconcile): which requests it
//! makes, in which order, with what, for the start of an operation and for the absorption of a
//! finished one.

use crate::runtime::cached::{CachedJob, CachedPod};
use crate::runtime::context::{Context, Stores};
use crate::runtime::index;
use crate::stack::objects::{build_update, build_workspace, ResolvedSource};
use http::{Request, Response};
use kube::client::Body;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use pulumi_operator_api::policy::{PolicyPackStatus, StackPolicy};
use pulumi_operator_api::{names, Stack, Update, UpdateType, Workspace};
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

fn stack() -> Stack {
    serde_json::from_value(json!({
        "apiVersion": "pulumi.com/v1", "kind": "Stack",
        "metadata": {"name": "web", "namespace": "apps", "uid": "stack-uid", "generation": 1},
        "spec": {"stack": "dev", "projectRepo": "https://git.example/app.git",
                 "commit": "b".repeat(40), "backend": "file:///state"}
    }))
    .unwrap()
}

/// The Stack's namespace, as the namespace cache has it (no StackPolicy covers it).
fn namespace() -> k8s_openapi::api::core::v1::Namespace {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "apps", "labels": {"kubernetes.io/metadata.name": "apps"}}
    }))
    .unwrap()
}

fn fixture() -> (Update, Workspace) {
    let s = stack();
    let source = ResolvedSource::Git {
        url: "https://git.example/app.git".into(),
        commit: "b".repeat(40),
        dir: None,
        shallow: false,
    };
    let mut update = build_update(&s, UpdateType::Up, "Initial stack update", &"b".repeat(40));
    update.metadata.uid = Some("update-uid".into());
    update.metadata.creation_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
    );
    let mut ws = build_workspace(&s, &source);
    ws.metadata.generation = Some(1);
    (update, ws)
}

fn store<K>(objects: Vec<K>) -> (reflector::Store<K>, Writer<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (reader, mut writer) = reflector::store::<K>();
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(o));
    }
    (reader, writer)
}

/// A context whose client talks to a mocked API server that answers every request the way
/// the API server would for a fresh namespace, and records it. `update` is what a status
/// write returns.
fn mocked(
    update: &Update,
    workspaces: Vec<Workspace>,
    jobs: Vec<CachedJob>,
    pods: Vec<CachedPod>,
) -> (Arc<Context>, Arc<Mutex<Vec<Call>>>) {
    mocked_with_policies(update, workspaces, jobs, pods, vec![])
}

/// [`mocked`], with these StackPolicies in the policy cache.
fn mocked_with_policies(
    update: &Update,
    workspaces: Vec<Workspace>,
    jobs: Vec<CachedJob>,
    pods: Vec<CachedPod>,
    policies: Vec<StackPolicy>,
) -> (Arc<Context>, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let recorded = calls.clone();
    let stored = serde_json::to_value(update).unwrap();
    let service = tower::service_fn(move |request: Request<Body>| {
        let recorded = recorded.clone();
        let stored = stored.clone();
        async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let call = Call {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                body: body.clone(),
            };
            recorded.lock().unwrap().push(call.clone());
            let (code, answer) = match call.method.as_str() {
                // Creations succeed and return what was sent.
                "POST" => (201, body),
                // A status write returns the Update with that status.
                "PATCH" if call.path.ends_with("/status") => {
                    let mut u = stored;
                    u["status"] = body["status"].clone();
                    (200, u)
                }
                _ => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "NotFound", "code": 404, "message": "not found"}),
                ),
            };
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
    let pods_by_update = index::Index::new(index::label::<CachedPod, { index::UPDATE_NAME }>);
    let (pod_store, _pod_writer) = store(pods.clone());
    for p in &pods {
        pods_by_update.apply(p);
    }
    let stores = Stores {
        stacks: store(vec![stack()]).0,
        updates: store(vec![update.clone()]).0,
        programs: store(vec![]).0,
        workspaces: store(workspaces).0,
        jobs: store(jobs).0,
        pods: pod_store,
        pods_by_update,
        pods_by_stack: index::Index::new(|_| None),
        updates_by_stack: index::Index::new(|_| None),
        policies: store(policies).0,
        namespaces: store(vec![namespace()]).0,
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

#[tokio::test]
async fn a_new_update_creates_its_plan_secret_and_job_then_records_its_start() {
    let (update, ws) = fixture();
    let (ctx, calls) = mocked(&update, vec![ws], vec![], vec![]);

    let action = super::reconcile::reconcile(Arc::new(update.clone()), ctx.clone())
        .await
        .expect("the reconcile succeeds");
    assert_eq!(action, kube::runtime::controller::Action::await_change());

    let calls = calls_of(&calls);
    let name = update.metadata.name.clone().unwrap();
    let seen: Vec<(String, String)> = calls
        .iter()
        .map(|c| (c.method.clone(), c.path.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("POST".into(), "/api/v1/namespaces/apps/secrets".into()),
            ("POST".into(), "/apis/batch/v1/namespaces/apps/jobs".into()),
            (
                "PATCH".into(),
                format!("/apis/auto.pulumi.com/v1alpha1/namespaces/apps/updates/{name}/status"),
            ),
        ],
        "{calls:#?}"
    );
    // The plan Secret and the Job belong to the Update (garbage-collected with it).
    for created in &calls[..2] {
        let owner = &created.body["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "Update", "{created:?}");
        assert_eq!(owner["uid"], "update-uid", "{created:?}");
    }
    let job = &calls[1].body;
    assert_eq!(job["metadata"]["name"], name.as_str());
    assert_eq!(
        job["metadata"]["labels"][names::UPDATE_NAME_LABEL],
        name.as_str()
    );
    // The run plan, with the key the outputs are sealed with, is in the Secret only: the pod
    // reads it from there, and the Job spec never carries it.
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(calls[0].body.clone()).unwrap();
    let plan = &secret.string_data.as_ref().unwrap()[pulumi_operator_api::plan::PLAN_KEY];
    let plan: pulumi_operator_api::plan::RunPlan = serde_json::from_str(plan).unwrap();
    let key = plan.outputs_key.expect("a key to seal the outputs with");
    assert!(!job.to_string().contains(&key), "{job}");
    // The start is recorded (never a second Job for this Update) and says it runs.
    let status = &calls[2].body["status"];
    assert!(status["startTime"].is_string(), "{status}");
    assert_eq!(status["conditions"][0]["type"], "Progressing", "{status}");
    assert_eq!(status["conditions"][0]["status"], "True", "{status}");
}

#[tokio::test]
async fn a_failed_job_is_absorbed_into_a_failed_status_and_a_warning_event() {
    let (mut update, ws) = fixture();
    let name = update.metadata.name.clone().unwrap();
    update.status =
        Some(serde_json::from_value(json!({"startTime": "2026-11-27T10:00:00Z"})).unwrap());
    let owner = json!([{"apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update", "name": name,
                        "uid": "update-uid", "controller": true}]);
    let job: CachedJob = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "apps", "uid": "job-uid",
                     "labels": {names::UPDATE_NAME_LABEL: name}, "ownerReferences": owner,
                     "creationTimestamp": "2026-11-27T10:00:00Z"},
        "spec": {"template": {"spec": {"containers": []}}},
        "status": {"startTime": "2026-11-27T10:00:00Z", "failed": 1,
                   "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                   "message": "Job has reached the specified backoff limit"}]}
    }))
    .unwrap();
    let pod: CachedPod = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-abcde"), "namespace": "apps",
                     "labels": {names::UPDATE_NAME_LABEL: name},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                          "uid": "job-uid", "controller": true}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "pulumi",
            "state": {"terminated": {"exitCode": 1, "reason": "Error",
                                     "message": "error: the stack is locked by another update",
                                     "finishedAt": "2026-11-27T10:01:00Z"}}}]}
    }))
    .unwrap();
    let (ctx, calls) = mocked(&update, vec![ws], vec![job], vec![pod]);

    super::reconcile::reconcile(Arc::new(update.clone()), ctx.clone())
        .await
        .expect("the reconcile succeeds");

    let calls = calls_of(&calls);
    // Nothing is created for a finished operation: its status is written, then its Event.
    assert!(
        !calls
            .iter()
            .any(|c| c.method == "POST" && !c.path.ends_with("/events")),
        "{calls:#?}"
    );
    let status_write = calls
        .iter()
        .position(|c| c.method == "PATCH" && c.path.ends_with(&format!("/updates/{name}/status")))
        .unwrap_or_else(|| panic!("no status write: {calls:#?}"));
    let status = &calls[status_write].body["status"];
    let condition = |type_: &str| {
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == type_)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(condition("Complete")["status"], "True", "{status}");
    assert_eq!(condition("Failed")["status"], "True", "{status}");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("the stack is locked by another update")),
        "the runner's own words reach the status: {status}"
    );
    let event = calls
        .iter()
        .skip(status_write)
        .find(|c| c.method == "POST" && c.path.ends_with("/events"))
        .unwrap_or_else(|| panic!("no Event after the status write: {calls:#?}"));
    assert_eq!(event.body["type"], "Warning", "{event:?}");
    assert_eq!(
        event.body["reason"],
        names::EVENT_UPDATE_FAILED,
        "{event:?}"
    );
    assert_eq!(event.body["regarding"]["name"], name.as_str(), "{event:?}");
}

/// A StackPolicy covering every namespace, with one pack tracking a branch, and what its status
/// says of the pack.
fn policy(pack: PolicyPackStatus) -> StackPolicy {
    serde_json::from_value(json!({
        "apiVersion": "policy.pulumi-operator-rs.dev/v1alpha1", "kind": "StackPolicy",
        "metadata": {"name": "limits", "generation": 1},
        "spec": {"namespaceSelector": {}, "packs": [{"name": "k8s-limits",
                 "git": {"url": "https://git.example/packs.git", "branch": "main"}}]},
        "status": {"observedGeneration": 1, "packs": [pack]}
    }))
    .unwrap()
}

#[tokio::test]
async fn an_update_waits_for_a_pack_being_resolved_and_fails_for_one_that_failed() {
    let (update, ws) = fixture();
    let name = update.metadata.name.clone().unwrap();
    let being_resolved = PolicyPackStatus {
        name: "k8s-limits".into(),
        ..Default::default()
    };
    let (ctx, calls) = mocked_with_policies(
        &update,
        vec![ws.clone()],
        vec![],
        vec![],
        vec![policy(being_resolved)],
    );
    let action = super::reconcile::reconcile(Arc::new(update.clone()), ctx)
        .await
        .expect("the reconcile succeeds");
    // Nothing is created nor written: it looks again soon (no StackPolicy watch triggers it).
    assert_ne!(action, kube::runtime::controller::Action::await_change());
    let calls = calls_of(&calls);
    assert!(
        calls.iter().all(|c| c.method == "GET"),
        "an Update failed or ran without its pack: {calls:#?}"
    );

    let failed = PolicyPackStatus {
        name: "k8s-limits".into(),
        error: Some("cannot read branch \"main\": repository not found".into()),
        ..Default::default()
    };
    let (ctx, calls) =
        mocked_with_policies(&update, vec![ws], vec![], vec![], vec![policy(failed)]);
    super::reconcile::reconcile(Arc::new(update.clone()), ctx)
        .await
        .expect("the reconcile succeeds");
    let calls = calls_of(&calls);
    assert!(
        !calls.iter().any(|c| c.path.ends_with("/jobs")),
        "ran without its pack: {calls:#?}"
    );
    let write = calls
        .iter()
        .find(|c| c.method == "PATCH" && c.path.ends_with(&format!("/updates/{name}/status")))
        .unwrap_or_else(|| panic!("no status write: {calls:#?}"));
    let failed = write.body["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(failed["status"], "True", "{write:?}");
    assert_eq!(failed["reason"], "PolicyPackFailed", "{write:?}");
}
