//! Update status from what Kubernetes and the runner report: the Job, its pod (container
//! states and the runner's result in the termination message). Pure: the I/O loop feeds it.

use crate::runtime::cached::{CachedContainerStatus, CachedJob as Job, CachedPod as Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use pulumi_operator_api::names;
use pulumi_operator_api::plan::{Outcome, RunResult, MAX_REPORTED_CHANGES};
use pulumi_operator_api::{ResourceChange, Update, UpdateStatus};

/// How long a pod may wait on an image or configuration error before the Update fails.
pub const STUCK_AFTER_SECONDS: i64 = 120;

const STUCK_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// The result of an operation, as far as it is known.
#[derive(Clone, Debug, PartialEq)]
pub enum Progress {
    /// Not finished; the message says what it waits for.
    Running { message: String },
    /// The operation's pod is on a node that stopped answering: its Pulumi may still run, so
    /// the operation is not over until the pod is proven stopped (see [`unconfirmed_stop`]).
    /// The message names the pod, the node and what a person can do.
    Unconfirmed { message: String },
    Succeeded {
        result: RunResult,
        end: Option<Time>,
    },
    Failed {
        reason: String,
        message: String,
        result: Option<RunResult>,
        end: Option<Time>,
    },
}

/// The outcome of one container that ended, or `None` while it has not ended (or ended well
/// without being the last).
fn container_outcome(cs: &CachedContainerStatus, last: bool) -> Option<Progress> {
    let t = cs.state.as_ref()?.terminated.as_ref()?;
    let end = t.finished_at.clone();
    let result = t
        .message
        .as_deref()
        .and_then(RunResult::from_termination_message);
    match (t.exit_code, result) {
        (_, Some(r)) if r.outcome == Outcome::Failed => Some(Progress::Failed {
            reason: r
                .reason
                .map(|x| x.as_str().to_string())
                .unwrap_or_else(|| names::UPDATE_REASON_UPDATE_FAILED.into()),
            message: if r.message.is_empty() {
                format!("container {} failed", cs.name)
            } else {
                r.message.clone()
            },
            result: Some(r),
            end,
        }),
        (0, Some(r)) if last => Some(Progress::Succeeded { result: r, end }),
        (0, None) if last => Some(Progress::Failed {
            reason: names::UPDATE_REASON_UNKNOWN.into(),
            message: format!("container {} exited without reporting a result", cs.name),
            result: None,
            end,
        }),
        (0, _) => None,
        (code, _) => {
            let k8s_reason = t.reason.clone().unwrap_or_else(|| "Error".into());
            let detail = t
                .message
                .clone()
                .filter(|m| !m.trim().is_empty())
                .map(|m| format!(": {}", m.trim()))
                .unwrap_or_default();
            Some(Progress::Failed {
                reason: k8s_reason.clone(),
                message: format!(
                    "container {} terminated ({k8s_reason}, exit code {code}){detail}",
                    cs.name
                ),
                result: None,
                end,
            })
        }
    }
}

fn seconds_since(t: Option<&Time>, now: jiff::Timestamp) -> i64 {
    t.map(|t| now.duration_since(t.0).as_secs()).unwrap_or(0)
}

/// The Progressing message from the Job's creation to the end of a normal run: each step of a
/// normal start (Job, pod, program fetch, Pulumi) would otherwise be a status write, four per
/// operation; `kubectl get pods` and `kubectl logs job/<update>` show those steps.
pub const RUNNING_MESSAGE: &str = "running the operation";

/// The message of Failed and Complete while the operation runs (Progressing says how).
const NOT_ENDED_MESSAGE: &str = "the operation has not ended";

/// What the pod says about the operation.
pub fn pod_progress(pod: &Pod, now: jiff::Timestamp) -> Progress {
    let status = pod.status.clone().unwrap_or_default();
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let mains = status.container_statuses.clone().unwrap_or_default();
    for cs in &inits {
        if let Some(p) = container_outcome(cs, false) {
            return p;
        }
    }
    if let Some(cs) = mains.iter().find(|c| c.name == names::PULUMI_CONTAINER) {
        if let Some(p) = container_outcome(cs, true) {
            return p;
        }
    }
    if let Some(message) = unconfirmed_stop(pod, now) {
        return Progress::Unconfirmed { message };
    }
    if status.phase.as_deref() == Some("Failed") {
        let reason = status.reason.clone().unwrap_or_else(|| "PodFailed".into());
        let message = status
            .message
            .clone()
            .unwrap_or_else(|| "the pod failed".into());
        return Progress::Failed {
            reason: reason.clone(),
            message: format!("pod {reason}: {message}"),
            result: None,
            end: None,
        };
    }
    let age = seconds_since(pod.metadata.creation_timestamp.as_ref(), now);
    for cs in inits.iter().chain(mains.iter()) {
        if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.clone().unwrap_or_default();
            if STUCK_REASONS.contains(&reason.as_str()) {
                let message = format!(
                    "container {} is waiting: {reason}: {}",
                    cs.name,
                    w.message.clone().unwrap_or_default()
                );
                if age >= STUCK_AFTER_SECONDS {
                    return Progress::Failed {
                        reason,
                        message,
                        result: None,
                        end: None,
                    };
                }
                return Progress::Running { message };
            }
        }
    }
    // Starting or running: one message, so that neither step is a status write.
    Progress::Running {
        message: RUNNING_MESSAGE.into(),
    }
}

/// How long past its deletion time (the end of its grace period) a pod may still be reported
/// running before the Update says that its node has not confirmed the stop: a kubelet that
/// answers has stopped it by then, and only a node that is gone or cut off leaves it
/// `Terminating`.
pub const LOST_AFTER_DELETION_SECONDS: i64 = 120;

/// The Stack condition and Update `Progressing` reason of an operation whose pod is on a node
/// that stopped answering, until the pod is proven stopped.
pub const REASON_NODE_UNREACHABLE: &str = "NodeUnreachable";

