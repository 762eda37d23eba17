//! The parts of an update Job that carry the administrator's policy packs, and the check that
//! the Workspace's pod template (the tenant's) left them as the operator built them: the
//! `fetch` container puts the packs in their own volume, the `policy` container (the
//! Workspace's image, with a clean environment) installs their dependencies there, and the
//! `pulumi` container mounts it read-only and runs the runner, which passes every pack to
//! every `preview` and `up`.

use crate::runtime::policy::NotAllowed;
use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, EnvVar, Volume, VolumeMount};
use pulumi_operator_api::names;
use pulumi_operator_api::plan::{self, POLICY_PACKS_DIR};
use serde_json::{json, Value};

/// The volume the packs are fetched into.
pub const PACKS_VOLUME: &str = "policy-packs";
/// The `policy` init container.
pub const POLICY_CONTAINER: &str = "policy";
/// The home of the `policy` container (package managers' caches), in the share volume.
const POLICY_HOME: &str = "/share/policy-home";

pub fn packs_volume() -> Volume {
    Volume {
        name: PACKS_VOLUME.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

pub fn packs_mount(read_only: bool) -> VolumeMount {
    VolumeMount {
        name: PACKS_VOLUME.into(),
        mount_path: POLICY_PACKS_DIR.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// The `policy` container's whole environment: nothing of the tenant's.
fn policy_env() -> Vec<EnvVar> {
    vec![
        env("HOME", POLICY_HOME),
        env("PULUMI_HOME", &format!("{POLICY_HOME}/.pulumi")),
        env(names::PULUMI_ENV_VAR, names::PULUMI_ENV_FILE),
    ]
}

fn policy_command() -> Vec<String> {
    vec![plan::RUNNER_BINARY.into(), "policy".into()]
}

/// The `policy` init container: the `pulumi` container's image, resources and security
/// context, the runner's `policy` stage, the share, the plan and the packs (writable here).
pub fn policy_container(pulumi: &Container, share: VolumeMount) -> Container {
    let plan_mount = VolumeMount {
        name: "plan".into(),
        mount_path: plan::PLAN_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    };
    Container {
        name: POLICY_CONTAINER.into(),
        image: pulumi.image.clone(),
        image_pull_policy: pulumi.image_pull_policy.clone(),
        command: Some(policy_command()),
        env: Some(policy_env()),
        volume_mounts: Some(vec![share, plan_mount, packs_mount(false)]),
        resources: pulumi.resources.clone(),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: pulumi.security_context.clone(),
        ..Default::default()
    }
}

fn containers<'a>(pod: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    pod.get(key).and_then(Value::as_array).into_iter().flatten()
}

fn named<'a>(pod: &'a Value, key: &str, name: &str) -> Option<&'a Value> {
    containers(pod, key).find(|c| c.get("name").and_then(Value::as_str) == Some(name))
}

fn empty(v: Option<&Value>) -> bool {
    v.is_none_or(|v| v.is_null() || v.as_array().is_some_and(|a| a.is_empty()))
}

/// Whether the final pod spec (the Workspace's template merged in) still carries the packs as
/// the operator built them; the error says what the template changed.
pub fn check_untouched(
    pod: &Value,
    runner_image: &str,
    plan_digest: Option<&str>,
) -> Result<(), NotAllowed> {
    let plan_digest = plan_digest.ok_or_else(|| refused("the plan's digest is unknown"))?;
    check_stages(pod, runner_image, plan_digest)?;
    check_plan_digest(pod, plan_digest)?;
    check_mounts(pod)?;
    check_env(pod)
}

/// The plan lists the packs, and its Secret can be edited: each container that reads it gets
/// the digest of the plan the operator wrote, once, as the operator set it.
fn check_plan_digest(pod: &Value, digest: &str) -> Result<(), NotAllowed> {
    let want = json!([{"name": plan::PLAN_DIGEST_ENV, "value": digest}]);
    for (key, name) in [
        ("initContainers", "fetch"),
        ("initContainers", POLICY_CONTAINER),
        ("containers", names::PULUMI_CONTAINER),
    ] {
        let set: Vec<&Value> = named(pod, key, name)
            .and_then(|c| c.get("env"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| e.get("name").and_then(Value::as_str) == Some(plan::PLAN_DIGEST_ENV))
            .collect();
        if serde_json::to_value(&set).ok().as_ref() != Some(&want) {
            return Err(refused(&format!(
                "the template changes {} of the {name} container",
                plan::PLAN_DIGEST_ENV
            )));
        }
    }
    Ok(())
}

fn refused(what: &str) -> NotAllowed {
    NotAllowed(format!(
        "{what}; the administrator's policy packs (StackPolicy) cover this operation and the \
         Workspace's pod template may not change how they are fetched, installed or run"
    ))
}

fn check_stages(pod: &Value, runner_image: &str, plan_digest: &str) -> Result<(), NotAllowed> {
    let fetch = named(pod, "initContainers", "fetch")
        .ok_or_else(|| refused("the fetch container is gone"))?;
    if fetch.get("image").and_then(Value::as_str) != Some(runner_image)
        || fetch.get("args") != Some(&json!(["fetch"]))
        || !empty(fetch.get("command"))
    {
        return Err(refused(
            "the template changes the fetch container's image, command or arguments",
        ));
    }
    let policy = named(pod, "initContainers", POLICY_CONTAINER)
        .ok_or_else(|| refused("the policy container is gone"))?;
    let mut want_env = policy_env();
    want_env.push(env(plan::PLAN_DIGEST_ENV, plan_digest));
    let want_env = serde_json::to_value(want_env).unwrap_or_default();
    if policy.get("command") != Some(&json!(policy_command()))
        || !empty(policy.get("args"))
        || policy.get("env") != Some(&want_env)
        || !empty(policy.get("envFrom"))
    {
        return Err(refused(
            "the template changes the policy container's command, arguments or environment",
        ));
    }
    let pulumi = named(pod, "containers", names::PULUMI_CONTAINER)
        .ok_or_else(|| refused("the pulumi container is gone"))?;
    if pulumi.get("command") != Some(&json!([plan::RUNNER_BINARY, "run"]))
        || !empty(pulumi.get("args"))
    {
        return Err(refused(
            "the template replaces the pulumi container's command or arguments",
        ));
    }
    Ok(())
}

/// The packs' volume is the operator's empty directory, only `fetch` and `policy` write it,
/// and nothing else is mounted over it.
fn check_mounts(pod: &Value) -> Result<(), NotAllowed> {
    let volume = containers(pod, "volumes")
        .find(|v| v.get("name").and_then(Value::as_str) == Some(PACKS_VOLUME));
    if volume != Some(&serde_json::to_value(packs_volume()).unwrap_or_default()) {
        return Err(refused("the template replaces the policy-packs volume"));
    }
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for c in containers(pod, key) {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            let writer = key == "initContainers" && (name == "fetch" || name == POLICY_CONTAINER);
            for m in c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let path = m
                    .get("mountPath")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let is_packs = m.get("name").and_then(Value::as_str) == Some(PACKS_VOLUME);
                let read_only = m.get("readOnly") == Some(&Value::Bool(true));
                if (is_packs && !read_only && !writer)
                    || (!is_packs && path.starts_with(POLICY_PACKS_DIR))
                {
                    return Err(refused(&format!(
                        "container {name:?} mounts {path:?} over or writable into the policy packs"
                    )));
                }
            }
        }
    }
    Ok(())
}

fn check_env(pod: &Value) -> Result<(), NotAllowed> {
    for key in ["initContainers", "containers"] {
        for c in containers(pod, key) {
            for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
                let name = e.get("name").and_then(Value::as_str).unwrap_or_default();
                if pulumi_operator_api::policy::changes_how_packs_run(name) {
                    return Err(NotAllowed(format!(
                        "environment variable {name} changes how policy packs run and may not be \
                         set on a Stack the administrator's policy packs (StackPolicy) cover"
                    )));
                }
            }
        }
    }
    Ok(())
}
