//! Stack outputs → the `<update>-stack-outputs` Secret (PKO's format): one key per output
//! (names sanitised with `[^-._a-zA-Z0-9]` → `_`), value = the output's JSON, annotation
//! `pulumi.com/secrets` = sorted JSON array of the secret keys, owned by the Update.

use crate::error::Failure;
use crate::redact::Redactor;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::Api;
use pulumi_operator_api::backoff::Backoff;
use pulumi_operator_api::plan::{FailureReason, RunPlan};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The annotation listing the secret keys.
pub const SECRETS_ANNOTATION: &str = "pulumi.com/secrets";

/// Why the CLI's outputs could not be read. Never quotes the revealed document.
#[derive(Debug, thiserror::Error)]
pub enum OutputsError {
    #[error("cannot parse `stack output --json`: {0}")]
    Masked(serde_json::Error),
    #[error("cannot parse `stack output --json --show-secrets`")]
    Revealed,
    #[error("`stack output --show-secrets` names other outputs than the operation's event log")]
    OtherOutputs,
}

/// Outputs read from `stack output --json [--show-secrets]`.
#[derive(Clone, PartialEq, Default)]
pub struct StackOutputs {
    /// Plaintext values (from `--show-secrets`).
    pub values: BTreeMap<String, Value>,
    /// Outputs that are secret (their masked JSON contains `[secret]`, as the SDK decides).
    pub secret: BTreeSet<String>,
}

impl std::fmt::Debug for StackOutputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackOutputs")
            .field("keys", &self.values.keys().collect::<Vec<_>>())
            .field("secret", &self.secret)
            .finish()
    }
}

impl StackOutputs {
    /// Parses the two JSON documents of `stack output --json` (masked) and
    /// `stack output --json --show-secrets` (revealed).
    pub fn parse(masked: &[u8], revealed: &[u8]) -> Result<StackOutputs, OutputsError> {
        let masked: BTreeMap<String, Value> =
            serde_json::from_slice(masked).map_err(OutputsError::Masked)?;
        // Never quote the revealed document in an error.
        let values: BTreeMap<String, Value> =
            serde_json::from_slice(revealed).map_err(|_| OutputsError::Revealed)?;
        let secret = values
            .keys()
            .filter(|k| {
                masked
                    .get(*k)
                    .map(|v| v.to_string().contains("[secret]"))
                    .unwrap_or(false)
            })
            .cloned()
            .collect();
        Ok(StackOutputs { values, secret })
    }

    /// The stack's outputs as an operation's event log (`--event-log`) recorded them: the
    /// last `resOutputsEvent` of the `pulumi:pulumi:Stack` resource, whose secret values are
    /// masked (a secret-signature object with `"ciphertext": "[secret]"`). `None` when the log
    /// holds no such event (the caller then asks `stack output`). The values of secret outputs
    /// are not in the log: [`StackOutputs::reveal`] fills them in.
    pub fn from_event_log(text: &str) -> Option<StackOutputs> {
        let outputs = text.lines().rev().find_map(|line| {
            let event: Value = serde_json::from_str(line).ok()?;
            let metadata = event.get("resOutputsEvent")?.get("metadata")?;
            (metadata.get("type")?.as_str()? == "pulumi:pulumi:Stack")
                .then(|| metadata.get("new")?.get("outputs").cloned())?
        })?;
        let Value::Object(map) = outputs else {
            return None;
        };
        let values: BTreeMap<String, Value> = map.into_iter().collect();
        let secret = values
            .iter()
            .filter(|(_, v)| holds_secret(v))
            .map(|(k, _)| k.clone())
            .collect();
        Some(StackOutputs { values, secret })
    }

