//! `pulumi.com/v1` `Stack` (and the deprecated `pulumi.com/v1alpha1` view of the same objects).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    any_json_map, duration_string, is_false, preserved_object, string_enum, ProjectInfo,
    TemplateObjectMeta,
};
use crate::names;
use crate::update::{UpdateSpec, UpdateType};
use crate::workspace::WorkspaceSpec;

/// A Pulumi stack deployed by the operator. The operator keeps the stack up to date with its
/// program source (a git repository, a Flux source or a Program object) and configuration,
/// running each `pulumi up` (or `preview`/`destroy`) as a Kubernetes Job.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "pulumi.com",
    version = "v1",
    kind = "Stack",
    namespaced,
    derive = "PartialEq",
    status = "StackStatus",
    category = "pulumi",
    shortname = "pst",
    doc = "A Pulumi stack managed by the operator: what to deploy (`spec.stack` plus one program source), how to configure it, and when to run it. Every operation runs as a Kubernetes Job (see `kubectl get updates,jobs -l pulumi.com/stack-name=<name>`). Stack names must be at most 42 characters.",
    printcolumn = r#"{"name":"Stack","type":"string","priority":10,"jsonPath":".spec.stack","description":"The fully qualified Pulumi stack name."}"#,
    printcolumn = r#"{"name":"Last Update","type":"string","jsonPath":".status.lastUpdate.state","description":"State of the last update: succeeded or failed."}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".status.lastUpdate.lastResyncTime","description":"Time since the result of the last update was recorded."}"#,
    printcolumn = r#"{"name":"Last Commit","type":"string","priority":10,"jsonPath":".status.lastUpdate.lastAttemptedCommit","description":"The source revision of the last attempted update."}"#,
    printcolumn = r#"{"name":"Last Successful Commit","type":"string","priority":10,"jsonPath":".status.lastUpdate.lastSuccessfulCommit","description":"The source revision of the last successful update."}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Status of the Ready condition."}"#,
    printcolumn = r#"{"name":"Reconciling","type":"string","jsonPath":".status.conditions[?(@.type==\"Reconciling\")].reason","description":"Reason of the Reconciling condition."}"#,
    printcolumn = r#"{"name":"Stalled","type":"string","jsonPath":".status.conditions[?(@.type==\"Stalled\")].reason","description":"Reason of the Stalled condition."}"#,
    printcolumn = r#"{"name":"Permalink","type":"string","jsonPath":".status.lastUpdate.permalink","description":"Pulumi Cloud URL of the last update."}"#,
    printcolumn = r#"{"name":"Violations","type":"integer","jsonPath":".status.policy.violations","description":"Policy violations (mandatory and advisory) in the last operation the administrator's policy packs covered."}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.suspend","description":"Whether the Stack is suspended (spec.suspend): no new operation starts."}"#
)]
#[serde(rename_all = "camelCase")]
pub struct StackSpec {
    /// The fully qualified name of the Pulumi stack to deploy: `org/project/stack`, `stack`
    /// (default organization; the project comes from Pulumi.yaml), or any name your backend
    /// accepts (e.g. `s3backend.nginx.dev` for a DIY backend). Required.
    pub stack: String,

    // ----- program source: git -----
    /// Git source of the Pulumi program. Set `projectRepo` with exactly one of `commit` or
    /// `branch`; leave `fluxSource` and `programRef` empty.
    #[serde(flatten)]
    pub git: GitSource,

    /// Use a Flux source object (GitRepository, OCIRepository, Bucket, or any kind with a
    /// Flux-style `status.artifact`) in the Stack's namespace as the program source. Leave the
    /// git fields and `programRef` empty when you use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux_source: Option<Box<FluxSource>>,

    /// Use a `Program` object (a Pulumi YAML program stored in Kubernetes) in the Stack's
    /// namespace as the program source. Leave the git fields and `fluxSource` empty when you use
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_ref: Option<ProgramReference>,

    // ----- environment -----
    /// Environment variables for the Pulumi program and CLI, by name. Each value is a literal
    /// (`type: Literal`, `literal.value`) or a key of a Secret in the Stack's namespace
    /// (`type: Secret`, `secret.name`, `secret.key`). Typical use: `PULUMI_ACCESS_TOKEN`,
    /// cloud credentials, `PULUMI_CONFIG_PASSPHRASE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_refs: Option<BTreeMap<String, ResourceRef>>,

    /// Deprecated: use `envRefs` with a `Secret` reference instead. Name of a Secret in the
    /// Stack's namespace whose key `accessToken` is exposed as `PULUMI_ACCESS_TOKEN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token_secret: Option<String>,

    /// Deprecated: use `envRefs` instead. Names of ConfigMaps in the Stack's namespace whose
    /// keys all become environment variables (`envFrom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envs: Option<Vec<String>>,

