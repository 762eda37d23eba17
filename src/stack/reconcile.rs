//! The Stack controller's I/O loop, as a short sequence of phases over one `Pass`:
//!
//! 1. **finalizer** — ours is on every live Stack;
//! 2. **validate** (pure) — a bad spec stalls with a reason and waits for a change;
//! 3. **operations in flight** (`crate::stack::inflight`, pure) — an unfinished Update of the
//!    Stack is waited for, a finished one is absorbed and only then released: the one place
//!    that enforces "one operation at a time" and "absorb before delete";
//! 4. **resolve the source** — the revision to deploy;
//! 5. **decide** (`crate::stack::decide`, pure) — whether an operation is due;
//! 6. **act** — claim the operation with a status write conditioned on the Stack's
//!    resourceVersion (a reconcile on a stale Stack loses the race instead of starting a second
//!    operation), then apply the Workspace and create the Update;
//! 7. **report** — status, metrics, events.
//!
//! It never waits for a Pulumi run: it creates an Update and returns; the Update's completion
//! triggers the next reconcile.

use crate::runtime::context::Context;
use crate::runtime::error::{Error, Result};
use crate::runtime::finalizer::remove_finalizer;
use crate::runtime::metrics::{StackLabels, UpdateLabels};
use crate::stack::approval;
use crate::stack::cancel::{cancel_if_unstarted, cancellable};
use crate::stack::decide::{decide, Decision, Limits, Observed};
use crate::stack::drift::{self, Finding};
use crate::stack::inflight::{in_flight, node_unreachable, owned_by, releasable, InFlight};
use crate::stack::objects::{build_update, build_workspace, trigger_of, ResolvedSource};
use crate::stack::policy_check;
use crate::stack::prereq;
use crate::stack::source::{self, ResolveError, Resolved};
use crate::stack::status::{self, absorb, mark_reconciling, mark_result, mark_stalled};
use crate::stack::suspend::{self, Transition};
use crate::update::status::{pod_ended, unconfirmed_stop, REASON_NODE_UNREACHABLE};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::validation::{join_errors, validate_stack};
use pulumi_operator_api::{
    CurrentStackUpdate, Stack, StackStatus, StackUpdateStateMessage, Update, UpdateType, Workspace,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

const SOURCE_UNAVAILABLE_REQUEUE: Duration = Duration::from_secs(30);
/// How often a Stack looks again whether a pod of an earlier operation has stopped.
const LEFTOVER_POD_REQUEUE: Duration = Duration::from_secs(5);
/// While a branch head is read in the background: its answer triggers the next reconcile
/// (`Poller::answers`); this is only a safety net.
const SOURCE_PENDING_REQUEUE: Duration = Duration::from_secs(15);
/// Reconciling reason while the head of a tracked branch is being read.
const REASON_RESOLVING_SOURCE: &str = "ResolvingSource";
/// Stalled reason (and Event reason) when an object the operation needs does not exist.
const REASON_REFERENCE_NOT_FOUND: &str = "ReferenceNotFound";
/// After losing the race for the Stack (it changed since it was read): its watch event
/// triggers the next reconcile; this is only a safety net.
const CLAIM_CONFLICT_REQUEUE: Duration = Duration::from_secs(2);
/// How soon a policy check waiting for a free slot looks again.
const POLICY_CHECK_WAIT: Duration = Duration::from_secs(15);
/// After the API server refused the operation's objects (the spec must change).
const REJECTED_REQUEUE: Duration = Duration::from_secs(60);
/// How soon a drift check put off for a policy pack still being resolved looks again (the
/// StackPolicy's status change reconciles the Stack anyway; this is only a safety net).
const POLICY_PACK_CHECK_WAIT: Duration = Duration::from_secs(60);

/// One reconcile of one Stack: what it read and the status it is building.
struct Pass<'a> {
    stack: &'a Stack,
    ctx: &'a Context,
    ns: String,
    name: String,
    uid: String,
    api: Api<Stack>,
    now: Time,
    generation: i64,
    request: String,
    deleting: bool,
    /// The status as last written (or read).
    written: StackStatus,
    status: StackStatus,
    /// The Stack's resourceVersion after this pass's own writes.
    resource_version: Option<String>,
    /// An Update absorbed by this pass: it is announced and released only once a status
    /// holding its result is written (one write then carries the result and what follows).
    absorbed: Option<Arc<Update>>,
    /// The Update this pass cancelled (released already; the cache shows it a moment later).
    cancelled: Option<String>,
    /// What the absorbed Update found, when it was a drift check.
    drift_finding: Option<Finding>,
    /// The plan the absorbed Update saved, when it was a plan for approval.
    saved_plan: Option<String>,
    /// Whether the absorbed Update was a policy check.
    policy_checked: bool,
    /// How the absorbed policy check failed, when it ended without the packs' verdict.
    policy_check_failure: Option<pulumi_operator_api::policy::PolicyCheckFailure>,
    /// An approval refused by this pass (its Warning Event is published when the pass ends).
    refused_approval: Option<String>,
}

/// Why an operation runs.
#[derive(Clone, Debug, PartialEq)]
enum Purpose {
    /// The sync decision (`decide`).
    Sync,
    /// A drift check for this scheduled time.
    DriftCheck(jiff::Timestamp),
    /// An `up` that repairs drift.
    Remediation,
    /// A preview that saves a plan for approval (`spec.approval`).
    Plan,
    /// The `up` of this approved plan.
    ApplyPlan(String, approval::ApprovedBy),
    /// A preview with the policy packs of this digest (they changed since the last operation),
    /// and how many checks of them failed before.
    PolicyCheck(String, i64),
}

/// What drift detection asks of a synced Stack.
enum DriftStep {
    Nothing,
    /// An `up` that repairs drift a check found.
    Remediate(String),
    /// A drift check for this scheduled time.
    Check(jiff::Timestamp),
    /// The next check is this far away.
    Wait(Duration),
}

/// [`reconcile`], with a panic (a bug reached through this Stack's content) turned into a
/// Stalled condition on this Stack and a backed-off retry: it never ends the process.
pub async fn reconcile_guarded(stack: Arc<Stack>, ctx: Arc<Context>) -> Result<Action> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(reconcile(stack.clone(), ctx.clone()))
        .catch_unwind()
        .await
    {
        Ok(Err(e)) if e.is_permanent() => {
            // Retried with backoff all the same; the Stack says why meanwhile.
            let message =
                format!("the operator cannot process this Stack and will retry with backoff: {e}");
            let mut pass = Pass::new(&stack, &ctx)?;
            pass.stall_once(
                names::REASON_RECONCILE_FAILED,
                &message,
                names::REASON_RECONCILE_FAILED,
            )
            .await;
            if let Err(write) = pass.save().await {
                warn!("cannot report the failure on the Stack: {write}");
            }
            Err(e)
        }
        Ok(result) => result,
        Err(panic) => {
            let what = crate::runtime::error::panic_text(panic.as_ref());
            tracing::error!("reconcile panicked: {what}");
            let message = format!(
                "the operator hit an internal error on this Stack (a bug, please report it) and \
                 will retry with backoff: {what}"
            );
            let mut pass = Pass::new(&stack, &ctx)?;
            pass.stall_once(
                names::REASON_INTERNAL_ERROR,
                &message,
                names::REASON_INTERNAL_ERROR,
            )
            .await;
            pass.save().await?;
            Err(Error::Panicked(what))
        }
    }
}

pub async fn reconcile(stack: Arc<Stack>, ctx: Arc<Context>) -> Result<Action> {
    let mut pass = Pass::new(&stack, &ctx)?;
    let has_finalizer = stack.finalizers().iter().any(|f| f == names::FINALIZER);
    if pass.deleting && !has_finalizer {
        return Ok(Action::await_change());
    }
    if !pass.deleting && !has_finalizer {
        // Then go on in this reconcile: waiting for the watch to show the finalizer would
        // add a round trip before the first operation.
        pass.add_finalizer().await?;
    }
    pass.mark_suspension().await;
    if let Some(action) = pass.validate().await? {
        return pass.finish(action).await;
    }
    if let Some(action) = pass.operations_in_flight().await? {
        return pass.finish(action).await;
    }
    if pass.deleting {
        if let Some(action) = pass.go_without_destroy().await? {
            return Ok(action);
        }
    }
    if stack.spec.suspend && !pass.deleting {
        // Before the source is read: a suspended Stack does not track its branch either.
        let action = pass.suspended();
        return pass.finish(action).await;
    }
    let source = match pass.resolve_source().await {
        Ok(s) => s,
        Err(action) => return pass.finish(action).await,
    };
    let revision = source.revision().to_string();
    if !approval::required(&stack.spec) {
        // The gate was turned off: what it last said no longer holds.
        approval::forget(&mut pass.status);
    }
    let decision = pass.decide(&revision);
    let action = match decision {
        Decision::Synced { requeue } => {
            match pass.when_synced(requeue, &source, &revision).await? {
                Some(action) => action,
                None => return Ok(Action::await_change()),
            }
        }
        Decision::Run { kind, reason } => {
            pass.run(kind, reason, &source, &revision, Purpose::Sync)
                .await?
        }
    };
    pass.finish(action).await
}

