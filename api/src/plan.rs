//! The contract between the operator and the runner, defined once for both sides: the
//! [`RunPlan`] the operator writes for an Update (into the Secret `<update>-plan`, mounted in
//! the Job at [`PLAN_FILE`]) and the [`RunResult`] the runner reports (as the termination
//! message of its container, at most [`MAX_RESULT_BYTES`]).
//!
//! Secret values never travel in the plan's references: config read from Secrets and
//! ConfigMaps is mounted as files (`valueFrom.path`) or passed as environment variables
//! (`valueFrom.env`) by reference in the Job spec. Literal values written in the Stack itself
//! (`spec.secrets`, `secretsRef` literals) are in the plan, which is itself a Secret.

use crate::common::ProjectInfo;
use crate::policy::PolicyReport;
use crate::stack::ResourceChange;
use crate::workspace::ConfigItem;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where the plan is mounted in every container of an update Job.
pub const PLAN_DIR: &str = "/var/run/pulumi-operator/plan";
/// The plan file.
pub const PLAN_FILE: &str = "/var/run/pulumi-operator/plan/plan.json";
/// The key of the plan in its Secret.
pub const PLAN_KEY: &str = "plan.json";
/// The environment variable of an update Job's runner containers with the digest of the plan
/// the operator wrote ([`plan_digest`]): the Job's pod spec cannot change after creation, the
/// plan Secret can (a tenant may edit Secrets in its namespace), so the runner refuses a plan
/// whose digest differs.
pub const PLAN_DIGEST_ENV: &str = "PULUMI_OPERATOR_PLAN_DIGEST";

/// The digest of a plan's text as stored in its Secret: `sha256:<hex>`.
pub fn plan_digest(text: &[u8]) -> String {
    crate::common::sha256_digest(text)
}
/// Where a Program's rendered Pulumi.yaml is mounted (from the ConfigMap `<update>-program`).
pub const PROGRAM_DIR: &str = "/var/run/pulumi-operator/program";
/// The checkout of the source (git clone, unpacked artifact, Program) in the share volume.
pub const SOURCE_DIR: &str = "/share/source";
/// The project directory: `SOURCE_DIR` joined with the source's `dir` (a symlink, as in PKO).
pub const WORKSPACE_DIR: &str = "/share/workspace";
/// The runner's own volume (an emptyDir): only the `bootstrap` container writes it (a copy of
/// the runner image's executable); every other container mounts it read-only, so nothing a
/// tenant runs before the `pulumi` container can replace the runner.
pub const RUNNER_VOLUME: &str = "pulumi-runner";
/// Where [`RUNNER_VOLUME`] is mounted.
pub const RUNNER_DIR: &str = "/var/run/pulumi-operator/bin";
/// Where the bootstrap container puts the runner binary (in [`RUNNER_DIR`]).
pub const RUNNER_BINARY: &str = "/var/run/pulumi-operator/bin/pulumi-runner";
/// On the `pulumi` container of an operation the policy packs cover: the mount paths of its
/// volumes, `:`-separated (a mount path cannot hold `:`). The runner never runs a `pulumi`,
/// nor lets Pulumi find a plugin or an interpreter, from a directory on one of them.
pub const VOLUME_PATHS_ENV: &str = "PULUMI_OPERATOR_VOLUME_PATHS";
/// Where the Secrets the `pulumi` container takes whole as environment (`envFrom`) are also
/// mounted, one directory each ([`secret_env_dir`]), so that the runner knows their values
/// and can mask them in everything it prints.
pub const SECRET_ENV_ROOT: &str = "/var/run/pulumi-operator/env-secrets";
/// The largest plan an approval may hold: it travels in Secrets (at most 1 MiB each, with
/// the rest of the plan Secret beside it).
pub const MAX_SAVED_PLAN_BYTES: usize = 768 * 1024;
/// Kubernetes caps termination messages at 4096 bytes.
pub const MAX_RESULT_BYTES: usize = 4096;

/// The mount directory of the `index`-th Secret used as `envFrom` (see [`SECRET_ENV_ROOT`]).
pub fn secret_env_dir(index: usize) -> String {
    format!("{SECRET_ENV_ROOT}/{index}")
}

/// The name of the plan Secret of an Update.
pub fn plan_secret_name(update: &str) -> String {
    format!("{update}-plan")
}

/// The name of the Program ConfigMap of an Update.
pub fn program_config_map_name(update: &str) -> String {
    format!("{update}-program")
}