    /// Deprecated: use `envRefs` instead. Names of Secrets in the Stack's namespace whose keys
    /// all become environment variables (`envFrom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_secrets: Option<Vec<String>>,

    /// The state backend URL, exported as `PULUMI_BACKEND_URL`. Examples:
    /// `https://app.pulumi.com` (Pulumi Cloud, the default), `s3://bucket`, `azblob://container`,
    /// `gs://bucket`, `file:///state`. Pass backend credentials with `envRefs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,

    // ----- configuration -----
    /// Stack configuration values, by config key (e.g. `aws:region`). Values may be any JSON:
    /// strings, numbers, booleans, objects or arrays (non-string values need Pulumi CLI
    /// 3.202.0 or later). An object replaces the whole value; keys are not paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_map")]
    pub config: Option<BTreeMap<String, serde_json::Value>>,

    /// Stack configuration values read from ConfigMaps in the Stack's namespace, by config key.
    /// Set `json: true` to parse the value as JSON (structured configuration). The ConfigMap is
    /// mounted into the operation's pod; the operator never reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_ref: Option<BTreeMap<String, ConfigMapRef>>,

    /// Alias (not in PKO's API) of `configRef`, spelled as in the Pulumi documentation. Entries
    /// are merged with `configRef`; a key must not appear in both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_refs: Option<BTreeMap<String, ConfigMapRef>>,

    /// Deprecated: use `secretsRef` instead. Secret configuration values (plain strings), by
    /// config key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<BTreeMap<String, String>>,

    /// Secret stack configuration values, by config key. Each value is a literal or a key of a
    /// Secret in the Stack's namespace; it is stored encrypted in the stack configuration.
    /// String values only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_ref: Option<BTreeMap<String, ResourceRef>>,

    /// Alias (not in PKO's API) of `secretsRef`, spelled as in the Pulumi documentation.
    /// Entries are merged with `secretsRef`; a key must not appear in both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_refs: Option<BTreeMap<String, ResourceRef>>,

    /// The secrets provider used when the stack is created (`pulumi stack init
    /// --secrets-provider`), e.g. `awskms://...`, `passphrase` or `default`. An existing stack
    /// is not re-keyed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_provider: Option<String>,

    /// Pulumi ESC environments to import into the stack configuration
    /// (`pulumi config env add`), e.g. `my-project/prod`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub environment: Option<Vec<String>>,

    // ----- operation options -----
    /// Resource URNs to update (`--target`). Only these resources (and, with
    /// `targetDependents`, their dependents) are changed by `up` and `preview`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<String>>,

    /// With `targets`, also update the resources that depend on the targets
    /// (`--target-dependents`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub target_dependents: bool,

    /// Refresh the stack's state from the cloud before each update (`--refresh`). Recommended.
    #[serde(default, skip_serializing_if = "is_false")]
    pub refresh: bool,

    /// With `refresh`, fail the update when the refresh finds changes (drift), instead of
    /// carrying on. (PKO accepts this field but ignores it; this operator honours it.)
    #[serde(default, skip_serializing_if = "is_false")]
    pub expect_no_refresh_changes: bool,

    /// Run `pulumi preview` instead of `pulumi up`: see the changes without applying them.
    /// A preview stack never destroys anything, even with `destroyOnFinalize`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub preview: bool,

    /// When the Stack object is deleted, first destroy all the stack's resources
    /// (`pulumi destroy`), then let the object go.
    #[serde(default, skip_serializing_if = "is_false")]
    pub destroy_on_finalize: bool,

    /// Run the program during `destroy` (`--run-program`), for programs whose providers are
    /// configured by the program itself.
    #[serde(default, skip_serializing_if = "is_false")]
    pub run_program: bool,

    /// Retry an update that failed because another update was in progress on the same stack
    /// (HTTP 409 "Another update is currently in progress"). (PKO accepts this field but
    /// ignores it; this operator honours it.)
    #[serde(default, skip_serializing_if = "is_false")]
    pub retry_on_update_conflict: bool,

    /// Never create the Pulumi stack: fail if `stack` does not already exist in the backend.
    #[serde(default, skip_serializing_if = "is_false")]
    pub use_local_stack_only: bool,

    /// Deprecated (v1-era field): the stack is created when missing unless `useLocalStackOnly`
    /// is set, so this field has no effect. Accepted so that old manifests still apply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_on_create: Option<bool>,

    // ----- scheduling -----
    /// Keep running `pulumi up` every `resyncFrequencySeconds` even when the source revision
    /// has not changed (drift correction, programs with dynamic results).
    #[serde(default, skip_serializing_if = "is_false")]
    pub continue_resync_on_commit_match: bool,