impl<'a> Pass<'a> {
    fn new(stack: &'a Stack, ctx: &'a Context) -> Result<Pass<'a>> {
        let ns = stack
            .namespace()
            .ok_or(Error::MissingField("metadata.namespace"))?;
        let generation = stack.metadata.generation.unwrap_or(0);
        let request = stack
            .annotations()
            .get(names::RECONCILIATION_REQUEST_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        let written = stack.status.clone().unwrap_or_default();
        let mut status = written.clone();
        status.observed_generation = Some(generation);
        status.observed_reconcile_request = Some(request.clone());
        suspend::carry_forward(&mut status, generation, || stack.spec.digest());
        // A Stack in a namespace being deleted is deleted next: nothing new can be created
        // there, so no operation is started for it meanwhile.
        let deleting =
            stack.metadata.deletion_timestamp.is_some() || ctx.stores.namespace_terminating(&ns);
        Ok(Pass {
            stack,
            ctx,
            api: Api::namespaced(ctx.client.clone(), &ns),
            ns,
            name: stack.name_any(),
            uid: stack.uid().unwrap_or_default(),
            now: Time(jiff::Timestamp::now()),
            generation,
            request,
            // A Stack in a namespace being deleted is deleted next: nothing new can be
            // created there, so no operation is started for it meanwhile.
            deleting,
            written,
            status,
            resource_version: stack.resource_version(),
            absorbed: None,
            cancelled: None,
            drift_finding: None,
            policy_checked: false,
            policy_check_failure: None,
            saved_plan: None,
            refused_approval: None,
        })
    }

    // ---- suspend ---------------------------------------------------------------------

    /// `Suspended` as the spec says, with an Event when that changes (not while deleting:
    /// a deleted Stack is destroyed, suspended or not).
    async fn mark_suspension(&mut self) {
        if self.deleting {
            return;
        }
        let suspended = self.stack.spec.suspend;
        match suspend::mark(&mut self.status, suspended, self.generation, &self.now) {
            Some(Transition::Suspended) => {
                info!("suspended: no new operation starts");
                let note = suspend::SUSPENDED_MESSAGE.to_string();
                self.publish(EventType::Normal, names::REASON_SUSPENDED, note)
                    .await;
            }
            Some(Transition::Resumed) => {
                info!("resumed");
                let note = "spec.suspend is false: operations start again as they fall due";
                self.publish(EventType::Normal, names::EVENT_RESUMED, note.into())
                    .await;
            }
            None => {}
        }
    }

    /// A suspended Stack with nothing in flight runs nothing: its conditions show the last
    /// result, and its sync request stays unobserved (the resume handles it).
    fn suspended(&mut self) -> Action {
        self.status.observed_reconcile_request = self.written.observed_reconcile_request.clone();
        suspend::fold_idle(&mut self.status, self.generation, &self.request, &self.now);
        Action::await_change()
    }

    // ---- phase 2: validate ------------------------------------------------------------

    /// A bad spec stalls with a clear reason, an event and a log line, and waits for the
    /// spec to change.
    async fn validate(&mut self) -> Result<Option<Action>> {
        let errors = validate_stack(self.stack);
        let refused = crate::source::auth::github_api_limits(self.stack, &self.ctx.limits);
        let schedules = match &self.stack.spec.drift_detection {
            Some(d) => drift::parse(d).map(|_| ()),
            None => Ok(()),
        }
        .and(match &self.stack.spec.maintenance_window {
            Some(w) => crate::stack::window::parse(w).map(|_| ()),
            None => Ok(()),
        });
        if errors.is_empty() && refused.is_ok() && schedules.is_ok() {
            return Ok(None);
        }
        if let Err(why) = refused {
            warn!(%why, "not allowed");
            self.stall_once(names::REASON_NOT_ALLOWED, &why.0, names::REASON_NOT_ALLOWED)
                .await;
            return Ok(Some(Action::await_change()));
        }
        let mut message = join_errors(&errors);
        if let Err(why) = schedules {
            if !message.is_empty() {
                message.push_str("; ");
            }
            message.push_str(&why.0);
        }
        if self.deleting {
            message.push_str(&format!(
                "; the stack cannot be destroyed with this spec: fix it, or remove the finalizer with \
                 kubectl patch stack {} --type=merge -p '{{\"metadata\":{{\"finalizers\":[]}}}}'",
                self.name
            ));
        }
        warn!(%message, "invalid stack spec");
        self.stall_once(
            names::REASON_SPEC_INVALID,
            &message,
            names::EVENT_STACK_CONFIG_INVALID,
        )
        .await;
        Ok(Some(Action::await_change()))
    }

    /// Stalled with `reason`; the event is published only when the condition is new.
    async fn stall_once(&mut self, reason: &str, message: &str, event: &str) {
        let repeated = self.written.conditions.iter().flatten().any(|c| {
            c.type_ == names::CONDITION_STALLED && c.reason == reason && c.message == message
        });
        mark_stalled(
            &mut self.status,
            reason,
            message,
            self.generation,
            &self.now,
        );
        if !repeated {
            self.publish(EventType::Warning, event, message.to_string())
                .await;
        }
    }

    // ---- phase 3: operations in flight -----------------------------------------------

    /// The Stack's own Updates (controller reference with its UID), from the cache.
    fn owned_updates(&self) -> Vec<Arc<Update>> {
        self.ctx
            .stores
            .updates_of_stack(&self.ns, &self.name, &self.uid)
    }

    /// An Update by name: the cache, else the API server (an Update this operator created a
    /// moment ago may not be cached yet; "missing" must be a fact before acting on it).
    async fn find_update(&self, name: &str) -> Result<Option<Update>> {
        let cached = self
            .ctx
            .stores
            .updates
            .get(&ObjectRef::new(name).within(&self.ns));
        Ok(match cached {
            Some(u) => Some((*u).clone()),
            None => {
                Api::<Update>::namespaced(self.ctx.client.clone(), &self.ns)
                    .get_opt(name)
                    .await?
            }
        })
    }

    /// Waits for the unfinished Update `name` (`busy`, from the cache); `adopt`: the status
    /// does not name it yet. Says why the Stack waits when that is a node that stopped
    /// answering.
    async fn wait_for(&mut self, name: &str, adopt: bool, busy: Option<&Update>) -> Action {
        if let (true, Some(u)) = (adopt, busy) {
            info!(update = %name, "adopting an unfinished Update of this stack");
            self.status.current_update = Some(trigger_of(u));
        }
        let checking = busy.is_some_and(|u| drift::is_check(u) || policy_check::is_check(u));
        let nothing_new = self.status.last_update.as_ref().is_some_and(|l| {
            l.generation == Some(self.generation)
                && l.reconcile_request.as_deref().unwrap_or("") == self.request
        });
        if checking && nothing_new {
            // A drift check changes nothing: the Stack stays as Ready as it was (a change made
            // meanwhile waits for the check, Reconciling, as below).
            return Action::await_change();
        }
        let unreachable = busy.and_then(node_unreachable);
        let (reason, message) = match &unreachable {
            Some(m) => {
                if !status::has_reason(&self.status, REASON_NODE_UNREACHABLE) {
                    let note = format!("operation {name}: {m}");
                    self.publish(EventType::Warning, REASON_NODE_UNREACHABLE, note)
                        .await;
                }
                (REASON_NODE_UNREACHABLE, m.as_str())
            }
            None => (
                names::REASON_STACK_PROCESSING,
                names::MESSAGE_STACK_BEING_PROCESSED,
            ),
        };
        mark_reconciling(
            &mut self.status,
            reason,
            message,
            self.generation,
            &self.now,
        );
        // The Update's changes trigger the next reconcile (it is owned).
        Action::await_change()
    }