/// The stack operation to run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    Preview,
    Up,
    Refresh,
    Destroy,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Preview => "preview",
            Operation::Up => "up",
            Operation::Refresh => "refresh",
            Operation::Destroy => "destroy",
        }
    }
}

/// Where the program comes from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Source {
    /// Clone `url` and check out exactly `commit` (a full SHA) — or `reference` (a branch or tag
    /// name) when no commit is known; `shallow` asks for a depth-1 fetch.
    #[serde(rename_all = "camelCase")]
    Git {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
        #[serde(default)]
        shallow: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
    },
    /// Download a tar.gz artifact (Flux style), verify its digest (`sha256:<hex>`), unpack it.
    #[serde(rename_all = "camelCase")]
    Flux {
        url: String,
        digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<String>,
    },
    /// A tar.gz handed over in the plan itself (base64), checked against its digest
    /// (`sha256:<hex>`) and unpacked: a policy pack the operator fetched with credentials that
    /// must not reach the operation's namespace.
    #[serde(rename_all = "camelCase")]
    Inline { digest: String, archive: String },
    /// Copy the rendered Pulumi.yaml of a Program (mounted at [`PROGRAM_DIR`]).
    #[serde(rename_all = "camelCase")]
    Program { file: String },
    /// The program is already in the image, at `dir`.
    #[serde(rename_all = "camelCase")]
    Local { dir: String },
    /// No program at all: write a minimal Pulumi.yaml with this project (destroy without source).
    #[serde(rename_all = "camelCase")]
    ProjectInfo { name: String, runtime: String },
}

/// The Pulumi stack to select and how to prepare it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StackPlan {
    /// The fully qualified stack name (`org/project/stack` or `stack`).
    pub name: String,
    /// Create the stack when it does not exist (false with `useLocalStackOnly`).
    pub create: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_provider: Option<String>,
    /// ESC environments to add to the stack.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<String>,
    /// Configuration, applied in order (`config`, `configRef`, `secrets`, `secretsRef`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<ConfigItem>,
    /// An earlier operation created the stack: no `stack select` before the operation (every
    /// command names its stack); a command that finds no such stack selects or creates it and
    /// runs again.
    #[serde(default, skip_serializing_if = "crate::common::is_false")]
    pub exists: bool,
}

/// Flags of the operation (from the Update spec and the Stack).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OperationOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub expect_no_changes: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replace: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target: Vec<String>,
    #[serde(default)]
    pub target_dependents: bool,
    #[serde(default)]
    pub refresh: bool,
    /// With `refresh`: fail when the refresh finds changes (`expectNoRefreshChanges`).
    #[serde(default)]
    pub expect_no_refresh_changes: bool,
    #[serde(default)]
    pub continue_on_error: bool,
    /// With destroy: also remove the stack and its config.
    #[serde(default)]
    pub remove: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_program: Option<bool>,
    /// Retry the operation (after `pulumi cancel`-free waiting) when the stack is locked by
    /// another update (`retryOnUpdateConflict`).
    #[serde(default)]
    pub retry_on_update_conflict: bool,
    /// With preview: save the plan (`--save-plan`) and hand it to the operator sealed, as
    /// outputs are (a Stack with `spec.approval`).
    #[serde(default, skip_serializing_if = "crate::common::is_false")]
    pub save_plan: bool,
}

