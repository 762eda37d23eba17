//! The parts of an update Job that carry the administrator's policy packs, and the check that
//! the Workspace's pod template (the tenant's) left them as the operator built them: the
//! `fetch` container puts the packs in their own volume, the `policy` container (the
//! Workspace's image, with a clean environment) installs their dependencies there, and the
//! `pulumi` container mounts it read-only and runs the runner, which passes every pack to
//! every `preview` and `up`.

use crate::runtime::limits::NotAllowed;
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
        volume_mounts: Some(vec![
            share,
            plan_mount,
            packs_mount(false),
            VolumeMount {
                name: plan::RUNNER_VOLUME.into(),
                mount_path: plan::RUNNER_DIR.into(),
                read_only: Some(true),
                ..Default::default()
            },
        ]),
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
    guarded: bool,
) -> Result<(), NotAllowed> {
    let plan_digest = plan_digest.ok_or_else(|| refused("the plan's digest is unknown"))?;
    if guarded {
        check_only_operator_containers(pod)?;
    }
    check_stages(pod, runner_image, plan_digest)?;
    check_operator_env(pod)?;
    check_plan_digest(pod, plan_digest)?;
    check_mounts(pod)?;
    check_processes(pod)?;
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
    for (stage, args) in [
        ("bootstrap", json!(["bootstrap", plan::RUNNER_BINARY])),
        ("fetch", json!(["fetch"])),
    ] {
        let c = named(pod, "initContainers", stage)
            .ok_or_else(|| refused(&format!("the {stage} container is gone")))?;
        if c.get("image").and_then(Value::as_str) != Some(runner_image)
            || c.get("args") != Some(&args)
            || !empty(c.get("command"))
        {
            return Err(refused(&format!(
                "the template changes the {stage} container's image, command or arguments"
            )));
        }
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

/// Under the stack identity guard the packs are a boundary: a container of the tenant's in
/// the pod would run as the Stack's ServiceAccount, with its identity, without the packs.
fn check_only_operator_containers(pod: &Value) -> Result<(), NotAllowed> {
    let tenant = containers(pod, "initContainers")
        .chain(containers(pod, "containers"))
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .find(|n| !OPERATOR_INITS.contains(n) && *n != names::PULUMI_CONTAINER);
    match tenant {
        None => Ok(()),
        Some(name) => Err(NotAllowed(format!(
            "container {name:?} of the Workspace's pod template would run as the Stack's \
             ServiceAccount without the administrator's policy packs, and the namespace is \
             under the stack identity guard ({}={}): an operation the packs cover runs only the \
             operator's containers there",
            crate::policy::GUARD_LABEL.0,
            crate::policy::GUARD_LABEL.1
        ))),
    }
}

/// `bootstrap` and `fetch` get only the operator's variables: git reads its configuration
/// from the environment (`GIT_CONFIG_*`, `GIT_SSH_COMMAND`), and `fetch` writes the packs.
fn check_operator_env(pod: &Value) -> Result<(), NotAllowed> {
    use pulumi_gitauth::env as git;
    let allowed = [
        names::PULUMI_ENV_VAR,
        plan::PLAN_DIGEST_ENV,
        git::SSH_PRIVATE_KEY,
        git::SSH_KNOWN_HOSTS,
        git::USERNAME,
        git::PASSWORD,
        git::TOKEN,
        git::GITHUB_APP_ID,
        git::GITHUB_APP_INSTALLATION_ID,
        git::GITHUB_APP_PRIVATE_KEY,
        git::GITHUB_API_URL,
    ];
    for stage in ["bootstrap", "fetch"] {
        let Some(c) = named(pod, "initContainers", stage) else {
            continue;
        };
        let extra = c
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|e| e.get("name").and_then(Value::as_str))
            .find(|n| !allowed.contains(n));
        if let Some(name) = extra {
            return Err(refused(&format!(
                "the template sets {name} on the {stage} container"
            )));
        }
        if !empty(c.get("envFrom")) {
            return Err(refused(&format!(
                "the template gives the {stage} container envFrom"
            )));
        }
    }
    Ok(())
}

/// A directory only the operator's own containers write: its volume, where it is mounted,
/// and the init containers that may write it.
struct Guarded {
    volume: &'static str,
    path: &'static str,
    writers: &'static [&'static str],
}

