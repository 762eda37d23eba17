//! `auto.pulumi.com/v1alpha1` `Update`: one stack operation (run as a Kubernetes Job).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::ResourceChange;
use crate::common::{duration_string, string_enum, ProjectInfo};

/// One Pulumi operation (`up`, `preview`, `refresh` or `destroy`) on a stack of a Workspace.
/// The operator runs it as a Kubernetes Job with the same name; see its output with
/// `kubectl logs job/<name>`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "auto.pulumi.com",
    version = "v1alpha1",
    kind = "Update",
    namespaced,
    derive = "PartialEq",
    status = "UpdateStatus",
    category = "pulumi",
    shortname = "pupd",
    doc = "One Pulumi operation (up, preview, refresh or destroy) on a stack. The operator runs it as a Kubernetes Job with the same name (`kubectl logs job/<name>`); the result is in the status (conditions Progressing, Complete, Failed) and the stack outputs in the Secret `<name>-stack-outputs`.",
    printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".spec.workspaceName","description":"The Workspace (and Stack) the operation runs for."}"#,
    printcolumn = r#"{"name":"Stack","type":"string","priority":10,"jsonPath":".spec.stackName","description":"The Pulumi stack name."}"#,
    printcolumn = r#"{"name":"Type","type":"string","priority":10,"jsonPath":".spec.type","description":"The operation: up, preview, refresh or destroy."}"#,
    printcolumn = r#"{"name":"Start Time","type":"date","priority":10,"jsonPath":".status.startTime","description":"When the operation started."}"#,
    printcolumn = r#"{"name":"End Time","type":"date","priority":10,"jsonPath":".status.endTime","description":"When the operation ended."}"#,
    printcolumn = r#"{"name":"Progressing","type":"string","jsonPath":".status.conditions[?(@.type==\"Progressing\")].status","description":"Status of the Progressing condition."}"#,
    printcolumn = r#"{"name":"Failed","type":"string","jsonPath":".status.conditions[?(@.type==\"Failed\")].status","description":"Status of the Failed condition."}"#,
    printcolumn = r#"{"name":"Complete","type":"string","jsonPath":".status.conditions[?(@.type==\"Complete\")].status","description":"Status of the Complete condition."}"#,
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.permalink","description":"Pulumi Cloud URL of the operation."}"#
)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSpec {
    /// The Workspace (in the same namespace) whose environment the operation runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_name: Option<String>,

    /// The fully qualified Pulumi stack name; selected (and created if missing) before the
    /// operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_name: Option<String>,

    /// The operation: `up`, `preview`, `refresh` or `destroy`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub update_type: Option<UpdateType>,

    /// Delete the Update (and its Job and outputs Secret) this long after it completed, e.g.
    /// `24h`. Updates created for a Stack get `24h` unless its `updateTemplate` sets another
    /// value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_string")]
    pub ttl_after_completed: Option<String>,

    /// Maximum number of resource operations run in parallel (`--parallel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<i32>,

    /// Message recorded with the operation in the stack history (`--message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// Fail if the operation would change anything (`--expect-no-changes`; up, preview,
    /// refresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_no_changes: Option<bool>,

    /// URNs of resources to replace (`--replace`; up, preview).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<Vec<String>>,

    /// URNs of the only resources to operate on (`--target`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Vec<String>>,

    /// With `target`, also operate on the targets' dependents (`--target-dependents`; up,
    /// preview, destroy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_dependents: Option<bool>,

    /// Refresh the state before the operation (`--refresh`; up, preview, destroy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<bool>,

    /// Keep going after a resource fails (`--continue-on-error`; up, destroy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_on_error: Option<bool>,

    /// After a successful destroy, remove the stack itself from the backend (`--remove`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove: Option<bool>,

    /// Run the program (`--run-program`; destroy, refresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_program: Option<bool>,

    /// Extension (not in PKO): the time limit of the operation in seconds, the Job's
    /// `activeDeadlineSeconds`. The Stack controller copies the Stack's
    /// `operationTimeoutSeconds` here. Unset: 14400 (4 hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_timeout_seconds: Option<i64>,
}

string_enum! {
    /// A Pulumi operation.
    pub enum UpdateType (open) {
        /// `pulumi preview`.
        Preview = "preview",
        /// `pulumi up`.
        Up = "up",
        /// `pulumi destroy`.
        Destroy = "destroy",
        /// `pulumi refresh`.
        Refresh = "refresh",
    }
}

/// The observed state of an Update.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When the operation started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the operation ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Pulumi Cloud URL of the operation (empty for DIY backends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permalink: Option<String>,
    /// The result message (on failure: what went wrong).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Name of the Secret holding the stack outputs (`<name>-stack-outputs`), after an `up`
    /// that produced outputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<String>,
    /// `Progressing`, `Complete` and `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// Name and runtime of the Pulumi project that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_info: Option<ProjectInfo>,
    /// Extension (not in PKO), after an `up`, `refresh` or `destroy` that ran, succeeded or
    /// not: how many resources the stack's state holds (the stack itself and its providers
    /// not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub resources: Option<i64>,
    /// Extension (not in PKO), for a preview: how many resources an `up` would change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<i64>,
    /// Extension (not in PKO), for a preview: the resources an `up` would change (at most 20)
    /// and how.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<ResourceChange>,
    /// Extension (not in PKO), for a preview: how many resources an `up` would create,
    /// update, replace and delete.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub change_counts: std::collections::BTreeMap<String, i64>,
    /// Extension (not in PKO): what the administrator's policy packs (`StackPolicy`)
    /// reported, when any covered the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::policy::PolicyReport>,
}
