//! One pod per operation, decided from the objects. The Job controller may create a second pod
//! for a Job that wants one: a pod creation that failed for its client (an API server restarted
//! mid-request) may have been stored all the same, and the controller then creates another
//! (Kubernetes documents that a `parallelism: 1` Job "may sometimes be started twice"). Two
//! pods of one operation would run two Pulumi programs on one stack.
//!
//! So every update pod is created behind a scheduling gate ([`GATE`]): it is not scheduled,
//! and runs nothing, until the operator opens the gate. The operator opens it for one pod per
//! Update, ever: it first records that pod's UID on the Update ([`ADMITTED_POD_ANNOTATION`],
//! written only if the Update is unchanged since it was read, so two operators cannot choose
//! two pods), then removes the gate from that pod alone. It chooses only when every other pod
//! of the Stack that passed its gate has ended or is gone, read from the API server, not from
//! a cache that may lag. A pod still behind its gate never ran anything; the Job controller
//! removes the extra one (and counts it, so the operation fails and the Stack runs it again).

use crate::runtime::cached::CachedPod;
use crate::runtime::context::Context;
use crate::runtime::error::Result;
use crate::update::status::pod_ended;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use pulumi_operator_api::{names, Update};
use tracing::info;

/// The scheduling gate every update pod is created behind.
pub const GATE: &str = "pulumi.com/one-operation-per-stack";

/// The Update's annotation naming the UID of the one pod admitted to run its operation.
pub const ADMITTED_POD_ANNOTATION: &str = "auto.pulumi.com/admitted-pod";

/// The Update's annotation saying its operation was cancelled before any pod was admitted
/// (its Stack was deleted meanwhile): no pod of it is ever let through its gate.
pub const CANCELLED_ANNOTATION: &str = "auto.pulumi.com/cancelled";

/// Whether the Update's operation provably never ran: no pod of it was admitted past the gate,
/// and its Job (`None`: it has none on the API server) makes every pod behind that gate (a Job
/// of an older release may not).
pub fn never_admitted(update: &Update, job: Option<&crate::runtime::cached::CachedJob>) -> bool {
    let gated = |j: &crate::runtime::cached::CachedJob| {
        j.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| g.iter().any(|g| g.name == GATE))
    };
    !update.annotations().contains_key(ADMITTED_POD_ANNOTATION) && job.is_none_or(gated)
}

/// Whether the Update's operation was cancelled before it started.
pub fn cancelled(update: &Update) -> bool {
    update.annotations().contains_key(CANCELLED_ANNOTATION)
}

/// What to do about an Update's pods at their gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// No pod of the Update waits at its gate, or the admitted one has passed it.
    Nothing,
    /// Record `uid` as the operation's one pod, then open its gate.
    Choose { name: String, uid: String },
    /// Open the gate (at `index` in its `schedulingGates`) of the pod already chosen.
    Open {
        name: String,
        uid: String,
        index: usize,
    },
    /// A pod that passed its gate, of another operation or not admitted by us, has not ended.
    Wait { pod: String },
}

/// Where [`GATE`] is in the pod's scheduling gates, if the pod is still behind it.
pub fn gate_index(pod: &CachedPod) -> Option<usize> {
    pod.spec
        .as_ref()?
        .scheduling_gates
        .as_ref()?
        .iter()
        .position(|g| g.name == GATE)
}

fn is_of(pod: &CachedPod, update: &str) -> bool {
    pod.labels()
        .get(names::UPDATE_NAME_LABEL)
        .map(String::as_str)
        == Some(update)
}

/// The decision for Update `update`, which chose the pod `chosen` (a UID) if any, given every
/// pod of its Stack as the API server lists them now (`pods` includes the Update's own).
pub fn decide(update: &str, chosen: Option<&str>, pods: &[CachedPod]) -> Admission {
    let waiting = |p: &&CachedPod| {
        is_of(p, update) && p.metadata.deletion_timestamp.is_none() && gate_index(p).is_some()
    };
    if let Some(uid) = chosen {
        // Once chosen, never another: a chosen pod that went before passing its gate counts
        // as failed for its Job, which ends the operation.
        return pods
            .iter()
            .filter(waiting)
            .find(|p| p.metadata.uid.as_deref() == Some(uid))
            .and_then(|p| {
                Some(Admission::Open {
                    name: p.name_any(),
                    uid: uid.to_string(),
                    index: gate_index(p)?,
                })
            })
            .unwrap_or(Admission::Nothing);
    }
    let mut candidates: Vec<&CachedPod> = pods.iter().filter(waiting).collect();
    candidates.sort_by_key(|p| (p.metadata.creation_timestamp.clone(), p.name_any()));
    let Some(first) = candidates.first() else {
        return Admission::Nothing;
    };
    // Update pods only: a retained workspace's pod carries the Stack's label too, and runs no
    // operation of its own.
    let update_pod = |p: &&CachedPod| p.labels().contains_key(names::UPDATE_NAME_LABEL);
    if let Some(running) = pods
        .iter()
        .filter(update_pod)
        .find(|p| gate_index(p).is_none() && !pod_ended(p))
    {
        return Admission::Wait {
            pod: running.name_any(),
        };
    }
    Admission::Choose {
        name: first.name_any(),
        uid: first.metadata.uid.clone().unwrap_or_default(),
    }
}