/// Everything the runner needs to run one Update.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunPlan {
    /// The Update's name, namespace and UID (the outputs Secret is owned by the Update).
    /// Empty in a [`WorkspacePlan`], which has no Update.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_name: String,
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_uid: String,
    pub operation: Operation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    pub stack: StackPlan,
    #[serde(default)]
    pub options: OperationOptions,
    /// The Secret to write the stack outputs into (`<update>-stack-outputs`); empty in a
    /// [`WorkspacePlan`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub outputs_secret: String,
    /// Labels to put on the outputs Secret (e.g. `pulumi.com/stack-name`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs_labels: BTreeMap<String, String>,
    /// The key the outputs are sealed with in the pod's log ([`crate::sealed`]); the operator
    /// then writes the outputs Secret. Without it the runner writes the Secret itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_key: Option<String>,
    /// With up: the approved plan (the JSON `pulumi preview --save-plan` wrote) that the update
    /// must keep to (`pulumi up --plan`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_plan: Option<String>,
    /// Verbosity of Pulumi's own logs (`-v`), 0 for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulumi_log_level: Option<u32>,
    /// How this operation's locks are recognised (absent in a [`WorkspacePlan`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_holder: Option<LockHolder>,
    /// Names (never values) of the `pulumi` container's environment variables whose values
    /// come from Secrets (`secretKeyRef`): the runner masks their values in its output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<String>,
    /// Directories where Secrets used whole as environment (`envFrom`) are mounted: the runner
    /// masks every value in them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env_dirs: Vec<String>,
    /// Where the program's installed dependencies and the package managers' downloads are
    /// kept between operations (a directory the Job mounts): the retained workspace's cache,
    /// or the `dependency-cache` volume of the workspace template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependency_cache: Option<String>,
    /// The first wait (milliseconds) before an update conflict is retried
    /// (`retryOnUpdateConflict`), doubled each time up to a minute. The operator leaves it
    /// unset (5 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict_retry_delay_ms: Option<u64>,
    /// The administrator's policy packs covering this operation (`StackPolicy`): fetched by
    /// the `fetch` container, their dependencies installed by the `policy` container, mounted
    /// read-only in the `pulumi` container and passed to every `preview` and `up`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_packs: Vec<PolicyPackPlan>,
    /// The operation's fencing heartbeat: the runner holds this Lease while the operation runs
    /// and stops Pulumi itself when it cannot renew it (runner/src/heartbeat.rs). Absent: no
    /// Lease, and the runner behaves as without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<HeartbeatPlan>,
}

/// How often the runner renews its heartbeat Lease, by default (seconds).
pub const DEFAULT_HEARTBEAT_RENEW_SECONDS: u64 = 10;
/// How long the runner lets Pulumi run without a successful renewal, by default (seconds).
pub const DEFAULT_HEARTBEAT_EXPIRE_SECONDS: u64 = 60;
/// How long the runner waits for Pulumi to stop after its SIGINT before it kills Pulumi's
/// process group, by default (seconds).
pub const DEFAULT_HEARTBEAT_STOP_GRACE_SECONDS: u64 = 20;

fn default_heartbeat_renew() -> u64 {
    DEFAULT_HEARTBEAT_RENEW_SECONDS
}
fn default_heartbeat_expire() -> u64 {
    DEFAULT_HEARTBEAT_EXPIRE_SECONDS
}
fn default_heartbeat_stop_grace() -> u64 {
    DEFAULT_HEARTBEAT_STOP_GRACE_SECONDS
}

/// The fencing heartbeat of one operation ("self-fencing"). Before any Pulumi command the
/// runner creates the `coordination.k8s.io/v1` Lease `lease` in the plan's namespace, held by
/// its pod, and renews it every `renewEverySeconds` (always with the `resourceVersion` it last
/// saw). When no renewal succeeded for `expireAfterSeconds` (counted from the start of the last
/// successful request), or at once when the holder changed, it sends SIGINT to Pulumi's process
/// group, and SIGKILL `stopGraceSeconds` later. So once the operator changed the holder
/// (revoked the Lease) and observed that write succeed, Pulumi is stopped within
/// `expireAfterSeconds + stopGraceSeconds` (plus the watchdog's 250 ms tick), measured on any
/// clock running at the normal rate: the next operation may start after that and a margin.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatPlan {
    /// The Lease's name (its namespace is the plan's); empty with `tokenFile`.
    #[serde(default)]
    pub lease: String,
    /// Instead of a Lease: the pod's own projected ServiceAccount token (a file the kubelet
    /// refreshes). Each renewal is a `SelfSubjectReview` made with it, which needs no
    /// permission; the API server rejects the token (401) once the pod is gone or was deleted
    /// more than a minute ago (the "revocation"), and a node cut off from the API server cannot
    /// renew at all. `caFile` is the cluster's CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    #[serde(default = "default_heartbeat_renew")]
    pub renew_every_seconds: u64,
    #[serde(default = "default_heartbeat_expire")]
    pub expire_after_seconds: u64,
    #[serde(default = "default_heartbeat_stop_grace")]
    pub stop_grace_seconds: u64,
}

impl HeartbeatPlan {
    /// The heartbeat proven by the pod's token at `token_file` (CA bundle `ca_file`), with the
    /// default periods.
    pub fn of_token(token_file: impl Into<String>, ca_file: impl Into<String>) -> HeartbeatPlan {
        HeartbeatPlan {
            token_file: Some(token_file.into()),
            ca_file: Some(ca_file.into()),
            ..HeartbeatPlan::new("")
        }
    }