    /// How often, in seconds, to poll a git `branch` for new commits and, with
    /// `continueResyncOnCommitMatch`, to re-run the stack. Values under 60 (including unset)
    /// mean 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync_frequency_seconds: Option<i64>,

    /// Upper bound, in seconds, of the wait between retries of a failed update (the wait
    /// grows 10s, 30s, 90s, ... up to this cap). Unset or 0: 3600 (1 hour; PKO's default is
    /// 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_max_backoff_duration_seconds: Option<i64>,

    /// Other Stacks (in the same namespace) that must have succeeded before this one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prerequisites: Option<Vec<PrerequisiteRef>>,

    /// Extension (not in PKO): the time limit, in seconds, of one operation (`up`, `preview`,
    /// `destroy`, `refresh`). It becomes the Job's `activeDeadlineSeconds`: an operation still
    /// running after this long is stopped (Pulumi is interrupted first so that the stack is not
    /// left locked) and the Update fails with reason `DeadlineExceeded`. Unset: 14400
    /// (4 hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_timeout_seconds: Option<i64>,

    // ----- workspace -----
    /// The ServiceAccount that the stack's pods run as (same namespace). Give it the RBAC
    /// permissions your program needs (e.g. for the Kubernetes provider). Unset: `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Customizes the Workspace generated for this stack: its `spec` (image, resources, env,
    /// securityProfile, podTemplate, pulumiLogLevel, ...) and metadata. Applied as a strategic
    /// merge patch over the generated Workspace, i.e. over every operation's pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_template: Option<Box<WorkspaceTemplate>>,

    /// What to keep of the stack's workspace between operations, once the stack has reached
    /// its desired state. Allowed values: `Delete` (the default) and `Retain`.
    ///
    /// `Delete` (the default when unset): nothing keeps running for the stack between
    /// operations. Every operation (`up`, `preview`, `destroy`) runs as a Kubernetes Job that
    /// ends with the operation; no StatefulSet and no idle pod remain, so idle stacks cost
    /// nothing. Finished Jobs are kept for a while, so `kubectl logs job/<update-name>` still
    /// shows what happened.
    ///
    /// `Retain`: keep a warm workspace, a StatefulSet with one pod in which the program is
    /// checked out at the last deployed revision, its dependencies and plugins are installed
    /// and the stack is selected. Use it to `kubectl exec` into the `pulumi` container (the
    /// program is in /share/workspace) for `pulumi import`, `pulumi cancel` or state repairs;
    /// the stack's operations reuse its cache, so later updates do not download everything
    /// again. It costs one running pod per stack.
    ///
    /// Difference from the Pulumi Kubernetes Operator (PKO): PKO treats an unset value as
    /// `Retain`; this operator treats it as `Delete`. Set `Retain` explicitly to keep PKO's
    /// behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_reclaim_policy: Option<WorkspaceReclaimPolicy>,

    /// Customizes the Update objects the operator creates for this stack (e.g.
    /// `spec.ttlAfterCompleted`, `spec.parallel`, `spec.continueOnError`, `spec.replace`,
    /// labels and annotations). Applied as a strategic merge patch over each generated Update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_template: Option<Box<UpdateTemplate>>,

    /// Alias (not in PKO's Stack API; some PKO documentation shows it): the Pulumi CLI log
    /// verbosity for every operation, shorthand for `workspaceTemplate.spec.pulumiLogLevel`
    /// (which wins when both are set). 0 disables debug logging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pulumi_log_level: Option<u32>,

    /// Extension (not in PKO): scheduled drift detection. At each time one of `schedules`
    /// names, once the stack is up to date, the operator runs a drift check: a Job running
    /// `pulumi preview --refresh`, which changes nothing. Resources that the check finds
    /// different from the program are listed in `status.drift` and the `DriftDetected`
    /// condition turns `True` (with an Event `DriftDetected`); with `autoRemediate` an `up`
    /// then puts them back. A check never overlaps another operation of the stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_detection: Option<Box<DriftDetection>>,

    /// Extension (not in PKO): when changes may land. Outside the window no `up` or `destroy`
    /// starts (not even the destroy of a deleted `destroyOnFinalize` Stack, nor an
    /// `autoRemediate` repair): the Stack waits, `Reconciling` with reason
    /// `OutsideMaintenanceWindow` and the time the next window opens. Previews and drift checks
    /// run at any time; an operation started inside the window may end after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window: Option<Box<MaintenanceWindow>>,

