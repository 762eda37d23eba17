//! Volumes materialised as directories under the pod's state directory, and the bind mounts
//! that put them at their real `mountPath` inside each container's private mount namespace.

use crate::env::{field_path, EnvSource};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount,
};
use kube::api::{Api, PostParams};
use kube::Client;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Secrets and ConfigMaps a pod refers to (env and volumes), fetched once per attempt; `None`
/// records "not found".
#[derive(Default)]
pub struct Objects {
    pub secrets: HashMap<String, Option<Secret>>,
    pub config_maps: HashMap<String, Option<ConfigMap>>,
}

impl EnvSource for Objects {
    fn secret(&self, name: &str) -> Option<&Secret> {
        self.secrets.get(name).and_then(|s| s.as_ref())
    }
    fn config_map(&self, name: &str) -> Option<&ConfigMap> {
        self.config_maps.get(name).and_then(|c| c.as_ref())
    }
}

impl Objects {
    pub async fn fetch(client: &Client, pod: &Pod) -> Result<Objects, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let (secret_names, cm_names) = referenced(pod);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let mut out = Objects::default();
        for name in secret_names {
            let got = secrets
                .get_opt(&name)
                .await
                .map_err(|e| format!("get secret {name}: {e}"))?;
            out.secrets.insert(name, got);
        }
        for name in cm_names {
            let got = cms
                .get_opt(&name)
                .await
                .map_err(|e| format!("get configmap {name}: {e}"))?;
            out.config_maps.insert(name, got);
        }
        Ok(out)
    }
}

fn referenced(pod: &Pod) -> (HashSet<String>, HashSet<String>) {
    let mut secrets = HashSet::new();
    let mut cms = HashSet::new();
    let Some(spec) = &pod.spec else {
        return (secrets, cms);
    };
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter());
    for c in containers {
        for from in c.env_from.iter().flatten() {
            if let Some(r) = &from.secret_ref {
                secrets.insert(r.name.clone());
            }
            if let Some(r) = &from.config_map_ref {
                cms.insert(r.name.clone());
            }
        }
        for var in c.env.iter().flatten() {
            if let Some(from) = &var.value_from {
                if let Some(r) = &from.secret_key_ref {
                    secrets.insert(r.name.clone());
                }
                if let Some(r) = &from.config_map_key_ref {
                    cms.insert(r.name.clone());
                }
            }
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            secrets.insert(s);
        }
        if let Some(c) = &v.config_map {
            cms.insert(c.name.clone());
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(s) = &src.secret {
                secrets.insert(s.name.clone());
            }
            if let Some(c) = &src.config_map {
                cms.insert(c.name.clone());
            }
        }
    }
    (secrets, cms)
}

/// Creates every volume of the pod under `pod_dir/volumes/<name>` and returns name → host path.
/// The error is the message the kubelet would put in a `FailedMount` event.
pub async fn prepare(
    client: &Client,
    pod: &Pod,
    objects: &Objects,
    pod_dir: &Path,
    state_dir: &Path,
    pod_ip: &str,
    host_ip: &str,
) -> Result<HashMap<String, PathBuf>, String> {
    let mut out = HashMap::new();
    let Some(spec) = &pod.spec else {
        return Ok(out);
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    for v in spec.volumes.iter().flatten() {
        let dir = pod_dir.join("volumes").join(&v.name);
        let io = |e: std::io::Error| format!("volume {}: {e}", v.name);
        if v.empty_dir.is_some() {
            std::fs::create_dir_all(&dir).map_err(io)?;
            // emptyDir is world-writable, as the kubelet makes it.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
            out.insert(v.name.clone(), dir);
        } else if let Some(hp) = &v.host_path {
            let path = PathBuf::from(&hp.path);
            let kind = hp.type_.as_deref().unwrap_or("");
            if kind == "DirectoryOrCreate" {
                std::fs::create_dir_all(&path).map_err(io)?;
            } else if kind == "FileOrCreate" && !path.exists() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(io)?;
                }
                std::fs::write(&path, b"").map_err(io)?;
            } else if !kind.is_empty() && !path.exists() {
                return Err(format!(
                    "hostPath type check failed: {} is not a {kind}",
                    hp.path
                ));
            }
            out.insert(v.name.clone(), path);
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let mode = s.default_mode.unwrap_or(0o644);
            fresh_dir(&dir).map_err(io)?;
            match objects.secret(&name) {
                Some(secret) => write_keys(
                    &dir,
                    &secret_data(secret),
                    s.items.as_deref(),
                    mode,
                    s.optional,
                )?,
                None if s.optional == Some(true) => {}
                None => {
                    return Err(format!(
                        "MountVolume.SetUp failed for volume \"{}\" : secret \"{name}\" not found",
                        v.name
                    ))
                }
            }
            out.insert(v.name.clone(), dir);
        } else if let Some(c) = &v.config_map {
            let mode = c.default_mode.unwrap_or(0o644);
            fresh_dir(&dir).map_err(io)?;
            match objects.config_map(&c.name) {
                Some(cm) => write_keys(
                    &dir,
                    &config_map_data(cm),
                    c.items.as_deref(),
                    mode,
                    c.optional,
                )?,
                None if c.optional == Some(true) => {}
                None => {
                    return Err(format!(
                        "MountVolume.SetUp failed for volume \"{}\" : configmap \"{}\" not found",
                        v.name, c.name
                    ))
                }
            }
            out.insert(v.name.clone(), dir);
        } else if let Some(d) = &v.downward_api {
            fresh_dir(&dir).map_err(io)?;
            let mode = d.default_mode.unwrap_or(0o644);
            write_downward(&dir, pod, d.items.iter().flatten(), mode, pod_ip, host_ip)?;
            out.insert(v.name.clone(), dir);
        } else if let Some(p) = &v.projected {
            fresh_dir(&dir).map_err(io)?;
            let mode = p.default_mode.unwrap_or(0o644);
            for src in p.sources.iter().flatten() {
                if let Some(s) = &src.secret {
                    match objects.secret(&s.name) {
                        Some(secret) => write_keys(
                            &dir,
                            &secret_data(secret),
                            s.items.as_deref(),
                            mode,
                            s.optional,
                        )?,
                        None if s.optional == Some(true) => {}
                        None => return Err(format!("secret \"{}\" not found", s.name)),
                    }
                }
                if let Some(c) = &src.config_map {
                    match objects.config_map(&c.name) {
                        Some(cm) => write_keys(
                            &dir,
                            &config_map_data(cm),
                            c.items.as_deref(),
                            mode,
                            c.optional,
                        )?,
                        None if c.optional == Some(true) => {}
                        None => return Err(format!("configmap \"{}\" not found", c.name)),
                    }
                }
                if let Some(d) = &src.downward_api {
                    write_downward(&dir, pod, d.items.iter().flatten(), mode, pod_ip, host_ip)?;
                }
                if let Some(t) = &src.service_account_token {
                    let token =
                        request_token(client, pod, t.audience.clone(), t.expiration_seconds)
                            .await?;
                    write_file(&dir.join(&t.path), token.as_bytes(), mode).map_err(io)?;
                }
            }
            out.insert(v.name.clone(), dir);
        } else if let Some(claim) = &v.persistent_volume_claim {
            // Stand-in for a bound PersistentVolume: one directory per claim that outlives pods
            // (the hostPath of the volume pvc.rs provisions for the claim).
            let dir = crate::pvc::claim_dir(state_dir, ns, &claim.claim_name);
            std::fs::create_dir_all(&dir).map_err(io)?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(io)?;
            out.insert(v.name.clone(), dir);
        } else {
            return Err(format!(
                "volume {}: this volume type is not supported by the test node agent",
                v.name
            ));
        }
    }
    Ok(out)
}