    /// The heartbeat of `lease` with the default periods.
    pub fn new(lease: impl Into<String>) -> HeartbeatPlan {
        HeartbeatPlan {
            lease: lease.into(),
            token_file: None,
            ca_file: None,
            renew_every_seconds: DEFAULT_HEARTBEAT_RENEW_SECONDS,
            expire_after_seconds: DEFAULT_HEARTBEAT_EXPIRE_SECONDS,
            stop_grace_seconds: DEFAULT_HEARTBEAT_STOP_GRACE_SECONDS,
        }
    }
}

/// Where the policy packs are fetched to (a volume of their own, read-only in the `pulumi`
/// container); pack `name` of StackPolicy `policy` is in `POLICY_PACKS_DIR/<policy>/<name>`.
pub const POLICY_PACKS_DIR: &str = "/var/run/pulumi-operator/policy-packs";

/// One policy pack an operation must run with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPackPlan {
    /// The pack's name (a DNS label): its directory is `POLICY_PACKS_DIR/<policy>/<name>`.
    pub name: String,
    /// The StackPolicy that names it.
    pub policy: String,
    /// The repository (a `Source::Git` with the exact commit).
    pub source: Source,
    /// The `--policy-pack-config` document, if the policy configures the pack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
}

impl PolicyPackPlan {
    /// The pack's directory (the CLI's `--policy-pack`).
    pub fn dir(&self) -> String {
        format!("{POLICY_PACKS_DIR}/{}/{}", self.policy, self.name)
    }

    /// The pack's configuration file (the CLI's `--policy-pack-config`), beside the packs.
    pub fn config_file(&self) -> String {
        format!(
            "{POLICY_PACKS_DIR}/{}/{}.config.json",
            self.policy, self.name
        )
    }

    /// `name@revision`, as statuses show it.
    pub fn label(&self) -> String {
        match &self.source {
            Source::Git {
                commit: Some(c), ..
            } => format!("{}@{}", self.name, &c[..c.len().min(12)]),
            Source::Flux { digest, .. } => {
                let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
                format!("{}@{}", self.name, &hex[..hex.len().min(12)])
            }
            _ => self.name.clone(),
        }
    }
}

/// The identity Pulumi records in the locks an operation takes (`user@host (pid N)`): the
/// operation's pod runs with this hostname. The operator never runs two operations of one
/// Stack at once, so a lock held by another host with the Stack's prefix belongs to an earlier
/// operation whose pod is gone (killed, OOM, node lost): the runner may clear it. A lock held
/// by any other host is never touched.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LockHolder {
    /// This operation's hostname.
    pub hostname: String,
    /// The hostname prefix of every operation of this Stack (derived from its UID).
    pub stack_prefix: String,
}

/// The name of the plan Secret of a retained workspace (`<workspace>-workspace-plan`).
pub fn workspace_plan_secret_name(workspace: &str) -> String {
    format!("{workspace}-workspace-plan")
}

/// The key, in a retained workspace's plan Secret, of a Program's rendered `Pulumi.yaml` (the
/// plan's `Source::Program` then names `<PLAN_DIR>/<this>`).
pub const WORKSPACE_PROGRAM_KEY: &str = "Pulumi.yaml";

/// The plan of a retained workspace pod (`workspaceReclaimPolicy: Retain`), written by the
/// Workspace controller into the Secret `<workspace>-workspace-plan` and mounted at
/// [`PLAN_FILE`] like an Update's plan: the source and the stack to prepare, in a [`RunPlan`]
/// without an Update (the update fields are empty; `operation` is never run), plus
/// `workspace`, which `pulumi-runner workspace` requires. `pulumi-runner fetch` reads the same
/// file as a plain `RunPlan` (unknown fields are ignored).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkspacePlan {
    #[serde(flatten)]
    pub plan: RunPlan,
    pub workspace: RetainedWorkspace,
}

/// What identifies a retained workspace in its plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RetainedWorkspace {
    /// The Workspace's name (the StatefulSet is `<name>-workspace`).
    pub name: String,
    /// The source revision the workspace holds (a commit, or an artifact or Program digest).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
}

/// How the run ended.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Succeeded,
    Failed,
}