/// Why an operation whose pod still counts as running cannot be taken as stopped, if its node
/// stopped answering. A pod on an unreachable node is not stopped: its Pulumi may still be
/// running and writing the stack's state (an S3 backend is reachable from a partitioned node),
/// so the next operation of the Stack waits, as Kubernetes waits before it starts a
/// StatefulSet's pod elsewhere. Proof comes only from the objects: the kubelet reports the
/// containers terminated (or the pod `Failed`/`Succeeded`), or the pod object is gone, which
/// is what Kubernetes does once a person deletes the node, marks it
/// `node.kubernetes.io/out-of-service` (the pod garbage collector then removes its pods) or
/// force-deletes the pod.
///
/// The node is taken as unreachable when the node lifecycle controller evicted the pod
/// (`DisruptionTarget` reason `DeletionByTaintManager`, from the NoExecute taint of a node
/// that stopped posting its status) and marked it not ready (a NoExecute taint on a healthy
/// node leaves the pod ready until its kubelet stops it), or when the pod was deleted and is
/// still reported running [`LOST_AFTER_DELETION_SECONDS`] after its grace period ended.
pub fn unconfirmed_stop(pod: &Pod, now: jiff::Timestamp) -> Option<String> {
    let deleted_at = pod.metadata.deletion_timestamp.as_ref()?;
    if !pod_busy(pod) {
        return None;
    }
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("(none)");
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let has = |kind: &str, status: &str, reason: Option<&str>| {
        conditions.iter().any(|c| {
            c.type_ == kind
                && c.status == status
                && reason.is_none_or(|r| c.reason.as_deref() == Some(r))
        })
    };
    let evicted = has("DisruptionTarget", "True", Some("DeletionByTaintManager"))
        && has("Ready", "False", None);
    let overdue = seconds_since(Some(deleted_at), now) - LOST_AFTER_DELETION_SECONDS;
    let why = if evicted {
        format!("node {node} stopped answering and Kubernetes evicted the pod")
    } else if overdue >= 0 {
        format!(
            "the pod was deleted and node {node} has not confirmed that it stopped within {} \
             of the end of its grace period",
            crate::runtime::duration::human_secs(LOST_AFTER_DELETION_SECONDS)
        )
    } else {
        return None;
    };
    let alone = if crate::update::fence::fenced_and_deleted(pod) {
        format!(
            ". Without that, the operation ends by itself {}s after the operator saw the pod's \
             deletion: its runner stops Pulumi once the API server no longer accepts the pod's \
             token, or cannot be reached",
            crate::update::fence::bound(pod).as_secs()
        )
    } else {
        String::new()
    };
    Some(format!(
        "{why}; the operation's pod {name} may still be running Pulumi there, so the stack's \
         next operation waits until the pod is proven stopped. Once you have made sure node \
         {node} is down, run `kubectl taint nodes {node} \
         node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (or `kubectl delete node \
         {node}`): Kubernetes then removes the pod, and the stack runs the operation again{alone}"
    ))
}

fn deadline_message(job: &Job) -> String {
    format!(
        "the operation exceeded its deadline of {}s (spec.operationTimeoutSeconds) and was stopped",
        job.spec
            .as_ref()
            .and_then(|s| s.active_deadline_seconds)
            .unwrap_or(0)
    )
}

/// Whether a pod still runs (or may still run) processes.
fn pod_busy(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The progress of an Update from its Job and the Job's pods. An outcome is final only once
/// no pod of the Job runs any more: Kubernetes 1.20 starts a replacement pod as soon as one is
/// being deleted, and the next operation must not start while an interrupted Pulumi still
/// holds the stack's lock.
pub fn progress(job: Option<&Job>, pods: &[&Pod], now: jiff::Timestamp) -> Progress {
    let Some(job) = job else {
        return Progress::Running {
            message: RUNNING_MESSAGE.into(),
        };
    };
    let mut pods: Vec<&Pod> = pods.to_vec();
    pods.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let outcomes: Vec<Progress> = pods.iter().map(|p| pod_progress(p, now)).collect();
    // A pod that may still run on an unreachable node holds the operation open, whatever
    // else has ended.
    if let Some(lost) = outcomes
        .iter()
        .find(|o| matches!(o, Progress::Unconfirmed { .. }))
    {
        return lost.clone();
    }
    let busy = pods
        .iter()
        .zip(&outcomes)
        .find(|(p, o)| matches!(o, Progress::Running { .. }) && pod_busy(p))
        .map(|(p, _)| *p);
    let job_outcome = job_failure(job);
    let first_finished = outcomes
        .iter()
        .find(|o| !matches!(o, Progress::Running { .. }));
    let complete = job_complete(job);
    let deadline = deadline_outcome(job, job_outcome.as_ref(), first_finished, complete, now);
    let result_lost = (complete && pods.is_empty()).then(lost_result);
    let stopped = stopped_outcome(job, complete, busy.is_some());
    let outcome = deadline
        .as_ref()
        .or(first_finished)
        .or(job_outcome.as_ref())
        .or(result_lost.as_ref())
        .or(stopped.as_ref());
    match (outcome, busy) {
        (Some(_), Some(pod)) => Progress::Running {
            message: format!(
                "the operation ended; waiting for pod {} to stop",
                pod.metadata.name.as_deref().unwrap_or_default()
            ),
        },
        (Some(o), None) => o.clone(),
        (None, _) => outcomes.last().cloned().unwrap_or(Progress::Running {
            message: RUNNING_MESSAGE.into(),
        }),
    }
}

/// The Job's own verdict of failure, if it has one. Kubernetes 1.31+ sets `FailureTarget`
/// (same reason) as soon as it decides a Job fails, and `Failed` only once its pods have
/// stopped: the reason is known from the first.
fn job_failure(job: &Job) -> Option<Progress> {
    let failed = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            let is = |t: &str| c.iter().find(|c| c.type_ == t && c.status == "True");
            is("Failed").or_else(|| is("FailureTarget"))
        })?;
    let reason = failed.reason.clone().unwrap_or_else(|| "JobFailed".into());
    let message = match reason.as_str() {
        "DeadlineExceeded" => deadline_message(job),
        _ => failed
            .message
            .clone()
            .unwrap_or_else(|| format!("the Job failed: {reason}")),
    };
    Some(Progress::Failed {
        reason,
        message,
        result: None,
        end: failed.last_transition_time.clone(),
    })
}