    /// No Update is in flight, but a pod of an earlier operation may still run Pulumi: its
    /// Update or Job was deleted by force, or ended without the pod's word. The next operation
    /// starts only once every such pod is proven stopped (ended, or gone).
    fn wait_for_leftover_pods(&mut self) -> Option<Action> {
        let cached = self.ctx.stores.pods_of_stack(&self.ns, &self.name);
        let cached: Vec<&crate::runtime::cached::CachedPod> =
            cached.iter().map(|p| p.as_ref()).collect();
        // A pod past its fence's bound reads as stopped (see `update::fence`).
        let pods = crate::update::status::with_fence_verdicts(&cached, &self.ctx.deletions);
        let now = self.now.0;
        // A pod still behind its gate never ran, and no finished operation lets it through.
        let leftover = pods
            .iter()
            .find(|p| !pod_ended(p) && crate::update::admission::gate_index(p).is_none())?;
        let pod = leftover.name_any();
        let (reason, message) = match unconfirmed_stop(leftover, now) {
            Some(m) => (REASON_NODE_UNREACHABLE, m),
            None => (
                names::REASON_STACK_PROCESSING,
                format!(
                    "pod {pod} of an earlier operation has not stopped yet (its Update or Job is \
                     gone); the next operation starts once it has ended or is gone"
                ),
            ),
        };
        info!(%pod, "waiting for a pod of an earlier operation to stop");
        mark_reconciling(
            &mut self.status,
            reason,
            &message,
            self.generation,
            &self.now,
        );
        // Pods trigger their Update, not the Stack: look again shortly (a cache read).
        Some(crate::runtime::requeue(LEFTOVER_POD_REQUEUE))
    }

    /// Waits for the operation in flight, or absorbs the one that finished. `Some` ends the
    /// reconcile here.
    async fn operations_in_flight(&mut self) -> Result<Option<Action>> {
        let current_name = self
            .status
            .current_update
            .as_ref()
            .and_then(|c| c.name.clone());
        let current = match &current_name {
            Some(n) => self
                .find_update(n)
                .await?
                .filter(|u| owned_by(u, &self.uid)),
            None => None,
        };
        if let (Some(n), None) = (&current_name, &current) {
            // Claimed but never created (a crash in between), or removed by force: nothing
            // of it can be absorbed; the decision below starts what is due.
            warn!(update = %n, "the Update in flight does not exist; deciding again");
            self.status.current_update = None;
        }
        let owned = self.owned_updates();
        let refs: Vec<&Update> = owned.iter().map(|u| u.as_ref()).collect();
        match in_flight(current.as_ref(), &refs) {
            InFlight::Busy { name, adopt } => {
                let busy = owned.iter().find(|u| u.name_any() == name);
                let cancelled = match busy.filter(|u| cancellable(self.deleting, u)) {
                    Some(u) => cancel_if_unstarted(self.ctx, &self.ns, u).await?,
                    None => false,
                };
                if cancelled {
                    self.status.current_update = None;
                    self.cancelled = Some(name);
                    return Ok(None);
                }
                return Ok(Some(
                    self.wait_for(&name, adopt, busy.map(|u| u.as_ref())).await,
                ));
            }
            InFlight::Absorb { .. } => {
                if let Some(u) = &current {
                    self.absorb(u).await?;
                }
            }
            InFlight::Free => {
                if let Some(action) = self.wait_for_leftover_pods() {
                    return Ok(Some(action));
                }
            }
        }
        // Release every finished Update absorbed by an earlier pass (the one absorbed now goes
        // once the status saying so is written: `after_write`).
        let keep = self
            .status
            .current_update
            .as_ref()
            .and_then(|c| c.name.as_deref());
        let absorbed_now = self.absorbed.as_ref().map(|u| u.name_any());
        for name in releasable(&refs, keep) {
            if Some(&name) == absorbed_now.as_ref() {
                continue;
            }
            let seen = refs.iter().copied().find(|u| u.name_any() == name);
            release_update(self.ctx, &self.ns, &name, seen).await;
        }
        Ok(None)
    }

    /// Folds a finished Update into the status; the status is written by the end of this pass,
    /// together with what the pass decides next, and then the Update is released.
    async fn absorb(&mut self, update: &Update) -> Result<()> {
        if policy_check::is_check(update) {
            self.policy_check_failure =
                policy_check::absorb_check(&mut self.status, update, self.generation, &self.now);
            self.policy_checked = true;
            self.absorbed = Some(Arc::new(update.clone()));
            return Ok(());
        }
        if drift::is_check(update) {
            let finding = drift::absorb_check(&mut self.status, update, self.generation, &self.now);
            self.drift_finding = Some(finding);
            self.absorbed = Some(Arc::new(update.clone()));
            return Ok(());
        }
        let failed = crate::update::status::update_failed(update);
        if approval::saves_plan(update) && !failed {
            // A saved plan deployed nothing: it waits for approval, `lastUpdate` is untouched.
            // A failed one is `lastUpdate` (below), so that the usual backoff applies.
            let plan = approval::absorb_plan(&mut self.status, update, &self.now);
            self.saved_plan = Some(plan);
            self.absorbed = Some(Arc::new(update.clone()));
            return Ok(());
        }
        if let Some(plan) = approval::applied_plan(update) {
            approval::mark_applied(&mut self.status, plan);
        }
        let outputs = if failed {
            None
        } else {
            read_outputs(self.ctx, &self.ns, update).await?
        };
        absorb(&mut self.status, update, outputs, &self.now);
        policy_check::record_digest(&mut self.status, update);
        // Only an `up` that refreshed first has put drifted resources back; after any other,
        // the next check tells.
        if !failed
            && update.spec.update_type == Some(UpdateType::Up)
            && update.spec.refresh == Some(true)
        {
            drift::mark_remediated(
                &mut self.status,
                &update.name_any(),
                self.generation,
                &self.now,
            );
        }
        self.absorbed = Some(Arc::new(update.clone()));
        Ok(())
    }

    /// What follows the first status write that holds an absorbed result: the result's Event
    /// and metrics, the history limit, and the Update's release.
    async fn after_write(&mut self) {
        let Some(update) = self.absorbed.take() else {
            return;
        };
        let update = update.as_ref();
        if let Some(finding) = self.drift_finding.take() {
            self.announce_drift(finding).await;
            prune_history(self.ctx, self.stack, &self.ns, &self.status).await;
            release_update(self.ctx, &self.ns, &update.name_any(), Some(update)).await;
            return;
        }
        if std::mem::take(&mut self.policy_checked) {
            self.announce_policy(update).await;
            prune_history(self.ctx, self.stack, &self.ns, &self.status).await;
            release_update(self.ctx, &self.ns, &update.name_any(), Some(update)).await;
            return;
        }
        if let Some(plan) = self.saved_plan.take() {
            let changes = self
                .status
                .approval
                .as_ref()
                .map(|a| approval::summary(&a.changes))
                .unwrap_or_default();
            info!(%plan, %changes, "plan saved");
            if changes != "no changes" {
                self.publish(
                    EventType::Normal,
                    approval::REASON_AWAITING_APPROVAL,
                    approval::waiting_message(&self.name, &self.status, None),
                )
                .await;
            }
            prune_history(self.ctx, self.stack, &self.ns, &self.status).await;
            release_update(self.ctx, &self.ns, &update.name_any(), Some(update)).await;
            return;
        }
        let failed = crate::update::status::update_failed(update);
        record_finished_update(self.ctx, update);
        self.announce_policy(update).await;
        if failed {
            let msg = update
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default();
            self.publish(
                EventType::Warning,
                names::EVENT_STACK_UPDATE_FAILURE,
                format!("Failed to update stack: {msg}"),
            )
            .await;
        } else {
            self.publish(
                EventType::Normal,
                names::EVENT_STACK_UPDATE_SUCCESSFUL,
                "Successfully updated stack".into(),
            )
            .await;
        }
        info!(update = %update.name_any(), failed, "update finished");
        prune_history(self.ctx, self.stack, &self.ns, &self.status).await;
        release_update(self.ctx, &self.ns, &update.name_any(), Some(update)).await;
    }

    /// The Event, metric and log line of the policy violations an operation reported.
    async fn announce_policy(&mut self, update: &Update) {
        if let Some(failure) = self.policy_check_failure.take() {
            let note = policy_check::failure_note(&failure);
            warn!(update = %update.name_any(), attempts = failure.attempts, "{note}");
            self.publish(EventType::Warning, policy_check::REASON_CHECK_FAILED, note)
                .await;
            return;
        }
        let Some(report) = update.status.as_ref().and_then(|s| s.policy.as_ref()) else {
            return;
        };
        let advisory = report.violations - report.mandatory;
        for (level, count) in [("mandatory", report.mandatory), ("advisory", advisory)] {
            if let Ok(n) = u64::try_from(count) {
                self.ctx
                    .metrics
                    .policy_violations
                    .get_or_create(&crate::runtime::metrics::LevelLabels {
                        level: level.into(),
                    })
                    .inc_by(n);
            }
        }
        if report.violations <= 0 {
            return;
        }
        let listed: Vec<String> = report
            .items
            .iter()
            .map(|v| {
                format!(
                    "[{}] {}/{} on {}",
                    v.enforcement_level, v.pack, v.policy, v.urn
                )
            })
            .collect();
        warn!(
            mandatory = report.mandatory,
            advisory,
            "policy violations: {}",
            listed.join("; ")
        );
        let reason = if report.mandatory > 0 {
            pulumi_operator_api::plan::FailureReason::PolicyViolation.as_str()
        } else {
            crate::stack::status::CONDITION_POLICY_WARNINGS
        };
        let message = format!(
            "{} policy violation(s) ({} mandatory): {}",
            report.violations,
            report.mandatory,
            listed.join("; ")
        );
        self.publish(EventType::Warning, reason, message).await;
    }