/// Why a run failed, classified from Pulumi's output and exit code (runner/src/classify.rs).
/// Serialized as PascalCase strings; they become the Update's `Failed` condition reason.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// The program could not be fetched (clone, checkout, download, digest).
    SourceUnavailable,
    /// The plan or the configuration could not be applied.
    ConfigInvalid,
    /// The stack does not exist and may not be created (`useLocalStackOnly`).
    StackNotFound,
    /// Another update holds the stack's lock (HTTP 409 / "conflict").
    UpdateConflict,
    /// `pulumi install` (plugins, packages, dependencies) failed: retrying the same revision
    /// cannot fix it (PKO's workspace `InstallationFailed`).
    InstallationFailed,
    /// An earlier update was interrupted and left pending operations.
    PendingOperations,
    /// The program failed to compile or evaluate.
    CompileError,
    /// `expectNoChanges` (or `expectNoRefreshChanges`) and there were changes.
    ExpectedNoChanges,
    /// Bad or missing Pulumi Cloud credentials.
    InvalidAccessToken,
    /// The run was stopped (SIGTERM: pod deleted, deadline) and Pulumi was interrupted.
    Interrupted,
    /// The outputs could not be written to the outputs Secret (RBAC).
    PermissionDenied,
    /// A mandatory policy of the administrator's policy packs refused the changes.
    PolicyViolation,
    /// A policy pack could not be fetched, installed or loaded: nothing runs without it.
    PolicyPackFailed,
    /// The runner stopped Pulumi itself because it could not renew its operation's heartbeat
    /// Lease in time, or the operator took the Lease over ([`HeartbeatPlan`]); or the Lease
    /// could not be held, and Pulumi did not run. Retrying runs the operation again.
    HeartbeatLost,
    /// Pulumi failed for another reason (see the message and the logs).
    UpdateFailed,
}

impl FailureReason {
    /// Failures that retrying the same spec and revision cannot fix: the Stack stalls at once
    /// instead of retrying (with [`FailureReason::stalled_reason`]).
    pub fn workspace_failure(reason: &str) -> bool {
        matches!(
            reason,
            "InstallationFailed" | "StackNotFound" | "PolicyPackFailed" | "PolicyViolation"
        )
    }

    /// The reason of the `Stalled` condition for such a failure: PKO's `WorkspaceFailed` for
    /// the workspace's own failures, the policy reasons as they are.
    pub fn stalled_reason(reason: &str) -> &str {
        match reason {
            "PolicyPackFailed" | "PolicyViolation" => reason,
            _ => crate::names::REASON_WORKSPACE_FAILED,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::SourceUnavailable => "SourceUnavailable",
            FailureReason::ConfigInvalid => "ConfigInvalid",
            FailureReason::StackNotFound => "StackNotFound",
            FailureReason::UpdateConflict => "UpdateConflict",
            FailureReason::InstallationFailed => "InstallationFailed",
            FailureReason::PendingOperations => "PendingOperations",
            FailureReason::CompileError => "CompileError",
            FailureReason::ExpectedNoChanges => "ExpectedNoChanges",
            FailureReason::InvalidAccessToken => "InvalidAccessToken",
            FailureReason::Interrupted => "Interrupted",
            FailureReason::PermissionDenied => "PermissionDenied",
            FailureReason::PolicyViolation => "PolicyViolation",
            FailureReason::PolicyPackFailed => "PolicyPackFailed",
            FailureReason::HeartbeatLost => "HeartbeatLost",
            FailureReason::UpdateFailed => "UpdateFailed",
        }
    }
}

/// The summary of an operation (`pulumi stack history --json`, first entry).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resource_changes: BTreeMap<String, i64>,
}

/// What the runner reports: the termination message of the container that ended the run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<FailureReason>,
    /// A short human-readable message, free of secret values.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permalink: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectInfo>,
    /// The outputs Secret written (absent when the operation has no outputs to report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<String>,
    /// With sealed outputs: the SHA-256 of the sealed line in the log (the operator writes
    /// the outputs Secret from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_digest: Option<String>,
    /// Stale locks of earlier operations of this Stack that the runner cleared (`user@host
    /// (pid N) at time`, as Pulumi reported them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stale_locks_cleared: Vec<String>,
    /// The resources left in the stack's state after an up, refresh or destroy (the stack
    /// itself and its providers not counted), whatever the outcome; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<i64>,
    /// A preview's count of the resources an `up` would change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<i64>,
    /// A preview's changes, at most [`MAX_REPORTED_CHANGES`] of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<ResourceChange>,
    /// What the policy packs reported (absent when none ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyReport>,
}

