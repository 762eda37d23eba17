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

    /// The stack's outputs as an operation's event log (`--event-log`) recorded them (the
    /// `new.outputs` of the last `resOutputsEvent` of the `pulumi:pulumi:Stack` resource:
    /// `crate::eventlog`), whose secret values are masked (a secret-signature object with
    /// `"ciphertext": "[secret]"`). `None` when they are not an object. The values of secret
    /// outputs are not in the log: [`StackOutputs::reveal`] fills them in.
    pub fn from_logged(outputs: Value) -> Option<StackOutputs> {
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

    /// Marks as secret the outputs whose value holds a value `redactor` masks, or one of
    /// `large` (secret texts too long for a redactor, [`MAX_MASKED_SECRET`]); returns their
    /// names.
    pub fn mark_known_secrets(&mut self, redactor: &Redactor, large: &[String]) -> Vec<String> {
        let mut marked = Vec::new();
        for (name, value) in &self.values {
            if self.secret.contains(name) {
                continue;
            }
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if redactor.apply(&text) != text || large.iter().any(|l| text.contains(l.as_str())) {
                marked.push(name.clone());
            }
        }
        self.secret.extend(marked.iter().cloned());
        marked
    }

    /// Keeps the outputs the outputs Secret can hold within `budget` bytes
    /// ([`SECRET_BUDGET`]), in name order: each output that still fits is kept, so one too
    /// large does not push out the smaller ones after it. Returns what was left out, and why.
    pub fn fit(&mut self, budget: usize) -> LeftOut {
        let mut left = LeftOut {
            total: self.values.len(),
            budget,
            ..Default::default()
        };
        let mut used = 0usize;
        let mut keys = BTreeSet::new();
        self.values.retain(|name, value| {
            let key = sanitize_key(name);
            let why = if secret_key_problem(&key) {
                Some(Why::BadName)
            } else if keys.contains(&key) {
                Some(Why::SameKey)
            } else if used + secret_cost(&key, value) > budget {
                Some(Why::TooLarge)
            } else {
                None
            };
            match why {
                Some(why) => left.outputs.push((name.clone(), why)),
                None => {
                    used += secret_cost(&key, value);
                    keys.insert(key);
                }
            }
            why.is_none()
        });
        let values = &self.values;
        self.secret.retain(|name| values.contains_key(name));
        left.bytes = used;
        left
    }
}

/// Secret output texts longer than this are not given to the redactor: its automaton costs
/// time and memory far beyond their length (a 64 KiB value took 2.5 minutes and 90 MiB to
/// build), and the runner prints no output value after it has read them. They still mark the
/// outputs that repeat them as secret ([`StackOutputs::mark_known_secrets`]).
pub const MAX_MASKED_SECRET: usize = 4096;

/// What the outputs of one operation may take of the outputs Secret (see [`secret_cost`]):
/// Kubernetes refuses a Secret whose values pass 1 MiB, etcd an object over 1.5 MiB, and the
/// sealed log line that carries them should stay short enough for the operator's log tail.
pub const SECRET_BUDGET: usize = 960 * 1024;

/// What one output takes: its JSON as a JSON string (as the sealed payload holds it, escapes
/// included; never less than the Secret's value), its key three times (the data, the field
/// manager's list, the secret-keys annotation) and room for the framing.
fn secret_cost(key: &str, value: &Value) -> usize {
    let json = serde_json::to_string(value).unwrap_or_default();
    let quoted = serde_json::to_string(&json).map_or(json.len(), |q| q.len());
    quoted + 3 * key.len() + 32
}

/// Whether a sanitised name cannot be a Secret key (Kubernetes' `IsConfigMapKey`: at most 253
/// characters, not `.`, `..` or starting with `..`; the characters are already valid).
fn secret_key_problem(key: &str) -> bool {
    key.is_empty() || key.len() > 253 || key == "." || key.starts_with("..")
}

/// Why an output was left out of the outputs Secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// It did not fit in [`SECRET_BUDGET`] beside the outputs before it.
    TooLarge,
    /// Its name makes no Secret key.
    BadName,
    /// Its name makes the same Secret key as an output before it (`a/b` and `a_b`).
    SameKey,
}

/// The outputs left out of the outputs Secret ([`StackOutputs::fit`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Name and reason, in name order.
    pub outputs: Vec<(String, Why)>,
    /// How many outputs there were.
    pub total: usize,
    /// What the kept ones take of the budget.
    pub bytes: usize,
    /// The budget they were fitted in.
    pub budget: usize,
}

/// At most this many names of each kind are shown, each cut to [`NAME_SHOWN`] characters.
const NAMES_SHOWN: usize = 5;
const NAME_SHOWN: usize = 64;