    /// The Event and log line of a finished drift check (a clean check only when it ends a
    /// drift: a check every minute must not flood the Stack's Events).
    async fn announce_drift(&self, finding: Finding) {
        match finding {
            Finding::Drifted {
                count,
                message,
                new,
            } => {
                warn!(drifted = count, "drift detected");
                if !new {
                    // The same resources as the last check: the condition says it already.
                    return;
                }
                let remediate = drift::remediation_due(&self.stack.spec, &self.status).is_some();
                let note = if remediate {
                    format!("{message}; autoRemediate: an update follows")
                } else {
                    message
                };
                self.publish(EventType::Warning, drift::REASON_DRIFT_DETECTED, note)
                    .await;
            }
            Finding::Clean { resolved } => {
                info!("no drift");
                if resolved {
                    self.publish(
                        EventType::Normal,
                        drift::EVENT_DRIFT_RESOLVED,
                        "the last drift check found no drift".into(),
                    )
                    .await;
                }
            }
            Finding::Failed { message } => {
                warn!(%message, "drift check failed");
                self.publish(EventType::Warning, drift::REASON_CHECK_FAILED, message)
                    .await;
            }
        }
    }

    /// The digest of the policy packs covering this Stack now (`None`: none, or not known).
    fn policy_digest(&self) -> Option<String> {
        match crate::policy::packs_for_stack(self.stack, &self.ctx.stores) {
            Ok(Some(packs)) => crate::policy::digest(&packs),
            _ => None,
        }
    }

    /// What the policy packs ask of a synced Stack: `None` when nothing; a check (or a wait
    /// for a free slot) when they changed since its last operation. Packs that cannot be had
    /// now ask nothing: the next operation fails for them anyway.
    fn policy_step(&mut self) -> Option<policy_check::Step> {
        // Only what is deployed is checked again: a failing Stack's next operation runs with
        // the packs as they are then.
        let deployed = self.status.last_update.as_ref().is_some_and(|l| {
            l.state == Some(pulumi_operator_api::StackUpdateStateMessage::Succeeded)
        });
        if self.deleting || !deployed {
            return None;
        }
        let current = match crate::policy::packs_for_stack(self.stack, &self.ctx.stores) {
            Ok(Some(packs)) => crate::policy::digest(&packs),
            _ => return None,
        };
        let in_flight = policy_check::in_flight(&self.ctx.stores.updates.state());
        match policy_check::step(&self.status, current.as_deref(), in_flight, self.now.0) {
            policy_check::Step::Nothing => None,
            policy_check::Step::Forget => {
                policy_check::forget(&mut self.status, self.generation, &self.now);
                None
            }
            step => Some(step),
        }
    }

    /// What a synced Stack does: repair or check drift, check its policy packs again, or
    /// wait (`None`: nothing until something changes).
    async fn when_synced(
        &mut self,
        requeue: Option<Duration>,
        source: &ResolvedSource,
        revision: &str,
    ) -> Result<Option<Action>> {
        let step = match self.drift_step() {
            DriftStep::Remediate(reason) => {
                let purpose = Purpose::Remediation;
                return Ok(Some(
                    self.run(UpdateType::Up, reason, source, revision, purpose)
                        .await?,
                ));
            }
            DriftStep::Check(slot) => {
                let reason = drift::CHECK_MESSAGE.to_string();
                let purpose = Purpose::DriftCheck(slot);
                return Ok(Some(
                    self.run(UpdateType::Preview, reason, source, revision, purpose)
                        .await?,
                ));
            }
            step => step,
        };
        let policy = self.policy_step();
        if let Some(policy_check::Step::Check { digest, attempt }) = policy {
            let reason = policy_check::CHECK_MESSAGE.to_string();
            let purpose = Purpose::PolicyCheck(digest, attempt);
            return Ok(Some(
                self.run(UpdateType::Preview, reason, source, revision, purpose)
                    .await?,
            ));
        }
        let requeue = match (step, requeue) {
            (DriftStep::Wait(w), Some(r)) => Some(w.min(r)),
            (DriftStep::Wait(w), None) => Some(w),
            (_, r) => r,
        };
        // A check waiting for a free slot looks again soon.
        let next_check = match policy {
            Some(policy_check::Step::Wait) => Some(POLICY_CHECK_WAIT),
            // A failed check is tried again after its backoff.
            Some(policy_check::Step::RetryIn(wait)) => Some(wait),
            _ => None,
        };
        let requeue = match (requeue, next_check) {
            (Some(r), Some(n)) => Some(r.min(n)),
            (r, n) => r.or(n),
        };
        self.synced(requeue).await
    }

    /// What drift detection asks of a Stack that is otherwise synced: an `up` that repairs
    /// found drift, a check now, or a look again at the next scheduled check.
    fn drift_step(&mut self) -> DriftStep {
        let spec = &self.stack.spec;
        let Some(schedules) = spec
            .drift_detection
            .as_ref()
            .and_then(|d| drift::parse(d).ok())
        else {
            if spec.drift_detection.is_none() {
                // Detection turned off: what it last said no longer holds.
                drift::forget(&mut self.status);
            }
            return DriftStep::Nothing;
        };
        if self.deleting {
            return DriftStep::Nothing;
        }
        if let Some(reason) = drift::remediation_due(spec, &self.status) {
            return DriftStep::Remediate(reason);
        }
        match drift::check_due(&self.status, &schedules, self.now.0) {
            drift::Due::Never => DriftStep::Nothing,
            drift::Due::Now { slot } => DriftStep::Check(slot),
            drift::Due::At(next) => {
                self.status
                    .drift
                    .get_or_insert_with(Default::default)
                    .next_check_time = Some(Time(next));
                let wait = next
                    .duration_since(self.now.0)
                    .try_into()
                    .unwrap_or(Duration::from_secs(1));
                DriftStep::Wait(wait)
            }
        }
    }

    // ---- phase 4: source -------------------------------------------------------------

    async fn resolve_source(&mut self) -> std::result::Result<ResolvedSource, Action> {
        let spec = &self.stack.spec;
        // Destroy without the source (pko-reference §3.5): the recorded project is enough, so
        // a deleted repository, Program or Flux source cannot block the deletion.
        let bypass =
            self.deleting && spec.destroy_on_finalize && !spec.preview && !spec.run_program;
        if let Some(p) = self.status.project_info.clone().filter(|_| bypass) {
            return Ok(ResolvedSource::ProjectInfo {
                name: p.name,
                runtime: p.runtime,
            });
        }
        // A tracked branch is re-read when the answer shared by all Stacks tracking it is
        // older than this Stack's resync period (src/source/poll.rs).
        let resync = crate::stack::decide::resync_period(spec, &self.limits());
        match source::resolve_source(self.stack, self.ctx, resync).await {
            Ok(Resolved::Ready(s)) => Ok(s),
            Ok(Resolved::Pending { message }) => {
                info!(%message, "source pending");
                self.source_pending(&message);
                Err(crate::runtime::requeue(SOURCE_PENDING_REQUEUE))
            }
            Err(ResolveError { reason, message }) if reason == names::REASON_NOT_ALLOWED => {
                // A repository host the operator does not contact: nothing was sent to it.
                warn!(%message, %reason, "repository not allowed");
                self.stall_once(reason, &message, names::REASON_NOT_ALLOWED)
                    .await;
                // The spec or the operator's settings change it (either reconciles again); a
                // name's addresses may change too, checked again after the poller's backoff.
                Err(crate::runtime::requeue(REJECTED_REQUEUE))
            }
            Err(ResolveError { reason, message }) => {
                warn!(%message, %reason, "source unavailable");
                if reason == names::REASON_SPEC_INVALID {
                    // A missing git credentials Secret or key is an invalid spec (PKO).
                    self.stall_once(reason, &message, names::EVENT_STACK_CONFIG_INVALID)
                        .await;
                } else {
                    mark_stalled(
                        &mut self.status,
                        reason,
                        &message,
                        self.generation,
                        &self.now,
                    );
                }
                // Secrets and remotes are not watched: look again later.
                Err(crate::runtime::requeue(SOURCE_UNAVAILABLE_REQUEUE))
            }
        }
    }