/// What the Update's status says while its pod waits for another to stop.
pub fn waiting_message(pod: &str) -> String {
    format!(
        "waiting for pod {pod} to stop before this operation's pod may start (one Pulumi per \
         stack)"
    )
}

/// Lets one pod of the Update through its gate, when one waits there (`pods`: the Update's
/// pods in the cache). Returns the status message while it must wait for another pod.
pub async fn admit(
    ctx: &Context,
    ns: &str,
    update: &Update,
    pods: &[&CachedPod],
) -> Result<Option<String>> {
    let at_gate = |p: &&&CachedPod| gate_index(p).is_some();
    // A cancel is written only if the Update is as it was read, like a choice (`record_choice`):
    // of the two, the one written first wins and the other fails on its resourceVersion.
    if update.metadata.deletion_timestamp.is_some()
        || cancelled(update)
        || !pods.iter().any(|p| at_gate(&p))
    {
        return Ok(None);
    }
    let name = update.name_any();
    let ours = ctx.admitted_for(update);
    if ours.as_ref().is_some_and(|a| a.opened) {
        // Its pod is through (the cache shows it a moment later); never another.
        return Ok(None);
    }
    // Every pod of the Stack (or of this Update alone, for an Update no Stack made), read now.
    let selector = match update.labels().get(names::STACK_NAME_LABEL) {
        Some(stack) => format!(
            "{}={stack},{}",
            names::STACK_NAME_LABEL,
            names::UPDATE_NAME_LABEL
        ),
        None => format!("{}={name}", names::UPDATE_NAME_LABEL),
    };
    let api: Api<CachedPod> = Api::namespaced(ctx.client.clone(), ns);
    let listed = api.list(&ListParams::default().labels(&selector)).await?;
    // Recorded on the Update, or by this operator a moment ago (the cache may not show it).
    let chosen = update
        .annotations()
        .get(ADMITTED_POD_ANNOTATION)
        .cloned()
        .or(ours.map(|a| a.pod_uid));
    let listed: Vec<&CachedPod> = listed.items.iter().collect();
    let judged = crate::update::status::with_fence_verdicts(&listed, &ctx.deletions);
    match decide(&name, chosen.as_deref(), &judged) {
        Admission::Nothing => Ok(None),
        Admission::Wait { pod } => {
            info!(%pod, "the operation's pod waits for another pod of the stack to stop");
            Ok(Some(waiting_message(&pod)))
        }
        Admission::Choose { name: pod, uid } => {
            record_choice(ctx, ns, update, &uid).await?;
            ctx.admitted(update, &uid, false);
            info!(%pod, "the operation's pod chosen to run it");
            // The choice is this look's (written on the Update as read): open the gate now,
            // as a later look would, instead of waiting for the annotation's watch event.
            let index = judged
                .iter()
                .find(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
                .and_then(gate_index);
            if let Some(index) = index {
                open(ctx, &api, update, (&pod, &uid, index)).await?;
            }
            Ok(None)
        }
        Admission::Open {
            name: pod,
            uid,
            index,
        } => {
            open(ctx, &api, update, (&pod, &uid, index)).await?;
            Ok(None)
        }
    }
}

/// Names the chosen pod on the Update, only if the Update is as it was read (a conflict
/// means another look decided meanwhile: the error makes the controller look again).
async fn record_choice(ctx: &Context, ns: &str, update: &Update, uid: &str) -> Result<()> {
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": update.resource_version(),
        "annotations": {ADMITTED_POD_ANNOTATION: uid},
    }});
    api.patch(
        &update.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// Opens the gate of the chosen pod (name, UID, the gate's place) and remembers it did.
async fn open(
    ctx: &Context,
    api: &Api<CachedPod>,
    update: &Update,
    (pod, uid, index): (&str, &str, usize),
) -> Result<()> {
    open_gate(api, pod, uid, index).await?;
    ctx.admitted(update, uid, true);
    info!(%pod, "the operation's pod let through its gate");
    Ok(())
}

/// Removes the gate from that pod alone: the patch tests its UID and the gate's place.
async fn open_gate(api: &Api<CachedPod>, pod: &str, uid: &str, index: usize) -> Result<()> {
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": GATE},
        {"op": "remove", "path": format!("/spec/schedulingGates/{index}")},
    ]))?;
    api.patch(pod, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, update: &str, created: &str, gated: bool, phase: &str) -> CachedPod {
        let gates = if gated {
            serde_json::json!([{"name": "other"}, {"name": GATE}])
        } else {
            serde_json::json!([])
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"),
                "creationTimestamp": created,
                "labels": {names::UPDATE_NAME_LABEL: update}},
            "spec": {"schedulingGates": gates},
            "status": {"phase": phase}
        }))
        .expect("pod")
    }

    #[test]
    fn the_oldest_waiting_pod_is_chosen_once_nothing_else_runs() {
        let pods = [
            pod("u-b", "u", "2026-01-01T00:00:02Z", true, "Pending"),
            pod("u-a", "u", "2026-01-01T00:00:01Z", true, "Pending"),
            pod("old", "earlier", "2025-12-31T00:00:00Z", false, "Succeeded"),
        ];
        assert_eq!(
            decide("u", None, &pods),
            Admission::Choose {
                name: "u-a".into(),
                uid: "uid-u-a".into()
            }
        );
    }

    #[test]
    fn a_running_pod_of_an_earlier_operation_holds_the_gate_shut() {
        let pods = [
            pod("u-a", "u", "2026-01-01T00:00:01Z", true, "Pending"),
            pod("old", "earlier", "2025-12-31T00:00:00Z", false, "Running"),
        ];
        assert_eq!(
            decide("u", None, &pods),
            Admission::Wait { pod: "old".into() }
        );
        // A retained workspace's pod (no Update label) runs no operation: it does not count.
        let mut workspace = pod("ws-0", "", "2025-12-31T00:00:00Z", false, "Running");
        workspace.metadata.labels = Some(Default::default());
        let pods = [
            pod("u-a", "u", "2026-01-01T00:00:01Z", true, "Pending"),
            workspace,
        ];
        assert!(matches!(
            decide("u", None, &pods),
            Admission::Choose { name, .. } if name == "u-a"
        ));
        // A pod of an earlier operation still behind its gate never ran: it does not count.
        let pods = [
            pod("u-a", "u", "2026-01-01T00:00:01Z", true, "Pending"),
            pod("old", "earlier", "2025-12-31T00:00:00Z", true, "Pending"),
        ];
        assert!(matches!(
            decide("u", None, &pods),
            Admission::Choose { name, .. } if name == "u-a"
        ));
    }

    #[test]
    fn only_the_chosen_pod_is_ever_let_through() {
        let pods = [
            pod("u-a", "u", "2026-01-01T00:00:01Z", false, "Running"),
            pod("u-b", "u", "2026-01-01T00:00:02Z", true, "Pending"),
        ];
        assert_eq!(decide("u", Some("uid-u-a"), &pods), Admission::Nothing);
        // The chosen pod went before passing its gate: no other is chosen in its place.
        let pods = [pod("u-b", "u", "2026-01-01T00:00:02Z", true, "Pending")];
        assert_eq!(decide("u", Some("uid-u-a"), &pods), Admission::Nothing);
        // Chosen, gate not yet opened (the operator stopped in between): opened now.
        assert_eq!(
            decide("u", Some("uid-u-b"), &pods),
            Admission::Open {
                name: "u-b".into(),
                uid: "uid-u-b".into(),
                index: 1
            }
        );
    }

    #[test]
    fn only_an_update_without_an_admitted_pod_and_with_a_gated_job_never_ran() {
        use crate::runtime::cached::CachedJob;
        let update = |annotations: serde_json::Value| -> Update {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
                "metadata": {"name": "u", "annotations": annotations},
                "spec": {"type": "up"}
            }))
            .expect("update")
        };
        let job = |gates: serde_json::Value| -> CachedJob {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "u"},
                "spec": {"template": {"spec": {"schedulingGates": gates}}}
            }))
            .expect("job")
        };
        let fresh = update(serde_json::json!({}));
        let gated = job(serde_json::json!([{"name": GATE}]));
        assert!(
            never_admitted(&fresh, None),
            "no Job yet: its pods will be gated"
        );
        assert!(never_admitted(&fresh, Some(&gated)));
        // A Job of an older release, without the gate, may have run a pod.
        assert!(!never_admitted(&fresh, Some(&job(serde_json::json!([])))));
        let chosen = update(serde_json::json!({ADMITTED_POD_ANNOTATION: "uid-a"}));
        assert!(!never_admitted(&chosen, Some(&gated)));
        assert!(!cancelled(&chosen));
        assert!(cancelled(&update(
            serde_json::json!({CANCELLED_ANNOTATION: "deleted"})
        )));
    }

    #[test]
    fn a_pod_being_deleted_is_never_chosen() {
        let mut deleting = pod("u-a", "u", "2026-01-01T00:00:01Z", true, "Pending");
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        assert_eq!(decide("u", None, &[deleting]), Admission::Nothing);
    }
}
