//! The exact strings that tools and users depend on (PKO compatibility surface), plus the
//! operator's documented defaults. Controllers must use these constants instead of literals.

/// API group of `Stack` and `Program`.
pub const PULUMI_GROUP: &str = "pulumi.com";
/// API group of `Workspace` and `Update`.
pub const AUTO_GROUP: &str = "auto.pulumi.com";
/// The CRD category shared by all four kinds (`kubectl get pulumi`).
pub const CATEGORY: &str = "pulumi";

// ---------------------------------------------------------------------------------------------
// Finalizers, annotations and labels
// ---------------------------------------------------------------------------------------------

/// Finalizer put on Stacks (and on Updates until the Stack has absorbed their result).
pub const FINALIZER: &str = "finalizer.stack.pulumi.com";

/// Annotation whose every new value forces a Stack to sync (Flux-style reconcile request).
pub const RECONCILIATION_REQUEST_ANNOTATION: &str = "pulumi.com/reconciliation-request";
/// Prefix of the value the operator writes into a prerequisite's reconcile-request annotation
/// (`after-<lastUpdateName>`).
pub const RECONCILIATION_REQUEST_AFTER_PREFIX: &str = "after-";

/// Label put on every object the operator creates for a stack (Workspace, Update, Job, pods,
/// Secrets): the name of the `Stack` object.
pub const STACK_NAME_LABEL: &str = "pulumi.com/stack-name";
/// Label put on Workspaces and Updates created for a stack.
pub const COMPONENT_LABEL: &str = "pulumi.com/component";
/// Value of [`COMPONENT_LABEL`] on objects created for a stack.
pub const COMPONENT_STACK: &str = "stack";

/// Label on workspace-level objects (StatefulSet, Service, pods).
pub const AUTO_COMPONENT_LABEL: &str = "auto.pulumi.com/component";
/// Value of [`AUTO_COMPONENT_LABEL`] on workspace objects.
pub const AUTO_COMPONENT_WORKSPACE: &str = "workspace";
/// Value of [`AUTO_COMPONENT_LABEL`] on update objects (outputs Secret).
pub const AUTO_COMPONENT_UPDATE: &str = "update";
/// Label carrying the Workspace name.
pub const WORKSPACE_NAME_LABEL: &str = "auto.pulumi.com/workspace-name";
/// Label carrying the Update name (on the outputs Secret).
pub const UPDATE_NAME_LABEL: &str = "auto.pulumi.com/update-name";
/// Pod-template annotation holding the hash of the workspace source spec.
pub const REVISION_HASH_ANNOTATION: &str = "auto.pulumi.com/revision-hash";

/// Annotation on the outputs Secret: a sorted JSON array of the keys whose values are secret.
pub const SECRETS_ANNOTATION: &str = "pulumi.com/secrets";
/// Suffix of the outputs Secret name: `<update>-stack-outputs`.
pub const OUTPUTS_SECRET_SUFFIX: &str = "-stack-outputs";
/// How a secret output value is shown in `Stack.status.outputs`.
pub const SECRET_OUTPUT_PLACEHOLDER: &str = "[secret]";

/// The outputs Secret name of an Update.
pub fn outputs_secret_name(update_name: &str) -> String {
    format!("{update_name}{OUTPUTS_SECRET_SUFFIX}")
}

// ---------------------------------------------------------------------------------------------
// Field managers (server-side apply)
// ---------------------------------------------------------------------------------------------

/// The operator's main field manager.
pub const FIELD_MANAGER: &str = "pulumi-kubernetes-operator";
/// Field manager for Stack status writes.
pub const FIELD_MANAGER_STACK_STATUS: &str = "pulumi-kubernetes-operator/stack-status";
/// Field manager that owns the finalizer on Updates.
pub const FIELD_MANAGER_STACK_FINALIZER: &str = "pulumi-kubernetes-operator/stack-finalizer";
/// Field manager that writes the reconcile-request annotation on prerequisites.
pub const FIELD_MANAGER_PREREQUISITE_REQUEST: &str =
    "pulumi-kubernetes-operator/prerequisite-request";
