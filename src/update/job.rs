//! Update → Job, as pure functions: the runner's plan (from the Workspace and the Update) and
//! the Job whose pod has PKO's workspace shape: init containers `bootstrap` (copies the runner
//! into its own volume, read-only for every other container) and `fetch` (puts the program in
//! `/share/workspace`), then the `pulumi` container running the copied runner in the
//! Workspace's image.

use crate::program::PROGRAM_SCHEME;
use crate::update::annotations::{
    EXPECT_NO_REFRESH_CHANGES_ANNOTATION, RETRY_ON_CONFLICT_ANNOTATION, STACK_EXISTS_ANNOTATION,
};
use crate::update::errors::InvalidUpdate;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements,
    SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::plan::{self, Operation, OperationOptions, RunPlan, Source, StackPlan};
use pulumi_operator_api::{SecurityProfile, Update, UpdateType, Workspace};
use serde_json::Value;
use std::collections::BTreeMap;

/// What the operator contributes to every Job.
#[derive(Clone, Debug)]
pub struct JobConfig {
    pub runner_image: String,
    pub runner_pull_policy: String,
    /// The digest of the plan as stored in the plan Secret ([`plan::plan_digest`]), given to
    /// every container that runs the runner so that it refuses an edited plan.
    pub plan_digest: Option<String>,
}

/// The label that ties a Job and its pod to their Update.
pub const UPDATE_NAME_LABEL: &str = names::UPDATE_NAME_LABEL;

/// PKO's grace period for a workspace pod, so that an interrupted Pulumi can stop cleanly.
const TERMINATION_GRACE_SECONDS: i64 = 600;

fn is_full_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

pub fn operation(update: &Update) -> Result<Operation, InvalidUpdate> {
    match &update.spec.update_type {
        Some(UpdateType::Up) => Ok(Operation::Up),
        Some(UpdateType::Preview) => Ok(Operation::Preview),
        Some(UpdateType::Refresh) => Ok(Operation::Refresh),
        Some(UpdateType::Destroy) => Ok(Operation::Destroy),
        Some(other) => Err(InvalidUpdate::UnsupportedType(other.as_str().to_string())),
        None => Err(InvalidUpdate::MissingType),
    }
}

/// Where the `pulumi` container's environment comes from Secrets, so that the runner can
/// mask those values: the variables set from a `secretKeyRef`, and the Secrets taken whole
/// (`envFrom`), which the Job also mounts (their keys are not known here). Both from the
/// Workspace's `env`/`envFrom` and from its pod template's `pulumi` container.
#[derive(Debug, Default, PartialEq)]
pub struct SecretEnv {
    /// Variable names, never values.
    pub names: Vec<String>,
    /// (Secret name, `optional`), in `envFrom` order; the n-th is mounted at
    /// [`plan::secret_env_dir`]`(n)`.
    pub whole_secrets: Vec<(String, Option<bool>)>,
}

pub fn secret_env(ws: &Workspace) -> SecretEnv {
    let spec = &ws.spec;
    let mut env: Vec<Value> = spec
        .env
        .iter()
        .flatten()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    let mut env_from: Vec<Value> = spec
        .env_from
        .iter()
        .flatten()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    let template_containers = spec
        .pod_template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s["containers"].as_array());
    for c in template_containers
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == names::PULUMI_CONTAINER)
    {
        env.extend(c["env"].as_array().into_iter().flatten().cloned());
        env_from.extend(c["envFrom"].as_array().into_iter().flatten().cloned());
    }
    let mut out = SecretEnv::default();
    for e in &env {
        if let Some(name) = e["name"]
            .as_str()
            .filter(|_| e["valueFrom"]["secretKeyRef"].is_object())
        {
            if !out.names.iter().any(|n| n == name) {
                out.names.push(name.to_string());
            }
        }
    }
    for e in &env_from {
        if let Some(secret) = e["secretRef"]["name"].as_str().filter(|n| !n.is_empty()) {
            if !out.whole_secrets.iter().any(|(n, _)| n == secret) {
                out.whole_secrets
                    .push((secret.to_string(), e["secretRef"]["optional"].as_bool()));
            }
        }
    }
    out
}

/// The runner's plan for an Update against a Workspace. The error explains what is invalid.
pub fn build_plan(update: &Update, ws: &Workspace) -> Result<RunPlan, InvalidUpdate> {
    let operation = operation(update)?;
    let stack_name = update
        .spec
        .stack_name
        .clone()
        .filter(|s| !s.is_empty())
        .ok_or(InvalidUpdate::MissingStackName)?;
    check_env(ws)?;
    let source = plan_source(ws)?;
    let name = update.name_any();
    let secret = secret_env(ws);
    Ok(RunPlan {
        update_name: name.clone(),
        namespace: update.namespace().unwrap_or_default(),
        update_uid: update.uid().unwrap_or_default(),
        operation,
        source,
        stack: stack_plan(update, ws, stack_name),
        options: operation_options(update, operation),
        outputs_secret: names::outputs_secret_name(&name),
        outputs_labels: outputs_labels(update),
        outputs_key: None,
        apply_plan: None,
        pulumi_log_level: ws.spec.pulumi_log_level.filter(|l| *l > 0),
        lock_holder: Some(lock_holder(update)),
        secret_env: secret.names,
        secret_env_dirs: (0..secret.whole_secrets.len())
            .map(plan::secret_env_dir)
            .collect(),
        dependency_cache: crate::update::cache::dependency_cache_dir(
            ws,
            crate::update::cache::mounts_retained_cache(ws),
        ),
        conflict_retry_delay_ms: None,
        policy_packs: Vec::new(),
        heartbeat: Some(crate::update::fence::heartbeat_plan()),
    })
}

/// Refuses a Workspace whose `spec.env` sets a variable the operator sets itself.
fn check_env(ws: &Workspace) -> Result<(), InvalidUpdate> {
    match ws
        .spec
        .env
        .iter()
        .flatten()
        .find_map(|e| pulumi_operator_api::validation::reserved_env_problem(&e.name))
    {
        Some(why) => Err(InvalidUpdate::ReservedEnv(why)),
        None => Ok(()),
    }
}

