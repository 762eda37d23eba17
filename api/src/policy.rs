//! `policy.pulumi-operator-rs.dev/v1alpha1` `StackPolicy`: policy packs an administrator sets
//! once for the Stacks of selected namespaces. Cluster-scoped and in this project's own API
//! group (PKO owns `pulumi.com`), so that tenants, who may write Stacks in their namespaces,
//! can read it but never change it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::string_enum;

/// The API group of [`StackPolicy`].
pub const GROUP: &str = "policy.pulumi-operator-rs.dev";

/// Policy packs every `preview` and `up` of the covered Stacks runs with (`pulumi
/// --policy-pack`). A mandatory violation fails the operation with reason `PolicyViolation`;
/// advisory ones leave the Stack Ready with a `PolicyWarnings` condition. Nothing in a Stack,
/// its Workspace template or an Update can remove a pack or change its configuration.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "policy.pulumi-operator-rs.dev",
    version = "v1alpha1",
    kind = "StackPolicy",
    plural = "stackpolicies",
    derive = "PartialEq",
    status = "StackPolicyStatus",
    category = "pulumi",
    shortname = "spol",
    doc = "Policy packs an administrator sets once for the Stacks of selected namespaces: every preview and up of a covered Stack runs with each pack (`pulumi --policy-pack`), fetched by the operator's plan, mounted read-only, and out of reach of the Stack's own settings.",
    printcolumn = r#"{"name":"Packs","type":"string","jsonPath":".status.packNames","description":"The packs, with the revision each resolved to."}"#,
    printcolumn = r#"{"name":"Stacks","type":"integer","jsonPath":".status.coveredStacks","description":"How many Stacks the policy covers."}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether every pack resolved."}"#,
    printcolumn = r#"{"name":"Reason","type":"string","priority":10,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","description":"Why not, if not."}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct StackPolicySpec {
    /// The policy packs, each run by every `preview` and `up` of a covered Stack (and its drift
    /// checks and saved plans). At least one.
    #[schemars(length(min = 1, max = 20))]
    pub packs: Vec<PolicyPackSpec>,

    /// The namespaces whose Stacks (and Updates) the policy covers. An empty selector (`{}`)
    /// covers every namespace.
    pub namespace_selector: LabelSelector,

    /// Only the Stacks with these labels, in the selected namespaces. Advisory: a Stack's
    /// labels are written by whoever writes the Stack, so a tenant who removes the label
    /// removes the packs; a policy that must hold against tenants selects by namespace only
    /// (namespace labels are the cluster administrator's). An Update created without a Stack
    /// is covered by every policy whose namespace selector matches, whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_selector: Option<LabelSelector>,
}

/// One policy pack: a directory holding `PulumiPolicy.yaml` (TypeScript with `@pulumi/policy`
/// or Python with `pulumi-policy`), its dependencies installed by the operation before it runs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPackSpec {
    /// The pack's name in status, conditions and events (a DNS label, unique in the policy).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,

    /// A git repository holding the pack. Exactly one of `git`, `fluxSource` and `archive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<PolicyPackGitSource>,

    /// A Flux source (`GitRepository`, `OCIRepository` or `Bucket`, in any namespace) whose
    /// artifact holds the pack: the operator reads its current artifact (URL and digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux_source: Option<PolicyPackFluxSource>,

    /// A packaged pack: a `.tar.gz` at a URL, checked against its digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<PolicyPackArchive>,

    /// The pack's configuration, as `pulumi --policy-pack-config` takes it: by policy name,
    /// either an enforcement level (`"advisory"`, `"mandatory"`, `"remediate"`, `"disabled"`)
    /// or an object with `enforcementLevel` and the policy's own properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::common::any_json_map")]
    pub config: Option<BTreeMap<String, serde_json::Value>>,
}

/// A policy pack in a git repository, read with the operator's view of it (never a tenant's).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPackGitSource {
    /// The repository's URL (`https://…`).
    #[schemars(length(min = 1))]
    pub url: String,
    /// A full commit SHA to use. Either this or `branch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// A branch to follow: the operator resolves it to a commit (shown in the status) and the
    /// covered Stacks preview again when it moves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The pack's directory in the repository (default: its root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Credentials for a private repository, as a Stack's `gitAuth` (exactly one of
    /// `accessToken`, `sshAuth`, `basicAuth` or `githubApp`), read from Secrets in the
    /// operator's own namespace. The operator then fetches the pack itself and hands each
    /// operation a copy checked by its digest: the credentials never reach a tenant's
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_auth: Option<Box<crate::GitAuthConfig>>,
}