/// The runner (copied by `bootstrap`) and the packs (fetched by `fetch`, installed by
/// `policy`): what the tenant's containers could otherwise replace before the `pulumi`
/// container runs them.
const GUARDED: [Guarded; 2] = [
    Guarded {
        volume: plan::RUNNER_VOLUME,
        path: plan::RUNNER_DIR,
        writers: &["bootstrap"],
    },
    Guarded {
        volume: PACKS_VOLUME,
        path: POLICY_PACKS_DIR,
        writers: &["fetch", POLICY_CONTAINER],
    },
];

/// The operator's own init containers, which run the runner image or the runner.
const OPERATOR_INITS: [&str; 3] = ["bootstrap", "fetch", POLICY_CONTAINER];

/// Whether one of two absolute paths is the other or lies under it.
fn overlaps(a: &str, b: &str) -> bool {
    let parts = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_string)
            .collect()
    };
    let (a, b) = (parts(a), parts(b));
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// Every guarded volume is the operator's empty directory; only its writers mount it
/// writable; no other volume is mounted over, under or above it; and the operator's init
/// containers mount nothing but the operator's volumes (a mount over the runner image's
/// executable would replace `bootstrap` or `fetch`).
fn check_mounts(pod: &Value) -> Result<(), NotAllowed> {
    let empty_dir = |name: &str| {
        serde_json::to_value(Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        })
        .unwrap_or_default()
    };
    for g in &GUARDED {
        let volume = containers(pod, "volumes")
            .find(|v| v.get("name").and_then(Value::as_str) == Some(g.volume));
        if volume != Some(&empty_dir(g.volume)) {
            return Err(refused(&format!(
                "the template replaces the {} volume",
                g.volume
            )));
        }
    }
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for c in containers(pod, key) {
            let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
            let operators = key == "initContainers" && OPERATOR_INITS.contains(&name);
            for m in c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                check_mount(key, name, operators, m)?;
            }
        }
    }
    Ok(())
}

/// One mount of container `name` (of the pod spec's list `key`), see [`check_mounts`].
fn check_mount(key: &str, name: &str, operators: bool, m: &Value) -> Result<(), NotAllowed> {
    let path = m
        .get("mountPath")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let volume = m.get("name").and_then(Value::as_str).unwrap_or_default();
    let read_only = m.get("readOnly") == Some(&Value::Bool(true));
    let bad = |what: &str| {
        Err(refused(&format!(
            "container {name:?} mounts {volume:?} at {path:?} {what}"
        )))
    };
    for g in &GUARDED {
        if volume == g.volume {
            let writer = key == "initContainers" && g.writers.contains(&name);
            if !read_only && !writer {
                return bad("writable: only the operator's containers write it");
            }
        } else if overlaps(path, g.path) {
            return bad(&format!("over, under or above {}", g.path));
        }
    }
    let own = [
        (names::SHARE_VOLUME, names::SHARE_MOUNT_PATH),
        ("plan", plan::PLAN_DIR),
        ("program", plan::PROGRAM_DIR),
        (PACKS_VOLUME, POLICY_PACKS_DIR),
        (plan::RUNNER_VOLUME, plan::RUNNER_DIR),
    ];
    if operators && !own.contains(&(volume, path)) {
        return bad("into one of the operator's containers");
    }
    Ok(())
}

/// No process of another container may see the runner's and Pulumi's: it could trace them.
fn check_processes(pod: &Value) -> Result<(), NotAllowed> {
    for field in ["shareProcessNamespace", "hostPID"] {
        if pod.get(field) == Some(&Value::Bool(true)) {
            return Err(refused(&format!("the template sets {field}")));
        }
    }
    Ok(())
}

/// The mount paths of the `pulumi` container's volumes, as [`plan::VOLUME_PATHS_ENV`] says
/// them.
fn volume_paths(pulumi: &Container) -> String {
    pulumi
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str())
        .collect::<Vec<_>>()
        .join(":")
}

/// Tells the runner of a covered operation where the `pulumi` container's volumes are
/// mounted (see [`plan::VOLUME_PATHS_ENV`]); set once the Workspace's template is merged in,
/// over any value of the template's, so there is nothing of the tenant's left to check.
pub fn set_volume_paths(spec: &mut k8s_openapi::api::core::v1::PodSpec) {
    for c in spec
        .containers
        .iter_mut()
        .filter(|c| c.name == names::PULUMI_CONTAINER)
    {
        let value = volume_paths(c);
        let env = c.env.get_or_insert_with(Vec::new);
        env.retain(|e| e.name != plan::VOLUME_PATHS_ENV);
        env.push(self::env(plan::VOLUME_PATHS_ENV, &value));
    }
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
