//! The state backend: backend URL selection, the DIY (file) layout under `.pulumi/`, stack
//! checkpoints, history, locks, and the selected stack in `$PULUMI_HOME/workspaces/`.
//!
//! Layout (as the real DIY backend in project mode, `meta.yaml` version 1):
//! ```text
//! <root>/.pulumi/meta.yaml
//! <root>/.pulumi/stacks/<project>/<stack>.json                       checkpoint
//! <root>/.pulumi/history/<project>/<stack>/<stack>-<unixnano>.history.json
//! <root>/.pulumi/history/<project>/<stack>/<stack>-<unixnano>.checkpoint.json
//! <root>/.pulumi/locks/organization/<project>/<stack>/<uuid>.json    lock while an operation runs
//! ```

use crate::crypto::Secrets;
use crate::project::Project;
use crate::util::{self, exit, Failure, Res};
use crate::value::Val;
use serde_json::{json, Value as J};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const ACCESS_TOKEN_MISSING: &str =
    "PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions";
pub const CONFLICT_409: &str = "[409] Conflict: Another update is currently in progress.\nTo learn more about possible reasons and resolution, visit https://www.pulumi.com/docs/support/troubleshooting/common-issues/update-conflicts/";

#[derive(Clone, Debug)]
pub struct Backend {
    /// The backend URL as configured (e.g. `file:///tmp/state`, `https://api.pulumi.com`).
    pub url: String,
    /// The directory holding `.pulumi/`.
    pub root: PathBuf,
    /// A simulated Pulumi Cloud backend (`PULUMI_STANDIN_CLOUD_DIR`): Cloud-style messages,
    /// permalinks and the 409 conflict text, stored like the file backend.
    pub cloud: bool,
}

pub fn pulumi_home() -> PathBuf {
    match std::env::var("PULUMI_HOME") {
        Ok(h) if !h.is_empty() => PathBuf::from(h),
        _ => util::home_dir().join(".pulumi"),
    }
}

