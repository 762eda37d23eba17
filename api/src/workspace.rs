//! `auto.pulumi.com/v1alpha1` `Workspace`: the execution template of a stack.

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, ResourceRequirements, SecretKeySelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    any_json, is_false, object_list, preserved_object, string_enum, EmbeddedObjectMeta, ProjectInfo,
};

/// The environment in which a stack's operations run: image, program source, environment,
/// resources, pod customizations and stack settings. The operator creates one Workspace per
/// Stack (same name); every operation's Job pod is built from it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "auto.pulumi.com",
    version = "v1alpha1",
    kind = "Workspace",
    namespaced,
    derive = "PartialEq",
    status = "WorkspaceStatus",
    category = "pulumi",
    shortname = "pws",
    doc = "The environment in which a stack's operations run (image, program source, env, resources, pod template, stack settings). Created by the operator for each Stack (same name); each operation's Job pod is built from it. With workspaceReclaimPolicy Retain it is also backed by a StatefulSet that keeps a warm workspace pod.",
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image","description":"The image of the pulumi container (unset: the default image)."}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Status of the Ready condition."}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".status.address","description":"Address of the retained workspace pod, if any."}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSpec {
    /// The ServiceAccount the workspace pods run as. Unset: `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// The Pod Security Standard the generated pods follow: `restricted` (the default: non-root
    /// user 1000, no privilege escalation, all capabilities dropped) or `baseline` (for images
    /// that must run as root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_profile: Option<SecurityProfile>,

    /// The image of the `pulumi` container; it must contain the `pulumi` CLI and the language
    /// runtime of the program. Unset: `pulumi/pulumi:latest-nonroot` (restricted) or
    /// `pulumi/pulumi:latest` (baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// Pull policy of the `pulumi` container's image: `Always`, `IfNotPresent` or `Never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,

    /// Fetch the program from a git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<WorkspaceGitSource>,

    /// Fetch the program from a Flux-style artifact (a tarball URL with a digest). Also used
    /// for Program objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<Box<WorkspaceFluxSource>>,

    /// Use a program that is already in the image, at `local.dir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<Box<LocalSource>>,

    /// No program: write a minimal Pulumi.yaml with this project name and runtime (used to
    /// destroy a stack whose source is gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_info: Option<Box<ProjectInfo>>,

    /// Environment variables of the `pulumi` container, from ConfigMaps or Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub env_from: Option<Vec<EnvFromSource>>,

    /// Environment variables of the `pulumi` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Option<Vec<EnvVar>>,

    /// Compute resources of the `pulumi` container. Unset requests: 64Mi memory, 100m CPU (and
    /// an ephemeral-storage request), no limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Customizes the generated pod: labels, annotations and any PodSpec field (tolerations,
    /// nodeSelector, volumes, extra init containers or sidecars, terminationGracePeriodSeconds,
    /// the `pulumi` container's volumeMounts, ...). Applied as a strategic merge patch over the
    /// generated pod template; containers merge by name. Mount the `share` volume at `/share`
    /// in an init container to prepare files for the program, and append `KEY=VALUE` lines to
    /// `$PULUMI_ENV` to set environment variables for Pulumi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<Box<EmbeddedPodTemplateSpec>>,

    /// Extension (not in PKO's API; some PKO documentation shows it): init containers to add
    /// to the generated pod, shorthand for `podTemplate.spec.initContainers`. They run after
    /// the operator's own init containers and those of `podTemplate`, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "object_list")]
    pub init_containers: Option<Vec<serde_json::Value>>,

    /// Labels and annotations for the Service of a retained workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_template: Option<Box<EmbeddedServiceTemplateSpec>>,

    /// Verbosity of Pulumi's debug logging (`-v`), written to the operation's log. 0 or unset:
    /// off. Values above 9 are very verbose and may expose sensitive data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pulumi_log_level: Option<u32>,

    /// The Pulumi stacks of this workspace, with their settings and configuration. The
    /// operator fills this in from the Stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub stacks: Option<Vec<WorkspaceStack>>,
}