    /// The branch head is being read: nothing was observed yet, so the observed generation
    /// and reconciliation request stay as written (the request is still to be answered); a
    /// Ready or Stalled Stack keeps its conditions (`status::settled`), any other says it waits.
    fn source_pending(&mut self, message: &str) {
        self.status.observed_generation = self.written.observed_generation;
        self.status.observed_reconcile_request = self.written.observed_reconcile_request.clone();
        if !status::settled(&self.status) {
            mark_reconciling(
                &mut self.status,
                REASON_RESOLVING_SOURCE,
                message,
                self.generation,
                &self.now,
            );
        }
    }

    // ---- phase 5: decide -------------------------------------------------------------

    fn limits(&self) -> Limits {
        Limits {
            min_resync: Duration::from_secs(self.ctx.config.min_resync_seconds),
        }
    }

    fn decide(&self, revision: &str) -> Decision {
        let observed = Observed {
            generation: self.generation,
            reconcile_request: &self.request,
            deleting: self.deleting,
            revision,
            polled: self.stack.spec.git.branch.is_some() && self.stack.spec.git.commit.is_none(),
            now: self.now.0,
        };
        decide(
            &self.stack.spec,
            Some(&self.status),
            &observed,
            &self.limits(),
        )
    }

    // ---- phase 6: act ----------------------------------------------------------------

    /// Nothing to run. `None`: the Stack was released (deleted after its destroy).
    async fn synced(&mut self, requeue: Option<Duration>) -> Result<Option<Action>> {
        mark_result(&mut self.status, self.generation, &self.now);
        let destroyed = self.status.last_update.as_ref().is_some_and(|l| {
            l.update_type == Some(UpdateType::Destroy)
                && l.state == Some(StackUpdateStateMessage::Succeeded)
        });
        if self.deleting && destroyed {
            self.save().await?;
            self.release_and_remove_finalizer().await?;
            return Ok(None);
        }
        if self.deleting {
            // A destroy that keeps failing holds the Stack: say how to let it go.
            let hint = format!(
                "; to delete the Stack without destroying its resources: kubectl patch stack {} --type=merge -p '{{\"metadata\":{{\"finalizers\":[]}}}}'",
                self.name
            );
            for c in self.status.conditions.iter_mut().flatten() {
                if c.type_ == names::CONDITION_STALLED && !c.message.contains("finalizers") {
                    c.message.push_str(&hint);
                }
            }
        }
        Ok(Some(
            requeue
                .map(Action::requeue)
                .unwrap_or_else(Action::await_change),
        ))
    }

    /// An operation is due: check the approval gate, the maintenance window, prerequisites
    /// and what the pod needs, then claim it and start it.
    async fn run(
        &mut self,
        kind: UpdateType,
        reason: String,
        source: &ResolvedSource,
        revision: &str,
        purpose: Purpose,
    ) -> Result<Action> {
        let (kind, purpose) = match self.approval_step(kind, purpose, revision) {
            Ok(next) => next,
            Err(waiting) => return Ok(waiting),
        };
        // Checks change nothing: no window, no prerequisites, not the sync decision.
        let drift_check = matches!(purpose, Purpose::DriftCheck(_) | Purpose::PolicyCheck(..));
        if !drift_check {
            if let Some(waiting) = self.outside_window(&kind, &reason).await {
                return Ok(waiting);
            }
        }
        // Prerequisites are checked only when an operation is due, and not for a destroy (nor
        // for a drift check, which changes nothing).
        if !self.deleting && !drift_check {
            if let Some(waiting) = self.prerequisites_pending(&reason).await? {
                return Ok(waiting);
            }
        }
        if let Some(waiting) = self.policy_pack_pending(drift_check).await {
            return Ok(waiting);
        }
        let workspace = build_workspace(self.stack, source);
        if let Some(refused) = self.refused_workspace(&workspace).await? {
            return Ok(refused);
        }
        // Names derive from the status as this reconcile sees it (after absorbing).
        let mut view = self.stack.clone();
        view.status = Some(self.status.clone());
        let mut update = self.operation(&view, kind, &reason, revision, &purpose);
        policy_check::mark_digest(&mut update, self.policy_digest().as_deref());
        let update_name = update.name_any();
        // The claim: written only if the Stack is still the one this decision was made on.
        if !self.claim(&update_name, revision, drift_check).await? {
            info!(update = %update_name, "the stack changed since it was read; deciding again");
            return Ok(crate::runtime::requeue(CLAIM_CONFLICT_REQUEUE));
        }
        match start_update(self.ctx, &view, &workspace, update).await {
            Ok(()) => {}
            Err(Error::Kube(kube::Error::Api(e))) if rejected(&e) => {
                return self.rejected(&update_name, &e).await;
            }
            // Transient: the next reconcile finds the claim without its Update and decides again.
            Err(e) => return Err(e),
        }
        self.announce(&purpose, &update_name, reason).await;
        Ok(Action::await_change())
    }

    /// Outside the maintenance window (`spec.maintenanceWindow`): the action while waiting for
    /// it to open (a Normal Event when the wait begins).
    async fn outside_window(&mut self, kind: &UpdateType, reason: &str) -> Option<Action> {
        use crate::stack::window::{gate, Gate, REASON_OUTSIDE_MAINTENANCE_WINDOW};
        let Gate::Closed { opens_at } = gate(&self.stack.spec, kind, self.now.0) else {
            return None;
        };
        let (when, requeue) = match opens_at {
            Some(at) => {
                let wait: Duration = at
                    .duration_since(self.now.0)
                    .try_into()
                    .unwrap_or(Duration::from_secs(1));
                (
                    format!(
                        "opens at {at} (in {})",
                        crate::runtime::duration::human(wait)
                    ),
                    Some(wait.max(Duration::from_secs(1))),
                )
            }
            None => ("never opens again".to_string(), None),
        };
        let message = format!(
            "{} is due ({reason}) and waits for the maintenance window, which {when}; \
             remove or change spec.maintenanceWindow to run it sooner",
            kind.as_str()
        );
        let waiting = self.written.conditions.iter().flatten().any(|c| {
            c.type_ == names::CONDITION_RECONCILING && c.reason == REASON_OUTSIDE_MAINTENANCE_WINDOW
        });
        info!(%message, "outside the maintenance window");
        mark_reconciling(
            &mut self.status,
            REASON_OUTSIDE_MAINTENANCE_WINDOW,
            &message,
            self.generation,
            &self.now,
        );
        if !waiting {
            self.publish(
                EventType::Normal,
                REASON_OUTSIDE_MAINTENANCE_WINDOW,
                message,
            )
            .await;
        }
        Some(
            requeue
                .map(crate::runtime::requeue)
                .unwrap_or_else(Action::await_change),
        )
    }

    /// Prerequisites (`spec.prerequisites`) not satisfied yet: the action while waiting.
    async fn prerequisites_pending(&mut self, reason: &str) -> Result<Option<Action>> {
        let problems = prerequisites_ready(self.ctx, self.stack, &self.ns, &self.now).await?;
        if problems.is_empty() {
            return Ok(None);
        }
        let message = prereq::message(&problems);
        info!(%message, %reason, "waiting for prerequisites");
        mark_reconciling(
            &mut self.status,
            names::REASON_PREREQUISITE_NOT_SATISFIED,
            &message,
            self.generation,
            &self.now,
        );
        Ok(Some(Action::await_change()))
    }

    /// A policy pack covering the Stack that the StackPolicy controller has not resolved yet:
    /// the operation waits, `Reconciling` (never `Stalled`: it ends by itself), with a Normal
    /// Event when the wait begins. The policy's status change reconciles the Stack again
    /// (`controllers::stacks_of_policies`). A check changes no condition: it is put off.
    async fn policy_pack_pending(&mut self, check: bool) -> Option<Action> {
        let packs = crate::policy::packs_for_stack(self.stack, &self.ctx.stores);
        let message = policy_check::pack_wait(&packs)?;
        info!(%message, "waiting for a policy pack");
        if check {
            return Some(crate::runtime::requeue(POLICY_PACK_CHECK_WAIT));
        }
        let (generation, now) = (self.generation, &self.now);
        if policy_check::mark_waiting(&mut self.status, &self.written, &message, generation, now) {
            let reason = policy_check::REASON_WAITING_FOR_POLICY_PACK;
            self.publish(EventType::Normal, reason, message).await;
        }
        Some(Action::await_change())
    }

