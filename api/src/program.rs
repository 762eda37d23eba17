//! `pulumi.com/v1` `Program`: a Pulumi YAML program stored as a Kubernetes object.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{any_json, any_json_list, any_json_map, is_false, string_enum};

/// The body of a Program object. Unlike other kinds, a Program has no `spec`: the program is
/// under the top-level key `program`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "pulumi.com",
    version = "v1",
    kind = "Program",
    namespaced,
    derive = "PartialEq",
    no_spec,
    status = "ProgramStatus",
    category = "pulumi",
    shortname = "pprog",
    doc = "A Pulumi YAML program stored in Kubernetes, under the top-level key `program` (not `spec`). Stacks use it with `spec.programRef.name`; the operator serves it to their operations as a tarball holding a generated Pulumi.yaml.",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".status.artifact.url","description":"Where the operator serves the program."}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProgramSpec {
    /// The Pulumi YAML program: `configuration`, `resources`, `variables`, `outputs` and
    /// `packages`, as in a Pulumi.yaml file (the project name is the Program's name and the
    /// runtime is `yaml`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<ProgramDefinition>,
}

/// A Pulumi YAML program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramDefinition {
    /// Configuration keys the program reads, with their types and defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<BTreeMap<String, Configuration>>,

    /// The resources of the program, by logical name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<BTreeMap<String, Resource>>,

    /// Named expressions (Pulumi YAML `variables`), e.g. function invocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_map")]
    pub variables: Option<BTreeMap<String, serde_json::Value>>,

    /// The stack outputs, by name; values are expressions such as `${bucket.id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_map")]
    pub outputs: Option<BTreeMap<String, serde_json::Value>>,

    /// Packages (e.g. parameterized providers) to install, by name: `name: source@version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<BTreeMap<String, String>>,
}

string_enum! {
    /// Type of a configuration key of a Pulumi YAML program.
    pub enum ConfigType (strict) {
        /// A string.
        String = "String",
        /// A number.
        Number = "Number",
        /// A list of numbers.
        ListOfNumbers = "List<Number>",
        /// A list of strings.
        ListOfStrings = "List<String>",
    }
}

/// A configuration key of a Pulumi YAML program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    /// The type of the value: `String`, `Number`, `List<Number>` or `List<String>`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub config_type: Option<ConfigType>,
    /// The value used when the stack does not set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub default: Option<serde_json::Value>,
}

/// A resource of a Pulumi YAML program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// The resource type token, e.g. `aws:s3:Bucket` or `kubernetes:apps/v1:Deployment`.
    #[schemars(length(min = 1))]
    #[serde(rename = "type")]
    pub resource_type: String,
    /// The resource's input properties; values may be expressions such as `${other.id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_map")]
    pub properties: Option<BTreeMap<String, serde_json::Value>>,
    /// Resource options (dependsOn, protect, provider, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<ResourceOptions>,
    /// Read an existing resource instead of managing it. Do not combine with `properties`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get: Option<Getter>,
}

/// Pulumi resource options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceOptions {
    /// Output properties to store as secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_secret_outputs: Option<Vec<String>>,
    /// Previous URNs or names of this resource, so that renaming it does not replace it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aliases: Option<Vec<String>>,
    /// Timeouts for create, update and delete, e.g. `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_timeouts: Option<CustomTimeouts>,
    /// Delete the old resource before creating its replacement.
    #[serde(default, skip_serializing_if = "is_false")]
    pub delete_before_replace: bool,
    /// Resources this one depends on, as expressions (`${other}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_list")]
    pub depends_on: Option<Vec<serde_json::Value>>,
    /// Properties whose changes are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_changes: Option<Vec<String>>,
    /// ID of an existing cloud resource to adopt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<String>,
    /// The parent resource (expression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub parent: Option<serde_json::Value>,
    /// Refuse to delete this resource.
    #[serde(default, skip_serializing_if = "is_false")]
    pub protect: bool,
    /// The provider resource to use (expression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json")]
    pub provider: Option<serde_json::Value>,
    /// Providers to use for children, by package name (expressions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_map")]
    pub providers: Option<BTreeMap<String, serde_json::Value>>,
    /// The provider plugin version to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// Timeouts of resource operations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomTimeouts {
    /// Timeout of create, e.g. `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create: Option<String>,
    /// Timeout of delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete: Option<String>,
    /// Timeout of update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<String>,
}

/// Reads an existing resource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Getter {
    /// The ID of the resource.
    #[schemars(length(min = 1))]
    pub id: String,
    /// Extra state used to look the resource up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_json_map")]
    pub state: Option<BTreeMap<String, serde_json::Value>>,
}

/// The observed state of a Program.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProgramStatus {
    /// The `metadata.generation` the artifact was built from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Where the operator serves the program (a Flux-style artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
}

/// A downloadable tarball of a program (the same shape as a Flux source artifact).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Relative path of the artifact, e.g. `programs/<ns>/<name>/<generation>.tar.gz`.
    pub path: String,
    /// URL to download the artifact from.
    pub url: String,
    /// Revision of the source (for a Program: its generation).
    pub revision: String,
    /// Digest of the tarball, `<algorithm>:<hex>` (e.g. `sha256:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"))]
    pub digest: Option<String>,
    /// When the artifact was produced.
    pub last_update_time: Time,
    /// Size of the tarball in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Extra metadata of the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}