    /// Extension (not in PKO): a person approves each change before it lands. With
    /// `required: true`, an `up` first runs a preview that saves a plan (`pulumi preview
    /// --save-plan`; its diff is in `kubectl logs job/<plan>`) and the Stack waits, Reconciling
    /// `AwaitingApproval`, with the plan summarized in `status.approval`. Approving is
    /// `kubectl annotate stack <name> pulumi.com/approve-plan=<plan> --overwrite`; the `up`
    /// then applies exactly that plan (`pulumi up --plan`) and fails if the program would do
    /// anything else. A new generation, commit or sync request makes a new plan; an approval
    /// naming any other plan is refused with an Event. A plan that changes nothing needs no
    /// approval. `destroy` and previews are not gated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,

    /// Extension (not in PKO; Flux's convention): `true` stops every new operation of this
    /// Stack: resyncs, branch tracking, drift checks and auto-remediation, retries, plans and
    /// reconciliation requests. An operation already running finishes. Deletion is never
    /// blocked: a `destroyOnFinalize` Stack is still destroyed. The Stack shows `Suspended`
    /// (condition, column, Event, metric). Setting it back to `false` (or removing it) picks
    /// up what changed meanwhile with one operation; a resume with nothing new starts none
    /// (suspending and resuming alone never count as a spec change).
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
}

/// Recurring periods in which operations that change resources may start.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// Cron expressions of when the window opens (as `driftDetection.schedules`: five fields,
    /// or six with leading seconds), e.g. `"0 22 * * 1-5"` at 22:00 on weekdays.
    pub schedules: Vec<String>,
    /// How long the window stays open after each opening, e.g. `2h`, `30m`, `1h30m`.
    pub duration: String,
    /// The IANA time zone the schedules are read in. Unset: `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// Whether changes wait for a person's approval.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// Every `up` waits until a person approves its plan (see `spec.approval`).
    #[serde(default)]
    pub required: bool,
}

/// When to look for drift, and what to do about it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftDetection {
    /// Cron expressions of the checks: five fields (`minute hour day-of-month month
    /// day-of-week`, e.g. `"*/30 * * * *"` every 30 minutes, `"0 6 * * 1-5"` at 06:00 on
    /// weekdays) or six with leading seconds. A check missed while the operator was down, or
    /// while another operation ran, runs once as soon as it can.
    pub schedules: Vec<String>,
    /// The IANA time zone the schedules are read in (e.g. `Europe/Paris`). Unset: `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Run an `up` when a check finds drift, so that the deployed resources match the program
    /// again. Not for `preview: true` stacks (they never change anything).
    #[serde(default, skip_serializing_if = "is_false")]
    pub auto_remediate: bool,
}

impl StackSpec {
    /// The digest of everything in the spec but `suspend` (`sha256:<hex>` of its JSON): two
    /// generations with the same digest ask for the same deployment.
    pub fn digest(&self) -> String {
        let unsuspended = StackSpec {
            suspend: false,
            ..self.clone()
        };
        // Serializing a derived struct of strings, maps and JSON values cannot fail.
        let json = serde_json::to_vec(&unsuspended).unwrap_or_default();
        crate::common::sha256_digest(&json)
    }

    /// The reclaim policy in effect: `Delete` when unset (this operator's default; PKO's is
    /// `Retain`). An unknown value (which the CRD schema rejects) also means `Delete`.
    pub fn reclaim_policy(&self) -> WorkspaceReclaimPolicy {
        match &self.workspace_reclaim_policy {
            Some(WorkspaceReclaimPolicy::Retain) => WorkspaceReclaimPolicy::Retain,
            _ => WorkspaceReclaimPolicy::Delete,
        }
    }

    /// The per-operation time limit in seconds (the Job's `activeDeadlineSeconds`).
    pub fn operation_timeout_seconds(&self) -> i64 {
        match self.operation_timeout_seconds {
            Some(seconds) if seconds > 0 => seconds,
            _ => names::DEFAULT_OPERATION_TIMEOUT_SECONDS,
        }
    }

    /// The resync / branch polling period in seconds (at least 60, as in PKO).
    pub fn resync_frequency_seconds(&self) -> i64 {
        self.resync_frequency_seconds
            .unwrap_or(0)
            .max(names::MIN_RESYNC_FREQUENCY_SECONDS)
    }

    /// The retry backoff cap in seconds: the spec value when positive, else 1 hour.
    pub fn retry_max_backoff_seconds(&self) -> i64 {
        match self.retry_max_backoff_duration_seconds {
            Some(seconds) if seconds > 0 => seconds,
            _ => names::DEFAULT_RETRY_MAX_BACKOFF_SECONDS,
        }
    }