/// Field manager for Workspace status writes.
pub const FIELD_MANAGER_WORKSPACE_STATUS: &str = "pulumi-kubernetes-operator/workspace-status";
/// Field manager for Update status writes.
pub const FIELD_MANAGER_UPDATE_STATUS: &str = "pulumi-kubernetes-operator/update-status";
/// Field manager for Program status writes.
pub const FIELD_MANAGER_PROGRAM_STATUS: &str = "pulumi-kubernetes-operator/program-status";

// ---------------------------------------------------------------------------------------------
// Workspace pod contract (paths users patch through workspaceTemplate)
// ---------------------------------------------------------------------------------------------

/// Name of the main container that runs Pulumi.
pub const PULUMI_CONTAINER: &str = "pulumi";
/// Name of the shared emptyDir volume.
pub const SHARE_VOLUME: &str = "share";
/// Mount path of the shared volume in every container.
pub const SHARE_MOUNT_PATH: &str = "/share";
/// Directory holding the Pulumi program inside the shared volume.
pub const WORKSPACE_DIR: &str = "/share/workspace";
/// Environment variable naming the dotenv file that init containers may append to.
pub const PULUMI_ENV_VAR: &str = "PULUMI_ENV";
/// Value of [`PULUMI_ENV_VAR`].
pub const PULUMI_ENV_FILE: &str = "/share/.env";
/// Default workspace image for the `restricted` security profile.
pub const DEFAULT_IMAGE_RESTRICTED: &str = "pulumi/pulumi:latest-nonroot";
/// Default workspace image for the `baseline` security profile.
pub const DEFAULT_IMAGE_BASELINE: &str = "pulumi/pulumi:latest";
/// Default workspace service account.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

// ---------------------------------------------------------------------------------------------
// Condition types
// ---------------------------------------------------------------------------------------------

/// Stack/Workspace condition: the object is up to date.
pub const CONDITION_READY: &str = "Ready";
/// Stack condition: work is in progress (kstatus).
pub const CONDITION_RECONCILING: &str = "Reconciling";
/// Stack/Workspace condition: no progress without outside help (kstatus).
pub const CONDITION_STALLED: &str = "Stalled";
/// Stack condition (extension): `spec.suspend` is true; no new operation starts. Absent
/// when the Stack is not suspended.
pub const CONDITION_SUSPENDED: &str = "Suspended";
/// Reason of `Suspended=True`, of `Ready=False` on a suspended Stack with nothing good to
/// show, and of the Normal Event when a Stack is suspended.
pub const REASON_SUSPENDED: &str = "Suspended";
/// The Normal Event when a suspended Stack is resumed.
pub const EVENT_RESUMED: &str = "Resumed";
/// Update condition: the operation is running.
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Update condition: the operation has finished (successfully or not).
pub const CONDITION_COMPLETE: &str = "Complete";
/// Update condition: the operation failed.
pub const CONDITION_FAILED: &str = "Failed";

/// Condition status values.
pub const STATUS_TRUE: &str = "True";
/// Condition status values.
pub const STATUS_FALSE: &str = "False";
/// Condition status values.
pub const STATUS_UNKNOWN: &str = "Unknown";

// ---------------------------------------------------------------------------------------------
// Stack condition reasons and messages (pko-reference §2.2)
// ---------------------------------------------------------------------------------------------

/// `Ready=False` while reconciling.
pub const REASON_NOT_READY_IN_PROGRESS: &str = "NotReadyInProgress";
/// Message of `Ready=False/NotReadyInProgress`.
pub const MESSAGE_NOT_READY_IN_PROGRESS: &str = "reconciliation is in progress";
/// `Ready=False` while stalled.
pub const REASON_NOT_READY_STALLED: &str = "NotReadyStalled";
/// Message of `Ready=False/NotReadyStalled`.
pub const MESSAGE_NOT_READY_STALLED: &str = "reconciliation is stalled";
/// `Ready=True`.
pub const REASON_PROCESSING_COMPLETED: &str = "ProcessingCompleted";
/// Message of `Ready=True/ProcessingCompleted`.
pub const MESSAGE_PROCESSING_COMPLETED: &str = "the stack has been processed and is up to date";