string_enum! {
    /// The Pod Security Standard of the generated pods.
    #[derive(Default)]
    pub enum SecurityProfile (open) {
        /// The `restricted` Pod Security Standard (default).
        #[default]
        Restricted = "restricted",
        /// The `baseline` Pod Security Standard.
        Baseline = "baseline",
    }
}

/// A git repository holding the program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceGitSource {
    /// URL of the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The commit SHA (or ref) to check out.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// Alias (not in PKO's API; PKO's custom-workspace example uses it) of `ref`, which wins
    /// when both are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Directory of the Pulumi project inside the repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Credentials, from Secrets in the Workspace's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<Box<WorkspaceGitAuth>>,
    /// Make a shallow clone.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shallow: bool,
}

impl WorkspaceGitSource {
    /// The revision to check out: `ref`, else its alias `revision`.
    pub fn effective_ref(&self) -> Option<&str> {
        self.git_ref.as_deref().or(self.revision.as_deref())
    }
}

/// Git credentials of a Workspace, as Secret keys.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceGitAuth {
    /// An SSH private key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_private_key: Option<SecretKeySelector>,
    /// An HTTPS user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<SecretKeySelector>,
    /// An HTTPS password, or the passphrase of the SSH key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<SecretKeySelector>,
    /// An access token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<SecretKeySelector>,
    /// A GitHub App installation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_app: Option<WorkspaceGitHubAppAuth>,
}

/// GitHub App credentials of a Workspace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceGitHubAppAuth {
    /// The GitHub App ID.
    #[serde(rename = "appID")]
    pub app_id: SecretKeySelector,
    /// The installation ID.
    #[serde(rename = "installationID")]
    pub installation_id: SecretKeySelector,
    /// The app's private key (PKCS#1 PEM).
    pub private_key: SecretKeySelector,
}

/// A Flux-style artifact holding the program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceFluxSource {
    /// URL of the artifact (a .tar.gz).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Digest of the artifact (`sha256:<hex>`), verified after download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Directory of the Pulumi project inside the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// A program baked into the image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalSource {
    /// Absolute path of the Pulumi project in the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// A pod template customization.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedPodTemplateSpec {
    /// Labels and annotations for the generated pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EmbeddedObjectMeta>,
    /// PodSpec fields to set or override (any field of a Kubernetes PodSpec). Containers,
    /// init containers, volumes and similar lists merge by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub spec: Option<serde_json::Value>,
}

/// A Service template customization.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedServiceTemplateSpec {
    /// Labels and annotations for the generated Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EmbeddedObjectMeta>,
}

/// A Pulumi stack of a Workspace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStack {
    /// The fully qualified stack name.
    pub name: String,
    /// Create the stack if it does not exist. Unset: true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<bool>,
    /// The secrets provider used when the stack is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_provider: Option<String>,
    /// Configuration values to set on the stack before each operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key"]))]
    pub config: Option<Vec<ConfigItem>>,
    /// Pulumi ESC environments to import into the stack configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Vec<String>>,
}

/// One stack configuration value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigItem {
    /// The config key, e.g. `aws:region` (keys without a namespace get the project's).
    pub key: String,
    /// Treat the key as a path (`data.nums[0]`). Not compatible with structured values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<bool>,
    /// The value: any JSON (non-string values need Pulumi CLI 3.202.0 or later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub value: Option<serde_json::Value>,
    /// Read the value from an environment variable or a file of the `pulumi` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ConfigValueFrom>,
    /// Store the value encrypted (a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<bool>,
}

/// Where a configuration value is read from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigValueFrom {
    /// Name of an environment variable of the `pulumi` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Path of a file in the `pulumi` container (e.g. a mounted ConfigMap or Secret key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Parse the value as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<bool>,
}

/// The observed state of a Workspace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// Address of the retained workspace pod (only with `workspaceReclaimPolicy: Retain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Version of the Pulumi CLI in the workspace image, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulumi_version: Option<String>,
    /// `Ready` and `Stalled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}