/// Where the program comes from: git, a Flux artifact or a Program, a local directory, or
/// only the project's name and runtime.
fn plan_source(ws: &Workspace) -> Result<Option<Source>, InvalidUpdate> {
    let spec = &ws.spec;
    Ok(if let Some(git) = &spec.git {
        let url = git
            .url
            .clone()
            .filter(|u| !u.is_empty())
            .ok_or(InvalidUpdate::EmptyGitUrl)?;
        let reference = git.effective_ref().map(str::to_string);
        let (commit, reference) = match reference {
            Some(r) if is_full_sha(&r) => (Some(r), None),
            other => (None, other),
        };
        Some(Source::Git {
            url,
            commit,
            reference,
            shallow: git.shallow,
            dir: git.dir.clone().filter(|d| !d.is_empty()),
        })
    } else if let Some(flux) = &spec.flux {
        let url = flux.url.clone().unwrap_or_default();
        if url.starts_with(PROGRAM_SCHEME) {
            Some(Source::Program {
                file: format!("{}/Pulumi.yaml", plan::PROGRAM_DIR),
            })
        } else {
            Some(Source::Flux {
                url,
                digest: flux.digest.clone().unwrap_or_default(),
                dir: flux.dir.clone().filter(|d| !d.is_empty()),
            })
        }
    } else if let Some(local) = spec.local.as_ref().and_then(|l| l.dir.clone()) {
        Some(Source::Local { dir: local })
    } else {
        spec.project_info.as_ref().map(|p| Source::ProjectInfo {
            name: p.name.clone(),
            runtime: p.runtime.clone(),
        })
    })
}

/// The stack the operation selects, configured from the Workspace's entry for it.
fn stack_plan(update: &Update, ws: &Workspace, stack_name: String) -> StackPlan {
    let ws_stack = ws
        .spec
        .stacks
        .iter()
        .flatten()
        .find(|s| s.name == stack_name);
    StackPlan {
        name: stack_name,
        // PKO's Update selects its stack with create=true; the Stack's `useLocalStackOnly`
        // reaches us through the Workspace's stack entry.
        create: ws_stack.and_then(|s| s.create).unwrap_or(true),
        secrets_provider: ws_stack.and_then(|s| s.secrets_provider.clone()),
        environment: ws_stack
            .and_then(|s| s.environment.clone())
            .unwrap_or_default(),
        config: ws_stack.and_then(|s| s.config.clone()).unwrap_or_default(),
        exists: update
            .annotations()
            .get(STACK_EXISTS_ANNOTATION)
            .is_some_and(|v| v == "true"),
    }
}

/// The operation's options, from the Update's spec and annotations.
fn operation_options(update: &Update, operation: Operation) -> OperationOptions {
    let s = &update.spec;
    let annotation = |k: &str| update.annotations().get(k).is_some_and(|v| v == "true");
    OperationOptions {
        parallel: s.parallel,
        message: s.message.clone().filter(|m| !m.is_empty()),
        expect_no_changes: s.expect_no_changes.unwrap_or(false),
        replace: s.replace.clone().unwrap_or_default(),
        target: s.target.clone().unwrap_or_default(),
        target_dependents: s.target_dependents.unwrap_or(false),
        refresh: s.refresh.unwrap_or(false),
        expect_no_refresh_changes: annotation(EXPECT_NO_REFRESH_CHANGES_ANNOTATION),
        continue_on_error: s.continue_on_error.unwrap_or(false),
        remove: s.remove.unwrap_or(false),
        run_program: s.run_program,
        retry_on_update_conflict: annotation(RETRY_ON_CONFLICT_ANNOTATION),
        save_plan: operation == Operation::Preview && crate::update::plan::saves_plan(update),
    }
}

/// The labels of the outputs Secret: the Stack's name label, when the Update has it.
fn outputs_labels(update: &Update) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    if let Some(stack_label) = update.labels().get(names::STACK_NAME_LABEL) {
        labels.insert(names::STACK_NAME_LABEL.to_string(), stack_label.clone());
    }
    labels
}

/// The lock identity of an Update's operation: its pod's hostname, and the prefix shared by
/// every operation of the same Stack (by the Stack's UID, so same-named Stacks in other
/// namespaces or clusters sharing a backend never match).
pub fn lock_holder(update: &Update) -> pulumi_operator_api::plan::LockHolder {
    let stack_uid = update
        .owner_references()
        .iter()
        .find(|o| o.kind == "Stack")
        .map(|o| o.uid.clone())
        .unwrap_or_else(|| update.uid().unwrap_or_default());
    let short = |text: &str, n: usize| -> String {
        use sha2::{Digest, Sha256};
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()[..n]
            .to_string()
    };
    let prefix = format!("pulumi-{}-", short(&stack_uid, 12));
    pulumi_operator_api::plan::LockHolder {
        hostname: format!("{prefix}{}", short(&update.name_any(), 10)),
        stack_prefix: prefix,
    }
}

/// Labels on the Job, its pod and the plan Secret.
pub fn job_labels(update: &Update) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    if let Some(stack) = update.labels().get(names::STACK_NAME_LABEL) {
        labels.insert(names::STACK_NAME_LABEL.to_string(), stack.clone());
    }
    labels.insert(
        names::AUTO_COMPONENT_LABEL.to_string(),
        names::AUTO_COMPONENT_UPDATE.to_string(),
    );
    labels.insert(UPDATE_NAME_LABEL.to_string(), update.name_any());
    labels
}

/// The Update as the controller owner of its objects.
pub fn owned_by(update: &Update) -> Option<Vec<OwnerReference>> {
    Some(update.controller_owner_ref(&()).into_iter().collect())
}

/// The plan Secret (`<update>-plan`), owned by the Update.
pub fn build_plan_secret(update: &Update, plan: &RunPlan) -> Result<Secret, serde_json::Error> {
    let text = serde_json::to_string_pretty(plan)?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(plan::plan_secret_name(&update.name_any())),
            namespace: update.namespace(),
            labels: Some(job_labels(update)),
            owner_references: owned_by(update),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some([(plan::PLAN_KEY.to_string(), text)].into()),
        ..Default::default()
    })
}