/// Whether the Job is `Complete`.
fn job_complete(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// A Job that completed while its pod is gone (deleted, node lost) took the runner's result
/// with it: say so, so that the Stack runs the operation again.
fn lost_result() -> Progress {
    Progress::Failed {
        reason: names::UPDATE_REASON_UNKNOWN.into(),
        message: "the Job completed but its pod is gone, so the operation's result is unknown; the stack runs it again"
            .into(),
        result: None,
        end: None,
    }
}

/// The operation's end by its deadline, if that is what ended it. The Job controller stops
/// the pods of a Job past its deadline, and its verdict may come after the pod's own result or
/// name another cause: when a stopped pod is counted as failed before the deadline is looked
/// at, it says BackoffLimitExceeded (seen on 1.37). An operation interrupted (or ended) once
/// its deadline had passed was stopped by it.
fn deadline_outcome(
    job: &Job,
    job_outcome: Option<&Progress>,
    first_finished: Option<&Progress>,
    job_complete: bool,
    now: jiff::Timestamp,
) -> Option<Progress> {
    let deadline_at = job
        .spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .zip(job.status.as_ref().and_then(|s| s.start_time.as_ref()))
        .map(|(secs, start)| start.0.as_second().saturating_add(secs));
    let stopped_by_deadline = deadline_at.is_some_and(|at| {
        now.as_second() >= at
            && !job_complete
            && first_finished.is_some_and(|o| match o {
                Progress::Failed { result, end, .. } => {
                    result.as_ref().and_then(|r| r.reason)
                        == Some(pulumi_operator_api::plan::FailureReason::Interrupted)
                        || end.as_ref().is_some_and(|e| e.0.as_second() >= at)
                }
                _ => false,
            })
    });
    job_outcome
        .cloned()
        .filter(|o| matches!(o, Progress::Failed { reason, .. } if reason == "DeadlineExceeded"))
        .or_else(|| {
            stopped_by_deadline.then(|| Progress::Failed {
                reason: "DeadlineExceeded".into(),
                message: deadline_message(job),
                result: None,
                end: first_finished.and_then(|o| match o {
                    Progress::Failed { end, .. } => end.clone(),
                    _ => None,
                }),
            })
        })
}

/// The end of a Job the operator stopped, once it runs nothing any more. A Job stopped with
/// parallelism 0 (its Update was deleted, or its pod was being deleted or had failed) runs
/// nothing once it has no pod left, and Kubernetes may never call it failed: without this the
/// Update waited out the start patience (10 min). The Job controller's own count must agree,
/// so that no pod the cache has not seen yet can still be running when the Stack starts the
/// next attempt.
fn stopped_outcome(job: &Job, job_complete: bool, a_pod_busy: bool) -> Option<Progress> {
    let stopped_and_empty = job.spec.as_ref().and_then(|s| s.parallelism) == Some(0)
        && !job_complete
        && !a_pod_busy
        && job
            .status
            .as_ref()
            .is_none_or(|s| s.active.unwrap_or(0) == 0 && s.terminating.unwrap_or(0) == 0);
    stopped_and_empty.then(|| Progress::Failed {
        reason: names::UPDATE_REASON_ABORTED.into(),
        message: "the operation was stopped before it finished (its pod or its Update was \
                  deleted); the stack runs it again"
            .into(),
        result: None,
        end: None,
    })
}

/// Whether a Job has ended (`Complete` or `Failed`).
pub fn job_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// An operation that may never start: its Job has no pod, or its pod has not started any
/// container, for `seconds`.
#[derive(Clone, Debug, PartialEq)]
pub struct NotStarted {
    /// `None`: the Job has no pod (pod creation fails: the reason is an Event on the Job);
    /// else the pod that does not start (the reason is an Event on the pod).
    pub pod: Option<String>,
    pub seconds: i64,
}

/// With a Warning Event saying why, an operation that has not started after this long fails.
pub const NOT_STARTED_WITH_WARNING_SECONDS: i64 = 120;
/// Without any explanation (a very slow image pull, say), after this long.
pub const NOT_STARTED_SECONDS: i64 = 600;

/// How soon a pod held at its gate (for another pod of the stack to stop) is looked at again.
pub const AT_GATE_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a pod that the scheduler cannot place yet (`Unschedulable`) is waited for: a
/// cluster autoscaler may be adding a node, which takes minutes.
pub const UNSCHEDULABLE_SECONDS: i64 = NOT_STARTED_SECONDS;

/// How long an operation whose start Kubernetes explains with `reason` is waited for. The
/// scheduler says `Unschedulable` in the pod's condition and `FailedScheduling` in its Event:
/// both are the same wait for capacity.
fn patience(reason: &str) -> i64 {
    if matches!(reason, "Unschedulable" | "FailedScheduling") {
        UNSCHEDULABLE_SECONDS
    } else {
        NOT_STARTED_WITH_WARNING_SECONDS
    }
}

/// What a pod that has not started says about it without any Event: not schedulable, or a
/// container waiting for a reason other than the normal ContainerCreating/PodInitializing
/// (ImagePullBackOff, CreateContainerConfigError, ...): (reason, message).
pub fn pod_start_problem(pod: &Pod) -> Option<(String, String)> {
    let status = pod.status.as_ref()?;
    if let Some(c) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        // Behind the operator's own gate: the Update says what it waits for.
        .filter(|c| c.reason.as_deref() != Some("SchedulingGated"))
    {
        return Some((
            c.reason.clone().unwrap_or_else(|| "Unschedulable".into()),
            c.message.clone().unwrap_or_default(),
        ));
    }
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .find_map(|w| {
            let reason = w.reason.clone()?;
            (!matches!(reason.as_str(), "ContainerCreating" | "PodInitializing"))
                .then(|| (reason, w.message.clone().unwrap_or_default()))
        })
}

/// Longest time a running operation goes unexamined: its Job's and pod's watch events
/// trigger every other look, so this is only a backstop.
pub const RUNNING_RECHECK_SECONDS: i64 = 300;

/// How long after the `pulumi` container ended its log may still be missing its last lines:
/// the node writes a container's output to the log file on its own schedule, and a busy node
/// can report the container's end first.
pub const OUTPUTS_LOG_GRACE_SECONDS: i64 = 30;

/// Whether a succeeded operation whose sealed outputs are not (yet) in its pod's log should be
/// looked at again rather than failed: only within [`OUTPUTS_LOG_GRACE_SECONDS`] of the
/// container's end (`ended`). Returns when to look again.
pub fn outputs_log_recheck(
    ended: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Option<std::time::Duration> {
    let elapsed = now.as_second() - ended?.as_second();
    (elapsed < OUTPUTS_LOG_GRACE_SECONDS).then(|| std::time::Duration::from_secs(3))
}

/// When to look at a running operation again without a watch event: the next moment at which
/// a decision that depends on time alone can change. Pod, Job and Warning Event changes
/// trigger their own reconcile, so a fixed short period (which, for thousands of waiting
/// operations, starved the new ones) is not needed. `waiting`: the operation has not started;
/// `warning`: the reason Kubernetes gives for it, if any.
pub fn recheck_after(
    waiting: Option<&NotStarted>,
    warning: Option<&str>,
    pods: &[&Pod],
    now: jiff::Timestamp,
) -> std::time::Duration {
    let mut next = RUNNING_RECHECK_SECONDS;
    let mut at = |deadline: i64, elapsed: i64| {
        if deadline > elapsed {
            next = next.min(deadline - elapsed);
        }
    };
    if let Some(w) = waiting {
        at(NOT_STARTED_SECONDS, w.seconds);
        if let Some(reason) = warning {
            at(patience(reason), w.seconds);
        }
    }
    for pod in pods {
        if let Some(deleted) = pod.metadata.deletion_timestamp.as_ref() {
            at(
                LOST_AFTER_DELETION_SECONDS,
                seconds_since(Some(deleted), now),
            );
        }
        let stuck = pod
            .status
            .iter()
            .flat_map(|s| {
                s.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(s.container_statuses.iter().flatten())
            })
            .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
            .any(|r| STUCK_REASONS.contains(&r));
        if stuck {
            at(
                STUCK_AFTER_SECONDS,
                seconds_since(pod.metadata.creation_timestamp.as_ref(), now),
            );
        }
    }
    // A second late rather than early: an early look finds nothing due and waits again.
    std::time::Duration::from_secs(next.max(0) as u64 + 1)
}

/// Whether the operation is still waiting to start (pure; `None` once any container ran).
pub fn not_started(job: &Job, pods: &[&Pod], now: jiff::Timestamp) -> Option<NotStarted> {
    let finished = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter().any(|c| {
                ["Complete", "Failed", "FailureTarget", "SuccessCriteriaMet"]
                    .contains(&c.type_.as_str())
                    && c.status == "True"
            })
        });
    if finished {
        return None;
    }
    let live: Vec<&&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    if live.is_empty() {
        if !pods.is_empty() {
            return None; // a pod is stopping; the Job replaces it or ends
        }
        return Some(NotStarted {
            pod: None,
            seconds: seconds_since(job.metadata.creation_timestamp.as_ref(), now),
        });
    }
    let newest = live
        .iter()
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    let status = newest.status.clone().unwrap_or_default();
    let started = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .any(|c| {
            c.state
                .as_ref()
                .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                || c.last_state
                    .as_ref()
                    .is_some_and(|s| s.terminated.is_some())
        });
    if started || matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    Some(NotStarted {
        pod: newest.metadata.name.clone(),
        seconds: seconds_since(newest.metadata.creation_timestamp.as_ref(), now),
    })
}