/// `Reconciling=True`: waiting for the workspace or for a running update.
pub const REASON_STACK_PROCESSING: &str = "StackProcessing";
/// Message while the workspace is being prepared.
pub const MESSAGE_WAITING_FOR_WORKSPACE: &str = "waiting for workspace readiness";
/// Message while an update is running.
pub const MESSAGE_STACK_BEING_PROCESSED: &str = "stack is being processed";
/// `Reconciling=True`: retrying after a failed update (message `"%d update failure(s)"`).
pub const REASON_RETRYING_AFTER_FAILURE: &str = "RetryingAfterFailure";
/// `Reconciling=True`: the last preview failed (message `"preview failed (%d attempt(s))"`).
pub const REASON_PREVIEW_FAILED: &str = "PreviewFailed";
/// `Reconciling=True`: waiting for prerequisites.
pub const REASON_PREREQUISITE_NOT_SATISFIED: &str = "PrerequisiteNotSatisfied";

/// `Stalled=True`: the spec is invalid.
pub const REASON_SPEC_INVALID: &str = "SpecInvalid";
/// Stalled (ours): the operator hit a bug on this object; it retries with backoff.
pub const REASON_INTERNAL_ERROR: &str = "InternalError";
/// Stalled (ours): a reconcile failed in a way retrying alone cannot fix; it is retried with
/// backoff and the message says what failed.
pub const REASON_RECONCILE_FAILED: &str = "ReconcileFailed";
/// Stalled (ours), and an Update's failure reason: the operator's administrator does not allow
/// what the Stack asks for (its namespace, ServiceAccount, pod fields, GitHub API host).
pub const REASON_NOT_ALLOWED: &str = "NotAllowed";
/// `Stalled=True`: the program source cannot be resolved.
pub const REASON_SOURCE_UNAVAILABLE: &str = "SourceUnavailable";
/// `Stalled=True`: structured config needs a newer Pulumi CLI.
pub const REASON_PULUMI_VERSION_TOO_LOW: &str = "PulumiVersionTooLow";
/// `Stalled=True`: the workspace failed to install or initialise.
pub const REASON_WORKSPACE_FAILED: &str = "WorkspaceFailed";
/// `Stalled=True`: retries exhausted.
pub const REASON_UPDATE_FAILED: &str = "UpdateFailed";
/// `Stalled=True`: a destroy is needed but the namespace is terminating.
pub const REASON_NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
/// `Stalled=True`: another update holds the stack lock (defined by PKO, unused there).
pub const REASON_UPDATE_CONFLICT: &str = "UpdateConflict";

/// `status.lastUpdate.state` after a successful update.
pub const LAST_UPDATE_SUCCEEDED: &str = "succeeded";
/// `status.lastUpdate.state` after a failed update.
pub const LAST_UPDATE_FAILED: &str = "failed";

// ---------------------------------------------------------------------------------------------
// Workspace condition reasons (pko-reference §5.2)
// ---------------------------------------------------------------------------------------------

/// Workspace `Ready=False`: being deleted.
pub const WS_REASON_DELETING: &str = "Deleting";
/// Workspace `Ready=False`: the StatefulSet is rolling out.
pub const WS_REASON_ROLLING_UPDATE: &str = "RollingUpdate";
/// Workspace `Ready=False`: waiting for the workspace pod.
pub const WS_REASON_WAITING_FOR_REPLICAS: &str = "WaitingForReplicas";
/// Workspace `Ready=False`: could not connect to the workspace pod.
pub const WS_REASON_CONNECTION_FAILED: &str = "ConnectionFailed";
/// Workspace `Stalled=True`: the Pulumi CLI is too old for the configuration.
pub const WS_REASON_INCOMPATIBLE_CONFIGURATION: &str = "IncompatibleConfiguration";
/// Workspace `Ready=False`: installing packages and plugins.
pub const WS_REASON_INSTALLING: &str = "Installing";
/// Workspace `Stalled=True`: `pulumi install` failed.
pub const WS_REASON_INSTALLATION_FAILED: &str = "InstallationFailed";
/// Workspace `Ready=False`: selecting the stack and applying config.
pub const WS_REASON_INITIALIZING: &str = "Initializing";
/// Workspace `Stalled=True`: stack selection or config failed.
pub const WS_REASON_INITIALIZATION_FAILED: &str = "InitializationFailed";
/// Workspace `Ready=True`.
pub const WS_REASON_SUCCEEDED: &str = "Succeeded";

// ---------------------------------------------------------------------------------------------
// Update condition reasons (pko-reference §6.2)
// ---------------------------------------------------------------------------------------------

