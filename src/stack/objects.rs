//! The objects a Stack reconcile creates, built by pure functions: the Workspace (the
//! execution template of the stack's Jobs, PKO's shape) and the Update (one operation, with a
//! name derived from what triggered it).

use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapVolumeSource, Container, EnvFromSource, EnvVar, EnvVarSource,
    PodSpec, SecretEnvSource, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::{
    ConfigItem, ConfigValueFrom, EmbeddedPodTemplateSpec, ResourceSelectorType, Stack, Update,
    UpdateSpec, UpdateTemplate, UpdateType, Workspace, WorkspaceFluxSource, WorkspaceGitSource,
    WorkspaceSpec, WorkspaceStack,
};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

use crate::program::PROGRAM_SCHEME;
use crate::update::annotations::{
    EXPECT_NO_REFRESH_CHANGES_ANNOTATION, RETRY_ON_CONFLICT_ANNOTATION, STACK_EXISTS_ANNOTATION,
};

/// What triggered an Update, recorded on it so that a Stack whose status lost track of it (a
/// crash between creating it and writing `status.currentUpdate`) can adopt it.
pub const TRIGGER_GENERATION_ANNOTATION: &str = "pulumi.com/stack-generation";
pub const TRIGGER_REQUEST_ANNOTATION: &str = "pulumi.com/stack-reconcile-request";
pub const TRIGGER_REVISION_ANNOTATION: &str = names::TRIGGER_REVISION_ANNOTATION;
/// The digest of the spec an Update runs for (`StackSpec::digest`, `suspend` left out).
pub const TRIGGER_SPEC_DIGEST_ANNOTATION: &str = "pulumi.com/stack-spec-digest";

const CONFIGMAP_MOUNT_ROOT: &str = "/var/run/configmaps/stacks.pulumi.com/configmaps";
const SECRET_MOUNT_ROOT: &str = "/var/run/secrets/stacks.pulumi.com/secrets";

/// The source revision a reconcile resolved for a Stack.
#[derive(Clone, Debug, PartialEq)]
pub enum ResolvedSource {
    Git {
        url: String,
        commit: String,
        dir: Option<String>,
        shallow: bool,
    },
    Program {
        name: String,
        digest: String,
    },
    Flux {
        url: String,
        digest: String,
        dir: Option<String>,
        revision: String,
    },
    /// Destroy without the source: a minimal Pulumi.yaml from the recorded project
    /// (`status.projectInfo`), so a deleted repository, Program or Flux source cannot block it.
    ProjectInfo {
        name: String,
        runtime: String,
    },
    None,
}

impl ResolvedSource {
    /// What `lastAttemptedCommit` / `lastSuccessfulCommit` record.
    pub fn revision(&self) -> &str {
        match self {
            ResolvedSource::Git { commit, .. } => commit,
            ResolvedSource::Program { digest, .. } => digest,
            ResolvedSource::Flux { revision, .. } => revision,
            ResolvedSource::ProjectInfo { .. } => "",
            ResolvedSource::None => "",
        }
    }
}

pub fn labels(stack_name: &str) -> BTreeMap<String, String> {
    [
        (
            names::COMPONENT_LABEL.to_string(),
            names::COMPONENT_STACK.to_string(),
        ),
        (names::STACK_NAME_LABEL.to_string(), stack_name.to_string()),
    ]
    .into()
}

fn controller_ref(stack: &Stack) -> Option<OwnerReference> {
    stack.controller_owner_ref(&())
}

fn secret_ref(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        secret_key_ref: Some(SecretKeySelector {
            name: name.into(),
            key: key.into(),
            optional,
        }),
        ..Default::default()
    }
}