/// The failure of an operation that did not start, if its time is up. `warning` is the latest
/// Warning Event about the Job (no pod) or the pod: (reason, message).
pub fn start_failure(waiting: &NotStarted, warning: Option<(String, String)>) -> Option<Progress> {
    let subject = match &waiting.pod {
        None => "the operation's pod could not be created".to_string(),
        Some(p) => format!("the operation's pod {p} did not start"),
    };
    match warning {
        Some((reason, message)) if waiting.seconds >= patience(&reason) => Some(Progress::Failed {
            reason: reason.clone(),
            message: format!(
                "{subject} in {}: {reason}: {message}",
                crate::runtime::duration::human_secs(waiting.seconds)
            ),
            result: None,
            end: None,
        }),
        _ if waiting.seconds >= NOT_STARTED_SECONDS => Some(Progress::Failed {
            reason: "StartTimeout".into(),
            message: format!(
                "{subject} in {} and Kubernetes gave no reason (see kubectl describe)",
                crate::runtime::duration::human_secs(waiting.seconds)
            ),
            result: None,
            end: None,
        }),
        _ => None,
    }
}

/// Whether a pod has ended or is ending by itself: its phase says so, or its `pulumi`
/// container has terminated (the kubelet reports the phase a moment later, and a Job stopped
/// in between would delete the pod, and its logs, as still active).
pub fn pod_ended(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
        || status.container_statuses.iter().flatten().any(|c| {
            c.name == names::PULUMI_CONTAINER
                && c.state.as_ref().is_some_and(|s| s.terminated.is_some())
        })
}

/// The pods as the decisions read them (see `fence`): a fenced pod past its bound is `Failed` with reason
/// `NodeLost`, saying why it is taken as stopped.
pub fn with_fence_verdicts(
    pods: &[&Pod],
    clock: &crate::runtime::deletion_clock::DeletionClock,
) -> Vec<Pod> {
    pods.iter()
        .map(|p| {
            let mut pod = (*p).clone();
            if !pod_ended(p) && crate::update::fence::stopped_by_fence(p, clock.seen_for(p)) {
                let status = pod.status.get_or_insert_with(Default::default);
                status.phase = Some("Failed".into());
                status.reason = Some("NodeLost".into());
                status.message = Some(format!(
                    "the pod was deleted {}s ago and its node has not confirmed that it stopped; \
                     its runner stops Pulumi by itself once the API server no longer takes the \
                     pod's token or cannot be reached, which is over by now",
                    crate::update::fence::bound(p).as_secs()
                ));
            }
            pod
        })
        .collect()
}

/// When the next fenced pod among `pods` passes its bound, if one is on its way there (the
/// reconcile looks again then: nothing else happens on a node that stopped answering).
pub fn fence_due(
    pods: &[&Pod],
    clock: &crate::runtime::deletion_clock::DeletionClock,
) -> Option<std::time::Duration> {
    pods.iter()
        .filter(|p| !pod_ended(p) && crate::update::fence::fenced_and_deleted(p))
        .filter_map(|p| {
            let seen = clock.seen_for(p)?;
            Some(
                crate::update::fence::bound(p).saturating_sub(seen)
                    + std::time::Duration::from_secs(1),
            )
        })
        .min()
}

/// Whether the Job must be told to start no further pod: one of its pods is being deleted or
/// has failed, so the operation is over (Kubernetes 1.20 would replace the pod).
pub fn should_stop_job(job: &Job, pods: &[&Pod]) -> bool {
    let parallelism = job.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1);
    parallelism > 0
        && pods.iter().any(|p| {
            p.metadata.deletion_timestamp.is_some()
                || p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
        })
}

fn cond(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: kind.into(),
        status: if ok {
            names::STATUS_TRUE
        } else {
            names::STATUS_FALSE
        }
        .into(),
        reason: reason.into(),
        message: if message.is_empty() {
            reason.into()
        } else {
            message.into()
        },
        last_transition_time: now.clone(),
        observed_generation: generation,
    }
}

/// A preview's changes as the pod reported them, kept only in a shape the Stack can show: at
/// most [`MAX_REPORTED_CHANGES`], each a known operation on a URN of bounded length (the pod
/// is trusted with nothing beyond its own Update).
fn reported_changes(result: &RunResult) -> (Option<i64>, Vec<ResourceChange>) {
    const MAX_URN_BYTES: usize = 512;
    let changes: Vec<ResourceChange> = result
        .changes
        .iter()
        .filter(|c| {
            matches!(
                c.operation.as_str(),
                "create" | "update" | "replace" | "delete"
            )
        })
        .filter(|c| !c.urn.is_empty() && c.urn.len() <= MAX_URN_BYTES)
        .take(MAX_REPORTED_CHANGES)
        .cloned()
        .collect();
    let changed = result
        .changed
        .map(|n| n.max(changes.len() as i64).min(i64::from(u32::MAX)));
    (changed, changes)
}

/// A preview's counts of planned changes by operation (from its summary), only the known
/// operations and bounded values.
fn reported_counts(result: &RunResult) -> std::collections::BTreeMap<String, i64> {
    result
        .summary
        .iter()
        .flat_map(|s| s.resource_changes.iter())
        .filter(|(op, _)| matches!(op.as_str(), "create" | "update" | "replace" | "delete"))
        .map(|(op, n)| (op.clone(), (*n).clamp(0, i64::from(u32::MAX))))
        .collect()
}

/// The Update's status for a progress, keeping transition times of unchanged conditions.
pub fn status_for(
    update: &Update,
    progress: &Progress,
    start: Option<Time>,
    now: &Time,
) -> UpdateStatus {
    let generation = update.metadata.generation;
    let old = update.status.clone().unwrap_or_default();
    let mut st = UpdateStatus {
        observed_generation: generation,
        start_time: old.start_time.clone().or(start),
        ..Default::default()
    };
    let conditions = match progress {
        Progress::Running { message } => running_conditions(message),
        Progress::Unconfirmed { message } => [
            (true, REASON_NODE_UNREACHABLE, message.as_str()),
            (false, names::UPDATE_REASON_PROGRESSING, NOT_ENDED_MESSAGE),
            (false, names::UPDATE_REASON_PROGRESSING, NOT_ENDED_MESSAGE),
        ],
        Progress::Succeeded { result, end } => {
            record_success(&mut st, result, end, now);
            SUCCEEDED_CONDITIONS
        }
        Progress::Failed {
            reason,
            message,
            result,
            end,
        } => {
            record_failure(&mut st, message, result.as_ref(), end, now);
            failed_conditions(reason, message)
        }
    };
    let conditions = [
        names::CONDITION_PROGRESSING,
        names::CONDITION_FAILED,
        names::CONDITION_COMPLETE,
    ]
    .into_iter()
    .zip(conditions)
    .map(|(kind, (ok, reason, message))| cond(kind, ok, reason, message, generation, now));
    st.conditions = Some(keep_transition_times(
        conditions,
        &old.conditions.unwrap_or_default(),
    ));
    st
}