/// A Flux source holding a policy pack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPackFluxSource {
    /// The Flux source object: `apiVersion` (e.g. `source.toolkit.fluxcd.io/v1`), `kind`,
    /// `name` and `namespace`.
    pub source_ref: PolicyPackFluxReference,
    /// The pack's directory in the artifact (default: its root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// The Flux source object of a pack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPackFluxReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// The source's namespace (StackPolicies are cluster-scoped).
    pub namespace: String,
}

/// A packaged policy pack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPackArchive {
    /// Where to download the `.tar.gz` (`https://…`).
    #[schemars(length(min = 1))]
    pub url: String,
    /// Its SHA-256, `sha256:<64 hex digits>`: a download with another digest is refused.
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub digest: String,
    /// The pack's directory in the archive (default: its root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// The observed state of a StackPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StackPolicyStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: every pack resolved to a revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// Each pack's resolved revision, or why it has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packs: Vec<PolicyPackStatus>,
    /// `name@revision` of each pack, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack_names: Option<String>,
    /// How many Stacks the policy covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered_stacks: Option<i64>,
    /// The last error resolving a pack, with the pack's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Where one pack stands.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyPackStatus {
    /// The pack's name.
    pub name: String,
    /// The revision the pack resolved to: a git commit, or an artifact's `sha256:` digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// For a Flux source: the URL of the artifact with that digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Why the pack has no revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

string_enum! {
    /// How a policy is enforced (the levels `@pulumi/policy` and `pulumi-policy` report).
    pub enum EnforcementLevel (open) {
        /// Reported; the operation goes on.
        Advisory = "advisory",
        /// The operation fails.
        Mandatory = "mandatory",
        /// The policy changed the resource instead of refusing it.
        Remediate = "remediate",
        /// Not run.
        Disabled = "disabled",
    }
}

/// One policy violation an operation reported.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct PolicyViolation {
    /// The policy pack.
    pub pack: String,
    /// The policy.
    pub policy: String,
    /// The resource's URN (empty for a stack-wide policy).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub urn: String,
    /// What the policy says (shortened to 300 characters).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// `mandatory` or `advisory`.
    pub enforcement_level: String,
}

/// Whether an environment variable changes how a policy pack runs (its interpreter's options,
/// module search path or package manager): an operation the administrator's packs cover may
/// not set it (the operator checks the Job, the runner its own environment).
pub fn changes_how_packs_run(name: &str) -> bool {
    // Code a pack's interpreter or the dynamic loader would run: a preloaded library, an
    // import hook, a cached compilation, a startup file of a shell.
    const NAMES: [&str; 9] = [
        "NODE_OPTIONS",
        "NODE_PATH",
        "NODE_COMPILE_CACHE",
        "NODE_REPL_EXTERNAL_MODULE",
        "PULUMI_PYTHON_CMD",
        "GCONV_PATH",
        "BASH_ENV",
        "ENV",
        "HOSTALIASES",
    ];
    const PREFIXES: [&str; 6] = [
        "PULUMI_POLICY",
        "npm_config_",
        "NPM_CONFIG_",
        "PIP_",
        "LD_",
        "PYTHON",
    ];
    // Output and hashing only: images set them.
    const HARMLESS: [&str; 5] = [
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONHASHSEED",
    ];
    !HARMLESS.contains(&name)
        && (NAMES.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p)))
}

/// The most violations a result (and a status) lists; the counts stay exact.
pub const MAX_REPORTED_VIOLATIONS: usize = 20;

/// The longest message kept for one violation.
pub const MAX_VIOLATION_MESSAGE: usize = 300;

impl PolicyViolation {
    pub fn is_mandatory(&self) -> bool {
        self.enforcement_level == "mandatory"
    }
}

/// What an operation's policy packs reported, as the Update and the Stack show it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    /// The packs the operation ran with (`name@revision`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packs: Vec<String>,
    /// How many violations (mandatory and advisory) were reported.
    #[serde(default)]
    pub violations: i64,
    /// How many of them were mandatory.
    #[serde(default)]
    pub mandatory: i64,
    /// The violations, each resource and policy once (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<PolicyViolation>,
    /// A digest of the packs, revisions and configuration the operation ran with: when the
    /// packs covering the Stack differ, the operator previews it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Set when the last policy check with these packs ended without their verdict (its
    /// preview failed for another reason): the check is tried again after a backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_failure: Option<PolicyCheckFailure>,
}

/// A policy check that ended without the packs' verdict.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCheckFailure {
    /// Why it failed: the first lines of the check's error.
    pub message: String,
    /// The failed check's Update.
    pub update: String,
    /// How many checks with these packs have failed in a row.
    pub attempts: i64,
    /// When the last of them ended. The next check starts 30 s after it, doubling with each
    /// failure, at most 10 minutes.
    pub last_attempt: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}