/// The environment of the stack's pods, in PKO's order: backend URL, access token, `envRefs`
/// (sorted by key; a later entry replaces an earlier one of the same name).
fn stack_env(spec: &pulumi_operator_api::StackSpec) -> Vec<EnvVar> {
    let mut env: Vec<EnvVar> = Vec::new();
    if let Some(backend) = spec.backend.as_ref().filter(|b| !b.is_empty()) {
        env.push(EnvVar {
            name: "PULUMI_BACKEND_URL".into(),
            value: Some(backend.clone()),
            ..Default::default()
        });
    }
    if let Some(secret) = spec.access_token_secret.as_ref().filter(|s| !s.is_empty()) {
        env.push(EnvVar {
            name: "PULUMI_ACCESS_TOKEN".into(),
            value_from: Some(secret_ref(secret, "accessToken", None)),
            ..Default::default()
        });
    }
    for (key, r) in spec.env_refs.iter().flatten() {
        let var = match (&r.selector_type, &r.literal, &r.secret) {
            (ResourceSelectorType::Literal, Some(l), _) => EnvVar {
                name: key.clone(),
                value: Some(l.value.clone()),
                ..Default::default()
            },
            (ResourceSelectorType::Secret, _, Some(s)) => EnvVar {
                name: key.clone(),
                value_from: Some(secret_ref(&s.name, &s.key, None)),
                ..Default::default()
            },
            // Rejected by validation before we get here.
            _ => continue,
        };
        env.retain(|e| e.name != var.name);
        env.push(var);
    }
    env
}

/// `envs` and `envSecrets` as envFrom sources (appended after the template's, as PKO does).
fn stack_env_from(spec: &pulumi_operator_api::StackSpec) -> Vec<EnvFromSource> {
    let mut env_from: Vec<EnvFromSource> = Vec::new();
    for cm in spec.envs.iter().flatten() {
        env_from.push(EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: cm.clone(),
                optional: None,
            }),
            ..Default::default()
        });
    }
    for s in spec.env_secrets.iter().flatten() {
        env_from.push(EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: s.clone(),
                optional: None,
            }),
            ..Default::default()
        });
    }

    env_from
}