/// The Progressing, Failed and Complete conditions of an Update, in this order, each as
/// (status, reason, message).
type Conditions<'a> = [(bool, &'a str, &'a str); 3];

/// Only Progressing says what the operation is doing (the scheduler's reason, say); repeated
/// in the other two it tripled every status write and cached Update.
fn running_conditions(message: &str) -> Conditions<'_> {
    [
        (true, names::UPDATE_REASON_PROGRESSING, message),
        (false, names::UPDATE_REASON_PROGRESSING, NOT_ENDED_MESSAGE),
        (false, names::UPDATE_REASON_PROGRESSING, NOT_ENDED_MESSAGE),
    ]
}

const SUCCEEDED_CONDITIONS: Conditions<'static> = [
    (
        false,
        names::UPDATE_REASON_COMPLETE,
        "the operation finished",
    ),
    (
        false,
        names::UPDATE_REASON_UPDATE_SUCCEEDED,
        "the operation succeeded",
    ),
    (
        true,
        names::UPDATE_REASON_UPDATED,
        "the operation succeeded",
    ),
];

fn failed_conditions<'a>(reason: &'a str, message: &'a str) -> Conditions<'a> {
    [
        (
            false,
            names::UPDATE_REASON_COMPLETE,
            "the operation finished",
        ),
        (true, reason, message),
        (true, names::UPDATE_REASON_UPDATED, "the operation failed"),
    ]
}

/// What a successful operation reported, into the status.
fn record_success(st: &mut UpdateStatus, result: &RunResult, end: &Option<Time>, now: &Time) {
    st.end_time = end.clone().or_else(|| Some(now.clone()));
    st.permalink = result.permalink.clone();
    st.outputs = result.outputs.clone();
    st.project_info = result.project.clone();
    st.resources = result.resources;
    (st.changed, st.changes) = reported_changes(result);
    st.change_counts = reported_counts(result);
    st.policy = result.policy.clone();
    st.message = Some(if result.message.is_empty() {
        "succeeded".into()
    } else {
        result.message.clone()
    });
}

/// What a failed operation reported, into the status.
fn record_failure(
    st: &mut UpdateStatus,
    message: &str,
    result: Option<&RunResult>,
    end: &Option<Time>,
    now: &Time,
) {
    st.end_time = end.clone().or_else(|| Some(now.clone()));
    st.message = Some(message.to_string());
    if let Some(r) = result {
        st.permalink = r.permalink.clone();
        st.project_info = r.project.clone();
        st.resources = r.resources;
        st.policy = r.policy.clone();
    }
}

/// The conditions, each with the transition time of the old condition of its type and status.
fn keep_transition_times(
    conditions: impl Iterator<Item = Condition>,
    old: &[Condition],
) -> Vec<Condition> {
    conditions
        .map(|c| {
            match old
                .iter()
                .find(|o| o.type_ == c.type_ && o.status == c.status)
            {
                Some(o) => Condition {
                    last_transition_time: o.last_transition_time.clone(),
                    ..c
                },
                None => c,
            }
        })
        .collect()
}

/// Whether an Update has finished (`Complete=True`).
pub fn update_complete(update: &Update) -> bool {
    update_condition(update, names::CONDITION_COMPLETE)
        .is_some_and(|c| c.status == names::STATUS_TRUE)
}

/// Whether an Update has failed (`Failed=True`).
pub fn update_failed(update: &Update) -> bool {
    update_condition(update, names::CONDITION_FAILED)
        .is_some_and(|c| c.status == names::STATUS_TRUE)
}