    /// The Pulumi log level: `workspaceTemplate.spec.pulumiLogLevel`, else the Stack-level
    /// alias `pulumiLogLevel`.
    pub fn effective_pulumi_log_level(&self) -> Option<u32> {
        self.workspace_template
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.pulumi_log_level)
            .or(self.pulumi_log_level)
    }

    /// `configRef` merged with its alias `configRefs` (`configRef` wins on a duplicate key,
    /// which validation reports).
    pub fn effective_config_refs(&self) -> BTreeMap<&str, &ConfigMapRef> {
        merge_maps(self.config_refs.as_ref(), self.config_ref.as_ref())
    }

    /// `secretsRef` merged with its alias `secretRefs` (`secretsRef` wins on a duplicate key,
    /// which validation reports).
    pub fn effective_secrets_refs(&self) -> BTreeMap<&str, &ResourceRef> {
        merge_maps(self.secret_refs.as_ref(), self.secrets_ref.as_ref())
    }
}

/// Merges two optional maps; entries of `winner` replace those of `base`.
fn merge_maps<'a, V>(
    base: Option<&'a BTreeMap<String, V>>,
    winner: Option<&'a BTreeMap<String, V>>,
) -> BTreeMap<&'a str, &'a V> {
    let mut out = BTreeMap::new();
    for map in [base, winner].into_iter().flatten() {
        for (key, value) in map {
            out.insert(key.as_str(), value);
        }
    }
    out
}

/// A git repository holding the Pulumi program (fields inlined into the Stack spec).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// URL of the git repository holding the Pulumi program, e.g.
    /// `https://github.com/pulumi/examples` or `git@github.com:org/repo.git`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_repo: Option<String>,

    /// Deploy this commit: a full 40-character commit SHA. Mutually exclusive with `branch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,

    /// Track this branch (`main` or `refs/heads/main`) and deploy each new commit; the branch is
    /// polled every `resyncFrequencySeconds`. Mutually exclusive with `commit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,

    /// Directory of the Pulumi project (the one holding Pulumi.yaml) inside the repository.
    /// Unset: the repository root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_dir: Option<String>,

    /// Credentials for a private repository: exactly one of `accessToken`, `sshAuth`,
    /// `basicAuth` or `githubApp`, each read from Secrets in the Stack's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_auth: Option<Box<GitAuthConfig>>,

    /// Deprecated: use `gitAuth` instead. Name of a Secret in the Stack's namespace with git
    /// credentials under the keys `sshPrivateKey` (optionally with `password`), `accessToken`,
    /// or `username` and `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_auth_secret: Option<String>,

    /// Fetch only the needed commit (a shallow clone), which is faster for large repositories.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shallow: bool,
}

impl GitSource {
    /// Whether any git field is set (PKO: the inlined pointer is non-nil).
    pub fn is_set(&self) -> bool {
        self.project_repo.is_some()
            || self.commit.is_some()
            || self.branch.is_some()
            || self.repo_dir.is_some()
            || self.git_auth.is_some()
            || self.git_auth_secret.is_some()
            || self.shallow
    }
}

/// Git credentials. Set exactly one of the four methods. Every reference must be
/// `type: Secret` pointing at a Secret in the Stack's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitAuthConfig {
    /// A personal access token (used as the HTTPS password with user `git`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<ResourceRef>,
    /// An SSH private key, and its optional passphrase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth: Option<SshAuth>,
    /// HTTPS user name and password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// A GitHub App installation; a short-lived installation token is obtained for each fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_app: Option<GitHubAppAuth>,
}

/// SSH credentials for git.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshAuth {
    /// The SSH private key (PEM).
    pub ssh_private_key: ResourceRef,
    /// The passphrase of the private key, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<ResourceRef>,
}

/// HTTPS basic-auth credentials for git.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The user name.
    pub user_name: ResourceRef,
    /// The password.
    pub password: ResourceRef,
}

/// GitHub App credentials for git.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitHubAppAuth {
    /// The GitHub App ID.
    #[serde(rename = "appID")]
    pub app_id: ResourceRef,
    /// The installation ID of the app in the repository's organization.
    #[serde(rename = "installationID")]
    pub installation_id: ResourceRef,
    /// The app's private key (PKCS#1 PEM).
    pub private_key: ResourceRef,
}

string_enum! {
    /// Where a [`ResourceRef`] takes its value from.
    #[derive(Default)]
    pub enum ResourceSelectorType (open) {
        /// The inline `literal.value`.
        Literal = "Literal",
        /// A key of a Secret (`secret.name`, `secret.key`).
        #[default]
        Secret = "Secret",
        /// v1 legacy, rejected: an environment variable of the operator.
        Env = "Env",
        /// v1 legacy, rejected: a file in the operator's filesystem.
        Fs = "FS",
    }
}