    /// Takes the secret outputs' values from `stack output --json --show-secrets`; the
    /// revealed document must name the same outputs.
    pub fn reveal(&mut self, revealed: &[u8]) -> Result<(), OutputsError> {
        // Never quote the revealed document in an error.
        let values: BTreeMap<String, Value> =
            serde_json::from_slice(revealed).map_err(|_| OutputsError::Revealed)?;
        if !values.keys().eq(self.values.keys()) {
            return Err(OutputsError::OtherOutputs);
        }
        self.values = values;
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Marks as secret the outputs whose value holds a value `redactor` masks; returns their
    /// names.
    pub fn mark_known_secrets(&mut self, redactor: &Redactor) -> Vec<String> {
        let mut marked = Vec::new();
        for (name, value) in &self.values {
            if self.secret.contains(name) {
                continue;
            }
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if redactor.apply(&text) != text {
                marked.push(name.clone());
            }
        }
        self.secret.extend(marked.iter().cloned());
        marked
    }
}

/// The signature key Pulumi marks a secret value with in serialized property values.
const SECRET_SIG_KEY: &str = "4dabf18193072939515e22adb298388d";
const SECRET_SIG: &str = "1b47061264138c4ac30d75fd1eb44270";

/// Whether a serialized property value is, or contains, a secret.
fn holds_secret(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            m.get(SECRET_SIG_KEY).and_then(Value::as_str) == Some(SECRET_SIG)
                || m.values().any(holds_secret)
        }
        Value::Array(items) => items.iter().any(holds_secret),
        _ => false,
    }
}