    /// A workspace the administrator's limits refuse, or whose referenced objects are missing
    /// (not checked for a destroy): the Stack stalls, and the action until it is fixed.
    async fn refused_workspace(&mut self, workspace: &Workspace) -> Result<Option<Action>> {
        if let Err(why) =
            crate::stack::objects::workspace_limits(&self.ns, workspace, &self.ctx.limits)
        {
            warn!(%why, "not allowed");
            self.stall_once(names::REASON_NOT_ALLOWED, &why.0, names::REASON_NOT_ALLOWED)
                .await;
            return Ok(Some(crate::runtime::requeue(REJECTED_REQUEUE)));
        }
        if self.deleting {
            return Ok(None);
        }
        let Some(message) = self.missing_references(workspace).await? else {
            return Ok(None);
        };
        warn!(%message, "referenced objects missing");
        self.stall_once(
            REASON_REFERENCE_NOT_FOUND,
            &message,
            REASON_REFERENCE_NOT_FOUND,
        )
        .await;
        Ok(Some(crate::runtime::requeue(SOURCE_UNAVAILABLE_REQUEUE)))
    }

    /// The Update that runs the operation, for what it is for.
    fn operation(
        &mut self,
        view: &Stack,
        kind: UpdateType,
        reason: &str,
        revision: &str,
        purpose: &Purpose,
    ) -> Update {
        match purpose {
            Purpose::DriftCheck(slot) => drift::build_check(view, revision, *slot),
            Purpose::PolicyCheck(digest, attempt) => {
                policy_check::build_check(view, revision, digest, *attempt)
            }
            Purpose::Remediation => drift::build_remediation(view, reason, revision),
            Purpose::Sync => build_update(view, kind, reason, revision),
            Purpose::Plan => approval::build_plan(view, reason, revision),
            Purpose::ApplyPlan(plan, _) => {
                approval::mark_applying(&mut self.status, plan);
                approval::build_apply(view, kind, reason, revision, plan)
            }
        }
    }

    /// Claims the operation in the status (`currentUpdate`), written only if the Stack is
    /// still the one this decision was made on (false: it changed).
    async fn claim(
        &mut self,
        update_name: &str,
        revision: &str,
        drift_check: bool,
    ) -> Result<bool> {
        self.status.current_update = Some(CurrentStackUpdate {
            name: Some(update_name.to_string()),
            generation: Some(self.generation),
            reconcile_request: Some(self.request.clone()),
            commit: Some(revision.to_string()),
        });
        if !drift_check {
            mark_reconciling(
                &mut self.status,
                names::REASON_STACK_PROCESSING,
                names::MESSAGE_STACK_BEING_PROCESSED,
                self.generation,
                &self.now,
            );
        }
        self.save_guarded().await
    }

    /// Says that the operation started: an Event for a sync or an approved plan, a log line
    /// for a drift check or a plan.
    async fn announce(&mut self, purpose: &Purpose, update_name: &str, reason: String) {
        if let Purpose::ApplyPlan(plan, by) = purpose {
            let note = match by {
                approval::ApprovedBy::Person => {
                    format!("the plan {plan} was approved: applying it")
                }
                approval::ApprovedBy::NoChanges => {
                    format!("the plan {plan} changes nothing: applying it without approval")
                }
            };
            info!(%plan, "{note}");
            self.publish(EventType::Normal, approval::EVENT_PLAN_APPROVED, note)
                .await;
        }
        match purpose {
            Purpose::DriftCheck(_) => info!(update = %update_name, "drift check started"),
            Purpose::PolicyCheck(..) => {
                info!(update = %update_name, "the policy packs changed: previewing with them")
            }
            Purpose::Plan => info!(update = %update_name, "saving a plan for approval"),
            _ => {
                self.publish(
                    EventType::Normal,
                    names::EVENT_STACK_UPDATE_DETECTED,
                    reason,
                )
                .await
            }
        }
    }

    /// The approval gate (`spec.approval`) in front of a due `up`: save a plan first (a
    /// preview), apply an approved plan, or wait (`Err`: the action while waiting).
    fn approval_step(
        &mut self,
        kind: UpdateType,
        purpose: Purpose,
        revision: &str,
    ) -> std::result::Result<(UpdateType, Purpose), Action> {
        if !approval::required(&self.stack.spec)
            || purpose != Purpose::Sync
            || kind != UpdateType::Up
        {
            return Ok((kind, purpose));
        }
        let due = approval::Due {
            generation: self.generation,
            revision,
            request: &self.request,
        };
        let approved = self
            .stack
            .annotations()
            .get(approval::APPROVE_ANNOTATION)
            .map(String::as_str);
        match approval::step(&self.status, approved, &due) {
            approval::Step::Plan => Ok((UpdateType::Preview, Purpose::Plan)),
            approval::Step::Apply { plan, by } => Ok((kind, Purpose::ApplyPlan(plan, by))),
            approval::Step::Wait { plan, refused } => {
                let message =
                    approval::waiting_message(&self.name, &self.status, refused.as_deref());
                info!(%plan, "awaiting approval");
                mark_reconciling(
                    &mut self.status,
                    approval::REASON_AWAITING_APPROVAL,
                    &message,
                    self.generation,
                    &self.now,
                );
                let before = self
                    .status
                    .approval
                    .as_ref()
                    .and_then(|a| a.refused.clone());
                if let (Some(r), Some(a)) = (&refused, self.status.approval.as_mut()) {
                    if before.as_ref() != Some(r) {
                        a.refused = Some(r.clone());
                        self.refused_approval = Some(format!(
                            "the approval of {r:?} was refused: it names a stale or unknown plan; the pending plan is {plan} \
                             (kubectl logs job/{plan}); approve it with kubectl annotate stack {} \
                             {}={plan} --overwrite",
                            self.name,
                            approval::APPROVE_ANNOTATION
                        ));
                    }
                }
                // A branch is still polled while the plan waits: a new commit makes a new plan.
                let polled =
                    self.stack.spec.git.branch.is_some() && self.stack.spec.git.commit.is_none();
                Err(if polled {
                    Action::requeue(crate::stack::decide::resync_period(
                        &self.stack.spec,
                        &self.limits(),
                    ))
                } else {
                    Action::await_change()
                })
            }
        }
    }

    /// A message naming the ServiceAccount, ConfigMaps and Secrets the operation's pod would
    /// need but that do not exist (none: all there). Not for a destroy: a deletion must not
    /// wait for objects the user may have removed first (its pod reports them if needed).
    async fn missing_references(&self, ws: &Workspace) -> Result<Option<String>> {
        use crate::stack::references::{missing_message, required, Kind};
        let client = &self.ctx.client;
        let mut missing = Vec::new();
        let now = std::time::Instant::now();
        let seen = &self.ctx.recently_seen;
        for r in required(ws) {
            if let Some(keys) = seen.get(r.kind.as_str(), &self.ns, &r.name, now) {
                if r.key.as_ref().is_none_or(|k| keys.contains(k)) {
                    continue;
                }
            }
            let keys_of = |data: Option<Vec<&String>>| -> Vec<String> {
                data.into_iter().flatten().cloned().collect()
            };
            let (exists, has_key) = match r.kind {
                Kind::ServiceAccount => {
                    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                        Api::namespaced(client.clone(), &self.ns);
                    let exists = api.get_opt(&r.name).await?.is_some();
                    if exists {
                        seen.put(r.kind.as_str(), &self.ns, &r.name, Vec::new(), now);
                    }
                    (exists, true)
                }
                Kind::ConfigMap => {
                    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
                        Api::namespaced(client.clone(), &self.ns);
                    match api.get_opt(&r.name).await? {
                        None => (false, false),
                        Some(cm) => {
                            let mut keys = keys_of(cm.data.as_ref().map(|d| d.keys().collect()));
                            keys.extend(keys_of(
                                cm.binary_data.as_ref().map(|d| d.keys().collect()),
                            ));
                            let has = r.key.as_ref().is_none_or(|k| keys.contains(k));
                            seen.put(r.kind.as_str(), &self.ns, &r.name, keys, now);
                            (true, has)
                        }
                    }
                }
                Kind::Secret => {
                    let api: Api<Secret> = Api::namespaced(client.clone(), &self.ns);
                    match api.get_opt(&r.name).await? {
                        None => (false, false),
                        Some(secret) => {
                            // Key names only: the values never leave this function.
                            let mut keys =
                                keys_of(secret.data.as_ref().map(|d| d.keys().collect()));
                            keys.extend(keys_of(
                                secret.string_data.as_ref().map(|d| d.keys().collect()),
                            ));
                            let has = r.key.as_ref().is_none_or(|k| keys.contains(k));
                            seen.put(r.kind.as_str(), &self.ns, &r.name, keys, now);
                            (true, has)
                        }
                    }
                }
            };
            if !exists || !has_key {
                missing.push((r, exists));
            }
        }
        Ok((!missing.is_empty()).then(|| missing_message(&missing, &self.ns)))
    }