/// The most resource changes a result (and a status) lists.
pub const MAX_REPORTED_CHANGES: usize = 20;

impl RunResult {
    pub fn failed(reason: FailureReason, message: impl Into<String>) -> RunResult {
        RunResult {
            outcome: Outcome::Failed,
            reason: Some(reason),
            message: message.into(),
            permalink: None,
            summary: None,
            project: None,
            outputs: None,
            outputs_digest: None,
            stale_locks_cleared: Vec::new(),
            resources: None,
            changed: None,
            changes: Vec::new(),
            policy: None,
        }
    }

    /// The termination message: JSON, shortened (message first) to fit [`MAX_RESULT_BYTES`].
    pub fn to_termination_message(&self) -> String {
        let mut result = self.clone();
        loop {
            let text = serde_json::to_string(&result)
                .unwrap_or_else(|_| String::from("{\"outcome\":\"failed\"}"));
            if text.len() <= MAX_RESULT_BYTES {
                return text;
            }
            if result.message.len() > 64 {
                let keep = result.message.len()
                    - (text.len() - MAX_RESULT_BYTES).min(result.message.len() - 64)
                    - 3;
                let mut cut = keep;
                while !result.message.is_char_boundary(cut) {
                    cut -= 1;
                }
                result.message.truncate(cut);
                result.message.push_str("...");
            } else if result.summary.take().is_some()
                || result.permalink.take().is_some()
                || result.project.take().is_some()
            {
                // Dropped the least useful details first.
            } else if result.stale_locks_cleared.pop().is_some()
                || result.changes.pop().is_some()
                || result
                    .policy
                    .as_mut()
                    .is_some_and(|p| p.items.pop().is_some())
            {
                // Each lock line is short; at most a few are ever cleared. The count of
                // changes stays when the list does not fit.
            } else if !result.message.is_empty() {
                result.message.clear();
            } else if result.outputs.take().is_none() {
                // Nothing left to drop (cannot happen with the fields above, but never loop).
                return serde_json::json!({"outcome": result.outcome, "reason": result.reason})
                    .to_string();
            }
        }
    }