fn config_map_volume(name: String, config_map: &str) -> Volume {
    Volume {
        name,
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn secret_volume(name: String, secret: &str) -> Volume {
    Volume {
        name,
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The Workspace pod template that mounts the configuration's ConfigMaps and Secrets into the
/// `pulumi` container.
fn config_pod_template(
    volumes: Vec<Volume>,
    mounts: Vec<VolumeMount>,
) -> Box<EmbeddedPodTemplateSpec> {
    let pod = PodSpec {
        volumes: Some(volumes),
        containers: vec![Container {
            name: names::PULUMI_CONTAINER.to_string(),
            volume_mounts: Some(mounts),
            ..Default::default()
        }],
        ..Default::default()
    };
    serde_json::from_value(json!({ "spec": pod })).unwrap_or_default()
}

/// The stack's configuration items in PKO's order (config, configRef, secrets, secretsRef;
/// sorted keys each), with the ConfigMap and Secret volumes (and mounts) the references need.
fn stack_config(
    spec: &pulumi_operator_api::StackSpec,
) -> (Vec<ConfigItem>, Vec<Volume>, Vec<VolumeMount>) {
    let mut config: Vec<ConfigItem> = Vec::new();
    let mut volumes: Vec<Volume> = Vec::new();
    let mut mounts: Vec<VolumeMount> = Vec::new();
    let mut add_volume = |volume: Volume, mount_path: String| {
        if !volumes.iter().any(|v| v.name == volume.name) {
            mounts.push(VolumeMount {
                name: volume.name.clone(),
                mount_path,
                read_only: Some(true),
                ..Default::default()
            });
            volumes.push(volume);
        }
    };
    for (key, value) in spec.config.iter().flatten() {
        config.push(ConfigItem {
            key: key.clone(),
            value: Some(value.clone()),
            secret: Some(false),
            ..Default::default()
        });
    }
    for (key, r) in spec.effective_config_refs() {
        let vol = format!("configmap-{}", r.name);
        let dir = format!("{CONFIGMAP_MOUNT_ROOT}/{}", r.name);
        add_volume(config_map_volume(vol, &r.name), dir.clone());
        config.push(ConfigItem {
            key: key.to_string(),
            value_from: Some(ConfigValueFrom {
                path: Some(format!("{dir}/{}", r.key)),
                json: r.json,
                env: None,
            }),
            secret: Some(false),
            ..Default::default()
        });
    }
    for (key, value) in spec.secrets.iter().flatten() {
        config.push(ConfigItem {
            key: key.clone(),
            value: Some(Value::String(value.clone())),
            secret: Some(true),
            ..Default::default()
        });
    }
    for (key, r) in spec.effective_secrets_refs() {
        match (&r.selector_type, &r.literal, &r.secret) {
            (ResourceSelectorType::Literal, Some(l), _) => config.push(ConfigItem {
                key: key.to_string(),
                value: Some(Value::String(l.value.clone())),
                secret: Some(true),
                ..Default::default()
            }),
            (ResourceSelectorType::Secret, _, Some(s)) => {
                let vol = format!("secret-{}", s.name);
                let dir = format!("{SECRET_MOUNT_ROOT}/{}", s.name);
                add_volume(secret_volume(vol, &s.name), dir.clone());
                config.push(ConfigItem {
                    key: key.to_string(),
                    value_from: Some(ConfigValueFrom {
                        path: Some(format!("{dir}/{}", s.key)),
                        json: None,
                        env: None,
                    }),
                    secret: Some(true),
                    ..Default::default()
                });
            }
            _ => {}
        }
    }

    (config, volumes, mounts)
}

/// The Workspace's git or Flux source for the resolved revision.
fn workspace_source(
    stack: &Stack,
    source: &ResolvedSource,
) -> (Option<WorkspaceGitSource>, Option<WorkspaceFluxSource>) {
    let spec = &stack.spec;
    match source {
        ResolvedSource::Git {
            url,
            commit,
            dir,
            shallow,
        } => (
            Some(WorkspaceGitSource {
                url: Some(url.clone()),
                git_ref: Some(commit.clone()),
                dir: dir.clone(),
                shallow: *shallow,
                // Secret references only; the Job's fetch container gets them as GIT_* env.
                auth: crate::source::auth::workspace_git_auth(&spec.git).map(Box::new),
                ..Default::default()
            }),
            None,
        ),
        ResolvedSource::Program { name, digest } => (
            None,
            Some(WorkspaceFluxSource {
                url: Some(format!(
                    "{PROGRAM_SCHEME}{}/{name}",
                    stack.namespace().unwrap_or_default()
                )),
                digest: Some(digest.clone()),
                dir: None,
            }),
        ),
        ResolvedSource::Flux {
            url, digest, dir, ..
        } => (
            None,
            Some(WorkspaceFluxSource {
                url: Some(url.clone()),
                digest: Some(digest.clone()),
                dir: dir.clone(),
            }),
        ),
        ResolvedSource::ProjectInfo { .. } | ResolvedSource::None => (None, None),
    }
}

/// Whether the operator's administrator allows the pods this Workspace asks for in `namespace`
/// (checked on the Stack before an operation is claimed; every Job is checked again).
pub fn workspace_limits(
    namespace: &str,
    ws: &Workspace,
    limits: &crate::runtime::limits::AdminLimits,
) -> Result<(), crate::runtime::limits::NotAllowed> {
    let mut pod = json!({
        "serviceAccountName": ws.spec.service_account_name.clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| names::DEFAULT_SERVICE_ACCOUNT.into()),
    });
    if let Some(user) = ws.spec.pod_template.as_ref().and_then(|t| t.spec.as_ref()) {
        crate::runtime::merge::merge(&mut pod, user);
    }
    crate::runtime::limits::check_pod(namespace, &pod, limits)
}

/// The Workspace of a Stack: image, identity, environment, source at the resolved revision,
/// the stack's configuration, and the user's `workspaceTemplate` on top.
pub fn build_workspace(stack: &Stack, source: &ResolvedSource) -> Workspace {
    let spec = &stack.spec;
    let name = stack.name_any();
    let env = stack_env(spec);
    let env_from = stack_env_from(spec);
    let (config, volumes, mounts) = stack_config(spec);
    let (git, flux) = workspace_source(stack, source);
    let pod_template = (!volumes.is_empty()).then(|| config_pod_template(volumes, mounts));
    let mut ws_spec = WorkspaceSpec {
        service_account_name: spec.service_account_name.clone().filter(|s| !s.is_empty()),
        git,
        flux: flux.map(Box::new),
        env: (!env.is_empty()).then_some(env),
        pod_template,
        pulumi_log_level: spec.effective_pulumi_log_level(),
        stacks: Some(vec![WorkspaceStack {
            name: spec.stack.clone(),
            create: Some(!spec.use_local_stack_only),
            secrets_provider: spec.secrets_provider.clone().filter(|s| !s.is_empty()),
            config: (!config.is_empty()).then_some(config),
            environment: spec.environment.clone().filter(|e| !e.is_empty()),
        }]),
        ..Default::default()
    };
    if let ResolvedSource::ProjectInfo { name, runtime } = source {
        ws_spec.project_info = Some(Box::new(pulumi_operator_api::ProjectInfo {
            name: name.clone(),
            runtime: runtime.clone(),
        }));
    }
    let mut metadata = ObjectMeta {
        name: Some(name.clone()),
        namespace: stack.namespace(),
        labels: Some(labels(&name)),
        owner_references: controller_ref(stack).map(|o| vec![o]),
        ..Default::default()
    };
    if let Some(template) = &spec.workspace_template {
        if let Some(t) = &template.spec {
            overlay_workspace(&mut ws_spec, t);
        }
        if let Some(m) = &template.metadata {
            let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
            for (k, v) in m.labels.iter().flatten() {
                labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
            if let Some(a) = &m.annotations {
                metadata.annotations = Some(a.clone());
            }
        }
    }
    // PKO appends `envs` and `envSecrets` after the template is merged (`SetEnvs`), so a
    // template's envFrom comes first and does not replace them.
    if !env_from.is_empty() {
        ws_spec
            .env_from
            .get_or_insert_with(Vec::new)
            .extend(env_from);
    }
    if let Some((k, v)) = crate::source::auth::workspace_annotations(stack) {
        metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k, v);
    }
    Workspace {
        metadata,
        spec: ws_spec,
        status: None,
    }
}

/// The user's `workspaceTemplate.spec` merged onto the generated spec (strategic merge).
fn overlay_workspace(base: &mut WorkspaceSpec, patch: &WorkspaceSpec) {
    let mut b = serde_json::to_value(&*base).unwrap_or(Value::Null);
    let mut p = serde_json::to_value(patch).unwrap_or(Value::Null);
    // The operator's stack entry always wins over a template's.
    if let Some(obj) = p.as_object_mut() {
        obj.remove("stacks");
    }
    crate::runtime::merge::merge(&mut b, &p);
    if let Ok(merged) = serde_json::from_value(b) {
        *base = merged;
    }
}

/// The deterministic name of the Update for a trigger: a restarted operator computes the same
/// name and finds the Update it already created instead of creating a second one.
pub fn update_name(stack: &Stack, kind: &UpdateType, revision: &str) -> String {
    let status = stack.status.as_ref();
    let last = status
        .and_then(|s| s.last_update.as_ref())
        .and_then(|l| l.name.clone())
        .unwrap_or_default();
    let request = stack
        .annotations()
        .get(names::RECONCILIATION_REQUEST_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let hex = short_hash(&[
        stack.uid().unwrap_or_default().as_str(),
        &stack.metadata.generation.unwrap_or(0).to_string(),
        &request,
        revision,
        kind.as_str(),
        &last,
    ]);
    format!("{}-{hex}", stack.name_any())
}

/// Ten hex digits of the SHA-256 of `parts` (each ended by a NUL, so that parts cannot run
/// into each other).
pub fn short_hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for part in parts {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize()
        .iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The trigger recorded on an Update by `build_update`, as `status.currentUpdate`.
pub fn trigger_of(update: &Update) -> pulumi_operator_api::CurrentStackUpdate {
    let get = |k: &str| update.annotations().get(k).cloned();
    pulumi_operator_api::CurrentStackUpdate {
        name: update.metadata.name.clone(),
        generation: get(TRIGGER_GENERATION_ANNOTATION).and_then(|g| g.parse().ok()),
        reconcile_request: get(TRIGGER_REQUEST_ANNOTATION),
        commit: get(TRIGGER_REVISION_ANNOTATION),
    }
}

/// Whether an earlier operation of this Stack succeeded (and so created its Pulumi stack). A
/// renamed stack or a stack removed by hand makes this wrong; the runner then creates it.
pub fn stack_exists(stack: &Stack) -> bool {
    stack
        .status
        .as_ref()
        .and_then(|s| s.last_update.as_ref())
        .and_then(|u| u.last_successful_commit.as_deref())
        .is_some_and(|c| !c.is_empty())
}

/// The Update for a due operation (PKO's `newUp` / `newDestroy`), with `updateTemplate` on top.
pub fn build_update(stack: &Stack, kind: UpdateType, reason: &str, revision: &str) -> Update {
    let name = update_name(stack, &kind, revision);
    let annotations = update_annotations(stack, &kind, revision);
    let mut update = Update {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: stack.namespace(),
            labels: Some(labels(&stack.name_any())),
            annotations: Some(annotations),
            owner_references: controller_ref(stack).map(|o| vec![o]),
            // Held until the Stack has absorbed the result (src/stack/inflight.rs).
            finalizers: Some(vec![names::FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: update_spec(stack, kind, reason),
        status: None,
    };
    if let Some(template) = &stack.spec.update_template {
        apply_update_template(&mut update, template);
    }
    update
}

/// The operation's options, from the Stack's spec.
fn update_spec(stack: &Stack, kind: UpdateType, reason: &str) -> UpdateSpec {
    let spec = &stack.spec;
    let is_destroy = kind == UpdateType::Destroy;
    let mut update_spec = UpdateSpec {
        workspace_name: Some(stack.name_any()),
        stack_name: Some(spec.stack.clone()),
        update_type: Some(kind),
        ttl_after_completed: Some(names::DEFAULT_UPDATE_TTL.into()),
        message: Some(reason.to_string()),
        operation_timeout_seconds: Some(spec.operation_timeout_seconds()),
        ..Default::default()
    };
    if is_destroy {
        update_spec.run_program = spec.run_program.then_some(true);
    } else {
        update_spec.target = spec.targets.clone().filter(|t| !t.is_empty());
        update_spec.target_dependents = Some(spec.target_dependents);
        update_spec.refresh = Some(spec.refresh);
    }
    update_spec
}

/// What triggered the Update, and the options PKO's Update spec has no field for.
fn update_annotations(
    stack: &Stack,
    kind: &UpdateType,
    revision: &str,
) -> BTreeMap<String, String> {
    let spec = &stack.spec;
    let request = stack
        .annotations()
        .get(names::RECONCILIATION_REQUEST_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let mut annotations = BTreeMap::from([
        (
            TRIGGER_GENERATION_ANNOTATION.to_string(),
            stack.metadata.generation.unwrap_or(0).to_string(),
        ),
        (TRIGGER_REQUEST_ANNOTATION.to_string(), request),
        (
            TRIGGER_REVISION_ANNOTATION.to_string(),
            revision.to_string(),
        ),
        (TRIGGER_SPEC_DIGEST_ANNOTATION.to_string(), spec.digest()),
    ]);
    let flags = [
        (RETRY_ON_CONFLICT_ANNOTATION, spec.retry_on_update_conflict),
        (STACK_EXISTS_ANNOTATION, stack_exists(stack)),
        (
            EXPECT_NO_REFRESH_CHANGES_ANNOTATION,
            spec.expect_no_refresh_changes && spec.refresh && *kind != UpdateType::Destroy,
        ),
    ];
    for (annotation, set) in flags {
        if set {
            annotations.insert(annotation.to_string(), "true".to_string());
        }
    }
    annotations
}

/// `spec.updateTemplate`: its spec merged over the operator's (except what the operator
/// decided), its labels and annotations added where the operator set none.
fn apply_update_template(update: &mut Update, template: &UpdateTemplate) {
    if let Some(t) = &template.spec {
        let mut b = serde_json::to_value(&update.spec).unwrap_or(Value::Null);
        let mut p = serde_json::to_value(t).unwrap_or(Value::Null);
        if let Some(obj) = p.as_object_mut() {
            // What the operator decided is not the template's to change.
            for k in ["workspaceName", "stackName", "type"] {
                obj.remove(k);
            }
        }
        crate::runtime::merge::merge(&mut b, &p);
        if let Ok(s) = serde_json::from_value(b) {
            update.spec = s;
        }
    }
    if let Some(m) = &template.metadata {
        let labels = update.metadata.labels.get_or_insert_with(BTreeMap::new);
        for (k, v) in m.labels.iter().flatten() {
            labels.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let annotations = update
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        for (k, v) in m.annotations.iter().flatten() {
            annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(extra: Value) -> Stack {
        let mut base = json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-1", "generation": 3},
            "spec": {"stack": "org/web/dev"}
        });
        crate::runtime::merge::merge(&mut base, &json!({"spec": extra}));
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn envs_and_env_secrets_are_appended_after_a_template_env_from() {
        let s = stack(json!({
            "projectRepo": "https://git.example/app.git", "commit": "a".repeat(40),
            "envs": ["cm-env"], "envSecrets": ["sec-env"],
            "workspaceTemplate": {"spec": {"envFrom": [{"configMapRef": {"name": "from-template"}}]}}
        }));
        let ws = build_workspace(&s, &ResolvedSource::None);
        let names: Vec<String> = ws
            .spec
            .env_from
            .unwrap()
            .iter()
            .map(|e| {
                e.config_map_ref
                    .as_ref()
                    .map(|c| c.name.clone())
                    .or(e.secret_ref.as_ref().map(|s| s.name.clone()))
                    .unwrap()
            })
            .collect();
        assert_eq!(names, vec!["from-template", "cm-env", "sec-env"]);
    }

    #[test]
    fn workspace_carries_source_env_and_config_in_pko_order() {
        let s = stack(json!({
            "projectRepo": "https://git.example/app.git", "commit": "a".repeat(40), "repoDir": "infra", "shallow": true,
            "backend": "file:///state",
            "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Secret", "secret": {"name": "pp", "key": "pass"}},
                        "MODE": {"type": "Literal", "literal": {"value": "fast"}}},
            "envs": ["cm-env"], "envSecrets": ["sec-env"],
            "config": {"b": 2, "a": {"nested": true}},
            "configRef": {"c": {"name": "cfg", "key": "c.json", "json": true}},
            "secrets": {"s": "plain-secret"},
            "secretsRef": {"t": {"type": "Secret", "secret": {"name": "creds", "key": "token"}}},
            "serviceAccountName": "pulumi", "useLocalStackOnly": true, "secretsProvider": "passphrase",
            "workspaceTemplate": {"spec": {"image": "pulumi/pulumi:3.202.0-nonroot",
                                           "env": [{"name": "EXTRA", "value": "1"}]}}
        }));
        let src = ResolvedSource::Git {
            url: "https://git.example/app.git".into(),
            commit: "a".repeat(40),
            dir: Some("infra".into()),
            shallow: true,
        };
        let ws = build_workspace(&s, &src);
        assert_eq!(ws.metadata.name.as_deref(), Some("web"));
        assert_eq!(
            ws.metadata.labels.as_ref().unwrap()["pulumi.com/stack-name"],
            "web"
        );
        assert_eq!(ws.metadata.owner_references.as_ref().unwrap()[0].uid, "u-1");
        let spec = &ws.spec;
        assert_eq!(spec.image.as_deref(), Some("pulumi/pulumi:3.202.0-nonroot"));
        assert_eq!(spec.service_account_name.as_deref(), Some("pulumi"));
        let git = spec.git.as_ref().unwrap();
        assert_eq!(
            (git.git_ref.as_deref(), git.dir.as_deref(), git.shallow),
            (Some("a".repeat(40).as_str()), Some("infra"), true)
        );
        let env: Vec<&str> = spec
            .env
            .as_ref()
            .unwrap()
            .iter()
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(
            env,
            [
                "PULUMI_BACKEND_URL",
                "MODE",
                "PULUMI_CONFIG_PASSPHRASE",
                "EXTRA"
            ]
        );
        let pp = &spec.env.as_ref().unwrap()[2];
        assert!(pp.value.is_none(), "secrets are references, never values");
        assert_eq!(
            pp.value_from
                .as_ref()
                .unwrap()
                .secret_key_ref
                .as_ref()
                .unwrap()
                .name,
            "pp"
        );
        assert_eq!(spec.env_from.as_ref().unwrap().len(), 2);
        let st = &spec.stacks.as_ref().unwrap()[0];
        assert_eq!(
            (st.name.as_str(), st.create, st.secrets_provider.as_deref()),
            ("org/web/dev", Some(false), Some("passphrase"))
        );
        let keys: Vec<&str> = st
            .config
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.key.as_str())
            .collect();
        assert_eq!(keys, ["a", "b", "c", "s", "t"]);
        let c = &st.config.as_ref().unwrap()[2];
        assert_eq!(
            c.value_from.as_ref().unwrap().path.as_deref(),
            Some("/var/run/configmaps/stacks.pulumi.com/configmaps/cfg/c.json")
        );
        let t = &st.config.as_ref().unwrap()[4];
        assert_eq!(t.secret, Some(true));
        assert_eq!(
            t.value_from.as_ref().unwrap().path.as_deref(),
            Some("/var/run/secrets/stacks.pulumi.com/secrets/creds/token")
        );
        let pod = serde_json::to_value(spec.pod_template.as_ref().unwrap()).unwrap();
        assert_eq!(
            pod["spec"],
            json!({
                "volumes": [
                    {"name": "configmap-cfg", "configMap": {"name": "cfg"}},
                    {"name": "secret-creds", "secret": {"secretName": "creds"}}
                ],
                "containers": [{"name": "pulumi", "volumeMounts": [
                    {"name": "configmap-cfg", "readOnly": true,
                     "mountPath": "/var/run/configmaps/stacks.pulumi.com/configmaps/cfg"},
                    {"name": "secret-creds", "readOnly": true,
                     "mountPath": "/var/run/secrets/stacks.pulumi.com/secrets/creds"}
                ]}]
            })
        );
    }

    #[test]
    fn update_names_are_deterministic_per_trigger() {
        let s = stack(json!({"projectRepo": "r", "commit": "c"}));
        let a = update_name(&s, &UpdateType::Up, "c");
        assert_eq!(a, update_name(&s, &UpdateType::Up, "c"));
        assert!(a.starts_with("web-") && a.len() == "web-".len() + 10, "{a}");
        assert_ne!(a, update_name(&s, &UpdateType::Up, "d"));
        assert_ne!(a, update_name(&s, &UpdateType::Destroy, "c"));
        let mut later = s.clone();
        later.metadata.generation = Some(4);
        assert_ne!(a, update_name(&later, &UpdateType::Up, "c"));
    }

    #[test]
    fn update_spec_follows_pko_and_the_template() {
        let s = stack(
            json!({"projectRepo": "r", "commit": "c", "refresh": true, "targets": ["urn:a"], "retryOnUpdateConflict": true,
                             "updateTemplate": {"spec": {"ttlAfterCompleted": "1h", "parallel": 4, "type": "destroy"},
                                                "metadata": {"labels": {"team": "x"}}}}),
        );
        let u = build_update(&s, UpdateType::Up, "Initial stack update", "c");
        assert_eq!(u.spec.update_type, Some(UpdateType::Up));
        assert_eq!(u.spec.refresh, Some(true));
        assert_eq!(u.spec.target, Some(vec!["urn:a".to_string()]));
        assert_eq!(u.spec.ttl_after_completed.as_deref(), Some("1h"));
        assert_eq!(u.spec.parallel, Some(4));
        assert_eq!(u.spec.message.as_deref(), Some("Initial stack update"));
        assert_eq!(u.metadata.labels.as_ref().unwrap()["team"], "x");
        assert_eq!(
            u.metadata.annotations.as_ref().unwrap()[RETRY_ON_CONFLICT_ANNOTATION],
            "true"
        );
        let d = build_update(&s, UpdateType::Destroy, "Stack marked for deletion", "c");
        assert_eq!(d.spec.target, None);
        assert_eq!(d.spec.refresh, None);
    }

    #[test]
    fn an_update_says_the_stack_exists_after_a_success() {
        let mut s = stack(json!({"projectRepo": "r", "commit": "c"}));
        let exists = |s: &Stack| {
            build_update(s, UpdateType::Up, "r", "c")
                .annotations()
                .get(STACK_EXISTS_ANNOTATION)
                .cloned()
        };
        assert_eq!(exists(&s), None, "a new Stack");
        s.status =
            Some(serde_json::from_value(json!({"lastUpdate": {"state": "failed"}})).unwrap());
        assert_eq!(exists(&s), None, "only failures so far");
        s.status = Some(
            serde_json::from_value(
                json!({"lastUpdate": {"state": "failed", "lastSuccessfulCommit": "c0"}}),
            )
            .unwrap(),
        );
        assert_eq!(exists(&s).as_deref(), Some("true"));
    }
}
