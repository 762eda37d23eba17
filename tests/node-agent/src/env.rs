//! Container environment: `env` (value, valueFrom), `envFrom`, and `$(VAR)` expansion, with
//! the kubelet's error when a referenced Secret or ConfigMap is missing.

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use std::collections::BTreeMap;

/// The objects a container's environment may refer to, fetched beforehand.
pub trait EnvSource {
    fn secret(&self, name: &str) -> Option<&Secret>;
    fn config_map(&self, name: &str) -> Option<&ConfigMap>;
}

/// Resolves the environment in the order Kubernetes applies it: `envFrom` first, then `env`,
/// where later values win and `$(NAME)` refers to values defined earlier.
/// The error is a `CreateContainerConfigError` message.
pub fn resolve(
    pod: &Pod,
    container: &Container,
    pod_ip: &str,
    host_ip: &str,
    sources: &dyn EnvSource,
) -> Result<Vec<(String, String)>, String> {
    let mut vars: Vec<(String, String)> = Vec::new();
    let set = |vars: &mut Vec<(String, String)>, k: String, v: String| {
        if let Some(slot) = vars.iter_mut().find(|(n, _)| *n == k) {
            slot.1 = v;
        } else {
            vars.push((k, v));
        }
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.secret_ref {
            match sources.secret(&r.name) {
                Some(s) => {
                    for (k, v) in s.data.iter().flatten() {
                        set(
                            &mut vars,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into(),
                        );
                    }
                    for (k, v) in s.string_data.iter().flatten() {
                        set(&mut vars, format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("secret \"{}\" not found", r.name)),
            }
        }
        if let Some(r) = &from.config_map_ref {
            match sources.config_map(&r.name) {
                Some(c) => {
                    for (k, v) in c.data.iter().flatten() {
                        set(&mut vars, format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(format!("configmap \"{}\" not found", r.name)),
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(from) = &var.value_from {
            if let Some(r) = &from.secret_key_ref {
                let optional = r.optional == Some(true);
                match sources.secret(&r.name) {
                    Some(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(String::from_utf8_lossy(&v.0).into_owned()),
                        None if optional => None,
                        None => {
                            return Err(format!(
                                "couldn't find key {} in Secret {}/{}",
                                r.key,
                                namespace(pod),
                                r.name
                            ))
                        }
                    },
                    None if optional => None,
                    None => return Err(format!("secret \"{}\" not found", r.name)),
                }
            } else if let Some(r) = &from.config_map_key_ref {
                let optional = r.optional == Some(true);
                match sources.config_map(&r.name) {
                    Some(c) => match c.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if optional => None,
                        None => {
                            return Err(format!(
                                "couldn't find key {} in ConfigMap {}/{}",
                                r.key,
                                namespace(pod),
                                r.name
                            ))
                        }
                    },
                    None if optional => None,
                    None => return Err(format!("configmap \"{}\" not found", r.name)),
                }
            } else if let Some(f) = &from.field_ref {
                Some(field_path(pod, &f.field_path, pod_ip, host_ip)?)
            } else {
                from.resource_field_ref
                    .as_ref()
                    .map(|r| resource_field(container, &r.resource))
            }
        } else {
            Some(expand(var.value.as_deref().unwrap_or(""), &vars))
        };
        if let Some(value) = value {
            set(&mut vars, var.name.clone(), value);
        }
    }
    Ok(vars)
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// The downward API's field paths (env `fieldRef` and `downwardAPI` volumes).
pub fn field_path(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Result<String, String> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| -> Option<String> {
        let key = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => namespace(pod).to_string(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "status.podIP" => pod_ip.to_string(),
        "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" => host_ip.to_string(),
        "metadata.labels" => format_map(m.labels.as_ref()),
        "metadata.annotations" => format_map(m.annotations.as_ref()),
        other => keyed("metadata.labels", m.labels.as_ref())
            .or_else(|| keyed("metadata.annotations", m.annotations.as_ref()))
            .ok_or_else(|| format!("unsupported fieldPath {other}"))?,
    })
}

fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.iter()
        .flat_map(|m| m.iter())
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn resource_field(container: &Container, resource: &str) -> String {
    let (kind, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let res = container.resources.as_ref();
    let q = match kind {
        "requests" => res
            .and_then(|r| r.requests.as_ref())
            .and_then(|m| m.get(name)),
        _ => res
            .and_then(|r| r.limits.as_ref())
            .and_then(|m| m.get(name)),
    };
    q.map(|q| q.0.clone()).unwrap_or_else(|| "0".into())
}

/// Kubernetes `$(VAR)` expansion: `$$` escapes, undefined references stay as written.
pub fn expand(input: &str, vars: &[(String, String)]) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match vars.iter().rev().find(|(k, _)| k == name) {
                        Some((_, v)) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, EnvVarSource, SecretKeySelector};
    use k8s_openapi::ByteString;

    struct Fake(Vec<Secret>);
    impl EnvSource for Fake {
        fn secret(&self, name: &str) -> Option<&Secret> {
            self.0
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(name))
        }
        fn config_map(&self, _: &str) -> Option<&ConfigMap> {
            None
        }
    }

    fn secret(name: &str, k: &str, v: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.data = Some([(k.to_string(), ByteString(v.as_bytes().to_vec()))].into());
        s
    }

    #[test]
    fn expand_handles_refs_escapes_and_unknowns() {
        let vars = vec![("A".to_string(), "1".to_string())];
        assert_eq!(expand("x$(A)y", &vars), "x1y");
        assert_eq!(expand("$$(A)", &vars), "$(A)");
        assert_eq!(expand("$(B)", &vars), "$(B)");
        assert_eq!(expand("$A $(", &vars), "$A $(");
    }

    #[test]
    fn resolves_secret_refs_env_from_and_order() {
        let pod = Pod::default();
        let container = Container {
            env_from: Some(vec![EnvFromSource {
                prefix: Some("P_".into()),
                secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
                    name: "s".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            env: Some(vec![
                EnvVar {
                    name: "X".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "s".into(),
                            key: "k".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                EnvVar {
                    name: "Y".into(),
                    value: Some("[$(X)]".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let got = resolve(
            &pod,
            &container,
            "127.1.0.1",
            "127.0.0.1",
            &Fake(vec![secret("s", "k", "v")]),
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("P_k".to_string(), "v".to_string()),
                ("X".to_string(), "v".to_string()),
                ("Y".to_string(), "[v]".to_string())
            ]
        );
        let err = resolve(&pod, &container, "", "", &Fake(vec![])).unwrap_err();
        assert_eq!(err, "secret \"s\" not found");
    }
}