/// A Secret data key for an output name.
pub fn sanitize_key(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The outputs as the operator seals them into the outputs Secret: data key → the output's
/// JSON, and the secret keys (pure).
pub fn payload(outputs: &StackOutputs) -> pulumi_operator_api::sealed::OutputsPayload {
    let mut payload = pulumi_operator_api::sealed::OutputsPayload::default();
    for (name, value) in &outputs.values {
        let key = sanitize_key(name);
        if outputs.secret.contains(name) {
            payload.secret_keys.insert(key.clone());
        }
        payload
            .data
            .insert(key, serde_json::to_string(value).unwrap_or_default());
    }
    payload
}

/// The outputs Secret (pure).
pub fn build_secret(plan: &RunPlan, outputs: &StackOutputs) -> Secret {
    let mut data = BTreeMap::new();
    let mut secret_keys = BTreeSet::new();
    for (name, value) in &outputs.values {
        let key = sanitize_key(name);
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        if outputs.secret.contains(name) {
            secret_keys.insert(key.clone());
        }
        data.insert(key, ByteString(bytes));
    }
    let mut labels = plan.outputs_labels.clone();
    labels.insert("auto.pulumi.com/component".into(), "update".into());
    labels.insert(
        "auto.pulumi.com/update-name".into(),
        plan.update_name.clone(),
    );
    let annotations = BTreeMap::from([(
        SECRETS_ANNOTATION.to_string(),
        serde_json::to_string(&secret_keys).unwrap_or_else(|_| "[]".into()),
    )]);
    Secret {
        metadata: ObjectMeta {
            name: Some(plan.outputs_secret.clone()),
            namespace: Some(plan.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![update_owner(plan)]),
            ..Default::default()
        },
        immutable: Some(true),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// A reference to the operation's Update, as the owner (not the controller) of what the runner
/// creates for it: the outputs Secret, the heartbeat Lease.
pub fn update_owner(plan: &RunPlan) -> OwnerReference {
    OwnerReference {
        api_version: "auto.pulumi.com/v1alpha1".into(),
        kind: "Update".into(),
        name: plan.update_name.clone(),
        uid: plan.update_uid.clone(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    }
}

/// Creates the outputs Secret, replacing an existing one (it is immutable, so: delete, then
/// create). A 403 fails with PermissionDenied naming the missing permission.
pub async fn write_secret(
    client: kube::Client,
    plan: &RunPlan,
    outputs: &StackOutputs,
) -> Result<(), Failure> {
    let api: Api<Secret> = Api::namespaced(client, &plan.namespace);
    let secret = build_secret(plan, outputs);
    let name = plan.outputs_secret.as_str();
    let backoff = Backoff::new(Duration::from_millis(500), 2.0, Duration::from_secs(8));
    let mut attempt = 1;
    loop {
        let result = match api.create(&PostParams::default(), &secret).await {
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = api.get(name).await;
                let uid = existing.ok().and_then(|s| s.metadata.uid);
                let dp = DeleteParams {
                    preconditions: uid.map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match api.delete(name, &dp).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {
                        api.create(&PostParams::default(), &secret).await
                    }
                    Err(e) => Err(e),
                }
                .map_err(|e| (e, "replace"))
            }
            other => other.map_err(|e| (e, "create")),
        };
        match result {
            Ok(_) => return Ok(()),
            Err((kube::Error::Api(s), verb)) if s.code == 403 => {
                let who = service_account(&s.message)
                    .or_else(|| {
                        // The Job sets these from the pod's own fields.
                        let ns = std::env::var("POD_NAMESPACE").ok()?;
                        let sa = std::env::var("POD_SA_NAME").ok()?;
                        Some(format!("{ns}/{sa}"))
                    })
                    .unwrap_or_else(|| "the pod's serviceaccount".to_string());
                let verbs = if verb == "replace" {
                    "get, delete and create"
                } else {
                    "create"
                };
                return Err(Failure::new(
                    FailureReason::PermissionDenied,
                    format!(
                        "cannot write the outputs Secret {name}: missing permission to {verbs} secrets in namespace {} for serviceaccount {who} ({})",
                        plan.namespace, s.message
                    ),
                ));
            }
            Err((e, _))
                if attempt >= 5
                    || matches!(&e, kube::Error::Api(s) if s.code < 500 && s.code != 409 && s.code != 429) =>
            {
                return Err(Failure::new(
                    FailureReason::UpdateFailed,
                    format!("the operation succeeded, but writing the outputs Secret {name} failed: {e}"),
                ));
            }
            Err((e, _)) => {
                let delay = backoff.after(attempt);
                crate::report::log(format!(
                    "writing the outputs Secret failed ({e}); retrying in {}ms",
                    delay.as_millis()
                ));
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

/// `ns/name` of `User "system:serviceaccount:ns:name"` in an API server message.
pub fn service_account(message: &str) -> Option<String> {
    let start = message.find("system:serviceaccount:")? + "system:serviceaccount:".len();
    let rest = &message[start..];
    let end = rest.find('"').unwrap_or(rest.len());
    let (ns, name) = rest[..end].split_once(':')?;
    Some(format!("{ns}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::plan::{Operation, StackPlan};
    use serde_json::json;

    fn plan() -> RunPlan {
        RunPlan {
            update_name: "s-up-1".into(),
            namespace: "ns".into(),
            update_uid: "uid-1".into(),
            operation: Operation::Up,
            source: None,
            stack: StackPlan::default(),
            options: Default::default(),
            outputs_secret: "s-up-1-stack-outputs".into(),
            outputs_labels: BTreeMap::from([("pulumi.com/stack-name".into(), "s".into())]),
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
        }
    }

    #[test]
    fn outputs_come_from_the_event_log_and_secrets_from_the_cli() {
        // As the real CLI (3.259) writes them, one event a line.
        let log = r#"{"sequence":1,"resOutputsEvent":{"metadata":{"op":"same","urn":"u1","type":"pulumi:pulumi:Stack","new":{"outputs":{}}}}}
{"sequence":2,"resOutputsEvent":{"metadata":{"op":"same","urn":"u2","type":"standin:index:Record","new":{"outputs":{"greeting":"other"}}}}}
{"sequence":3,"resOutputsEvent":{"metadata":{"op":"same","urn":"u1","type":"pulumi:pulumi:Stack","new":{"outputs":{"greeting":"hi","obj":{"a":1,"b":["x"]},"pw":{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","ciphertext":"[secret]"},"nested":{"k":[{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","ciphertext":"[secret]"}]}}}}}}
{"sequence":4,"summaryEvent":{"resourceChanges":{"same":3}}}"#;
        let mut o = StackOutputs::from_event_log(log).unwrap();
        assert_eq!(o.values["greeting"], json!("hi"));
        assert_eq!(o.values["obj"], json!({"a": 1, "b": ["x"]}));
        assert_eq!(
            o.secret,
            ["nested".to_string(), "pw".to_string()]
                .into_iter()
                .collect()
        );
        assert!(o.reveal(br#"{"greeting":"hi"}"#).is_err(), "other outputs");
        let err = o.reveal(b"s3cr3t not json").unwrap_err().to_string();
        assert!(!err.contains("s3cr3t"));
        o.reveal(
            br#"{"greeting":"hi","obj":{"a":1,"b":["x"]},"pw":"s3cr3t","nested":{"k":["n"]}}"#,
        )
        .unwrap();
        assert_eq!(o.values["pw"], json!("s3cr3t"));
        assert_eq!(o.secret.len(), 2);

        // No event of the stack resource: the caller asks the CLI.
        assert!(StackOutputs::from_event_log(
            r#"{"sequence":4,"summaryEvent":{"resourceChanges":{}}}"#
        )
        .is_none());
        assert!(StackOutputs::from_event_log("").is_none());
        // A stack without outputs.
        let none = r#"{"resOutputsEvent":{"metadata":{"type":"pulumi:pulumi:Stack","new":{"outputs":{}}}}}"#;
        assert!(StackOutputs::from_event_log(none).unwrap().is_empty());
    }

    #[test]
    fn secret_outputs_are_detected_like_the_sdk() {
        let masked = br#"{"url": "http://x", "pw": "[secret]", "conn": {"host": "h", "token": "[secret]"}, "n": 3}"#;
        let revealed =
            br#"{"url": "http://x", "pw": "hunter2", "conn": {"host": "h", "token": "t"}, "n": 3}"#;
        let o = StackOutputs::parse(masked, revealed).unwrap();
        assert_eq!(
            o.secret,
            BTreeSet::from(["conn".to_string(), "pw".to_string()])
        );
        assert_eq!(o.values["pw"], Value::String("hunter2".into()));
        assert!(!format!("{o:?}").contains("hunter2"));
        let e = StackOutputs::parse(b"{}", b"{\"pw\": hunter2")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("hunter2"));
    }

    #[test]
    fn outputs_holding_known_secrets_become_secret() {
        let masked = br#"{"url": "http://x", "dsn": "postgres://u:canary-out-pw@db/x", "nested": {"k": "canary-out-pw"}, "n": 3}"#;
        let mut o = StackOutputs::parse(masked, masked).unwrap();
        assert!(o.secret.is_empty());
        let mut r = Redactor::default();
        r.add("canary-out-pw");
        assert_eq!(o.mark_known_secrets(&r), ["dsn", "nested"]);
        assert_eq!(
            o.secret,
            BTreeSet::from(["dsn".to_string(), "nested".to_string()])
        );
        let s = build_secret(&plan(), &o);
        assert_eq!(
            s.metadata.annotations.as_ref().unwrap()[SECRETS_ANNOTATION],
            r#"["dsn","nested"]"#
        );
    }

    #[test]
    fn secret_object_shape() {
        let mut o = StackOutputs::default();
        o.values
            .insert("my out/1".into(), serde_json::json!({"a": 1}));
        o.values.insert("pw".into(), serde_json::json!("s3"));
        o.secret.insert("pw".into());
        let s = build_secret(&plan(), &o);
        assert_eq!(s.metadata.name.as_deref(), Some("s-up-1-stack-outputs"));
        let data = s.data.as_ref().unwrap();
        assert_eq!(data["my_out_1"].0, br#"{"a":1}"#);
        assert_eq!(data["pw"].0, br#""s3""#);
        assert_eq!(
            s.metadata.annotations.as_ref().unwrap()[SECRETS_ANNOTATION],
            r#"["pw"]"#
        );
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["auto.pulumi.com/component"], "update");
        assert_eq!(labels["auto.pulumi.com/update-name"], "s-up-1");
        assert_eq!(labels["pulumi.com/stack-name"], "s");
        let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            ("auto.pulumi.com/v1alpha1", "Update", "s-up-1", "uid-1")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(false), Some(false))
        );
        assert_eq!(s.immutable, Some(true));
    }

    #[test]
    fn service_account_from_forbidden_message() {
        let m = r#"secrets is forbidden: User "system:serviceaccount:team-a:runner" cannot create resource "secrets" in API group "" in the namespace "team-a""#;
        assert_eq!(service_account(m).as_deref(), Some("team-a/runner"));
        assert_eq!(service_account("forbidden: User \"alice\""), None);
    }
}