    /// The API server refused the operation's Workspace or Update: say why and wait for a
    /// change (PKO's NamespaceTerminating when the namespace is going away).
    async fn rejected(&mut self, update: &str, e: &kube::core::Status) -> Result<Action> {
        self.status.current_update = None;
        if e.message.contains("being terminated") {
            let message = status::namespace_terminating_message(self.stack, &e.message);
            warn!(%message, "namespace terminating");
            // No event: an Event cannot be created in a terminating namespace.
            mark_stalled(
                &mut self.status,
                names::REASON_NAMESPACE_TERMINATING,
                &message,
                self.generation,
                &self.now,
            );
            return Ok(crate::runtime::requeue(SOURCE_UNAVAILABLE_REQUEUE));
        }
        let message = format!(
            "the API server refused the objects of operation {update}: {} (HTTP {}); fix the \
             spec (often spec.updateTemplate or spec.workspaceTemplate)",
            e.message, e.code
        );
        warn!(%message, "operation rejected");
        self.stall_once(
            names::REASON_SPEC_INVALID,
            &message,
            names::EVENT_STACK_CONFIG_INVALID,
        )
        .await;
        Ok(crate::runtime::requeue(REJECTED_REQUEUE))
    }

    // ---- phase 7: report and writes --------------------------------------------------

    async fn finish(mut self, action: Action) -> Result<Action> {
        self.save().await?;
        if let Some(note) = self.refused_approval.take() {
            warn!(%note, "approval refused");
            self.publish(EventType::Warning, approval::EVENT_APPROVAL_REFUSED, note)
                .await;
        }
        update_metrics(self.ctx, self.stack, &self.status);
        Ok(action)
    }

    /// Lets a deleted Stack that needs no destroy go without running anything (Ready, then
    /// the finalizer removed): one without `destroyOnFinalize` (or a preview Stack), or one
    /// whose state holds nothing to destroy.
    async fn go_without_destroy(&mut self) -> Result<Option<Action>> {
        let spec = &self.stack.spec;
        if spec.destroy_on_finalize && !spec.preview {
            let Some(counted) = status::nothing_to_destroy(&self.status, self.generation) else {
                return Ok(None);
            };
            let note = format!(
                "deleted without a destroy: the stack's state holds no resources (counted by \
                 Update {})",
                counted.update
            );
            info!(%note, "nothing to destroy");
            self.publish(EventType::Normal, names::EVENT_NOTHING_TO_DESTROY, note)
                .await;
        }
        status::mark_ready(&mut self.status, self.generation, &self.now);
        self.save().await?;
        self.release_and_remove_finalizer().await?;
        Ok(Some(Action::await_change()))
    }

    async fn publish(&self, type_: EventType, reason: &str, note: String) {
        self.ctx
            .publish(
                &self.stack.object_ref(&()),
                type_,
                reason,
                "Reconcile",
                note,
            )
            .await;
    }

    /// Writes the status if it changed.
    async fn save(&mut self) -> Result<()> {
        if self.status != self.written {
            self.write(None).await?;
        }
        Ok(())
    }

    /// Writes the status only if the Stack has not changed since this pass read it (or last
    /// wrote it); `false` when it has.
    async fn save_guarded(&mut self) -> Result<bool> {
        let rv = self.resource_version.clone();
        match self.write(rv).await {
            Ok(()) => Ok(true),
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn write(&mut self, resource_version: Option<String>) -> Result<()> {
        let written = write_status(
            &self.api,
            &self.name,
            &self.status,
            resource_version.as_deref(),
        )
        .await?;
        self.resource_version = written.resource_version();
        self.written = self.status.clone();
        self.after_write().await;
        Ok(())
    }

    async fn add_finalizer(&mut self) -> Result<()> {
        let mut finalizers = self.stack.finalizers().to_vec();
        finalizers.push(names::FINALIZER.into());
        let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": self.resource_version}});
        let patched = self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.resource_version = patched.resource_version();
        Ok(())
    }

    /// The Stack is done: its Updates' finalizers go first (they could not be absorbed any
    /// more), then its own, guarded by the resourceVersion of this pass's last write.
    async fn release_and_remove_finalizer(&mut self) -> Result<()> {
        for u in self.owned_updates() {
            if self.cancelled.as_deref() == Some(u.name_any().as_str()) {
                continue;
            }
            if u.finalizers().iter().any(|f| f == names::FINALIZER) {
                release_update(self.ctx, &self.ns, &u.name_any(), Some(u.as_ref())).await;
            }
        }
        let finalizers: Vec<&String> = self
            .stack
            .finalizers()
            .iter()
            .filter(|f| *f != names::FINALIZER)
            .collect();
        let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": self.resource_version}});
        self.api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}

/// Whether the API server refused an object for good (not a conflict, not a transient error).
fn rejected(e: &kube::core::Status) -> bool {
    matches!(e.code, 400 | 403 | 404 | 422)
}

/// The status by server-side apply with PKO's status field manager, optionally guarded by a
/// resourceVersion. A Stack whose status was last written by another manager (PKO before a
/// migration, or an older release of this operator) may keep entries that manager still owns
/// (a `Stalled` beside `Ready=True`, a stale `currentUpdate`): those are replaced.
async fn write_status(
    api: &Api<Stack>,
    name: &str,
    status: &StackStatus,
    resource_version: Option<&str>,
) -> Result<Stack> {
    let written = crate::runtime::status::apply_status(
        api,
        name,
        names::FIELD_MANAGER_STACK_STATUS,
        status,
        resource_version,
    )
    .await?;
    let wanted = serde_json::to_value(status)?;
    let got = serde_json::to_value(written.status.clone().unwrap_or_default())?;
    if let Some(fix) = leftovers(&wanted, &got) {
        let fixed = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&fix))
            .await?;
        return Ok(fixed);
    }
    Ok(written)
}

/// A merge patch that makes `got` equal `wanted`, if they differ (top-level status fields:
/// lists are replaced whole, fields only `got` has are removed).
fn leftovers(wanted: &serde_json::Value, got: &serde_json::Value) -> Option<serde_json::Value> {
    if wanted == got {
        return None;
    }
    let empty = serde_json::Map::new();
    let w = wanted.as_object().unwrap_or(&empty);
    let g = got.as_object().unwrap_or(&empty);
    let mut fix = serde_json::Map::new();
    for (k, v) in w {
        if g.get(k) != Some(v) {
            fix.insert(k.clone(), v.clone());
        }
    }
    for k in g.keys() {
        if !w.contains_key(k) {
            fix.insert(k.clone(), serde_json::Value::Null);
        }
    }
    (!fix.is_empty()).then(|| serde_json::json!({ "status": fix }))
}

/// Removes our finalizer from a finished Update the Stack has absorbed (best effort: the next
/// reconcile tries again). A JSON patch tests the entry, so a concurrent change is not lost.
async fn release_update(ctx: &Context, ns: &str, name: &str, seen: Option<&Update>) {
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
    if let Err(e) = remove_finalizer(&api, name, seen).await {
        warn!(update = %name, "cannot release the Update's finalizer: {e}");
    }
}

fn update_metrics(ctx: &Context, stack: &Stack, status: &StackStatus) {
    let labels = StackLabels {
        namespace: stack.namespace().unwrap_or_default(),
        name: stack.name_any(),
    };
    let failing = status.last_update.as_ref().and_then(|l| l.state.clone())
        == Some(StackUpdateStateMessage::Failed);
    ctx.metrics
        .stacks_failing
        .get_or_create(&labels)
        .set(failing as i64);
    let reconciling = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == names::CONDITION_RECONCILING && c.status == names::STATUS_TRUE);
    ctx.metrics
        .stacks_reconciling
        .get_or_create(&labels)
        .set(reconciling as i64);
    if stack.spec.drift_detection.is_some() || status.drift.is_some() {
        let drifted = if drift::drifted(status) {
            status.drift.as_ref().and_then(|d| d.drifted).unwrap_or(1)
        } else {
            0
        };
        ctx.metrics
            .stacks_drifted
            .get_or_create(&labels)
            .set(drifted);
    }
}