/// The `fetch` container's git credentials, from the Workspace's `spec.git.auth`: PKO's `GIT_*`
/// names (§5.3) as `secretKeyRef`s — the Job spec never holds a credential value. With an SSH
/// key, `GIT_SSH_KNOWN_HOSTS` optionally reads the key `known_hosts` of the same Secret; with a
/// GitHub App, the Workspace's `pulumi.com/github-api-url` annotation becomes `GITHUB_API_URL`.
pub fn git_auth_env(ws: &Workspace) -> Vec<EnvVar> {
    use pulumi_gitauth::env;
    let mut out = Vec::new();
    let Some(auth) = ws.spec.git.as_ref().and_then(|g| g.auth.as_ref()) else {
        return out;
    };
    let mut add = |name: &str, selector: &SecretKeySelector| {
        out.push(EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(selector.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
    };
    if let Some(key) = &auth.ssh_private_key {
        add(env::SSH_PRIVATE_KEY, key);
        add(
            env::SSH_KNOWN_HOSTS,
            &SecretKeySelector {
                name: key.name.clone(),
                key: pulumi_gitauth::KNOWN_HOSTS_KEY.into(),
                optional: Some(true),
            },
        );
    }
    if let Some(s) = &auth.username {
        add(env::USERNAME, s);
    }
    if let Some(s) = &auth.password {
        add(env::PASSWORD, s);
    }
    if let Some(s) = &auth.token {
        add(env::TOKEN, s);
    }
    if let Some(app) = &auth.github_app {
        add(env::GITHUB_APP_ID, &app.app_id);
        add(env::GITHUB_APP_INSTALLATION_ID, &app.installation_id);
        add(env::GITHUB_APP_PRIVATE_KEY, &app.private_key);
        if let Some(url) = ws
            .annotations()
            .get(crate::source::auth::GITHUB_API_URL_ANNOTATION)
            .filter(|u| !u.is_empty())
        {
            out.push(env_value(env::GITHUB_API_URL, url));
        }
    }
    out
}

pub(crate) fn restricted_container_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        ..Default::default()
    }
}

pub(crate) fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// An environment variable holding a field of the pod (the downward API).
fn env_field(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn quantities(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    )
}

/// The `pulumi` container's resources when the Workspace sets none.
fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: quantities(&[
            ("cpu", "100m"),
            ("memory", "64Mi"),
            ("ephemeral-storage", "1Gi"),
        ]),
        limits: quantities(&[("ephemeral-storage", "8Gi")]),
        ..Default::default()
    }
}

/// An init container of the runner image (`bootstrap`, `fetch`).
fn runner_container(cfg: &JobConfig, stage: &str, mounts: Vec<VolumeMount>) -> Container {
    Container {
        name: stage.into(),
        image: Some(cfg.runner_image.clone()),
        image_pull_policy: Some(cfg.runner_pull_policy.clone()),
        args: Some(vec![stage.into()]),
        env: Some(vec![pulumi_env_var()]),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(restricted_container_context()),
        resources: Some(ResourceRequirements {
            requests: quantities(&[("cpu", "50m"), ("memory", "64Mi")]),
            limits: quantities(&[("memory", "512Mi")]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn pulumi_env_var() -> EnvVar {
    env_value(names::PULUMI_ENV_VAR, names::PULUMI_ENV_FILE)
}

/// The Job for an Update. `program` says whether the ConfigMap `<update>-program` is mounted.
/// Phases: the operator's pod spec (typed), then the Workspace's pod template merged in, then
/// the Job around it.
/// What of the plan shapes its Job: a Program's ConfigMap to mount, policy packs to fetch,
/// install and mount read-only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobShape {
    pub program: bool,
    pub policy_packs: bool,
}

impl JobShape {
    pub fn of(plan: &RunPlan) -> JobShape {
        JobShape {
            program: matches!(plan.source, Some(Source::Program { .. })),
            policy_packs: !plan.policy_packs.is_empty(),
        }
    }
}

pub fn build_job(
    update: &Update,
    ws: &Workspace,
    cfg: &JobConfig,
    shape: JobShape,
) -> Result<Job, serde_json::Error> {
    let ours = operator_pod_spec(update, ws, cfg, shape);
    let (pod_meta, mut pod_spec) = merge_pod_template(ws, ours, job_labels(update))?;
    if shape.policy_packs {
        crate::update::policy_job::set_volume_paths(&mut pod_spec);
    }
    let (key, value) = crate::update::fence::annotation();
    let mut pod_meta = pod_meta;
    pod_meta
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key, value);
    // The operator lets one pod of the Job through (see `admission`).
    pod_spec.scheduling_gates.get_or_insert_with(Vec::new).push(
        k8s_openapi::api::core::v1::PodSchedulingGate {
            name: crate::update::admission::GATE.into(),
        },
    );
    let deadline = update
        .spec
        .operation_timeout_seconds
        .filter(|s| *s > 0)
        .unwrap_or(names::DEFAULT_OPERATION_TIMEOUT_SECONDS);
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(update.name_any()),
            namespace: update.namespace(),
            labels: Some(job_labels(update)),
            owner_references: Some(update.controller_owner_ref(&()).into_iter().collect()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            // Retries belong to the Stack controller, which counts failures.
            backoff_limit: Some(0),
            active_deadline_seconds: Some(deadline),
            template: PodTemplateSpec {
                metadata: Some(pod_meta),
                spec: Some(pod_spec),
            },
            ..Default::default()
        }),
        status: None,
    })
}

/// The volumes every update pod has (the share, the plan, the Program's ConfigMap) and the
/// Secrets used whole as environment, with the `pulumi` container's mounts of them and the
/// `fetch` container's.
struct PodVolumes {
    volumes: Vec<Volume>,
    share: VolumeMount,
    fetch_mounts: Vec<VolumeMount>,
    pulumi_mounts: Vec<VolumeMount>,
}

