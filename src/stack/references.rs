//! The objects an operation's pod cannot start without (pure): the ServiceAccount it runs as,
//! and the ConfigMaps and Secrets its environment and volumes name. The Stack checks they exist
//! before it starts an operation, so a typo or a missing object is reported on the Stack at
//! once, by name, instead of as a pod that never starts.

use pulumi_operator_api::Workspace;
use std::collections::BTreeSet;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    ServiceAccount,
    ConfigMap,
    Secret,
}

impl Kind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::ServiceAccount => "ServiceAccount",
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }
}

/// One required object, and the key it must hold (for a single-key reference).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    pub kind: Kind,
    pub name: String,
    pub key: Option<String>,
}

/// Every non-optional object the Workspace's pods need, sorted and without duplicates.
pub fn required(ws: &Workspace) -> Vec<Reference> {
    let spec = &ws.spec;
    let mut out = BTreeSet::from([Reference {
        kind: Kind::ServiceAccount,
        name: spec
            .service_account_name
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| pulumi_operator_api::names::DEFAULT_SERVICE_ACCOUNT.to_string()),
        key: None,
    }]);
    env_references(ws, &mut out);
    volume_references(ws, &mut out);
    out.into_iter().collect()
}

fn reference(kind: Kind, name: &str, key: Option<&str>) -> Reference {
    Reference {
        kind,
        name: name.to_string(),
        key: key.map(str::to_string),
    }
}

/// The Secrets and ConfigMaps named by `env` (with their keys) and `envFrom`.
fn env_references(ws: &Workspace, out: &mut BTreeSet<Reference>) {
    let spec = &ws.spec;
    for from in spec
        .env
        .iter()
        .flatten()
        .filter_map(|e| e.value_from.as_ref())
    {
        if let Some(s) = from
            .secret_key_ref
            .as_ref()
            .filter(|s| s.optional != Some(true))
        {
            out.insert(reference(Kind::Secret, &s.name, Some(&s.key)));
        }
        if let Some(c) = from
            .config_map_key_ref
            .as_ref()
            .filter(|c| c.optional != Some(true))
        {
            out.insert(reference(Kind::ConfigMap, &c.name, Some(&c.key)));
        }
    }
    for e in spec.env_from.iter().flatten() {
        if let Some(c) = e
            .config_map_ref
            .as_ref()
            .filter(|c| c.optional != Some(true))
        {
            out.insert(reference(Kind::ConfigMap, &c.name, None));
        }
        if let Some(s) = e.secret_ref.as_ref().filter(|s| s.optional != Some(true)) {
            out.insert(reference(Kind::Secret, &s.name, None));
        }
    }
}

/// The ConfigMaps and Secrets the pod template's volumes mount.
fn volume_references(ws: &Workspace, out: &mut BTreeSet<Reference>) {
    let volumes = ws
        .spec
        .pod_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.get("volumes"))
        .and_then(|v| v.as_array());
    let optional = |o: &serde_json::Value| o.get("optional") == Some(&true.into());
    for v in volumes.into_iter().flatten() {
        let config_map = v.get("configMap").filter(|c| !optional(c));
        if let Some(name) = config_map
            .and_then(|c| c.get("name"))
            .and_then(|n| n.as_str())
        {
            out.insert(reference(Kind::ConfigMap, name, None));
        }
        let secret = v.get("secret").filter(|s| !optional(s));
        if let Some(name) = secret
            .and_then(|s| s.get("secretName"))
            .and_then(|n| n.as_str())
        {
            out.insert(reference(Kind::Secret, name, None));
        }
    }
}

/// What a missing reference means to the user.
pub fn missing_message(missing: &[(Reference, bool)], ns: &str) -> String {
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, object_exists)| match (&r.key, object_exists) {
            (Some(key), true) => format!("{} {:?} has no key {key:?}", r.kind.as_str(), r.name),
            _ => format!("{} {:?} not found", r.kind.as_str(), r.name),
        })
        .collect();
    format!(
        "the operation cannot start: {} in namespace {ns}; it starts once they exist (checked every 30s)",
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn everything_a_pod_needs_is_listed_once_optional_ones_not_at_all() {
        let ws: Workspace = serde_json::from_value(json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "s"},
            "spec": {
                "serviceAccountName": "deployer",
                "env": [
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "maybe", "key": "k", "optional": true}}},
                    {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "region"}}}
                ],
                "envFrom": [{"configMapRef": {"name": "env-cm"}}, {"secretRef": {"name": "env-secret"}}],
                "podTemplate": {"spec": {"volumes": [
                    {"name": "configmap-cfg", "configMap": {"name": "cfg"}},
                    {"name": "secret-creds", "secret": {"secretName": "creds"}},
                    {"name": "opt", "secret": {"secretName": "opt", "optional": true}}
                ]}}
            }
        }))
        .unwrap();
        let refs: Vec<(Kind, String, Option<String>)> = required(&ws)
            .into_iter()
            .map(|r| (r.kind, r.name, r.key))
            .collect();
        assert_eq!(
            refs,
            vec![
                (Kind::ServiceAccount, "deployer".into(), None),
                (Kind::ConfigMap, "cfg".into(), None),
                (Kind::ConfigMap, "env-cm".into(), None),
                (Kind::ConfigMap, "settings".into(), Some("region".into())),
                (Kind::Secret, "creds".into(), None),
                (Kind::Secret, "creds".into(), Some("token".into())),
                (Kind::Secret, "env-secret".into(), None),
            ]
        );
    }

    #[test]
    fn the_default_service_account_is_required_too() {
        let ws: Workspace = serde_json::from_value(json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Workspace",
            "metadata": {"name": "s"}, "spec": {}
        }))
        .unwrap();
        assert_eq!(
            required(&ws),
            vec![Reference {
                kind: Kind::ServiceAccount,
                name: "default".into(),
                key: None
            }]
        );
        let m = missing_message(
            &[
                (
                    Reference {
                        kind: Kind::ConfigMap,
                        name: "cfg".into(),
                        key: None,
                    },
                    false,
                ),
                (
                    Reference {
                        kind: Kind::Secret,
                        name: "creds".into(),
                        key: Some("token".into()),
                    },
                    true,
                ),
            ],
            "apps",
        );
        assert_eq!(
            m,
            "the operation cannot start: ConfigMap \"cfg\" not found, Secret \"creds\" has no key \"token\" in namespace apps; it starts once they exist (checked every 30s)"
        );
    }
}
