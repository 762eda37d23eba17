//! The Update's objects besides its Job and plan Secret, as pure functions: the Program's
//! ConfigMap the Job mounts, and the Secrets the operator writes from what the pod reported
//! (the outputs, a preview's saved plan). All owned by the Update and immutable.

use crate::update::job::{job_labels, owned_by};
use crate::update::plan::SAVED_PLAN_KEY;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use pulumi_operator_api::plan::program_config_map_name;
use pulumi_operator_api::sealed::OutputsPayload;
use pulumi_operator_api::{names, Update};
use std::collections::BTreeMap;

/// The key of the outputs Secret's annotation that lists its secret outputs.
const SECRET_KEYS_ANNOTATION: &str = "pulumi.com/secrets";

/// Metadata of an object `name` in `ns` owned by the Update.
fn owned_meta(
    update: &Update,
    name: String,
    ns: &str,
    labels: BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(ns.to_string()),
        labels: Some(labels),
        owner_references: owned_by(update),
        ..Default::default()
    }
}

/// The ConfigMap `<update>-program` holding a Program's rendered Pulumi.yaml.
pub fn program_config_map(update: &Update, ns: &str, rendered: String) -> ConfigMap {
    let name = program_config_map_name(&update.name_any());
    ConfigMap {
        metadata: owned_meta(update, name, ns, job_labels(update)),
        immutable: Some(true),
        data: Some([("Pulumi.yaml".to_string(), rendered)].into()),
        ..Default::default()
    }
}

/// The outputs Secret `<update>-stack-outputs` from the opened payload: each output's JSON
/// under its name, the secret ones listed in an annotation. `labels` are the plan's
/// `outputsLabels`.
pub fn outputs_secret(
    update: &Update,
    ns: &str,
    labels: &BTreeMap<String, String>,
    payload: OutputsPayload,
) -> Result<Secret, serde_json::Error> {
    let name = update.name_any();
    let mut labels = labels.clone();
    labels.insert("auto.pulumi.com/component".into(), "update".into());
    labels.insert(names::UPDATE_NAME_LABEL.into(), name.clone());
    let mut metadata = owned_meta(update, format!("{name}-stack-outputs"), ns, labels);
    metadata.annotations = Some(
        [(
            SECRET_KEYS_ANNOTATION.to_string(),
            serde_json::to_string(&payload.secret_keys)?,
        )]
        .into(),
    );
    Ok(Secret {
        metadata,
        immutable: Some(true),
        type_: Some("Opaque".into()),
        string_data: Some(payload.data),
        ..Default::default()
    })
}

/// The Secret `<update>-saved-plan` that keeps the plan a preview saved.
pub fn saved_plan_secret(update: &Update, ns: &str, plan: String) -> Secret {
    let name = crate::update::plan::saved_plan_secret_name(&update.name_any());
    Secret {
        metadata: owned_meta(update, name, ns, job_labels(update)),
        immutable: Some(true),
        type_: Some("Opaque".into()),
        string_data: Some([(SAVED_PLAN_KEY.to_string(), plan)].into()),
        ..Default::default()
    }
}