impl LeftOut {
    /// A message saying what was left out and why (names only, never values), e.g. `2 of 10003
    /// outputs were left out of the outputs Secret: 2 over its 960 KiB ("big", "huge")`;
    /// `None` when nothing was.
    pub fn message(&self) -> Option<String> {
        if self.outputs.is_empty() {
            return None;
        }
        let group = |why: Why, what: &str| -> Option<String> {
            let names: Vec<&str> = self
                .outputs
                .iter()
                .filter(|(_, w)| *w == why)
                .map(|(n, _)| n.as_str())
                .collect();
            if names.is_empty() {
                return None;
            }
            let mut shown: Vec<String> = names
                .iter()
                .take(NAMES_SHOWN)
                .map(|n| format!("{:?}", n.chars().take(NAME_SHOWN).collect::<String>()))
                .collect();
            if names.len() > NAMES_SHOWN {
                shown.push(format!("and {} more", names.len() - NAMES_SHOWN));
            }
            Some(format!("{} {what} ({})", names.len(), shown.join(", ")))
        };
        let parts: Vec<String> = [
            group(
                Why::TooLarge,
                &format!("over its {} KiB", self.budget / 1024),
            ),
            group(Why::BadName, "whose name cannot be a Secret key"),
            group(Why::SameKey, "whose Secret key an output before it has"),
        ]
        .into_iter()
        .flatten()
        .collect();
        Some(format!(
            "{} of {} outputs were {}: {}",
            self.outputs.len(),
            self.total,
            pulumi_operator_api::sealed::OUTPUTS_LEFT_OUT,
            parts.join("; ")
        ))
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
        let logged = |text: &str| crate::eventlog::EventLog::from_text(text).outputs();
        let mut o = logged(log).unwrap();
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
        assert!(logged(r#"{"sequence":4,"summaryEvent":{"resourceChanges":{}}}"#).is_none());
        assert!(logged("").is_none());
        // A stack without outputs.
        let none = r#"{"resOutputsEvent":{"metadata":{"type":"pulumi:pulumi:Stack","new":{"outputs":{}}}}}"#;
        assert!(logged(none).unwrap().is_empty());
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
        assert_eq!(o.mark_known_secrets(&r, &[]), ["dsn", "nested"]);
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
    fn outputs_repeating_a_large_secret_become_secret() {
        let big = "k".repeat(MAX_MASKED_SECRET + 1);
        let masked = format!(r#"{{"copy": "x{big}y", "other": "z"}}"#);
        let mut o = StackOutputs::parse(masked.as_bytes(), masked.as_bytes()).unwrap();
        assert_eq!(o.mark_known_secrets(&Redactor::default(), &[big]), ["copy"]);
    }

    fn outputs(entries: &[(&str, Value)]) -> StackOutputs {
        StackOutputs {
            values: entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            secret: BTreeSet::new(),
        }
    }

    #[test]
    fn fitting_keeps_what_fits_in_name_order_and_says_what_it_left_out() {
        let small = |i: usize| (format!("o{i:05}"), json!(format!("value {i}")));
        let mut entries: Vec<(String, Value)> = (0..10_000).map(small).collect();
        entries.push(("big".into(), json!("b".repeat(SECRET_BUDGET))));
        entries.push(("a/b".into(), json!(1)));
        entries.push(("a_b".into(), json!(2)));
        entries.push(("..x".into(), json!(3)));
        entries.push(("y".repeat(254), json!(4)));
        entries.push((String::new(), json!(5)));
        let refs: Vec<(&str, Value)> = entries
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let mut o = outputs(&refs);
        o.secret.insert("big".into());
        o.secret.insert("o09999".into());
        let total = o.values.len();
        let left = o.fit(64 * 1024);
        assert_eq!(left.total, total);
        assert!(left.bytes <= 64 * 1024);
        // Every output kept is in the budget's bill; secret keys only of kept outputs.
        let p = payload(&o);
        let bill: usize = p.data.iter().map(|(k, v)| v.len() + 3 * k.len()).sum();
        assert!(bill <= 64 * 1024, "{bill}");
        assert!(p.secret_keys.is_empty(), "{:?}", p.secret_keys);
        assert_eq!(o.values.len() + left.outputs.len(), total);
        // In name order: the small ones up to some point, nothing after.
        let kept: Vec<&String> = o.values.keys().filter(|k| k.starts_with('o')).collect();
        assert_eq!(
            kept.last().map(|k| k.as_str()),
            Some(format!("o{:05}", kept.len() - 1).as_str())
        );
        assert_eq!(
            o.values["a/b"],
            json!(1),
            "the first of two names for key a_b"
        );
        let why = |name: &str| {
            left.outputs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, w)| *w)
        };
        assert_eq!(why("big"), Some(Why::TooLarge));
        assert_eq!(why("a_b"), Some(Why::SameKey));
        assert_eq!(why("..x"), Some(Why::BadName));
        assert_eq!(why(""), Some(Why::BadName));
        assert_eq!(why(&"y".repeat(254)), Some(Why::BadName));
        assert_eq!(why("o09999"), Some(Why::TooLarge));
        let m = left.message().unwrap();
        let too_large = left.outputs.len() - 4;
        assert!(
            m.starts_with(&format!(
                "{} of {total} outputs were left out of the outputs Secret: {too_large} over its 64 KiB (\"big\", \"o0",
                left.outputs.len()
            )),
            "{m}"
        );
        assert!(m.contains(&format!("and {} more)", too_large - 5)), "{m}");
        assert!(
            m.contains("; 3 whose name cannot be a Secret key (\"\", \"..x\", \"yyyy"),
            "{m}"
        );
        assert!(
            m.ends_with("; 1 whose Secret key an output before it has (\"a_b\")"),
            "{m}"
        );
        assert!(m.len() < 1024, "{}", m.len());
        // Nothing left out: no message, nothing changed.
        let mut few = outputs(&[("a", json!(1))]);
        assert_eq!(few.fit(SECRET_BUDGET).message(), None);
        assert_eq!(few.values.len(), 1);
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