    /// Parses a termination message; `None` when it is not a runner result.
    pub fn from_termination_message(text: &str) -> Option<RunResult> {
        serde_json::from_str(text.trim()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_round_trips_with_tagged_source() {
        let plan = RunPlan {
            update_name: "s-1".into(),
            namespace: "ns".into(),
            update_uid: "uid".into(),
            operation: Operation::Up,
            source: Some(Source::Git {
                url: "https://example.com/r.git".into(),
                commit: Some("a".repeat(40)),
                reference: None,
                shallow: true,
                dir: Some("app".into()),
            }),
            stack: StackPlan {
                name: "dev".into(),
                create: true,
                ..Default::default()
            },
            options: OperationOptions {
                refresh: true,
                ..Default::default()
            },
            outputs_secret: "s-1-stack-outputs".into(),
            outputs_labels: BTreeMap::new(),
            outputs_key: None,
            apply_plan: None,
            pulumi_log_level: None,
            lock_holder: None,
            secret_env: vec!["PULUMI_ACCESS_TOKEN".into()],
            secret_env_dirs: vec![secret_env_dir(0)],
            dependency_cache: None,
            conflict_retry_delay_ms: None,
            policy_packs: Vec::new(),
            heartbeat: Some(HeartbeatPlan::new("s-1-heartbeat")),
        };
        let text = serde_json::to_string(&plan).unwrap();
        assert!(text.contains(r#""kind":"git""#), "{text}");
        assert!(
            text.contains(
                r#""heartbeat":{"lease":"s-1-heartbeat","renewEverySeconds":10,"expireAfterSeconds":60,"stopGraceSeconds":20}"#
            ),
            "{text}"
        );
        assert!(text.contains(r#""operation":"up""#), "{text}");
        assert_eq!(serde_json::from_str::<RunPlan>(&text).unwrap(), plan);
    }

    #[test]
    fn heartbeat_periods_default_and_no_heartbeat_is_absent() {
        let plan: RunPlan = serde_json::from_value(serde_json::json!({
            "namespace": "ns",
            "operation": "up",
            "stack": {"name": "dev", "create": true},
            "heartbeat": {"lease": "l", "expireAfterSeconds": 30},
        }))
        .unwrap();
        let hb = plan.heartbeat.clone().unwrap();
        assert_eq!(
            (
                hb.lease.as_str(),
                hb.renew_every_seconds,
                hb.expire_after_seconds,
                hb.stop_grace_seconds
            ),
            (
                "l",
                DEFAULT_HEARTBEAT_RENEW_SECONDS,
                30,
                DEFAULT_HEARTBEAT_STOP_GRACE_SECONDS
            )
        );
        let without = RunPlan {
            heartbeat: None,
            ..plan
        };
        let text = serde_json::to_string(&without).unwrap();
        assert!(!text.contains("heartbeat"), "{text}");
        assert_eq!(FailureReason::HeartbeatLost.as_str(), "HeartbeatLost");
        assert_eq!(
            serde_json::to_string(&FailureReason::HeartbeatLost).unwrap(),
            r#""HeartbeatLost""#
        );
    }

    #[test]
    fn workspace_plan_is_a_run_plan_without_an_update() {
        let plan = WorkspacePlan {
            plan: RunPlan {
                update_name: String::new(),
                namespace: "ns".into(),
                update_uid: String::new(),
                operation: Operation::Preview,
                source: Some(Source::Program {
                    file: format!("{PLAN_DIR}/{WORKSPACE_PROGRAM_KEY}"),
                }),
                stack: StackPlan {
                    name: "dev".into(),
                    create: true,
                    ..Default::default()
                },
                options: OperationOptions::default(),
                outputs_secret: String::new(),
                outputs_labels: BTreeMap::new(),
                outputs_key: None,
                apply_plan: None,
                pulumi_log_level: None,
                lock_holder: None,
                secret_env: Vec::new(),
                secret_env_dirs: Vec::new(),
                dependency_cache: None,
                conflict_retry_delay_ms: None,
                policy_packs: Vec::new(),
                heartbeat: None,
            },
            workspace: RetainedWorkspace {
                name: "app".into(),
                revision: "sha256:abc".into(),
            },
        };
        let text = serde_json::to_string(&plan).unwrap();
        assert!(!text.contains("updateName"), "{text}");
        assert!(!text.contains("outputsSecret"), "{text}");
        assert_eq!(serde_json::from_str::<WorkspacePlan>(&text).unwrap(), plan);
        // `fetch` reads it as a RunPlan.
        let run: RunPlan = serde_json::from_str(&text).unwrap();
        assert_eq!(run, plan.plan);
        // An Update's plan is not a workspace plan.
        let update_plan = serde_json::to_string(&plan.plan).unwrap();
        assert!(serde_json::from_str::<WorkspacePlan>(&update_plan).is_err());
        assert_eq!(workspace_plan_secret_name("app"), "app-workspace-plan");
    }

    #[test]
    fn result_fits_the_termination_message_limit() {
        let mut r = RunResult::failed(FailureReason::UpdateFailed, "x".repeat(10_000));
        r.summary = Some(Summary {
            result: Some("failed".into()),
            resource_changes: BTreeMap::new(),
        });
        let text = r.to_termination_message();
        assert!(text.len() <= MAX_RESULT_BYTES, "{}", text.len());
        let back = RunResult::from_termination_message(&text).unwrap();
        assert_eq!(back.reason, Some(FailureReason::UpdateFailed));
        assert!(back.message.ends_with("..."));
        assert!(text.contains(r#""reason":"UpdateFailed""#));
        assert!(RunResult::from_termination_message("not json").is_none());
    }

    #[test]
    fn oversized_details_are_dropped_until_the_result_fits() {
        let mut r = RunResult::failed(FailureReason::UpdateFailed, "\u{1}".repeat(60));
        r.stale_locks_cleared = (0..500)
            .map(|i| format!("runner@pulumi-abc-{i} (pid {i}) at 2026-01-01"))
            .collect();
        r.permalink = Some(format!("https://app.pulumi.com/{}", "p".repeat(5000)));
        let text = r.to_termination_message();
        assert!(text.len() <= MAX_RESULT_BYTES, "{}", text.len());
        let back = RunResult::from_termination_message(&text).unwrap();
        assert_eq!(back.reason, Some(FailureReason::UpdateFailed));
        assert!(back.permalink.is_none());
        assert!(!back.stale_locks_cleared.is_empty());
    }
}
