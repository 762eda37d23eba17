//! The heartbeat proven by the pod's own ServiceAccount token ([`HeartbeatPlan::token_file`]):
//! no Lease, so no permission to grant. Each renewal is a `SelfSubjectReview` made with the
//! pod's projected token, which every authenticated identity may create. The API server takes a
//! pod-bound token only while its pod exists and was not deleted more than a minute ago
//! (`jwt.DefaultLeeway` in Kubernetes' `pkg/serviceaccount/claims.go`; successful
//! authentications are cached 10 s): a 401 is the revocation, and the watchdog stops Pulumi at
//! once. A node cut off from the API server cannot renew at all, and the watchdog stops Pulumi
//! `expireAfterSeconds` after the start of the last review that succeeded. So every review
//! that succeeded started before the pod's deletion time + 70 s, and Pulumi is stopped by then
//! + `expireAfterSeconds` + `stopGraceSeconds`: the operator's bound (docs/operations.md).

use crate::error::{chain, Failure};
use crate::heartbeat::{
    boottime_now, deadline_after, holder_identity, with_retries, Answer, Attempt, Fence, Heartbeat,
    Settings,
};
use crate::report::log;
use crate::signals::Signals;
use pulumi_operator_api::plan::{FailureReason, HeartbeatPlan, RunPlan};
use std::sync::Arc;
use std::time::Duration;

const REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// The plan's heartbeat, started: proven by the pod's token when the plan says so, else by its
/// Lease ([`Heartbeat::start`]). Fails, before any Pulumi command, when it cannot be armed.
pub async fn start(plan: &RunPlan, signals: &Signals) -> Result<Option<Heartbeat>, Failure> {
    let Some(hb) = plan.heartbeat.as_ref().filter(|h| h.token_file.is_some()) else {
        return Heartbeat::start(plan, signals).await;
    };
    tokio::select! {
        started = start_token(plan, hb) => started.map(Some),
        _ = signals.after(0) => Err(Failure::new(
            FailureReason::Interrupted,
            "interrupted while proving this pod alive to the API server; Pulumi did not run",
        )),
    }
}

async fn start_token(plan: &RunPlan, hb: &HeartbeatPlan) -> Result<Heartbeat, Failure> {
    let s = Settings::new(plan, hb, holder_identity(|v| std::env::var(v).ok()))?;
    let client = client(hb).await?;
    let deadline = arm(&client, &s).await?;
    log(format!(
        "proving this pod alive to the API server every {}s; pulumi is stopped if it cannot for \
         {}s, or at once if the pod was deleted",
        s.renew_every.as_secs(),
        s.expire_after.as_secs()
    ));
    Heartbeat::with_renewer(s, deadline, |fence| tokio::spawn(renew_loop(client, fence)))
}

/// A client for the API server the pod runs under (`KUBERNETES_SERVICE_HOST`/`_PORT`), which
/// authenticates with the token file (re-read as the kubelet refreshes it) and trusts `caFile`.
pub async fn client(hb: &HeartbeatPlan) -> Result<kube::Client, Failure> {
    let fail = |why: String| {
        Failure::new(
            FailureReason::HeartbeatLost,
            format!("no Kubernetes client to prove this pod alive: {why}; Pulumi did not run"),
        )
    };
    let host = std::env::var("KUBERNETES_SERVICE_HOST")
        .map_err(|_| fail("KUBERNETES_SERVICE_HOST is not set".into()))?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "pod", "cluster": {
            "server": format!("https://{host}:{port}"),
            "certificate-authority": hb.ca_file,
        }}],
        "users": [{"name": "pod", "user": {"tokenFile": hb.token_file}}],
        "contexts": [{"name": "pod", "context": {"cluster": "pod", "user": "pod"}}],
        "current-context": "pod",
    });
    let kubeconfig: kube::config::Kubeconfig =
        serde_json::from_value(kubeconfig).map_err(|e| fail(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| fail(chain(&e)))?;
    // One review at a time, each bounded by the heartbeat's own timeout: no hidden retries.
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| fail(chain(&e)))
}

/// One `SelfSubjectReview` with the pod's token.
async fn review(client: &kube::Client, timeout: Duration) -> Result<(), (Answer, String)> {
    let body = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"
    });
    let request = http::Request::post(REVIEWS)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        .map_err(|e| (Answer::NoAnswer, e.to_string()))?;
    let answer = client.request::<serde_json::Value>(request);
    match tokio::time::timeout(timeout, answer).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) => Err((Answer::Status(s.code), s.message.clone())),
        Ok(Err(e)) => Err((Answer::NoAnswer, chain(&e))),
        Err(_) => Err((
            Answer::NoAnswer,
            format!("no answer within {}ms", timeout.as_millis()),
        )),
    }
}

/// The first review, retried with backoff for up to `expireAfterSeconds`: Pulumi runs only once
/// the pod is proven alive. Returns the first deadline.
pub async fn arm(client: &kube::Client, s: &Settings) -> Result<Duration, Failure> {
    let what = "reach the API server to prove this pod alive (the operation's pod must reach \
                the API server: a NetworkPolicy?)";
    with_retries(s.expire_after, what, || async {
        let started = boottime_now();
        match review(client, s.request_timeout()).await {
            Ok(()) => Ok(deadline_after(started, s.expire_after)),
            Err((Answer::Status(401), message)) => Err(Attempt::Fatal(Failure::new(
                FailureReason::HeartbeatLost,
                format!(
                    "the API server rejected this pod's token ({message}): the pod is being \
                     deleted; Pulumi did not run"
                ),
            ))),
            Err((_, why)) => Err(Attempt::Retry(why)),
        }
    })
    .await
}

/// Reviews the token every period until aborted or revoked.
pub async fn renew_loop(client: kube::Client, fence: Arc<Fence>) {
    let s = fence.settings().clone();
    let mut ticks = tokio::time::interval(s.renew_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: the pod was just proven alive.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if fence.fenced().is_some() {
            return;
        }
        let started = boottime_now();
        match review(&client, s.request_timeout()).await {
            Ok(()) => fence.extend(deadline_after(started, s.expire_after)),
            Err((Answer::Status(401), message)) => {
                log(format!(
                    "the API server rejected this pod's token ({message}): the pod was deleted; \
                     stopping pulumi"
                ));
                fence.revoke();
                return;
            }
            Err((_, why)) => {
                let left = fence.deadline().saturating_sub(boottime_now());
                log(format!(
                    "cannot prove this pod alive to the API server ({why}); pulumi is stopped in \
                     {}s unless a review succeeds",
                    left.as_secs()
                ));
            }
        }
    }
}