/// A reference to a value: a literal or a key of a Secret in the Stack's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// Where the value comes from: `Literal` (use `literal`) or `Secret` (use `secret`). The
    /// v1 types `Env` and `FS` are rejected (they would read from the operator's own
    /// environment).
    #[serde(rename = "type")]
    pub selector_type: ResourceSelectorType,
    /// The value itself, for `type: Literal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub literal: Option<LiteralRef>,
    // Boxed: every Stack in the operator's cache holds its `envRefs`, and a map with one entry
    // allocates room for eleven.
    /// A key of a Secret, for `type: Secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Box<SecretSelector>>,
    /// Deprecated (v1 `type: Env`, rejected): an environment variable of the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Box<EnvSelector>>,
    /// Deprecated (v1 `type: FS`, rejected): a file in the operator's filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem: Option<Box<FsSelector>>,
}

impl ResourceRef {
    /// A literal value.
    pub fn literal(value: impl Into<String>) -> Self {
        Self {
            selector_type: ResourceSelectorType::Literal,
            literal: Some(LiteralRef {
                value: value.into(),
            }),
            ..Self::default()
        }
    }

    /// A key of a Secret in the same namespace.
    pub fn secret(name: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            selector_type: ResourceSelectorType::Secret,
            secret: Some(Box::new(SecretSelector {
                namespace: None,
                name: name.into(),
                key: key.into(),
            })),
            ..Self::default()
        }
    }
}

/// An inline value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LiteralRef {
    /// The value.
    pub value: String,
}

/// A key of a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretSelector {
    /// Deprecated: must be empty or the Stack's own namespace (cross-namespace references are
    /// rejected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the Secret, in the Stack's namespace.
    pub name: String,
    /// Key within the Secret.
    pub key: String,
}

/// v1 legacy: an environment variable of the operator (rejected).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvSelector {
    /// Name of the environment variable.
    pub name: String,
}

/// v1 legacy: a file of the operator (rejected).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FsSelector {
    /// Path of the file.
    pub path: String,
}

/// A key of a ConfigMap in the Stack's namespace, used as a configuration value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapRef {
    /// Name of the ConfigMap, in the Stack's namespace.
    pub name: String,
    /// Key within the ConfigMap.
    pub key: String,
    /// Parse the value as JSON (structured configuration; needs Pulumi CLI 3.202.0 or later).
    /// Unset or false: the value is a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<bool>,
}

/// A Flux source object used as the program source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxSource {
    /// The Flux source object, in the Stack's namespace.
    pub source_ref: FluxSourceReference,
    /// Directory of the Pulumi project inside the source artifact. Unset: the artifact root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// Identifies a Flux source object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxSourceReference {
    /// API version of the source, e.g. `source.toolkit.fluxcd.io/v1`.
    pub api_version: String,
    /// Kind of the source, e.g. `GitRepository`, `OCIRepository` or `Bucket`.
    pub kind: String,
    /// Name of the source object, in the Stack's namespace.
    pub name: String,
}

/// A Program object used as the program source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramReference {
    /// Name of the Program, in the Stack's namespace.
    pub name: String,
}

/// Another Stack that must succeed before this one runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrerequisiteRef {
    /// Name of the prerequisite Stack, in the same namespace.
    pub name: String,
    /// What "succeeded" means for this prerequisite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirement: Option<RequirementSpec>,
}

/// A requirement on a prerequisite Stack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequirementSpec {
    /// The prerequisite must have succeeded within this duration (e.g. `1h`, `30m`);
    /// otherwise the operator asks it to run again and waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_string")]
    pub succeeded_within_duration: Option<String>,
}

string_enum! {
    /// What remains of a stack's workspace between operations.
    #[derive(Default)]
    pub enum WorkspaceReclaimPolicy (strict) {
        /// Keep a warm workspace (StatefulSet with one pod) between operations.
        Retain = "Retain",
        /// Keep nothing running between operations (this operator's default).
        #[default]
        Delete = "Delete",
    }
}

/// Customization of the Workspace generated for a Stack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceTemplate {
    /// Ignored (accepted for apply-configuration compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Ignored (accepted for apply-configuration compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Labels and annotations for the generated Workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// Workspace spec fields to set or override; see `kubectl explain workspace.spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<WorkspaceSpec>,
    /// Ignored (accepted for apply-configuration compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub status: Option<serde_json::Value>,
}

/// Customization of the Updates generated for a Stack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTemplate {
    /// Ignored (accepted for apply-configuration compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Ignored (accepted for apply-configuration compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Labels and annotations for each generated Update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateObjectMeta>,
    /// Update spec fields to set or override; see `kubectl explain update.spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<UpdateSpec>,
    /// Ignored (accepted for apply-configuration compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub status: Option<serde_json::Value>,
}