/// The Update's condition of this type, if set.
pub fn update_condition<'a>(update: &'a Update, kind: &str) -> Option<&'a Condition> {
    update
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::plan::FailureReason;
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn job(conditions: serde_json::Value) -> Job {
        serde_json::from_value(
            json!({"metadata": {"name": "u"}, "spec": {"activeDeadlineSeconds": 60, "template": {}},
                                      "status": {"conditions": conditions}}),
        )
        .unwrap()
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "u-abc", "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": status})).unwrap()
    }

    fn terminated(name: &str, code: i32, reason: &str, message: &str) -> serde_json::Value {
        json!({"name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": code, "reason": reason, "message": message,
                                        "finishedAt": "2026-01-01T00:05:00Z"}}})
    }

    fn pending_pod(created: &str, waiting: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "u-abc", "creationTimestamp": created},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "pulumi", "image": "i", "imageID": "",
                "ready": false, "restartCount": 0, "state": {"waiting": {"reason": waiting}}}]}
        }))
        .unwrap()
    }

    /// A running operation's pod on node-a, deleted at `deleted` with `conditions`.
    fn deleted_pod(deleted: &str, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "u-abc", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "deletionTimestamp": deleted},
            "spec": {"nodeName": "node-a"},
            "status": {"phase": "Running", "conditions": conditions,
                       "containerStatuses": [{"name": "pulumi", "image": "i", "imageID": "",
                           "ready": true, "restartCount": 0, "state": {"running": {}}}]}
        }))
        .unwrap()
    }

    fn job_stopped_with_terminating_pod() -> Job {
        serde_json::from_value(json!({"metadata": {"name": "u"},
            "spec": {"parallelism": 0, "template": {}},
            "status": {"active": 0, "terminating": 1}}))
        .unwrap()
    }

    #[test]
    fn a_pod_evicted_from_a_node_that_stopped_answering_holds_the_operation_open() {
        let evicted = deleted_pod(
            "2026-01-01T00:09:59Z",
            json!([{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                    "message": "Taint manager: deleting due to NoExecute taint"},
                   {"type": "Ready", "status": "False"}]),
        );
        // The Job has already given up on the pod: that proves nothing about its processes.
        let failed_job = job(json!([{"type": "FailureTarget", "status": "True",
                                     "reason": "BackoffLimitExceeded"}]));
        for job in [job_stopped_with_terminating_pod(), failed_job] {
            match progress(Some(&job), &[&evicted], now()) {
                Progress::Unconfirmed { message } => {
                    assert!(
                        message.contains("u-abc") && message.contains("node node-a"),
                        "{message}"
                    );
                    assert!(
                        message.contains("kubectl taint nodes node-a node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"),
                        "{message}"
                    );
                }
                other => panic!("unconfirmed, not {other:?}"),
            }
        }
        let status = status_for(
            &serde_json::from_value(json!({"metadata": {"name": "u"}, "spec": {}})).unwrap(),
            &progress(
                Some(&job_stopped_with_terminating_pod()),
                &[&evicted],
                now(),
            ),
            None,
            &Time(now()),
        );
        let conditions = status.conditions.unwrap_or_default();
        let progressing = conditions
            .iter()
            .find(|c| c.type_ == names::CONDITION_PROGRESSING)
            .map(|c| (c.status.as_str(), c.reason.as_str()));
        assert_eq!(progressing, Some(("True", REASON_NODE_UNREACHABLE)));
    }

    #[test]
    fn proof_of_the_stop_ends_the_wait() {
        let conditions = json!([{"type": "DisruptionTarget", "status": "True",
                                 "reason": "DeletionByTaintManager"},
                                {"type": "Ready", "status": "False"}]);
        let failed_job = job(json!([{"type": "Failed", "status": "True",
                                     "reason": "BackoffLimitExceeded", "message": "gone"}]));
        // The pod object is gone (node deleted, out-of-service taint, force deletion).
        assert!(matches!(
            progress(Some(&failed_job), &[], now()),
            Progress::Failed { .. }
        ));
        // The kubelet reported the pod failed.
        let mut stopped = deleted_pod("2026-01-01T00:09:59Z", conditions.clone());
        if let Some(s) = stopped.status.as_mut() {
            s.phase = Some("Failed".into());
        }
        assert!(matches!(
            progress(Some(&failed_job), &[&stopped], now()),
            Progress::Failed { .. }
        ));
        // The kubelet reported the container terminated.
        let mut ended = deleted_pod("2026-01-01T00:09:59Z", conditions);
        if let Some(s) = ended.status.as_mut() {
            s.container_statuses =
                serde_json::from_value(json!([terminated("pulumi", 137, "Error", "")])).ok();
        }
        assert!(matches!(
            progress(Some(&failed_job), &[&ended], now()),
            Progress::Failed { .. }
        ));
    }

    #[test]
    fn a_pod_evicted_from_a_healthy_node_is_waited_for() {
        // A NoExecute taint put on a node that answers: the kubelet stops the pod, which
        // stays ready until then, and its container's end is the outcome.
        let evicted = deleted_pod(
            "2026-01-01T00:09:59Z",
            json!([{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"},
                   {"type": "Ready", "status": "True"}]),
        );
        let job = job_stopped_with_terminating_pod();
        assert!(matches!(
            progress(Some(&job), &[&evicted], now()),
            Progress::Running { .. }
        ));
        // Deleted by a person or the operator: waited for until the node has had its time.
        let deleted = deleted_pod("2026-01-01T00:08:01Z", json!([]));
        assert!(matches!(
            progress(Some(&job), &[&deleted], now()),
            Progress::Running { .. }
        ));
        let recheck = recheck_after(None, None, &[&deleted], now());
        assert_eq!(recheck.as_secs(), 2, "looked at again when the wait ends");
    }

    #[test]
    fn a_deleted_pod_never_confirmed_stopped_is_not_taken_as_stopped() {
        let deleted = deleted_pod("2026-01-01T00:08:00Z", json!([]));
        let job = job_stopped_with_terminating_pod();
        match progress(Some(&job), &[&deleted], now()) {
            Progress::Unconfirmed { message } => {
                assert!(
                    message.contains("has not confirmed that it stopped within 2m"),
                    "{message}"
                );
            }
            other => panic!("unconfirmed, not {other:?}"),
        }
    }

    #[test]
    fn a_pod_whose_pulumi_container_ended_is_ending() {
        let running: Pod = serde_json::from_value(json!({
            "metadata": {"name": "u-abc"},
            "status": {"phase": "Running", "containerStatuses": [{"name": "pulumi", "image": "i",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"running": {}}}]}
        }))
        .unwrap();
        assert!(!pod_ended(&running));
        let mut ended = running.clone();
        ended
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = serde_json::from_value(json!({"terminated": {"exitCode": 0}})).unwrap();
        assert!(pod_ended(&ended), "phase still Running, container done");
        let mut succeeded = running;
        succeeded.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(pod_ended(&succeeded));
    }

    #[test]
    fn a_pod_says_itself_why_it_does_not_start() {
        let unschedulable: Pod = serde_json::from_value(json!({
            "metadata": {"name": "u-abc"},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/1 nodes are available"}]}
        }))
        .unwrap();
        assert_eq!(
            pod_start_problem(&unschedulable),
            Some(("Unschedulable".into(), "0/1 nodes are available".into()))
        );
        let pulling = pending_pod("2026-01-01T00:09:00Z", "ImagePullBackOff");
        assert_eq!(
            pod_start_problem(&pulling).map(|p| p.0),
            Some("ImagePullBackOff".into())
        );
        // Starting normally: nothing to say, and no reason to read Events yet.
        assert_eq!(
            pod_start_problem(&pending_pod("2026-01-01T00:09:00Z", "ContainerCreating")),
            None
        );
    }

    #[test]
    fn an_operation_that_never_starts_fails_in_bounded_time_with_the_reason() {
        let mut j = job(json!([]));
        j.metadata.creation_timestamp = Some(Time("2026-01-01T00:09:00Z".parse().unwrap()));
        let none = not_started(&j, &[], now()).unwrap();
        assert_eq!(
            none,
            NotStarted {
                pod: None,
                seconds: 60
            }
        );
        let warning = Some((
            "FailedCreate".to_string(),
            "serviceaccount \"typo\" not found".to_string(),
        ));
        assert_eq!(start_failure(&none, warning.clone()), None, "too early");
        j.metadata.creation_timestamp = Some(Time("2026-01-01T00:07:00Z".parse().unwrap()));
        let none = not_started(&j, &[], now()).unwrap();
        match start_failure(&none, warning) {
            Some(Progress::Failed {
                reason, message, ..
            }) => {
                assert_eq!(reason, "FailedCreate");
                assert!(
                    message.contains("could not be created in 3m:") && message.contains("typo"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Unschedulable: the cluster may be adding a node; the wait is the long one.
        let unschedulable = Some(("Unschedulable".to_string(), "0/1 nodes".to_string()));
        let three_minutes = NotStarted {
            pod: Some("u-abc".into()),
            seconds: 180,
        };
        assert_eq!(start_failure(&three_minutes, unschedulable.clone()), None);
        let ten_minutes = NotStarted {
            pod: Some("u-abc".into()),
            seconds: UNSCHEDULABLE_SECONDS,
        };
        assert!(matches!(
            start_failure(&ten_minutes, unschedulable),
            Some(Progress::Failed { reason, .. }) if reason == "Unschedulable"
        ));
        // A pod stuck in ContainerCreating: no reason yet → waits up to the long deadline.
        let stuck = pending_pod("2026-01-01T00:05:00Z", "ContainerCreating");
        let w = not_started(&j, &[&stuck], now()).unwrap();
        assert_eq!(w.pod.as_deref(), Some("u-abc"));
        assert_eq!(start_failure(&w, None), None);
        let old = pending_pod("2026-01-01T00:00:00Z", "ContainerCreating");
        let w = not_started(&j, &[&old], now()).unwrap();
        assert!(
            matches!(start_failure(&w, None), Some(Progress::Failed { reason, .. }) if reason == "StartTimeout")
        );
        // Once a container ran, it has started.
        let ran = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "pulumi", "image": "i", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}));
        assert_eq!(not_started(&j, &[&ran], now()), None);
        let done = job(json!([{"type": "Complete", "status": "True"}]));
        assert_eq!(not_started(&done, &[], now()), None);
    }

    #[test]
    fn the_scheduler_event_waits_as_long_as_the_pod_condition() {
        let four_minutes = NotStarted {
            pod: Some("u-abc".into()),
            seconds: 240,
        };
        let event = Some(("FailedScheduling".to_string(), "0/1 nodes".to_string()));
        assert_eq!(start_failure(&four_minutes, event.clone()), None);
        let ten_minutes = NotStarted {
            seconds: UNSCHEDULABLE_SECONDS,
            ..four_minutes
        };
        assert!(matches!(
            start_failure(&ten_minutes, event),
            Some(Progress::Failed { reason, .. }) if reason == "FailedScheduling"
        ));
    }

    #[test]
    fn a_running_operation_is_looked_at_again_when_a_time_based_decision_is_due() {
        let secs = |d: std::time::Duration| d.as_secs() as i64;
        let waiting = |seconds| NotStarted {
            pod: Some("u-abc".into()),
            seconds,
        };
        // Started and healthy: only the backstop; watch events do the rest.
        assert_eq!(
            secs(recheck_after(None, None, &[], now())),
            RUNNING_RECHECK_SECONDS + 1
        );
        // Unexplained: the long deadline, never later than the backstop.
        assert_eq!(
            secs(recheck_after(Some(&waiting(400)), None, &[], now())),
            NOT_STARTED_SECONDS - 400 + 1
        );
        assert_eq!(
            secs(recheck_after(Some(&waiting(3)), None, &[], now())),
            RUNNING_RECHECK_SECONDS + 1
        );
        // A pod the scheduler cannot place: its (long) deadline.
        assert_eq!(
            secs(recheck_after(
                Some(&waiting(400)),
                Some("Unschedulable"),
                &[],
                now()
            )),
            UNSCHEDULABLE_SECONDS - 400 + 1
        );
        // A Warning Event: its shorter patience is the next deadline.
        assert_eq!(
            secs(recheck_after(
                Some(&waiting(100)),
                Some("FailedMount"),
                &[],
                now()
            )),
            NOT_STARTED_WITH_WARNING_SECONDS - 100 + 1
        );
        // Past every deadline (the failure is being written): the backstop, never zero.
        assert!(secs(recheck_after(Some(&waiting(10_000)), None, &[], now())) >= 1);
        // A container stuck on its image: the grace period's end (pod created 9 min ago).
        let pulling = pending_pod("2026-01-01T00:09:00Z", "ImagePullBackOff");
        assert_eq!(
            secs(recheck_after(None, None, &[&pulling], now())),
            STUCK_AFTER_SECONDS - 60 + 1
        );
    }

    #[test]
    fn a_completed_job_without_its_pod_has_lost_the_result() {
        let done = job(json!([{"type": "Complete", "status": "True"}]));
        match progress(Some(&done), &[], now()) {
            Progress::Failed {
                reason, message, ..
            } => {
                assert_eq!(reason, "Unknown");
                assert!(message.contains("result is unknown"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stopped_job_whose_pod_is_gone_has_ended() {
        let stopped = |status: serde_json::Value| -> Job {
            serde_json::from_value(json!({"metadata": {"name": "u"},
                "spec": {"parallelism": 0, "template": {}}, "status": status}))
            .unwrap()
        };
        // No pod left and none counted by the Job controller: over, without waiting.
        match progress(
            Some(&stopped(json!({"active": 0, "terminating": 0}))),
            &[],
            now(),
        ) {
            Progress::Failed { reason, .. } => assert_eq!(reason, "Aborted"),
            other => panic!("{other:?}"),
        }
        // The Job controller still counts a pod the cache has not seen: not yet.
        for status in [json!({"active": 1}), json!({"terminating": 1})] {
            assert!(matches!(
                progress(Some(&stopped(status)), &[], now()),
                Progress::Running { .. }
            ));
        }
        // Its pod is still stopping: not yet.
        let stopping = pod(json!({"phase": "Running"}));
        assert!(matches!(
            progress(Some(&stopped(json!({}))), &[&stopping], now()),
            Progress::Running { .. }
        ));
        // A Job that was never stopped and has no pod yet is starting, not over.
        let running = job(json!([]));
        assert!(matches!(
            progress(Some(&running), &[], now()),
            Progress::Running { .. }
        ));
    }

    #[test]
    fn runner_success_and_classified_failure() {
        let ok = RunResult {
            outputs: Some("u-stack-outputs".into()),
            permalink: Some("https://p".into()),
            ..RunResult::failed(FailureReason::UpdateFailed, "")
        };
        let ok = RunResult {
            outcome: Outcome::Succeeded,
            reason: None,
            ..ok
        };
        let p = pod(
            json!({"phase": "Succeeded", "containerStatuses": [terminated("pulumi", 0, "Completed", &ok.to_termination_message())]}),
        );
        match progress(Some(&job(json!([]))), &[&p], now()) {
            Progress::Succeeded { result, end } => {
                assert_eq!(result.outputs.as_deref(), Some("u-stack-outputs"));
                assert!(end.is_some());
            }
            other => panic!("{other:?}"),
        }
        let conflict = RunResult::failed(
            FailureReason::UpdateConflict,
            "Another update is currently in progress",
        );
        let p = pod(
            json!({"phase": "Failed", "containerStatuses": [terminated("pulumi", 1, "Error", &conflict.to_termination_message())]}),
        );
        match progress(Some(&job(json!([]))), &[&p], now()) {
            Progress::Failed {
                reason, message, ..
            } => {
                assert_eq!(reason, "UpdateConflict");
                assert_eq!(message, "Another update is currently in progress");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn deaths_without_a_result_carry_the_kubernetes_reason() {
        let oom = pod(
            json!({"phase": "Failed", "containerStatuses": [terminated("pulumi", 137, "OOMKilled", "")]}),
        );
        match progress(Some(&job(json!([]))), &[&oom], now()) {
            Progress::Failed {
                reason, message, ..
            } => {
                assert_eq!(reason, "OOMKilled");
                assert_eq!(
                    message,
                    "container pulumi terminated (OOMKilled, exit code 137)"
                );
            }
            other => panic!("{other:?}"),
        }
        let fetch = pod(
            json!({"phase": "Failed", "initContainerStatuses": [terminated("bootstrap", 0, "Completed", ""), terminated("fetch", 2, "Error", "clone failed")]}),
        );
        assert!(
            matches!(progress(Some(&job(json!([]))), &[&fetch], now()), Progress::Failed { ref reason, .. } if reason == "Error")
        );
        let evicted =
            pod(json!({"phase": "Failed", "reason": "Evicted", "message": "ephemeral storage"}));
        assert!(
            matches!(pod_progress(&evicted, now()), Progress::Failed { ref reason, .. } if reason == "Evicted")
        );
        let deadline = job(
            json!([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "x"}]),
        );
        match progress(Some(&deadline), &[], now()) {
            Progress::Failed {
                reason, message, ..
            } => {
                assert_eq!(reason, "DeadlineExceeded");
                assert!(message.contains("60s"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // 1.31+: `FailureTarget` names the reason before the pods stopped and `Failed` is set;
        // an interrupted pod's own result does not hide the deadline.
        let target = job(
            json!([{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "message": "x"}]),
        );
        let interrupted =
            RunResult::failed(FailureReason::Interrupted, "stack init was interrupted");
        let stopped = pod(
            json!({"phase": "Failed", "containerStatuses": [terminated("pulumi", 1, "Error", &interrupted.to_termination_message())]}),
        );
        // Interrupted past the deadline: the deadline stopped it, before the Job says so, and
        // when the Job's verdict names the pod's failure instead (1.37 may count the stopped
        // pod first: BackoffLimitExceeded).
        let past = |conditions| {
            let mut j = job(conditions);
            j.status.as_mut().unwrap().start_time =
                Some(Time(now() - jiff::SignedDuration::from_secs(61)));
            j
        };
        let backoff = json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "x"}]);
        for late in [past(json!([])), past(backoff.clone())] {
            match progress(Some(&late), &[&stopped], now()) {
                Progress::Failed { reason, .. } => assert_eq!(reason, "DeadlineExceeded"),
                other => panic!("{other:?}"),
            }
        }
        // A pod that failed on its own before the deadline keeps its own reason.
        let own = RunResult::failed(FailureReason::UpdateFailed, "provider error");
        let mut failed_early = pod(
            json!({"phase": "Failed", "containerStatuses": [terminated("pulumi", 1, "Error", &own.to_termination_message())]}),
        );
        let early_end = Some(Time(now() - jiff::SignedDuration::from_secs(30)));
        if let Some(t) = failed_early
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|c| c[0].state.as_mut())
            .and_then(|s| s.terminated.as_mut())
        {
            t.finished_at = early_end;
        }
        match progress(Some(&past(backoff)), &[&failed_early], now()) {
            Progress::Failed { reason, .. } => assert_eq!(reason, "UpdateFailed"),
            other => panic!("{other:?}"),
        }
        match progress(Some(&target), &[&stopped], now()) {
            Progress::Failed {
                reason, message, ..
            } => {
                assert_eq!(reason, "DeadlineExceeded");
                assert!(message.contains("deadline"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_replacement_pod_keeps_the_update_open_until_it_stops() {
        let interrupted = RunResult::failed(FailureReason::Interrupted, "interrupted");
        let mut original = pod(
            json!({"phase": "Failed", "containerStatuses": [terminated("pulumi", 1, "Error", &interrupted.to_termination_message())]}),
        );
        original.metadata.deletion_timestamp = Some(Time(now()));
        let mut replacement = pod(
            json!({"phase": "Pending", "initContainerStatuses": [{"name": "fetch", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"running": {}}}]}),
        );
        replacement.metadata.creation_timestamp =
            Some(Time("2026-01-01T00:00:05Z".parse().unwrap()));
        replacement.metadata.name = Some("u-def".into());
        let j = job(json!([]));
        assert!(should_stop_job(&j, &[&original, &replacement]));
        match progress(Some(&j), &[&original, &replacement], now()) {
            Progress::Running { message } => assert!(message.contains("u-def"), "{message}"),
            other => panic!("{other:?}"),
        }
        // Once the replacement has stopped too, the original's result stands.
        let stopped = pod(
            json!({"phase": "Failed", "initContainerStatuses": [terminated("fetch", 143, "Error", "")]}),
        );
        match progress(Some(&j), &[&original, &stopped], now()) {
            Progress::Failed { reason, .. } => assert_eq!(reason, "Interrupted"),
            other => panic!("{other:?}"),
        }
        let mut stopped_job = j.clone();
        stopped_job.spec.as_mut().unwrap().parallelism = Some(0);
        assert!(!should_stop_job(&stopped_job, &[&original]));
    }

    #[test]
    fn image_pull_errors_fail_after_a_grace_period() {
        let waiting = |created: &str| {
            let mut p = pod(
                json!({"phase": "Pending", "containerStatuses": [{"name": "pulumi", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}),
            );
            p.metadata.creation_timestamp = Some(Time(created.parse().unwrap()));
            p
        };
        assert!(matches!(
            pod_progress(&waiting("2026-01-01T00:09:30Z"), now()),
            Progress::Running { .. }
        ));
        assert!(
            matches!(pod_progress(&waiting("2026-01-01T00:00:00Z"), now()), Progress::Failed { ref reason, .. } if reason == "ImagePullBackOff")
        );
    }

    #[test]
    fn status_conditions_follow_pko_shapes() {
        let u: Update = serde_json::from_value(
            json!({"metadata": {"name": "u", "generation": 1}, "spec": {"type": "up"}}),
        )
        .unwrap();
        let t = Time(now());
        let st = status_for(
            &u,
            &Progress::Running {
                message: "running".into(),
            },
            None,
            &t,
        );
        let c = st.conditions.unwrap();
        assert_eq!(
            (c[0].type_.as_str(), c[0].status.as_str()),
            ("Progressing", "True")
        );
        // What the operation is doing is said once, by Progressing.
        assert_eq!(c[0].message, "running");
        assert_eq!(
            (c[1].message.as_str(), c[2].message.as_str()),
            (NOT_ENDED_MESSAGE, NOT_ENDED_MESSAGE)
        );
        let failed = Progress::Failed {
            reason: "OOMKilled".into(),
            message: "m".into(),
            result: None,
            end: None,
        };
        let st = status_for(&u, &failed, None, &t);
        let c = st.conditions.unwrap();
        assert_eq!(
            (
                c[1].type_.as_str(),
                c[1].status.as_str(),
                c[1].reason.as_str()
            ),
            ("Failed", "True", "OOMKilled")
        );
        assert_eq!(
            (c[2].type_.as_str(), c[2].status.as_str()),
            ("Complete", "True")
        );
        assert_eq!(st.message.as_deref(), Some("m"));
    }

    #[test]
    fn outputs_missing_from_the_log_are_waited_for_only_shortly_after_the_end() {
        let end = jiff::Timestamp::from_second(1_000_000).unwrap();
        let at = |s: i64| jiff::Timestamp::from_second(1_000_000 + s).unwrap();
        assert!(outputs_log_recheck(Some(end), at(0)).is_some());
        assert!(outputs_log_recheck(Some(end), at(OUTPUTS_LOG_GRACE_SECONDS - 1)).is_some());
        assert_eq!(
            outputs_log_recheck(Some(end), at(OUTPUTS_LOG_GRACE_SECONDS)),
            None
        );
        // No end recorded: nothing to measure the wait by, so no wait.
        assert_eq!(outputs_log_recheck(None, at(0)), None);
    }
}