/// Update reason: the operation is running (also the reason of `Failed`/`Complete=False`).
pub const UPDATE_REASON_PROGRESSING: &str = "Progressing";
/// Update `Progressing=False`: the operation has ended.
pub const UPDATE_REASON_COMPLETE: &str = "Complete";
/// Update `Complete=True`: a result was recorded.
pub const UPDATE_REASON_UPDATED: &str = "Updated";
/// Update `Failed=False`: the operation succeeded.
pub const UPDATE_REASON_UPDATE_SUCCEEDED: &str = "UpdateSucceeded";
/// Update `Failed=True`: the operation failed.
pub const UPDATE_REASON_UPDATE_FAILED: &str = "UpdateFailed";
/// The operation succeeded but its outputs could not be read back from its pod (the pod or
/// its log is gone); the Stack retries.
pub const UPDATE_REASON_OUTPUTS_UNAVAILABLE: &str = "OutputsUnavailable";
/// Update `Failed=True`: the run ended without a result.
pub const UPDATE_REASON_ABORTED: &str = "Aborted";
/// Update `Failed=True`: the Update was deleted or orphaned before it finished.
pub const UPDATE_REASON_CANCELED: &str = "Canceled";
/// Update `Complete=True`/`Progressing=False` reason in the aborted/canceled shape.
pub const UPDATE_REASON_FAILED: &str = "Failed";
/// Update `Failed=True` with an unclassified error.
pub const UPDATE_REASON_UNKNOWN: &str = "Unknown";
/// Update `Progressing=False`: the workspace does not exist.
pub const UPDATE_REASON_WORKSPACE_NOT_FOUND: &str = "WorkspaceNotFound";
/// Update `Progressing=False`: the workspace is not ready.
pub const UPDATE_REASON_WORKSPACE_NOT_READY: &str = "WorkspaceNotReady";
/// Update `Progressing=False`: a transient failure; will retry.
pub const UPDATE_REASON_TRANSIENT_FAILURE: &str = "TransientFailure";
/// Update `Failed=True`: another update holds the stack lock (HTTP 409).
pub const UPDATE_REASON_UPDATE_CONFLICT: &str = "UpdateConflict";
/// Update `Failed=True`: the Pulumi access token was rejected.
pub const UPDATE_REASON_INVALID_ACCESS_TOKEN: &str = "InvalidAccessToken";

// ---------------------------------------------------------------------------------------------
// Event reasons (pko-reference §10)
// ---------------------------------------------------------------------------------------------

/// Stack (Warning): the spec or its source/auth configuration is invalid.
pub const EVENT_STACK_CONFIG_INVALID: &str = "StackConfigInvalid";
/// Stack (Normal): an update is due; the message is the sync reason.
pub const EVENT_STACK_UPDATE_DETECTED: &str = "StackUpdateDetected";
/// Stack (Warning): an update failed.
pub const EVENT_STACK_UPDATE_FAILURE: &str = "StackUpdateFailure";
/// Stack (Normal): an update succeeded ("Successfully updated stack"). PKO's constant name is
/// `StackUpdateSuccessful`, its value `StackCreated`.
pub const EVENT_STACK_UPDATE_SUCCESSFUL: &str = "StackCreated";
/// Stack (Normal): the workspace was deleted per the reclaim policy.
pub const EVENT_WORKSPACE_DELETED: &str = "WorkspaceDeleted";
/// Stack: defined by PKO but never emitted there.
pub const EVENT_STACK_INITIALIZATION_FAILURE: &str = "StackInitializationFailure";
/// Stack: defined by PKO but never emitted there.
pub const EVENT_STACK_GIT_AUTHENTICATION_FAILURE: &str = "StackGitAuthenticationFailure";
/// Stack: defined by PKO but never emitted there.
pub const EVENT_STACK_UPDATE_CONFLICT_DETECTED: &str = "StackUpdateConflictDetected";
/// Stack: defined by PKO but never emitted there.
pub const EVENT_STACK_OUTPUT_RETRIEVAL_FAILURE: &str = "StackOutputRetrievalFailure";
/// Stack: defined by PKO but never emitted there.
pub const EVENT_STACK_NOT_FOUND: &str = "StackNotFound";
/// Stack: defined by PKO but never emitted there.
pub const EVENT_STACK_DESTROYED: &str = "StackDestroyed";
/// Stack (Normal), extension: a deleted `destroyOnFinalize` Stack went without a destroy,
/// its state holding no resources.
pub const EVENT_NOTHING_TO_DESTROY: &str = "NothingToDestroy";
/// Workspace (Warning): the StatefulSet was replaced after an immutable-field error.
pub const EVENT_MIGRATED: &str = "Migrated";
/// Workspace (Warning): could not connect to the workspace.
pub const EVENT_CONNECTION_FAILURE: &str = "ConnectionFailure";
/// Workspace (Warning): `pulumi install` failed.
pub const EVENT_INSTALLATION_FAILURE: &str = "InstallationFailure";
/// Workspace (Warning): stack initialisation failed. (Same string as the Stack constant.)
pub const EVENT_WORKSPACE_STACK_INITIALIZATION_FAILURE: &str = "StackInitializationFailure";
/// Workspace (Normal): the workspace pod was initialised.
pub const EVENT_INITIALIZED: &str = "Initialized";
/// Update (Warning): the operation failed.
pub const EVENT_UPDATE_FAILED: &str = "UpdateFailed";
/// Update (Normal): the operation succeeded.
pub const EVENT_UPDATE_SUCCEEDED: &str = "UpdateSucceeded";
/// Update (Normal): the Update's TTL expired and it was deleted.
pub const EVENT_UPDATE_EXPIRED: &str = "UpdateExpired";