/// The observed state of a Stack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StackStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The value of the `pulumi.com/reconciliation-request` annotation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_reconcile_request: Option<String>,

    /// `Ready`, `Reconciling` and `Stalled` (kstatus-compatible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,

    /// The stack outputs of the last successful `up`, by name. Secret outputs show as
    /// `"[secret]"`; the values are in the Secret `<update>-stack-outputs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_map")]
    pub outputs: Option<BTreeMap<String, serde_json::Value>>,

    /// The result of the last finished update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<StackUpdateState>,

    /// The update in progress, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_update: Option<CurrentStackUpdate>,

    /// Name and runtime of the Pulumi project, from the last successful update. Lets a
    /// `destroyOnFinalize` stack be destroyed even after its source is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_info: Option<Box<ProjectInfo>>,

    /// Extension (not in PKO): how many resources the stack's state held after the last
    /// `up`, `refresh` or `destroy` that ran. A deleted `destroyOnFinalize` Stack whose state
    /// held none at its current spec goes at once, without a destroy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_resources: Option<Box<StateResources>>,

    /// Extension (not in PKO): the last drift check (`spec.driftDetection`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Box<DriftStatus>>,

    /// Extension (not in PKO): the plan waiting for approval, or the last one applied
    /// (`spec.approval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Box<ApprovalStatus>>,

    /// Extension (not in PKO): what the administrator's policy packs (`StackPolicy`) reported
    /// in the last `preview` or `up` they covered: the violations, each resource and policy
    /// once. Mandatory ones failed it (`PolicyViolation`); advisory ones are also in the
    /// `PolicyWarnings` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Box<crate::policy::PolicyReport>>,
}

/// The resources a Stack's Pulumi stack held when an operation last counted them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StateResources {
    /// Resources in the state, the stack itself and its providers not counted.
    #[schemars(range(min = 0))]
    pub count: i64,
    /// The Stack's `metadata.generation` the counting operation ran for: the count is of the
    /// stack and backend that generation names.
    pub generation: i64,
    /// The Update that counted them.
    pub update: String,
}

string_enum! {
    /// Where a plan of a Stack with `spec.approval` stands.
    pub enum ApprovalState (open) {
        /// The plan waits for `pulumi.com/approve-plan=<plan>`.
        AwaitingApproval = "AwaitingApproval",
        /// The plan was approved (or changed nothing) and its `up` runs.
        Applying = "Applying",
        /// The plan's `up` ended (see `lastUpdate`).
        Applied = "Applied",
    }
}

/// A saved plan of a Stack with `spec.approval`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalStatus {
    /// The plan's id: the name of the preview Update that saved it (`kubectl logs
    /// job/<plan>` shows its diff). Approve it with `kubectl annotate stack <name>
    /// pulumi.com/approve-plan=<plan> --overwrite`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// `AwaitingApproval`, `Applying` or `Applied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ApprovalState>,
    /// When the plan was saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_time: Option<Time>,
    /// The Stack generation the plan was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The source revision the plan was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The `pulumi.com/reconciliation-request` the plan was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_request: Option<String>,
    /// How many resources the plan creates, updates, replaces and deletes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub changes: BTreeMap<String, i64>,
    /// The resources the plan changes (at most 20) and how.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceChange>,
    /// The last approval that was refused (it named another plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The last plan whose `up` ran (an approval still naming it is not a new one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied: Option<String>,
    /// Extension: the digest of the spec the plan was made for ([`StackSpec::digest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
}

/// What the last drift check found.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftStatus {
    /// When the last check ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check_time: Option<Time>,
    /// The Update that ran the last check (`kubectl logs job/<name>` shows its diff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check: Option<String>,
    /// The source revision the last check compared against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The number of drifted resources the last check found (0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drifted: Option<i64>,
    /// The drifted resources (at most 20) and what an `up` would do to each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceChange>,
    /// When the next check is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_check_time: Option<Time>,
}

// The Stack's status and the Update's status both list changes.
pub use crate::common::ResourceChange;

string_enum! {
    /// The state of the last update of a Stack.
    pub enum StackUpdateStateMessage (open) {
        /// The update succeeded.
        Succeeded = "succeeded",
        /// The update failed.
        Failed = "failed",
    }
}

/// The result of a finished update.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StackUpdateState {
    /// Name of the Update object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The operation: `up`, `preview` or `destroy`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub update_type: Option<UpdateType>,
    /// `succeeded` or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StackUpdateStateMessage>,
    /// Why the update failed (set only on failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The Stack generation the update ran for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The reconcile-request annotation value the update ran for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_request: Option<String>,
    /// The source revision the update ran with (git SHA, Flux revision or Program revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_commit: Option<String>,
    /// The source revision of the last successful update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_commit: Option<String>,
    /// Pulumi Cloud URL of the update (empty for DIY backends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permalink: Option<String>,
    /// When the operator recorded this result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_resync_time: Option<Time>,
    /// Consecutive failures for the same generation and reconcile request (0 after a success).
    /// After 3 the Stack is Stalled until its spec, source or reconcile request changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<i64>,
    /// Extension: the digest of the spec the update ran for, `spec.suspend` left out
    /// ([`StackSpec::digest`]), so that suspending and resuming is not a new generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_digest: Option<String>,
}