fn fresh_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

fn config_map_data(c: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = c
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in c.binary_data.iter().flatten() {
        out.insert(k.clone(), v.0.clone());
    }
    out
}

fn write_keys(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: i32,
    optional: Option<bool>,
) -> Result<(), String> {
    let err = |e: std::io::Error| e.to_string();
    match items {
        None => {
            for (k, v) in data {
                write_file(&dir.join(k), v, mode).map_err(err)?;
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => write_file(&dir.join(&item.path), v, item.mode.unwrap_or(mode))
                        .map_err(err)?,
                    None if optional == Some(true) => {}
                    None => return Err(format!("key {} not found", item.key)),
                }
            }
        }
    }
    Ok(())
}

fn write_downward<'a>(
    dir: &Path,
    pod: &Pod,
    items: impl Iterator<Item = &'a DownwardAPIVolumeFile>,
    mode: i32,
    pod_ip: &str,
    host_ip: &str,
) -> Result<(), String> {
    for item in items {
        let value = match &item.field_ref {
            Some(f) => field_path(pod, &f.field_path, pod_ip, host_ip)?,
            None => String::new(),
        };
        write_file(
            &dir.join(&item.path),
            value.as_bytes(),
            item.mode.unwrap_or(mode),
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn write_file(path: &Path, data: &[u8], mode: i32) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, data)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode as u32 & 0o7777))
}

async fn request_token(
    client: &Client,
    pod: &Pod,
    audience: Option<String>,
    expiration: Option<i64>,
) -> Result<String, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.into_iter().collect(),
            expiration_seconds: Some(expiration.unwrap_or(3600)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    let got: TokenRequest = api
        .create_subresource("token", &sa, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("TokenRequest for serviceaccount {ns}/{sa}: {e}"))?;
    got.status
        .map(|s| s.token)
        .ok_or_else(|| format!("TokenRequest for serviceaccount {ns}/{sa} returned no token"))
}

/// One bind mount inside a container's mount namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// The container's `volumeMounts` as bind mounts (with `subPath` and `readOnly`).
pub fn mounts(
    container: &Container,
    volumes: &HashMap<String, PathBuf>,
) -> Result<Vec<Mount>, String> {
    let mut out = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        let Some(base) = volumes.get(&m.name) else {
            return Err(format!(
                "volumeMount {}: no volume named {}",
                m.mount_path, m.name
            ));
        };
        let mut source = base.clone();
        if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            if sub.split('/').any(|c| c == "..") || sub.starts_with('/') {
                return Err(format!(
                    "subPath {sub:?} must be a relative path without '..'"
                ));
            }
            source = source.join(sub);
            if !source.exists() {
                // The kubelet creates a missing subPath as a directory.
                std::fs::create_dir_all(&source).map_err(|e| e.to_string())?;
                let _ = std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o777));
            }
        }
        out.push(Mount {
            source,
            target: PathBuf::from(&m.mount_path),
            read_only: m.read_only == Some(true),
        });
    }
    Ok(out)
}