// ---------------------------------------------------------------------------------------------
// Documented defaults and limits
// ---------------------------------------------------------------------------------------------

/// Maximum length of a Stack name (PKO enforces it with a CEL rule; we validate in the
/// controller because CEL does not exist on Kubernetes 1.20).
pub const MAX_STACK_NAME_LENGTH: usize = 42;
/// Default `operationTimeoutSeconds` (4 hours): the Job's `activeDeadlineSeconds`.
pub const DEFAULT_OPERATION_TIMEOUT_SECONDS: i64 = 4 * 60 * 60;
/// Resync frequencies below this are raised to it (PKO semantics).
pub const MIN_RESYNC_FREQUENCY_SECONDS: i64 = 60;
/// Default retry backoff cap (1 hour; PKO uses 24 hours).
pub const DEFAULT_RETRY_MAX_BACKOFF_SECONDS: i64 = 60 * 60;
/// Consecutive failures after which a Stack is `Stalled` with reason `UpdateFailed`.
pub const MAX_UPDATE_FAILURES: i64 = 3;
/// TTL the Stack controller puts on the Updates it creates.
pub const DEFAULT_UPDATE_TTL: &str = "24h";

// ---------------------------------------------------------------------------------------------
// Plan approval (`spec.approval`) and what an Update records about its trigger: shared by the
// operator and the kubectl plugin
// ---------------------------------------------------------------------------------------------

/// On a Stack: the id of the plan a person approves.
pub const APPROVE_PLAN_ANNOTATION: &str = "pulumi.com/approve-plan";
/// Marks an Update as a preview that saves a plan for approval.
pub const SAVES_PLAN_ANNOTATION: &str = "pulumi.com/saves-plan";
/// On an `up`: the id of the approved plan it applies.
pub const APPLIES_PLAN_ANNOTATION: &str = "pulumi.com/applies-plan";
/// The key of the plan in its Secret.
pub const SAVED_PLAN_KEY: &str = "plan.json";
/// On an Update: the source revision it runs with.
pub const TRIGGER_REVISION_ANNOTATION: &str = "pulumi.com/stack-revision";
/// What a plan does to resources, in the order people read it.
pub const PLAN_OPERATIONS: [&str; 4] = ["create", "update", "replace", "delete"];

/// The Secret that keeps the plan saved by the Update `plan`.
pub fn saved_plan_secret_name(plan: &str) -> String {
    format!("{plan}-saved-plan")
}

/// `1 to create, 2 to update` from a plan's counts by operation (nothing: `no changes`).
pub fn change_summary(counts: &std::collections::BTreeMap<String, i64>) -> String {
    let parts: Vec<String> = PLAN_OPERATIONS
        .iter()
        .filter_map(|op| {
            counts
                .get(*op)
                .filter(|n| **n > 0)
                .map(|n| format!("{n} to {op}"))
        })
        .collect();
    if parts.is_empty() {
        "no changes".into()
    } else {
        parts.join(", ")
    }
}