fn pod_volumes(update: &Update, ws: &Workspace, shape: JobShape) -> PodVolumes {
    let name = update.name_any();
    let program = shape.program;
    let share = mount(names::SHARE_VOLUME, names::SHARE_MOUNT_PATH, false);
    let plan_mount = mount("plan", plan::PLAN_DIR, true);
    let mut fetch_mounts = vec![share.clone(), plan_mount.clone()];
    let mut volumes = vec![
        Volume {
            name: names::SHARE_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        secret_volume("plan", plan::plan_secret_name(&name), None),
    ];
    if program {
        fetch_mounts.push(mount("program", plan::PROGRAM_DIR, true));
        volumes.push(Volume {
            name: "program".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: plan::program_config_map_name(&name),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let mut pulumi_mounts = vec![
        share.clone(),
        plan_mount,
        crate::update::fence::mount(),
        mount(plan::RUNNER_VOLUME, plan::RUNNER_DIR, true),
    ];
    volumes.push(crate::update::fence::volume());
    volumes.push(Volume {
        name: plan::RUNNER_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    });
    if shape.policy_packs {
        volumes.push(crate::update::policy_job::packs_volume());
        fetch_mounts.push(crate::update::policy_job::packs_mount(false));
        pulumi_mounts.push(crate::update::policy_job::packs_mount(true));
    }
    for (i, (secret, optional)) in secret_env(ws).whole_secrets.into_iter().enumerate() {
        let volume = format!("env-secret-{i}");
        pulumi_mounts.push(mount(&volume, &plan::secret_env_dir(i), true));
        volumes.push(secret_volume(&volume, secret, optional));
    }
    PodVolumes {
        volumes,
        share,
        fetch_mounts,
        pulumi_mounts,
    }
}

fn secret_volume(name: &str, secret: String, optional: Option<bool>) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            optional,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The pod spec the operator wants, before the Workspace's pod template: the runner's
/// `bootstrap` and `fetch` init containers and the `pulumi` container.
fn operator_pod_spec(update: &Update, ws: &Workspace, cfg: &JobConfig, shape: JobShape) -> PodSpec {
    let spec = &ws.spec;
    let restricted = spec
        .security_profile
        .clone()
        .unwrap_or(SecurityProfile::Restricted)
        != SecurityProfile::Baseline;
    let v = pod_volumes(update, ws, shape);
    let mut fetch = runner_container(cfg, "fetch", v.fetch_mounts);
    let mut fetch_env = git_auth_env(ws);
    if !fetch_env.is_empty() {
        fetch_env.push(pulumi_env_var());
        fetch.env = Some(fetch_env);
    }
    let runner_rw = mount(plan::RUNNER_VOLUME, plan::RUNNER_DIR, false);
    let mut bootstrap = runner_container(cfg, "bootstrap", vec![runner_rw]);
    bootstrap.args = Some(vec!["bootstrap".into(), plan::RUNNER_BINARY.into()]);
    let mut pulumi = pulumi_container(ws, restricted, v.pulumi_mounts);
    let mut init_containers = vec![bootstrap, fetch];
    if shape.policy_packs {
        init_containers.push(crate::update::policy_job::policy_container(
            &pulumi, v.share,
        ));
    }
    if let Some(digest) = &cfg.plan_digest {
        // Every container that reads the plan (not `bootstrap`, which only copies the runner).
        let readers = init_containers.iter_mut().filter(|c| c.name != "bootstrap");
        for c in readers.chain(std::iter::once(&mut pulumi)) {
            c.env
                .get_or_insert_with(Vec::new)
                .push(env_value(plan::PLAN_DIGEST_ENV, digest));
        }
    }
    PodSpec {
        restart_policy: Some("Never".into()),
        // Pulumi records the hostname in the locks it takes (see `lock_holder`).
        hostname: Some(lock_holder(update).hostname),
        service_account_name: Some(
            spec.service_account_name
                .clone()
                .unwrap_or_else(|| names::DEFAULT_SERVICE_ACCOUNT.into()),
        ),
        termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
        security_context: Some(pod_security_context(restricted)),
        init_containers: Some(init_containers),
        containers: vec![pulumi],
        volumes: Some(v.volumes),
        ..Default::default()
    }
}

/// The `pulumi` container: the Workspace's image running the runner, with the Workspace's
/// environment and the operator's own variables.
fn pulumi_container(ws: &Workspace, restricted: bool, mounts: Vec<VolumeMount>) -> Container {
    let spec = &ws.spec;
    let image = spec
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| {
            if restricted {
                names::DEFAULT_IMAGE_RESTRICTED
            } else {
                names::DEFAULT_IMAGE_BASELINE
            }
            .to_string()
        });
    let mut env: Vec<EnvVar> = spec.env.clone().unwrap_or_default();
    if !env.iter().any(|e| e.name == "PULUMI_HOME") {
        env.push(env_value("PULUMI_HOME", "/share/.pulumi"));
    }
    env.push(env_field("POD_NAMESPACE", "metadata.namespace"));
    env.push(env_field("POD_SA_NAME", "spec.serviceAccountName"));
    env.push(pulumi_env_var());
    Container {
        name: names::PULUMI_CONTAINER.into(),
        image: Some(image),
        command: Some(vec![plan::RUNNER_BINARY.into(), "run".into()]),
        env: Some(env),
        env_from: spec.env_from.clone(),
        volume_mounts: Some(mounts),
        resources: Some(spec.resources.clone().unwrap_or_else(default_resources)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(restricted_container_context()),
        image_pull_policy: spec.image_pull_policy.clone().filter(|p| !p.is_empty()),
        ..Default::default()
    }
}

fn pod_security_context(restricted: bool) -> PodSecurityContext {
    let seccomp = Some(SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    });
    if restricted {
        PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(1000),
            run_as_group: Some(1000),
            fs_group: Some(1000),
            seccomp_profile: seccomp,
            ..Default::default()
        }
    } else {
        PodSecurityContext {
            seccomp_profile: seccomp,
            ..Default::default()
        }
    }
}

/// The operator's pod spec merged with the Workspace's pod template (as JSON, field by field,
/// as PKO merges it), the retained cache and the dependency cache mounted, and the template's
/// init containers given `PULUMI_ENV`.
fn merge_pod_template(
    ws: &Workspace,
    mut ours: PodSpec,
    labels: BTreeMap<String, String>,
) -> Result<(ObjectMeta, PodSpec), serde_json::Error> {
    // workspaceReclaimPolicy Retain: the retained workspace's cache at PULUMI_HOME.
    crate::update::cache::retained_cache(ws, &mut ours);
    let ours_meta = ObjectMeta {
        labels: Some(labels),
        ..Default::default()
    };
    let (pod_meta, mut pod_spec) = match &ws.spec.pod_template {
        None => (ours_meta, ours),
        Some(template) => {
            let mut pod_spec = serde_json::to_value(ours)?;
            if let Some(user) = &template.spec {
                crate::runtime::merge::merge(&mut pod_spec, user);
            }
            let pod_meta = match &template.metadata {
                Some(meta) => {
                    let mut m = serde_json::to_value(meta)?;
                    crate::runtime::merge::merge(&mut m, &serde_json::to_value(ours_meta)?);
                    serde_json::from_value(m)?
                }
                None => ours_meta,
            };
            (pod_meta, serde_json::from_value(pod_spec)?)
        }
    };
    // The template's `dependency-cache` volume, where the runner keeps installed dependencies.
    crate::update::cache::add_dependency_cache_mount(&mut pod_spec);
    // User init containers (e.g. writing $PULUMI_ENV) see the share volume and PULUMI_ENV too.
    for c in pod_spec.init_containers.iter_mut().flatten() {
        let env = c.env.get_or_insert_with(Vec::new);
        if !env.iter().any(|e| e.name == names::PULUMI_ENV_VAR) {
            env.push(pulumi_env_var());
        }
    }
    if let Some(extra) = &ws.spec.init_containers {
        if let Some(inits) = pod_spec.init_containers.as_mut() {
            for c in extra {
                inits.push(serde_json::from_value(c.clone())?);
            }
        }
    }
    Ok((pod_meta, pod_spec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::objects::{build_update, build_workspace, ResolvedSource};
    use pulumi_operator_api::Stack;
    use serde_json::json;

    fn stack() -> Stack {
        serde_json::from_value(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "web", "namespace": "apps", "uid": "u-1", "generation": 1},
            "spec": {
                "stack": "dev", "projectRepo": "https://git.example/app.git", "commit": "b".repeat(40), "repoDir": "infra",
                "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Secret", "secret": {"name": "pp", "key": "pass"}}},
                "backend": "file:///state", "serviceAccountName": "pulumi",
                "secrets": {"token": "do-not-leak"},
                "workspaceTemplate": {"spec": {"podTemplate": {"spec": {
                    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    "initContainers": [{"name": "extra", "image": "busybox", "command": ["sh", "-c", "echo A=1 >> $PULUMI_ENV"],
                                        "volumeMounts": [{"name": "share", "mountPath": "/share"}]}]}}}}
            }
        }))
        .unwrap()
    }

    fn update(s: &Stack) -> Update {
        let mut u = build_update(s, UpdateType::Up, "Initial stack update", &"b".repeat(40));
        u.metadata.uid = Some("upd-uid".into());
        u
    }

    fn cfg() -> JobConfig {
        JobConfig {
            runner_image: "runner".into(),
            runner_pull_policy: "IfNotPresent".into(),
            plan_digest: None,
        }
    }

    fn fixture() -> (Update, Workspace) {
        let s = stack();
        let src = ResolvedSource::Git {
            url: "https://git.example/app.git".into(),
            commit: "b".repeat(40),
            dir: Some("infra".into()),
            shallow: false,
        };
        (update(&s), build_workspace(&s, &src))
    }

    const POLICY: JobShape = JobShape {
        program: false,
        policy_packs: true,
    };

    const DIGEST: &str = "sha256:d1";

    fn pod_of(ws: &Workspace, u: &Update) -> Value {
        let cfg = JobConfig {
            plan_digest: Some(DIGEST.into()),
            ..cfg()
        };
        let job = serde_json::to_value(build_job(u, ws, &cfg, POLICY).unwrap()).unwrap();
        job["spec"]["template"]["spec"].clone()
    }

    fn tenant_template(ws: &mut Workspace, spec: Value) {
        ws.spec.pod_template = Some(serde_json::from_value(json!({ "spec": spec })).unwrap());
    }

    #[test]
    fn covered_operations_fetch_install_and_mount_the_packs_read_only() {
        use crate::update::policy_job::check_untouched;
        let (u, ws) = fixture();
        let pod = pod_of(&ws, &u);
        let inits: Vec<&str> = pod["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(inits, ["bootstrap", "fetch", "policy", "extra"]);
        let policy = &pod["initContainers"][2];
        assert_eq!(policy["command"], json!([plan::RUNNER_BINARY, "policy"]));
        assert_eq!(policy["image"], pod["containers"][0]["image"]);
        // Nothing of the tenant's environment reaches the install.
        assert!(!policy.to_string().contains("PULUMI_CONFIG_PASSPHRASE"));
        let mounts = pod["containers"][0]["volumeMounts"].to_string();
        assert!(mounts.contains(r#"{"mountPath":"/var/run/pulumi-operator/policy-packs","name":"policy-packs","readOnly":true}"#), "{mounts}");
        assert_eq!(check_untouched(&pod, "runner", Some(DIGEST), false), Ok(()));
        // The runner learns where the pulumi container's volumes are, whatever the template
        // says.
        let (u2, mut ws2) = fixture();
        tenant_template(
            &mut ws2,
            json!({"containers": [{"name": "pulumi", "env": [{"name": "PULUMI_OPERATOR_VOLUME_PATHS", "value": "/nothing"}]}]}),
        );
        let env = pod_of(&ws2, &u2)["containers"][0]["env"].to_string();
        assert!(!env.contains("/nothing"), "{env}");
        assert!(
            env.contains(r#""value":"/share:/var/run/pulumi-operator/plan:/var/run/pulumi-operator/fence:/var/run/pulumi-operator/bin:/var/run/pulumi-operator/policy-packs"#),
            "{env}"
        );
        // A covered Job is not built without the digest of its plan.
        assert!(check_untouched(&pod, "runner", None, false).is_err());
        assert!(check_untouched(&pod, "runner", Some("sha256:other"), false).is_err());
        // Without packs, the Job is as before.
        let plain =
            serde_json::to_value(build_job(&u, &ws, &cfg(), JobShape::default()).unwrap()).unwrap();
        assert!(!plain.to_string().contains("policy-packs"));
    }

    #[test]
    fn under_the_identity_guard_a_covered_pod_runs_only_the_operators_containers() {
        use crate::update::policy_job::check_untouched;
        let (u, ws) = fixture();
        // The fixture's pod template has an init container of its own ("extra").
        let err = check_untouched(&pod_of(&ws, &u), "runner", Some(DIGEST), true).unwrap_err();
        assert!(err.0.contains("\"extra\""), "{err}");
        assert!(err.0.contains("stack-identity-guard=enforced"), "{err}");
        let (u, mut ws) = fixture();
        ws.spec.init_containers = None;
        tenant_template(
            &mut ws,
            json!({"containers": [{"name": "sidecar", "image": "pulumi/pulumi", "command": ["pulumi", "up"]}]}),
        );
        let err = check_untouched(&pod_of(&ws, &u), "runner", Some(DIGEST), true).unwrap_err();
        assert!(err.0.contains("\"sidecar\""), "{err}");
        let (u, mut ws) = fixture();
        ws.spec.init_containers = None;
        ws.spec.pod_template = None;
        assert_eq!(
            check_untouched(&pod_of(&ws, &u), "runner", Some(DIGEST), true),
            Ok(())
        );
    }

    #[test]
    fn a_template_cannot_change_how_the_packs_run() {
        use crate::update::policy_job::check_untouched;
        let attempts = [
            (
                json!({"containers": [{"name": "pulumi", "command": ["pulumi", "up", "--yes"]}]}),
                "command",
            ),
            (
                json!({"containers": [{"name": "pulumi", "args": ["--skip-policies"]}]}),
                "arguments",
            ),
            (
                json!({"containers": [{"name": "pulumi", "env": [{"name": "NODE_OPTIONS", "value": "--require /tmp/x.js"}]}]}),
                "NODE_OPTIONS",
            ),
            (
                json!({"containers": [{"name": "pulumi", "env": [{"name": "PULUMI_POLICY_PACK", "value": "/tmp/mine"}]}]}),
                "PULUMI_POLICY_PACK",
            ),
            (
                json!({"initContainers": [{"name": "policy", "env": [{"name": "npm_config_registry", "value": "http://evil"}]}]}),
                "policy container",
            ),
            (
                json!({"initContainers": [{"name": "fetch", "args": ["bootstrap"]}]}),
                "fetch container",
            ),
            (
                json!({"volumes": [{"name": "policy-packs", "hostPath": {"path": "/tmp/packs"}}]}),
                "policy-packs volume",
            ),
            (
                json!({"containers": [{"name": "pulumi", "env": [{"name": "PULUMI_OPERATOR_PLAN_DIGEST", "value": "sha256:mine"}]}]}),
                "PULUMI_OPERATOR_PLAN_DIGEST",
            ),
            (
                json!({"volumes": [{"name": "mine", "emptyDir": {}}],
                    "containers": [{"name": "pulumi", "volumeMounts": [{"name": "mine", "mountPath": "/var/run/pulumi-operator/policy-packs/limits/k8s"}]}]}),
                "over, under or above",
            ),
            (
                json!({"containers": [{"name": "sidecar", "image": "busybox", "volumeMounts": [{"name": "policy-packs", "mountPath": "/packs"}]}]}),
                "writable",
            ),
            // Issue 45: the runner replaced by an init container writing its volume, a volume
            // mounted over or above the runner's directory, a pre-filled volume in its place,
            // a mount over the runner image's own executable, a bootstrap that copies
            // something else, a process namespace shared with a tracer.
            (
                json!({"initContainers": [{"name": "swap", "image": "busybox", "volumeMounts": [{"name": "pulumi-runner", "mountPath": "/r"}]}]}),
                "writable",
            ),
            (
                json!({"containers": [{"name": "pulumi", "volumeMounts": [{"name": "share", "mountPath": "/var/run/pulumi-operator/bin"}]}]}),
                "over, under or above",
            ),
            (
                json!({"containers": [{"name": "pulumi", "volumeMounts": [{"name": "share", "mountPath": "/var/run/pulumi-operator"}]}]}),
                "over, under or above",
            ),
            (
                json!({"volumes": [{"name": "pulumi-runner", "persistentVolumeClaim": {"claimName": "mine"}}]}),
                "pulumi-runner volume",
            ),
            (
                json!({"volumes": [{"name": "mine", "configMap": {"name": "fake"}}],
                    "initContainers": [{"name": "bootstrap", "volumeMounts": [{"name": "mine", "mountPath": "/usr/local/bin"}]}]}),
                "operator's containers",
            ),
            (
                json!({"initContainers": [{"name": "bootstrap", "args": ["bootstrap", "/share/x"]}]}),
                "bootstrap container",
            ),
            (
                json!({"shareProcessNamespace": true}),
                "shareProcessNamespace",
            ),
            (
                json!({"initContainers": [{"name": "fetch", "env": [{"name": "GIT_CONFIG_COUNT", "value": "1"}]}]}),
                "GIT_CONFIG_COUNT on the fetch container",
            ),
            (
                json!({"initContainers": [{"name": "fetch", "envFrom": [{"configMapRef": {"name": "git"}}]}]}),
                "fetch container envFrom",
            ),
            (
                json!({"containers": [{"name": "pulumi", "env": [{"name": "LD_PRELOAD", "value": "/share/x.so"}]}]}),
                "LD_PRELOAD",
            ),
        ];
        for (spec, want) in attempts {
            let (u, mut ws) = fixture();
            tenant_template(&mut ws, spec.clone());
            let err = check_untouched(&pod_of(&ws, &u), "runner", Some(DIGEST), false)
                .expect_err(&spec.to_string());
            assert!(err.0.contains(want), "{spec}: {err}");
        }
        // Harmless template fields still merge.
        let (u, mut ws) = fixture();
        tenant_template(
            &mut ws,
            json!({"nodeSelector": {"pool": "pulumi"}, "containers": [{"name": "pulumi", "env": [{"name": "TZ", "value": "UTC"}]}]}),
        );
        assert_eq!(
            check_untouched(&pod_of(&ws, &u), "runner", Some(DIGEST), false),
            Ok(())
        );
    }

    #[test]
    fn a_dependency_cache_volume_is_mounted_and_named_in_the_plan() {
        let (u, mut ws) = fixture();
        assert_eq!(build_plan(&u, &ws).unwrap().dependency_cache, None);
        let job =
            serde_json::to_value(build_job(&u, &ws, &cfg(), JobShape::default()).unwrap()).unwrap();
        assert!(!job.to_string().contains("/dependency-cache"));

        ws.spec.pod_template = Some(
            serde_json::from_value(json!({"spec": {"volumes": [
                {"name": "dependency-cache", "persistentVolumeClaim": {"claimName": "deps"}}]}}))
            .unwrap(),
        );
        assert_eq!(
            build_plan(&u, &ws).unwrap().dependency_cache.as_deref(),
            Some("/dependency-cache")
        );
        let job =
            serde_json::to_value(build_job(&u, &ws, &cfg(), JobShape::default()).unwrap()).unwrap();
        let pod = &job["spec"]["template"]["spec"];
        let pulumi = pod["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "pulumi")
            .unwrap();
        assert!(pulumi["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "dependency-cache" && m["mountPath"] == "/dependency-cache"));
        assert!(pod["volumes"].as_array().unwrap().iter().any(|v| {
            v["name"] == "dependency-cache" && v["persistentVolumeClaim"]["claimName"] == "deps"
        }));
    }

    #[test]
    fn a_workspace_env_name_the_operator_sets_fails_the_plan() {
        let (u, mut ws) = fixture();
        ws.spec.env = Some(vec![serde_json::from_value(
            json!({"name": "PULUMI_RUNNER_SHARE", "value": "/elsewhere"}),
        )
        .unwrap()]);
        let why = build_plan(&u, &ws).unwrap_err().to_string();
        assert!(
            why.starts_with("the Workspace's spec.env: \"PULUMI_RUNNER_SHARE\" is reserved"),
            "{why}"
        );
    }

    #[test]
    fn plan_from_workspace_and_update() {
        let (u, ws) = fixture();
        let p = build_plan(&u, &ws).unwrap();
        assert_eq!(p.operation, Operation::Up);
        assert_eq!(p.update_uid, "upd-uid");
        assert_eq!(p.outputs_secret, format!("{}-stack-outputs", u.name_any()));
        assert_eq!(
            p.source,
            Some(Source::Git {
                url: "https://git.example/app.git".into(),
                commit: Some("b".repeat(40)),
                reference: None,
                shallow: false,
                dir: Some("infra".into())
            })
        );
        assert_eq!(p.stack.name, "dev");
        assert!(p.stack.create);
        assert_eq!(p.options.message.as_deref(), Some("Initial stack update"));
        assert_eq!(p.outputs_labels["pulumi.com/stack-name"], "web");
        let mut bad = u.clone();
        bad.spec.update_type = Some(UpdateType::parse("explode"));
        assert!(build_plan(&bad, &ws)
            .unwrap_err()
            .to_string()
            .contains("unsupported update type"));
    }

    #[test]
    fn secret_env_names_reach_the_plan_and_whole_secrets_are_mounted() {
        let mut s = stack();
        s.spec.access_token_secret = Some("tok".into());
        s.spec.env_secrets = Some(vec!["cloud-creds".into(), "cloud-creds".into()]);
        s.spec.envs = Some(vec!["plain-cm".into()]);
        let src = ResolvedSource::Git {
            url: "https://git.example/app.git".into(),
            commit: "b".repeat(40),
            dir: None,
            shallow: false,
        };
        let mut ws = build_workspace(&s, &src);
        // The pod template's `pulumi` container counts too.
        ws.spec.pod_template = Some(
            serde_json::from_value(json!({"spec": {"containers": [{"name": "pulumi",
                "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}},
                        {"name": "REGION", "value": "eu-west-1"}],
                "envFrom": [{"secretRef": {"name": "extra", "optional": true}}]}]}}))
            .unwrap(),
        );
        let u = update(&s);
        let p = build_plan(&u, &ws).unwrap();
        assert_eq!(
            p.secret_env,
            [
                "PULUMI_ACCESS_TOKEN",
                "PULUMI_CONFIG_PASSPHRASE",
                "DB_PASSWORD"
            ]
        );
        assert_eq!(
            p.secret_env_dirs,
            [plan::secret_env_dir(0), plan::secret_env_dir(1)]
        );
        // Names only: no value of the Stack's secrets in the plan's new fields.
        let text = serde_json::to_string(&p.secret_env).unwrap();
        assert!(!text.contains("do-not-leak"));

        let v =
            serde_json::to_value(build_job(&u, &ws, &cfg(), JobShape::default()).unwrap()).unwrap();
        let ps = &v["spec"]["template"]["spec"];
        let volumes = ps["volumes"].as_array().unwrap();
        let secret_volumes: Vec<&Value> = volumes
            .iter()
            .filter(|v| v["name"].as_str().unwrap().starts_with("env-secret-"))
            .collect();
        assert_eq!(secret_volumes.len(), 2, "{volumes:#?}");
        assert_eq!(secret_volumes[0]["secret"]["secretName"], "cloud-creds");
        assert_eq!(secret_volumes[1]["secret"]["secretName"], "extra");
        assert_eq!(secret_volumes[1]["secret"]["optional"], true);
        let pulumi = ps["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "pulumi")
            .unwrap();
        let mounts: Vec<&str> = pulumi["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap())
            .collect();
        assert!(
            mounts.contains(&plan::secret_env_dir(0).as_str()),
            "{mounts:?}"
        );
        assert!(
            mounts.contains(&plan::secret_env_dir(1).as_str()),
            "{mounts:?}"
        );
    }

    /// A snapshot of the Job, reviewed by reading: its shape is the compatibility surface
    /// (container names, the share volume, PULUMI_ENV) and its security posture.
    #[test]
    fn job_snapshot() {
        let (u, ws) = fixture();
        let cfg = JobConfig {
            runner_image: "ghcr.io/pulumi-operator-rs/runner:v0.1.0".into(),
            runner_pull_policy: "IfNotPresent".into(),
            plan_digest: Some("sha256:0123".into()),
        };
        let job = build_job(&u, &ws, &cfg, JobShape::default()).unwrap();
        let v = serde_json::to_value(&job).unwrap();
        let name = u.name_any();
        assert_eq!(v["metadata"]["name"], name);
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Update");
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(v["metadata"]["labels"]["pulumi.com/stack-name"], "web");
        assert_eq!(v["spec"]["backoffLimit"], 0);
        assert_eq!(v["spec"]["activeDeadlineSeconds"], 14400);
        let pod = &v["spec"]["template"];
        assert_eq!(pod["metadata"]["labels"]["pulumi.com/stack-name"], "web");
        assert_eq!(
            pod["metadata"]["labels"]["auto.pulumi.com/update-name"],
            name
        );
        let ps = &pod["spec"];
        assert_eq!(ps["restartPolicy"], "Never");
        assert_eq!(ps["serviceAccountName"], "pulumi");
        assert_eq!(ps["terminationGracePeriodSeconds"], 600);
        assert_eq!(ps["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            ps["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(ps["tolerations"][0]["key"], "dedicated");
        let inits: Vec<&str> = ps["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(inits, ["bootstrap", "fetch", "extra"]);
        assert_eq!(
            ps["initContainers"][0]["args"],
            json!(["bootstrap", plan::RUNNER_BINARY])
        );
        assert_eq!(ps["initContainers"][2]["env"][0]["name"], "PULUMI_ENV");
        let c = &ps["containers"][0];
        assert_eq!(c["name"], "pulumi");
        assert_eq!(c["image"], "pulumi/pulumi:latest-nonroot");
        assert_eq!(c["command"], json!([plan::RUNNER_BINARY, "run"]));
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["resources"]["requests"]["ephemeral-storage"], "1Gi");
        let env: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            env,
            [
                "PULUMI_BACKEND_URL",
                "PULUMI_CONFIG_PASSPHRASE",
                "PULUMI_HOME",
                "POD_NAMESPACE",
                "POD_SA_NAME",
                "PULUMI_ENV",
                "PULUMI_OPERATOR_PLAN_DIGEST"
            ]
        );
        assert_eq!(c["env"][1]["valueFrom"]["secretKeyRef"]["name"], "pp");
        // The plan's digest reaches every container that reads the plan, never bootstrap.
        assert_eq!(c["env"][6]["value"], "sha256:0123");
        let fetch_env = ps["initContainers"][1]["env"].as_array().unwrap();
        assert_eq!(fetch_env.last().unwrap()["value"], "sha256:0123");
        assert!(!ps["initContainers"][0].to_string().contains("PLAN_DIGEST"));
        let volumes: Vec<&str> = ps["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(volumes, ["share", "plan", "fence", "pulumi-runner"]);
        // No secret value anywhere in the Job.
        assert!(!serde_json::to_string(&job).unwrap().contains("do-not-leak"));
    }

    #[test]
    fn git_credentials_reach_the_fetch_container_as_secret_refs_only() {
        let cfg = JobConfig {
            runner_image: "r".into(),
            runner_pull_policy: "IfNotPresent".into(),
            plan_digest: None,
        };
        let src = ResolvedSource::Git {
            url: "git@github.com:org/app.git".into(),
            commit: "b".repeat(40),
            dir: None,
            shallow: false,
        };
        let env_of = |s: &Stack| {
            let ws = build_workspace(s, &src);
            let job = build_job(&update(s), &ws, &cfg, JobShape::default()).unwrap();
            let v = serde_json::to_value(&job).unwrap();
            assert_eq!(
                v["spec"]["template"]["spec"]["initContainers"][1]["name"],
                "fetch"
            );
            // The pulumi container never sees git credentials.
            let pulumi_env = v["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
            assert!(!pulumi_env.contains("GIT_"), "{pulumi_env}");
            (
                ws,
                v["spec"]["template"]["spec"]["initContainers"][1]["env"].clone(),
            )
        };
        let mut s = stack();
        s.spec.git.git_auth = Some(
            serde_json::from_value(json!({"sshAuth": {
                "sshPrivateKey": {"type": "Secret", "secret": {"name": "deploy-key", "key": "id_ed25519"}},
                "password": {"type": "Secret", "secret": {"name": "deploy-key", "key": "passphrase"}}}}))
            .unwrap(),
        );
        let (ws, env) = env_of(&s);
        assert_eq!(
            serde_json::to_value(&ws.spec.git.as_ref().unwrap().auth).unwrap(),
            json!({"sshPrivateKey": {"name": "deploy-key", "key": "id_ed25519"},
                   "password": {"name": "deploy-key", "key": "passphrase"}})
        );
        assert_eq!(
            env,
            json!([
                {"name": "GIT_SSH_PRIVATE_KEY", "valueFrom": {"secretKeyRef": {"name": "deploy-key", "key": "id_ed25519"}}},
                {"name": "GIT_SSH_KNOWN_HOSTS", "valueFrom": {"secretKeyRef": {"name": "deploy-key", "key": "known_hosts", "optional": true}}},
                {"name": "GIT_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "deploy-key", "key": "passphrase"}}},
                {"name": "PULUMI_ENV", "value": "/share/.env"},
            ])
        );
        // A GitHub App on GitHub Enterprise: the API URL travels as a Workspace annotation.
        let mut s = stack();
        s.metadata.annotations = Some(
            [(
                "pulumi.com/github-api-url".to_string(),
                "https://ghe.example.com/api/v3".to_string(),
            )]
            .into(),
        );
        s.spec.git.git_auth = Some(
            serde_json::from_value(json!({"githubApp": {
                "appID": {"type": "Secret", "secret": {"name": "app", "key": "id"}},
                "installationID": {"type": "Secret", "secret": {"name": "app", "key": "installation"}},
                "privateKey": {"type": "Secret", "secret": {"name": "app", "key": "key.pem"}}}}))
            .unwrap(),
        );
        let (ws, env) = env_of(&s);
        assert_eq!(
            ws.annotations()["pulumi.com/github-api-url"],
            "https://ghe.example.com/api/v3"
        );
        let names: Vec<&str> = env
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "GIT_GITHUB_APP_ID",
                "GIT_GITHUB_APP_INSTALLATION_ID",
                "GIT_GITHUB_APP_PRIVATE_KEY",
                "GITHUB_API_URL",
                "PULUMI_ENV"
            ]
        );
        assert_eq!(env[2]["valueFrom"]["secretKeyRef"]["key"], "key.pem");
        // The deprecated gitAuthSecret: every key, optional.
        let mut s = stack();
        s.spec.git.git_auth_secret = Some("git-creds".into());
        let (_, env) = env_of(&s);
        let names: Vec<(&str, &str, bool)> = env
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e.get("valueFrom").is_some())
            .map(|e| {
                let r = &e["valueFrom"]["secretKeyRef"];
                (
                    e["name"].as_str().unwrap(),
                    r["key"].as_str().unwrap(),
                    r["optional"] == true,
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("GIT_SSH_PRIVATE_KEY", "sshPrivateKey", true),
                ("GIT_SSH_KNOWN_HOSTS", "known_hosts", true),
                ("GIT_USERNAME", "username", true),
                ("GIT_PASSWORD", "password", true),
                ("GIT_TOKEN", "accessToken", true),
            ]
        );
        // Without credentials the fetch container keeps its plain environment.
        let (_, env) = env_of(&stack());
        assert_eq!(env, json!([{"name": "PULUMI_ENV", "value": "/share/.env"}]));
    }

    #[test]
    fn plan_secret_holds_the_plan_and_is_owned_by_the_update() {
        let (u, ws) = fixture();
        let p = build_plan(&u, &ws).unwrap();
        let s = build_plan_secret(&u, &p).unwrap();
        assert_eq!(
            s.metadata.name.as_deref(),
            Some(format!("{}-plan", u.name_any()).as_str())
        );
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].uid,
            "upd-uid"
        );
        let text = &s.string_data.as_ref().unwrap()["plan.json"];
        let back: RunPlan = serde_json::from_str(text).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn baseline_profile_and_program_source() {
        let (u, mut ws) = fixture();
        ws.spec.security_profile = Some(SecurityProfile::Baseline);
        ws.spec.git = None;
        ws.spec.flux = Some(Box::new(pulumi_operator_api::WorkspaceFluxSource {
            url: Some("program://apps/prog".into()),
            digest: Some("sha256:x".into()),
            dir: None,
        }));
        let cfg = JobConfig {
            runner_image: "r".into(),
            runner_pull_policy: "Always".into(),
            plan_digest: None,
        };
        let v = serde_json::to_value(
            build_job(
                &u,
                &ws,
                &cfg,
                JobShape {
                    program: true,
                    policy_packs: false,
                },
            )
            .unwrap(),
        )
        .unwrap();
        let ps = &v["spec"]["template"]["spec"];
        assert!(ps["securityContext"].get("runAsNonRoot").is_none());
        assert_eq!(ps["containers"][0]["image"], "pulumi/pulumi:latest");
        assert_eq!(
            ps["volumes"][2]["configMap"]["name"],
            format!("{}-program", u.name_any())
        );
        assert_eq!(
            build_plan(&u, &ws).unwrap().source,
            Some(Source::Program {
                file: "/var/run/pulumi-operator/program/Pulumi.yaml".into()
            })
        );
    }
}