/// The update in progress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentStackUpdate {
    /// Name of the Update object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The Stack generation the update runs for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The reconcile-request annotation value the update runs for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_request: Option<String>,
    /// The source revision the update runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The deprecated `pulumi.com/v1alpha1` version of Stack: the same objects, served with the
/// same schema (stored as `v1`).
pub mod v1alpha1 {
    use kube::CustomResource;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    // No doc comment here: the spec's schema description must be the v1 one, so that both
    // versions serve the same schema.
    #[allow(missing_docs)]
    #[derive(
        CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema,
    )]
    #[kube(
        group = "pulumi.com",
        version = "v1alpha1",
        kind = "Stack",
        namespaced,
        derive = "PartialEq",
        status = "super::StackStatus",
        category = "pulumi",
        shortname = "pst",
        storage = false,
        deprecated = "pulumi.com/v1alpha1 Stack is deprecated; use pulumi.com/v1 Stack",
        doc = "Deprecated: use pulumi.com/v1 Stack. The same objects as pulumi.com/v1 Stack, with the same schema.",
        printcolumn = r#"{"name":"Stack","type":"string","priority":10,"jsonPath":".spec.stack","description":"The fully qualified Pulumi stack name."}"#,
        printcolumn = r#"{"name":"Last Update","type":"string","jsonPath":".status.lastUpdate.state","description":"State of the last update: succeeded or failed."}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".status.lastUpdate.lastResyncTime","description":"Time since the result of the last update was recorded."}"#,
        printcolumn = r#"{"name":"Last Commit","type":"string","priority":10,"jsonPath":".status.lastUpdate.lastAttemptedCommit","description":"The source revision of the last attempted update."}"#,
        printcolumn = r#"{"name":"Last Successful Commit","type":"string","priority":10,"jsonPath":".status.lastUpdate.lastSuccessfulCommit","description":"The source revision of the last successful update."}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Status of the Ready condition."}"#,
        printcolumn = r#"{"name":"Reconciling","type":"string","jsonPath":".status.conditions[?(@.type==\"Reconciling\")].reason","description":"Reason of the Reconciling condition."}"#,
        printcolumn = r#"{"name":"Stalled","type":"string","jsonPath":".status.conditions[?(@.type==\"Stalled\")].reason","description":"Reason of the Stalled condition."}"#,
        printcolumn = r#"{"name":"Permalink","type":"string","jsonPath":".status.lastUpdate.permalink","description":"Pulumi Cloud URL of the last update."}"#
    )]
    #[serde(transparent)]
    pub struct StackSpec(pub super::StackSpec);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every Stack in the operator's cache holds its `envRefs` in a map whose first node has
    /// room for eleven entries: each byte of a `ResourceRef` costs eleven per Stack.
    #[test]
    fn a_value_reference_is_small() {
        assert!(
            std::mem::size_of::<ResourceRef>() <= 72,
            "{}",
            std::mem::size_of::<ResourceRef>()
        );
        let parsed: ResourceRef =
            serde_json::from_str(r#"{"type": "Secret", "secret": {"name": "s", "key": "k"}}"#)
                .expect("parses");
        assert_eq!(parsed, ResourceRef::secret("s", "k"));
    }

    #[test]
    fn the_spec_digest_leaves_out_suspend_only() {
        let spec = StackSpec {
            stack: "dev".into(),
            ..Default::default()
        };
        let suspended = StackSpec {
            suspend: true,
            ..spec.clone()
        };
        assert_eq!(spec.digest(), suspended.digest());
        assert!(spec.digest().starts_with("sha256:"));
        let other = StackSpec {
            refresh: true,
            ..spec.clone()
        };
        assert_ne!(spec.digest(), other.digest());
    }

    /// The operator's caches hold every Stack and Workspace inline: the parts few of them
    /// set (Flux source, drift, maintenance window, approval, pod and service templates)
    /// are boxed so that the rest do not pay for them (at 10,000 Stacks, 8.6 MiB). Every
    /// Stack that has run an update holds `lastUpdate.specDigest` (24 bytes inline).
    #[test]
    fn cached_kinds_are_small_inline() {
        let stack = std::mem::size_of::<Stack>();
        assert!(stack <= 1616, "Stack: {stack} bytes");
        let workspace = std::mem::size_of::<crate::Workspace>();
        assert!(workspace <= 900, "Workspace: {workspace} bytes");
    }
}