fn credentials() -> J {
    std::fs::read_to_string(pulumi_home().join("credentials.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(J::Null)
}

/// The backend URL by precedence: env > `backend.url` in Pulumi.yaml > stored credentials > Cloud.
pub fn backend_url(project: Option<&Project>) -> String {
    if let Ok(u) = std::env::var("PULUMI_BACKEND_URL") {
        if !u.is_empty() {
            return u;
        }
    }
    if let Some(u) = project.and_then(|p| p.backend_url.clone()) {
        return u;
    }
    if let Some(u) = credentials().get("current").and_then(J::as_str) {
        if !u.is_empty() {
            return u.to_string();
        }
    }
    "https://api.pulumi.com".to_string()
}

pub fn file_root(url: &str) -> Res<PathBuf> {
    let rest = url.trim_start_matches("file://");
    let rest = rest.split('?').next().unwrap_or_default();
    if rest.is_empty() {
        return util::err(format!(
            "could not determine the local state path from '{url}'"
        ));
    }
    let p = if rest == "~" {
        util::home_dir()
    } else if let Some(r) = rest.strip_prefix("~/") {
        util::home_dir().join(r)
    } else {
        PathBuf::from(rest)
    };
    Ok(std::path::absolute(&p).unwrap_or(p))
}

pub fn open_backend(project: Option<&Project>) -> Res<Backend> {
    let url = backend_url(project);
    if url.starts_with("file://") {
        return Ok(Backend {
            root: file_root(&url)?,
            url: url.trim_end_matches('/').to_string(),
            cloud: false,
        });
    }
    for scheme in ["s3://", "gs://", "azblob://", "postgres://"] {
        if url.starts_with(scheme) {
            return util::err(format!(
                "unable to open bucket {url}: this Pulumi CLI test stand-in has no driver for '{}' (only file:// backends are supported)",
                scheme.trim_end_matches("://")
            ));
        }
    }
    // Anything else is a Pulumi Cloud URL.
    let token = std::env::var("PULUMI_ACCESS_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| {
            credentials()
                .get("accessTokens")
                .and_then(|t| t.get(&url))
                .and_then(J::as_str)
                .map(str::to_string)
        });
    if token.is_none() {
        return Err(Failure::new(exit::AUTHENTICATION, ACCESS_TOKEN_MISSING));
    }
    if let Ok(dir) = std::env::var("PULUMI_STANDIN_CLOUD_DIR") {
        if !dir.is_empty() {
            return Ok(Backend {
                url: url.trim_end_matches('/').to_string(),
                root: PathBuf::from(dir),
                cloud: true,
            });
        }
    }
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or(&url)
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    util::err(format!(
        "problem logging in: getting user info from {url}: performing HTTP request: Get \"{url}/api/user\": dial tcp: lookup {host}: no such host"
    ))
}

/// A parsed stack reference: `stack`, `project/stack` or `org/project/stack`.
pub fn parse_stack_ref(r: &str, project: &str) -> Res<String> {
    let parts: Vec<&str> = r.split('/').collect();
    let name = match parts.as_slice() {
        [s] => *s,
        [p, s] | [_, p, s] => {
            if *p != project {
                return util::err(format!(
                    "a stack reference's project must match the current project: '{p}' is not '{project}'"
                ));
            }
            *s
        }
        _ => return util::err(format!("could not parse stack reference '{r}'")),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        return util::err(format!(
            "stack names may only contain alphanumeric, hyphens, underscores, or periods: '{name}'"
        ));
    }
    Ok(name.to_string())
}

impl Backend {
    pub fn dir(&self) -> PathBuf {
        self.root.join(".pulumi")
    }
    pub fn stack_path(&self, project: &str, stack: &str) -> PathBuf {
        self.dir()
            .join("stacks")
            .join(project)
            .join(format!("{stack}.json"))
    }
    pub fn history_dir(&self, project: &str, stack: &str) -> PathBuf {
        self.dir().join("history").join(project).join(stack)
    }
    pub fn lock_dir(&self, project: &str, stack: &str) -> PathBuf {
        self.dir()
            .join("locks")
            .join("organization")
            .join(project)
            .join(stack)
    }
    pub fn stack_exists(&self, project: &str, stack: &str) -> bool {
        self.stack_path(project, stack).is_file()
    }
    /// How a stack is named in messages: `dev` on file backends, `org/project/stack` on Cloud.
    pub fn display_ref(&self, project: &str, stack: &str) -> String {
        if self.cloud {
            format!("organization/{project}/{stack}")
        } else {
            stack.to_string()
        }
    }
    pub fn console_url(&self, project: &str, stack: &str) -> String {
        let base = self
            .url
            .replace("://api.", "://app.")
            .trim_end_matches('/')
            .to_string();
        format!("{base}/organization/{project}/{stack}")
    }

    pub fn list_stacks(&self, project: &str) -> Res<Vec<String>> {
        let dir = self.dir().join("stacks").join(project);
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if let Some(s) = n.strip_suffix(".json") {
                    out.push(s.to_string());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    pub fn create_stack(&self, project: &str, stack: &str) -> Res<()> {
        std::fs::create_dir_all(self.dir())?;
        let meta = self.dir().join("meta.yaml");
        if !meta.exists() {
            std::fs::write(&meta, "version: 1\n")?;
        }
        let chk = Checkpoint {
            stack: format!("organization/{project}/{stack}"),
            latest: None,
        };
        self.save_checkpoint(project, stack, &chk)
    }

    pub fn load_checkpoint(&self, project: &str, stack: &str) -> Res<Checkpoint> {
        let p = self.stack_path(project, stack);
        let text = std::fs::read_to_string(&p)?;
        let j: J = serde_json::from_str(&text).map_err(|e| {
            Failure::new(
                exit::ERROR,
                format!("could not read deployment file {}: {e}", p.display()),
            )
        })?;
        let c = j.get("checkpoint").cloned().unwrap_or(J::Null);
        Ok(Checkpoint {
            stack: c
                .get("stack")
                .and_then(J::as_str)
                .unwrap_or_default()
                .to_string(),
            latest: c.get("latest").filter(|l| !l.is_null()).cloned(),
        })
    }

    pub fn save_checkpoint(&self, project: &str, stack: &str, chk: &Checkpoint) -> Res<()> {
        let p = self.stack_path(project, stack);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        let mut c = json!({ "stack": chk.stack });
        c["latest"] = chk.latest.clone().unwrap_or(J::Null);
        let doc = json!({ "version": 3, "checkpoint": c });
        let tmp = p.with_extension(format!("json.tmp{}", std::process::id()));
        std::fs::write(&tmp, util::json_pretty(&doc, 4))?;
        std::fs::rename(&tmp, &p)?;
        Ok(())
    }

    pub fn remove_stack(&self, project: &str, stack: &str) -> Res<()> {
        let p = self.stack_path(project, stack);
        std::fs::remove_file(&p)?;
        let _ = std::fs::remove_dir_all(self.history_dir(project, stack));
        Ok(())
    }

    // ---- locks ----

    fn lock_files(&self, project: &str, stack: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.lock_dir(project, stack))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Fails with the DIY lock text (or the Cloud 409) when another operation holds the stack.
    pub fn check_lock(&self, project: &str, stack: &str, own: Option<&Path>) -> Res<()> {
        let others: Vec<PathBuf> = self
            .lock_files(project, stack)
            .into_iter()
            .filter(|p| Some(p.as_path()) != own)
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        if self.cloud {
            return util::err(CONFLICT_409);
        }
        let mut msg = format!(
            "the stack is currently locked by {} lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`.",
            others.len()
        );
        for p in &others {
            let content: J = std::fs::read_to_string(p)
                .ok()
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or(J::Null);
            let rel = p.strip_prefix(&self.root).unwrap_or(p);
            let ts = content
                .get("timestamp")
                .and_then(J::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| util::format_rfc3339(t.timestamp()))
                .unwrap_or_default();
            msg.push_str(&format!(
                "\n  {}/{}: created by {}@{} (pid {}) at {}",
                self.url,
                rel.display(),
                content.get("username").and_then(J::as_str).unwrap_or(""),
                content.get("hostname").and_then(J::as_str).unwrap_or(""),
                content.get("pid").and_then(J::as_i64).unwrap_or(0),
                ts
            ));
        }
        util::err(msg)
    }

    /// Takes the stack lock; the returned path must be passed to [`Backend::unlock`].
    pub fn lock(&self, project: &str, stack: &str) -> Res<PathBuf> {
        self.check_lock(project, stack, None)?;
        let dir = self.lock_dir(project, stack);
        std::fs::create_dir_all(&dir)?;
        let p = dir.join(format!("{}.json", util::uuid()));
        let content = json!({
            "pid": std::process::id(),
            "username": util::user_name(),
            "hostname": util::host_name(),
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        });
        std::fs::write(&p, serde_json::to_string(&content)?)?;
        if let Err(e) = self.check_lock(project, stack, Some(&p)) {
            let _ = std::fs::remove_file(&p);
            return Err(e);
        }
        Ok(p)
    }

    pub fn unlock(&self, lock: &Path) {
        let _ = std::fs::remove_file(lock);
    }

    /// Deletes every lock of the stack (`pulumi cancel` on a DIY backend).
    pub fn cancel(&self, project: &str, stack: &str) -> usize {
        let files = self.lock_files(project, stack);
        for f in &files {
            let _ = std::fs::remove_file(f);
        }
        files.len()
    }

    // ---- history ----

    pub fn add_history(&self, project: &str, stack: &str, info: &J, chk: &Checkpoint) -> Res<()> {
        let dir = self.history_dir(project, stack);
        std::fs::create_dir_all(&dir)?;
        let nanos = chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default();
        std::fs::write(
            dir.join(format!("{stack}-{nanos}.history.json")),
            util::json_pretty(info, 4),
        )?;
        let mut c = json!({ "stack": chk.stack });
        c["latest"] = chk.latest.clone().unwrap_or(J::Null);
        std::fs::write(
            dir.join(format!("{stack}-{nanos}.checkpoint.json")),
            util::json_pretty(&json!({"version": 3, "checkpoint": c}), 4),
        )?;
        Ok(())
    }

    /// History entries, newest first, each with its version number (1 = oldest).
    pub fn history(&self, project: &str, stack: &str) -> Vec<(usize, J)> {
        let dir = self.history_dir(project, stack);
        let mut files: Vec<(i128, PathBuf)> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        let stem = n.strip_suffix(".history.json")?;
                        let ts = stem.rsplit('-').next()?.parse::<i128>().ok()?;
                        Some((ts, e.path()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let mut out: Vec<(usize, J)> = files
            .iter()
            .enumerate()
            .filter_map(|(i, (_, p))| {
                let j = serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()?;
                Some((i + 1, j))
            })
            .collect();
        out.reverse();
        out
    }
}

/// The stack's checkpoint file: the latest deployment (raw JSON), `None` before the first update.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub stack: String,
    pub latest: Option<J>,
}

impl Checkpoint {
    pub fn salt(&self) -> Option<String> {
        let sp = self.latest.as_ref()?.get("secrets_providers")?;
        if sp.get("type").and_then(J::as_str) != Some("passphrase") {
            return None;
        }
        sp.get("state")?.get("salt")?.as_str().map(str::to_string)
    }

    pub fn snapshot(&self, secrets: Option<&Secrets>) -> Res<Snapshot> {
        match &self.latest {
            None => Ok(Snapshot::default()),
            Some(d) => Snapshot::from_json(d, secrets),
        }
    }

    pub fn resource_count(&self) -> usize {
        self.latest
            .as_ref()
            .and_then(|d| d.get("resources"))
            .and_then(J::as_array)
            .map(|a| a.len())
            .unwrap_or(0)
    }

    pub fn pending_count(&self) -> usize {
        self.latest
            .as_ref()
            .and_then(|d| d.get("pending_operations"))
            .and_then(J::as_array)
            .map(|a| a.len())
            .unwrap_or(0)
    }

    pub fn last_update_time(&self) -> Option<i64> {
        let t = self
            .latest
            .as_ref()?
            .get("manifest")?
            .get("time")?
            .as_str()?;
        chrono::DateTime::parse_from_rfc3339(t)
            .ok()
            .map(|t| t.timestamp())
    }
}

/// One resource in state.
#[derive(Clone, Debug, PartialEq)]
pub struct ResState {
    pub urn: String,
    pub typ: String,
    pub custom: bool,
    pub id: String,
    pub parent: String,
    pub protect: bool,
    pub retain_on_delete: bool,
    pub inputs: BTreeMap<String, Val>,
    pub outputs: BTreeMap<String, Val>,
    pub dependencies: Vec<String>,
    pub created: String,
    pub modified: String,
}

impl ResState {
    pub fn name(&self) -> &str {
        self.urn.rsplit("::").next().unwrap_or_default()
    }

    pub fn to_json(&self, secrets: &Secrets) -> Res<J> {
        let mut o = serde_json::Map::new();
        o.insert("urn".into(), J::String(self.urn.clone()));
        o.insert("custom".into(), J::Bool(self.custom));
        if !self.id.is_empty() {
            o.insert("id".into(), J::String(self.id.clone()));
        }
        o.insert("type".into(), J::String(self.typ.clone()));
        o.insert("inputs".into(), map_to_state(&self.inputs, secrets)?);
        o.insert("outputs".into(), map_to_state(&self.outputs, secrets)?);
        if !self.parent.is_empty() {
            o.insert("parent".into(), J::String(self.parent.clone()));
        }
        if self.protect {
            o.insert("protect".into(), J::Bool(true));
        }
        if self.retain_on_delete {
            o.insert("retainOnDelete".into(), J::Bool(true));
        }
        if !self.dependencies.is_empty() {
            o.insert("dependencies".into(), json!(self.dependencies));
        }
        o.insert("created".into(), J::String(self.created.clone()));
        o.insert("modified".into(), J::String(self.modified.clone()));
        Ok(J::Object(o))
    }

    pub fn from_json(j: &J, secrets: Option<&Secrets>) -> Res<ResState> {
        let s = |k: &str| j.get(k).and_then(J::as_str).unwrap_or_default().to_string();
        Ok(ResState {
            urn: s("urn"),
            typ: s("type"),
            custom: j.get("custom").and_then(J::as_bool).unwrap_or(false),
            id: s("id"),
            parent: s("parent"),
            protect: j.get("protect").and_then(J::as_bool).unwrap_or(false),
            retain_on_delete: j
                .get("retainOnDelete")
                .and_then(J::as_bool)
                .unwrap_or(false),
            inputs: map_from_state(j.get("inputs"), secrets)?,
            outputs: map_from_state(j.get("outputs"), secrets)?,
            dependencies: j
                .get("dependencies")
                .and_then(J::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            created: s("created"),
            modified: s("modified"),
        })
    }
}

fn map_to_state(m: &BTreeMap<String, Val>, secrets: &Secrets) -> Res<J> {
    let mut o = serde_json::Map::new();
    for (k, v) in m {
        o.insert(k.clone(), v.to_state(secrets)?);
    }
    Ok(J::Object(o))
}

fn map_from_state(j: Option<&J>, secrets: Option<&Secrets>) -> Res<BTreeMap<String, Val>> {
    let mut out = BTreeMap::new();
    if let Some(J::Object(o)) = j {
        for (k, v) in o {
            out.insert(k.clone(), Val::from_state(v, secrets)?);
        }
    }
    Ok(out)
}

#[derive(Clone, Debug, PartialEq)]
pub struct PendingOp {
    pub resource: ResState,
    /// `creating`, `updating`, `deleting` or `reading`.
    pub kind: String,
}

/// The decoded latest deployment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub resources: Vec<ResState>,
    pub pending: Vec<PendingOp>,
    pub metadata: J,
}

impl Snapshot {
    pub fn from_json(d: &J, secrets: Option<&Secrets>) -> Res<Snapshot> {
        let mut snap = Snapshot {
            metadata: d.get("metadata").cloned().unwrap_or(json!({})),
            ..Default::default()
        };
        if let Some(rs) = d.get("resources").and_then(J::as_array) {
            for r in rs {
                snap.resources.push(ResState::from_json(r, secrets)?);
            }
        }
        if let Some(ps) = d.get("pending_operations").and_then(J::as_array) {
            for p in ps {
                snap.pending.push(PendingOp {
                    resource: ResState::from_json(p.get("resource").unwrap_or(&J::Null), secrets)?,
                    kind: p
                        .get("type")
                        .and_then(J::as_str)
                        .unwrap_or_default()
                        .to_string(),
                });
            }
        }
        Ok(snap)
    }

    pub fn to_json(&self, secrets: &Secrets, salt: Option<&str>) -> Res<J> {
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let resources = self
            .resources
            .iter()
            .map(|r| r.to_json(secrets))
            .collect::<Res<Vec<_>>>()?;
        let magic = {
            use sha2::{Digest, Sha256};
            util::hex(&Sha256::digest(crate::version_tag().as_bytes()))
        };
        let mut d = json!({
            "manifest": {"time": time, "magic": magic, "version": crate::version_tag()},
        });
        if let Some(salt) = salt {
            d["secrets_providers"] = json!({"type": "passphrase", "state": {"salt": salt}});
        }
        d["resources"] = J::Array(resources);
        if !self.pending.is_empty() {
            let mut ps = Vec::new();
            for p in &self.pending {
                ps.push(json!({"resource": p.resource.to_json(secrets)?, "type": p.kind}));
            }
            d["pending_operations"] = J::Array(ps);
        }
        d["metadata"] = if self.metadata.is_null() {
            json!({})
        } else {
            self.metadata.clone()
        };
        Ok(d)
    }
}

// ---- selected stack (PULUMI_HOME workspace file) ----

fn workspace_file(project: &Project) -> PathBuf {
    let h = util::hex(&util::sha1(project.file.to_string_lossy().as_bytes()));
    pulumi_home()
        .join("workspaces")
        .join(format!("{}-{}-workspace.json", project.name, h))
}

pub fn selected_stack(project: &Project) -> Option<String> {
    let text = std::fs::read_to_string(workspace_file(project)).ok()?;
    let j: J = serde_json::from_str(&text).ok()?;
    j.get("stack")
        .and_then(J::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| s.rsplit('/').next().unwrap_or(s).to_string())
}

pub fn select_stack(project: &Project, stack: Option<&str>) -> Res<()> {
    let p = workspace_file(project);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)?;
    }
    let j = match stack {
        Some(s) => json!({ "stack": s }),
        None => json!({}),
    };
    std::fs::write(&p, util::json_pretty(&j, 4))?;
    Ok(())
}