/// The outputs of a successful Update. Only the Secret `<update>-stack-outputs` owned by this
/// Update is read (what the pod reported is not trusted further); a missing Secret means no
/// outputs; an error reading it is retried rather than losing the outputs. `status.outputs`
/// keeps those that fit [`status::MAX_STATUS_OUTPUTS_BYTES`]; a Warning Event on the Stack
/// names what was left out (there, or by the runner from the Secret).
async fn read_outputs(
    ctx: &Context,
    ns: &str,
    update: &Update,
) -> Result<Option<BTreeMap<String, serde_json::Value>>> {
    let Some(name) = update
        .status
        .as_ref()
        .and_then(|s| s.outputs.clone())
        .filter(|o| !o.is_empty())
    else {
        return Ok(None);
    };
    let expected = format!("{}{}", update.name_any(), names::OUTPUTS_SECRET_SUFFIX);
    if name != expected {
        warn!(secret = %name, %expected, "the Update names an outputs Secret that is not its own; ignored");
        return Ok(None);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let Some(secret) = secrets.get_opt(&name).await? else {
        return Ok(None);
    };
    let uid = update.uid().unwrap_or_default();
    if !secret.owner_references().iter().any(|o| o.uid == uid) {
        warn!(secret = %name, "the outputs Secret is not owned by its Update; ignored");
        return Ok(None);
    }
    let keys = status::secret_keys(
        secret
            .annotations()
            .get(names::SECRETS_ANNOTATION)
            .map(String::as_str),
    );
    let mut outputs = status::outputs_from_secret(&secret.data.unwrap_or_default(), &keys);
    let total = outputs.len();
    let left_out = status::fit_status_outputs(&mut outputs, status::MAX_STATUS_OUTPUTS_BYTES);
    let message = update.status.as_ref().and_then(|s| s.message.as_deref());
    if let Some(note) = status::outputs_left_out_note(message, &name, &left_out, total) {
        warn!(secret = %name, left_out = left_out.len(), "outputs left out");
        // The Stack is the Update's controller: its reference, without reading it again.
        let stack = update
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(o.api_version.clone()),
                kind: Some(o.kind.clone()),
                name: Some(o.name.clone()),
                uid: Some(o.uid.clone()),
                namespace: Some(ns.to_string()),
                ..Default::default()
            });
        if let Some(stack) = stack {
            let reason = status::REASON_OUTPUTS_LEFT_OUT;
            ctx.publish(&stack, EventType::Warning, reason, "Reconcile", note)
                .await;
        }
    }
    Ok(Some(outputs))
}

fn record_finished_update(ctx: &Context, update: &Update) {
    let kind = update
        .spec
        .update_type
        .as_ref()
        .map(|t| t.as_str().to_string())
        .unwrap_or_default();
    let result = if crate::update::status::update_failed(update) {
        "failed"
    } else {
        "succeeded"
    };
    let labels = UpdateLabels {
        r#type: kind,
        result: result.into(),
    };
    ctx.metrics.updates.get_or_create(&labels).inc();
    let st = update.status.as_ref();
    if let (Some(start), Some(end)) = (
        st.and_then(|s| s.start_time.as_ref()),
        st.and_then(|s| s.end_time.as_ref()),
    ) {
        let secs = end.0.duration_since(start.0).as_secs_f64().max(0.0);
        ctx.metrics
            .update_duration
            .get_or_create(&labels)
            .observe(secs);
    }
}

/// Unsatisfied prerequisites (none: the stack may run). Out-of-date ones are asked to run
/// again with the annotation `pulumi.com/reconciliation-request: after-<their last update>`.
async fn prerequisites_ready(
    ctx: &Context,
    stack: &Stack,
    ns: &str,
    now: &Time,
) -> Result<Vec<(String, prereq::Unsatisfied)>> {
    let mut problems = Vec::new();
    for requirement in stack.spec.prerequisites.iter().flatten() {
        let other = ctx
            .stores
            .stacks
            .get(&ObjectRef::new(&requirement.name).within(ns));
        let Some(why) = prereq::check(requirement, other.as_deref(), now.0) else {
            continue;
        };
        if let (prereq::Unsatisfied::OutOfDate { last_update }, Some(other)) = (&why, &other) {
            let value = prereq::rerun_request(last_update);
            if other
                .annotations()
                .get(names::RECONCILIATION_REQUEST_ANNOTATION)
                != Some(&value)
            {
                let api: Api<Stack> = Api::namespaced(ctx.client.clone(), ns);
                let patch = serde_json::json!({
                    "apiVersion": "pulumi.com/v1", "kind": "Stack",
                    "metadata": {"name": requirement.name, "annotations": {names::RECONCILIATION_REQUEST_ANNOTATION: value}},
                });
                let params = PatchParams::apply(names::FIELD_MANAGER_PREREQUISITE_REQUEST).force();
                api.patch(&requirement.name, &params, &Patch::Apply(&patch))
                    .await?;
                info!(prerequisite = %requirement.name, "asked an out-of-date prerequisite to run again");
            }
        }
        problems.push((requirement.name.clone(), why));
    }
    Ok(problems)
}

/// Deletes finished Updates beyond the history limit (their Jobs and Secrets go with them).
/// Only absorbed ones can go: the finalizer holds the others.
async fn prune_history(ctx: &Context, stack: &Stack, ns: &str, status: &StackStatus) {
    let name = stack.name_any();
    let uid = stack.uid().unwrap_or_default();
    let mine = ctx.stores.updates_of_stack(ns, &name, &uid);
    let refs: Vec<&Update> = mine.iter().map(|u| u.as_ref()).collect();
    let last = status
        .last_update
        .as_ref()
        .and_then(|l| l.name.clone())
        .unwrap_or_default();
    let current = status
        .current_update
        .as_ref()
        .and_then(|c| c.name.clone())
        .unwrap_or_default();
    let api: Api<Update> = Api::namespaced(ctx.client.clone(), ns);
    let plan = approval::protected_plan(status).unwrap_or_default();
    for old in prereq::prune(
        &refs,
        ctx.config.update_history_limit,
        &[&last, &current, plan],
    ) {
        match api
            .delete(&old, &kube::api::DeleteParams::background())
            .await
        {
            Ok(_) => info!(update = %old, "deleted an old update (history limit)"),
            Err(e) => warn!(update = %old, "cannot delete an old update: {e}"),
        }
    }
}

/// Applies the Workspace (the Job template) and creates the Update. An Update that already
/// exists under the same deterministic name is the one a previous run of this reconcile
/// created: it is re-attached, not duplicated.
async fn start_update(
    ctx: &Context,
    stack: &Stack,
    workspace: &Workspace,
    mut update: Update,
) -> Result<()> {
    let ns = stack.namespace().unwrap_or_default();
    let applied = apply_workspace(ctx, &ns, &stack.name_any(), workspace).await?;
    // The Update controller must build the Job from this Workspace, not an older cached one.
    update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            crate::update::annotations::WORKSPACE_GENERATION_ANNOTATION.to_string(),
            applied.metadata.generation.unwrap_or(0).to_string(),
        );
    let updates: Api<Update> = Api::namespaced(ctx.client.clone(), &ns);
    let params = PostParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..Default::default()
    };
    match updates.create(&params, &update).await {
        Ok(_) => info!(update = %update.name_any(), "update created"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            info!(update = %update.name_any(), "update already exists; re-attaching")
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Applies the Stack's Workspace (server-side apply) and returns it as stored.
async fn apply_workspace(
    ctx: &Context,
    ns: &str,
    name: &str,
    workspace: &Workspace,
) -> Result<Workspace> {
    let workspaces: Api<Workspace> = Api::namespaced(ctx.client.clone(), ns);
    let mut ws_value = serde_json::to_value(workspace)?;
    ws_value["apiVersion"] = "auto.pulumi.com/v1alpha1".into();
    ws_value["kind"] = "Workspace".into();
    let applied = workspaces
        .patch(
            name,
            &PatchParams::apply(names::FIELD_MANAGER).force(),
            &Patch::Apply(&ws_value),
        )
        .await?;
    // A source the Workspace no longer has (e.g. git, when a destroy runs from the recorded
    // project) may still be owned by another manager: remove it.
    let stale = stale_sources(workspace, &applied);
    if stale.is_empty() {
        return Ok(applied);
    }
    let patch = serde_json::json!({ "spec": stale });
    Ok(workspaces
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?)
}

/// The sources the stored Workspace still has but the wanted one does not, as null fields of
/// a merge patch.
fn stale_sources(
    wanted: &Workspace,
    applied: &Workspace,
) -> serde_json::Map<String, serde_json::Value> {
    let (w, a) = (&wanted.spec, &applied.spec);
    [
        ("git", w.git.is_none(), a.git.is_some()),
        ("flux", w.flux.is_none(), a.flux.is_some()),
        ("local", w.local.is_none(), a.local.is_some()),
        (
            "projectInfo",
            w.project_info.is_none(),
            a.project_info.is_some(),
        ),
    ]
    .into_iter()
    .filter(|(_, unwanted, present)| *unwanted && *present)
    .map(|(field, _, _)| (field.to_string(), serde_json::Value::Null))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leftovers_of_other_managers_are_replaced_or_removed() {
        let wanted = json!({"conditions": [{"type": "Ready"}], "observedGeneration": 2});
        assert_eq!(leftovers(&wanted, &wanted), None);
        let got = json!({
            "conditions": [{"type": "Ready"}, {"type": "Stalled"}],
            "observedGeneration": 2,
            "currentUpdate": {"name": "s-1"}
        });
        assert_eq!(
            leftovers(&wanted, &got),
            Some(json!({"status": {"conditions": [{"type": "Ready"}], "currentUpdate": null}}))
        );
    }
}
