//! The retained workspace of a Stack with `workspaceReclaimPolicy: Retain`, built by pure
//! functions from its Workspace:
//!
//! - a StatefulSet `<ws>-workspace` (1 replica, PKO's name, labels and pod shape: init
//!   containers `bootstrap` and `fetch` from the runner image, container `pulumi` from the
//!   Workspace's image) whose `pulumi` container runs `pulumi-runner workspace`: the program at
//!   the Workspace's revision (the last one the Stack deployed), dependencies installed, the
//!   stack selected and configured — and then nothing, so that `kubectl exec` finds it ready;
//! - its plan Secret `<ws>-workspace-plan` (a [`WorkspacePlan`]: the same `build_plan` as an
//!   Update's, without the Update), owned by the StatefulSet;
//! - a cache volume (volumeClaimTemplate `cache`, claim `cache-<ws>-workspace-0`) mounted at
//!   `/share/.pulumi` (`PULUMI_HOME`: plugins, policy packs, the selected stack), which the
//!   stack's update Jobs mount too ([`retained_cache`]) so that the next update does not
//!   download plugins again.
//!
//! The pod template is the update Job's own pod template (`build_job`), so every
//! `workspaceTemplate` customization applies to both in the same way.

pub use crate::update::cache::{
    add_cache_mount, cache_claim_name, pod_name, selector_labels, statefulset_name, CACHE_SIZE,
    CACHE_VOLUME,
};
use crate::update::errors::InvalidUpdate;
use crate::update::job::{build_job, build_plan, JobConfig};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, ExecAction, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodTemplateSpec,
    Probe, Secret, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use pulumi_operator_api::names;
use pulumi_operator_api::plan::{self, OperationOptions, RetainedWorkspace, Source, WorkspacePlan};
use pulumi_operator_api::{Update, UpdateSpec, UpdateType, Workspace};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// On the StatefulSet: a hash of everything applied (StatefulSet and plan Secret), so that a
/// reconcile writes nothing when nothing changed.
pub const APPLIED_HASH_ANNOTATION: &str = "auto.pulumi.com/applied-hash";

/// Selector labels plus `pulumi.com/stack-name` (so that `kubectl get ... -l
/// pulumi.com/stack-name=<stack>` lists the StatefulSet, its pod and its claim).
pub fn labels(ws: &Workspace) -> BTreeMap<String, String> {
    let name = ws.name_any();
    let mut l = selector_labels(&name);
    let stack = ws
        .labels()
        .get(names::STACK_NAME_LABEL)
        .cloned()
        .unwrap_or(name);
    l.insert(names::STACK_NAME_LABEL.to_string(), stack);
    l
}

/// The revision a Workspace holds: the git commit, the artifact or Program digest, the local
/// directory, or the project.
pub fn revision(ws: &Workspace) -> String {
    let s = &ws.spec;
    if let Some(r) = s.git.as_ref().and_then(|g| g.effective_ref()) {
        return r.to_string();
    }
    if let Some(d) = s.flux.as_ref().and_then(|f| f.digest.clone()) {
        return d;
    }
    if let Some(d) = s.local.as_ref().and_then(|l| l.dir.clone()) {
        return d;
    }
    s.project_info
        .as_ref()
        .map(|p| format!("{} ({})", p.name, p.runtime))
        .unwrap_or_default()
}

/// The Update-shaped input `build_plan` and `build_job` take: `<ws>-workspace`, the
/// Workspace's (first) stack, no operation of its own.
fn workspace_update(ws: &Workspace) -> Result<Update, WorkspaceError> {
    let stack = ws
        .spec
        .stacks
        .iter()
        .flatten()
        .next()
        .map(|s| s.name.clone())
        .filter(|s| !s.is_empty())
        .ok_or(WorkspaceError::NoStack)?;
    let mut u = Update::new(
        &statefulset_name(&ws.name_any()),
        UpdateSpec {
            workspace_name: Some(ws.name_any()),
            stack_name: Some(stack),
            // Only to satisfy the Update shape: a workspace runs no operation.
            update_type: Some(UpdateType::Preview),
            ..Default::default()
        },
    );
    u.metadata.namespace = ws.namespace();
    u.metadata.labels = Some(labels(ws));
    // build_job names an owner; the Job's metadata is not used.
    u.metadata.uid = Some("workspace".into());
    Ok(u)
}

/// The workspace pod's plan: the source and the stack of an Update's plan, nothing else.
/// A Program is read from the plan Secret itself (key `Pulumi.yaml`).
pub fn build_workspace_plan(ws: &Workspace) -> Result<WorkspacePlan, WorkspaceError> {
    let mut p = build_plan(&workspace_update(ws)?, ws)?;
    p.update_name.clear();
    p.update_uid.clear();
    p.outputs_secret.clear();
    p.outputs_labels.clear();
    p.options = OperationOptions::default();
    // The workspace pod always mounts its cache claim.
    p.dependency_cache = crate::update::cache::dependency_cache_dir(ws, true);
    if let Some(Source::Program { file }) = p.source.as_mut() {
        *file = format!("{}/{}", plan::PLAN_DIR, plan::WORKSPACE_PROGRAM_KEY);
    }
    Ok(WorkspacePlan {
        plan: p,
        workspace: RetainedWorkspace {
            name: ws.name_any(),
            revision: revision(ws),
        },
    })
}

/// Everything the Workspace controller applies for a retained workspace.
#[derive(Clone, Debug)]
pub struct Desired {
    pub statefulset: StatefulSet,
    pub plan: WorkspacePlan,
    /// The rendered Pulumi.yaml of a Program source.
    pub program: Option<String>,
    /// Hash of all of the above (also in the StatefulSet's `APPLIED_HASH_ANNOTATION`).
    pub hash: String,
}

fn sha256_hex(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a retained workspace cannot be built. The messages are the Workspace's `Ready`
/// condition's.
#[derive(thiserror::Error, Debug)]
pub enum WorkspaceError {
    #[error("the Workspace names no stack (spec.stacks)")]
    NoStack,
    #[error(transparent)]
    Invalid(#[from] InvalidUpdate),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("cannot build the pod template")]
    NoPodTemplate,
}

/// The StatefulSet, plan and hash of a retained workspace. `program` is the rendered
/// Pulumi.yaml when the Workspace's source is a Program. The error explains what is invalid.
pub fn desired(
    ws: &Workspace,
    cfg: &JobConfig,
    program: Option<String>,
) -> Result<Desired, WorkspaceError> {
    let plan = build_workspace_plan(ws)?;
    let labels = labels(ws);
    let mut template = job_pod_template(ws, cfg)?;
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    let mut pod_labels = meta.labels.take().unwrap_or_default();
    pod_labels.remove(names::UPDATE_NAME_LABEL);
    pod_labels.extend(labels.clone());
    meta.labels = Some(pod_labels);
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(
        names::REVISION_HASH_ANNOTATION.to_string(),
        revision_hash(ws),
    );
    let spec = template
        .spec
        .as_mut()
        .ok_or(WorkspaceError::NoPodTemplate)?;
    spec.restart_policy = Some("Always".into());
    add_cache_mount(spec);
    for c in spec
        .containers
        .iter_mut()
        .filter(|c| c.name == names::PULUMI_CONTAINER)
    {
        run_workspace(c);
    }
    let mut statefulset = statefulset(ws, template, labels);
    let plan_text = serde_json::to_string(&plan)?;
    let hash = sha256_hex(&[
        &serde_json::to_value(&statefulset)?.to_string(),
        &plan_text,
        program.as_deref().unwrap_or(""),
    ]);
    statefulset.metadata.annotations =
        Some([(APPLIED_HASH_ANNOTATION.to_string(), hash.clone())].into());
    Ok(Desired {
        statefulset,
        plan,
        program,
        hash,
    })
}

/// The update Job's pod template, without a Job's own cache mount (the StatefulSet mounts it
/// from its claim template).
fn job_pod_template(ws: &Workspace, cfg: &JobConfig) -> Result<PodTemplateSpec, WorkspaceError> {
    let update = workspace_update(ws)?;
    let mut bare = ws.clone();
    bare.status = None;
    let job = build_job(&update, &bare, cfg, crate::update::job::JobShape::default())?;
    let mut template = job
        .spec
        .map(|s| s.template)
        .ok_or(WorkspaceError::NoPodTemplate)?;
    // Not an operation's pod: the StatefulSet keeps one pod per name, and no operator
    // admission ever opens an update pod's gate for it (see `update::admission`).
    if let Some(gates) = template
        .spec
        .as_mut()
        .and_then(|s| s.scheduling_gates.as_mut())
    {
        gates.retain(|g| g.name != crate::update::admission::GATE);
    }
    if let Some(annotations) = template
        .metadata
        .as_mut()
        .and_then(|m| m.annotations.as_mut())
    {
        annotations.remove(crate::update::fence::FENCED_ANNOTATION);
    }
    Ok(template)
}

/// PKO's pod replacement trigger: any change of the Workspace's generation or source rolls
/// the pod, which then fetches and prepares the new revision.
fn revision_hash(ws: &Workspace) -> String {
    // A hash of this JSON text (its keys sorted): changing its shape would roll every pod.
    let source = json!({"generation": ws.metadata.generation, "git": ws.spec.git,
                        "flux": ws.spec.flux, "local": ws.spec.local,
                        "projectInfo": ws.spec.project_info});
    sha256_hex(&[&source.to_string()])[..32].to_string()
}

/// The `pulumi` container runs `pulumi-runner workspace` in the workspace directory, ready
/// once the workspace is prepared (unless the template says otherwise).
fn run_workspace(c: &mut Container) {
    c.command = Some(vec![plan::RUNNER_BINARY.into(), "workspace".into()]);
    if c.working_dir.is_none() {
        c.working_dir = Some(plan::WORKSPACE_DIR.into());
    }
    if c.readiness_probe.is_none() {
        c.readiness_probe = Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec![
                    plan::RUNNER_BINARY.into(),
                    "workspace".into(),
                    "--check".into(),
                ]),
            }),
            period_seconds: Some(2),
            failure_threshold: Some(1),
            timeout_seconds: Some(5),
            ..Default::default()
        });
    }
}

/// The StatefulSet `<ws>-workspace` around the pod template, owned by the Workspace.
fn statefulset(
    ws: &Workspace,
    template: PodTemplateSpec,
    labels: BTreeMap<String, String>,
) -> StatefulSet {
    let name = ws.name_any();
    let sts_name = statefulset_name(&name);
    StatefulSet {
        metadata: ObjectMeta {
            name: Some(sts_name.clone()),
            namespace: ws.namespace(),
            labels: Some(labels.clone()),
            owner_references: Some(ws.controller_owner_ref(&()).into_iter().collect()),
            ..Default::default()
        },
        spec: Some(StatefulSetSpec {
            replicas: Some(1),
            service_name: Some(sts_name),
            // Parallel rolls past a pod that never became ready (PKO, issue 801).
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector {
                match_labels: Some(selector_labels(&name)),
                match_expressions: None,
            },
            template,
            volume_claim_templates: Some(vec![cache_claim_template(ws, labels)]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The cache claim's template. The StatefulSet controller copies its metadata into the claim:
/// owned by the Workspace, the cache goes when the Stack goes (StatefulSets of Kubernetes
/// < 1.27 never delete their claims).
fn cache_claim_template(ws: &Workspace, labels: BTreeMap<String, String>) -> PersistentVolumeClaim {
    let owner = ws.controller_owner_ref(&()).map(|o| {
        vec![OwnerReference {
            controller: Some(false),
            ..o
        }]
    });
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(CACHE_VOLUME.into()),
            labels: Some(labels),
            owner_references: owner,
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), Quantity(CACHE_SIZE.into()))].into()),
                limits: None,
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// The plan Secret `<ws>-workspace-plan`, owned by the StatefulSet (it goes with it).
pub fn build_plan_secret(
    ws: &Workspace,
    desired: &Desired,
    owner: &StatefulSet,
) -> Result<Secret, serde_json::Error> {
    let mut data = BTreeMap::new();
    data.insert(
        plan::PLAN_KEY.to_string(),
        serde_json::to_string_pretty(&desired.plan)?,
    );
    if let Some(p) = &desired.program {
        data.insert(plan::WORKSPACE_PROGRAM_KEY.to_string(), p.clone());
    }
    let owner = owner.controller_owner_ref(&()).map(|o| OwnerReference {
        controller: Some(false),
        ..o
    });
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(plan::workspace_plan_secret_name(&ws.name_any())),
            namespace: ws.namespace(),
            labels: Some(labels(ws)),
            owner_references: Some(owner.into_iter().collect()),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(data),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::objects::{build_workspace, ResolvedSource};
    use pulumi_operator_api::{Stack, WorkspaceStatus};
    use serde_json::Value;

    fn stack(extra: Value) -> Stack {
        let mut v = json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "web", "namespace": "apps", "uid": "stack-uid", "generation": 1},
            "spec": {
                "stack": "dev", "projectRepo": "https://git.example/app.git", "commit": "b".repeat(40),
                "repoDir": "infra", "backend": "file:///state", "serviceAccountName": "pulumi",
                "workspaceReclaimPolicy": "Retain",
                "envRefs": {"PULUMI_CONFIG_PASSPHRASE": {"type": "Secret", "secret": {"name": "pp", "key": "pass"}}},
                "config": {"greeting": "hi"},
                "secrets": {"token": "do-not-leak-3f1"},
            }
        });
        crate::runtime::merge::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap()
    }

    fn workspace(s: &Stack) -> Workspace {
        let src = ResolvedSource::Git {
            url: "https://git.example/app.git".into(),
            commit: "b".repeat(40),
            dir: Some("infra".into()),
            shallow: false,
        };
        let mut ws = build_workspace(s, &src);
        ws.metadata.uid = Some("ws-uid".into());
        ws.metadata.generation = Some(3);
        ws
    }

    fn cfg() -> JobConfig {
        JobConfig {
            runner_image: "ghcr.io/pulumi-operator-rs/runner:v0.1.0".into(),
            runner_pull_policy: "IfNotPresent".into(),
            plan_digest: None,
        }
    }

    #[test]
    fn names_follow_pko() {
        assert_eq!(statefulset_name("web"), "web-workspace");
        assert_eq!(pod_name("web"), "web-workspace-0");
        assert_eq!(cache_claim_name("web"), "cache-web-workspace-0");
    }

    #[test]
    fn workspace_plan_is_the_update_plan_without_an_update() {
        let ws = workspace(&stack(json!({})));
        let wp = build_workspace_plan(&ws).unwrap();
        assert_eq!(wp.workspace.name, "web");
        assert_eq!(wp.workspace.revision, "b".repeat(40));
        assert_eq!(wp.plan.stack.name, "dev");
        assert!(wp.plan.stack.create);
        assert_eq!(wp.plan.stack.config.len(), 2);
        assert!(wp.plan.update_name.is_empty() && wp.plan.outputs_secret.is_empty());
        assert_eq!(wp.plan.options, OperationOptions::default());
        assert!(
            matches!(wp.plan.source, Some(Source::Git { ref dir, .. }) if dir.as_deref() == Some("infra"))
        );
    }

    #[test]
    fn program_sources_are_read_from_the_plan_secret() {
        let mut ws = workspace(&stack(json!({})));
        ws.spec.git = None;
        ws.spec.flux = Some(Box::new(pulumi_operator_api::WorkspaceFluxSource {
            url: Some("program://apps/prog".into()),
            digest: Some("sha256:abc".into()),
            dir: None,
        }));
        let d = desired(&ws, &cfg(), Some("name: prog\nruntime: yaml\n".into())).unwrap();
        assert_eq!(
            d.plan.plan.source,
            Some(Source::Program {
                file: "/var/run/pulumi-operator/plan/Pulumi.yaml".into()
            })
        );
        assert_eq!(d.plan.workspace.revision, "sha256:abc");
        let sts = d.statefulset.clone();
        let secret = build_plan_secret(&ws, &d, &with_uid(sts)).unwrap();
        let data = secret.string_data.unwrap();
        assert_eq!(data["Pulumi.yaml"], "name: prog\nruntime: yaml\n");
        let v = serde_json::to_value(&d.statefulset).unwrap();
        let vols: Vec<&str> = v["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            vols,
            ["share", "plan", "fence", "pulumi-runner"],
            "no program ConfigMap"
        );
        // The workspace's pod is never held at an update pod's gate.
        let gates = &v["spec"]["template"]["spec"]["schedulingGates"];
        assert!(
            gates.as_array().is_none_or(|g| g.is_empty()),
            "gated: {gates}"
        );
    }

    fn with_uid(mut sts: StatefulSet) -> StatefulSet {
        sts.metadata.uid = Some("sts-uid".into());
        sts
    }

    /// A snapshot of the StatefulSet, reviewed by reading: PKO's names, labels and pod shape,
    /// the runner's `workspace` command, the cache claim at PULUMI_HOME.
    #[test]
    fn statefulset_snapshot() {
        let ws = workspace(&stack(
            json!({"spec": {"workspaceTemplate": {"spec": {"podTemplate": {"spec": {
            "tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}}}}),
        ));
        let d = desired(&ws, &cfg(), None).unwrap();
        let v = serde_json::to_value(&d.statefulset).unwrap();
        assert_eq!(v["metadata"]["name"], "web-workspace");
        assert_eq!(v["metadata"]["namespace"], "apps");
        assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Workspace");
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "ws-uid");
        assert_eq!(v["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            v["metadata"]["annotations"][APPLIED_HASH_ANNOTATION],
            d.hash
        );
        let labels = &v["metadata"]["labels"];
        assert_eq!(labels["pulumi.com/stack-name"], "web");
        assert_eq!(labels["auto.pulumi.com/component"], "workspace");
        assert_eq!(labels["auto.pulumi.com/workspace-name"], "web");
        let spec = &v["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["serviceName"], "web-workspace");
        assert_eq!(spec["podManagementPolicy"], "Parallel");
        assert_eq!(
            spec["selector"]["matchLabels"],
            json!({"auto.pulumi.com/component": "workspace", "auto.pulumi.com/workspace-name": "web"})
        );
        let claim = &spec["volumeClaimTemplates"][0];
        assert_eq!(claim["metadata"]["name"], "cache");
        assert_eq!(claim["metadata"]["labels"]["pulumi.com/stack-name"], "web");
        assert_eq!(claim["metadata"]["ownerReferences"][0]["uid"], "ws-uid");
        assert_eq!(claim["metadata"]["ownerReferences"][0]["controller"], false);
        assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "4Gi");

        let pod = &spec["template"];
        let pod_labels = &pod["metadata"]["labels"];
        assert_eq!(pod_labels["auto.pulumi.com/workspace-name"], "web");
        assert_eq!(pod_labels["pulumi.com/stack-name"], "web");
        assert!(pod_labels.get("auto.pulumi.com/update-name").is_none());
        assert_eq!(
            pod["metadata"]["annotations"]["auto.pulumi.com/revision-hash"]
                .as_str()
                .unwrap()
                .len(),
            32
        );
        let ps = &pod["spec"];
        assert_eq!(ps["restartPolicy"], "Always");
        assert_eq!(ps["serviceAccountName"], "pulumi");
        assert_eq!(ps["securityContext"]["runAsNonRoot"], true);
        assert_eq!(ps["securityContext"]["fsGroup"], 1000);
        assert_eq!(ps["tolerations"][0]["key"], "dedicated");
        let inits: Vec<&str> = ps["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(inits, ["bootstrap", "fetch"]);
        assert_eq!(
            ps["initContainers"][0]["image"],
            "ghcr.io/pulumi-operator-rs/runner:v0.1.0"
        );
        let c = &ps["containers"][0];
        assert_eq!(c["name"], "pulumi");
        assert_eq!(c["image"], "pulumi/pulumi:latest-nonroot");
        assert_eq!(c["command"], json!([plan::RUNNER_BINARY, "workspace"]));
        assert_eq!(c["workingDir"], "/share/workspace");
        assert_eq!(
            c["readinessProbe"]["exec"]["command"],
            json!([plan::RUNNER_BINARY, "workspace", "--check"])
        );
        let mounts: Vec<(&str, &str)> = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap(),
                    m["mountPath"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            mounts,
            [
                ("share", "/share"),
                ("plan", "/var/run/pulumi-operator/plan"),
                ("fence", "/var/run/pulumi-operator/fence"),
                ("pulumi-runner", "/var/run/pulumi-operator/bin"),
                ("cache", "/share/.pulumi")
            ]
        );
        let env: BTreeMap<String, Value> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
            .collect();
        assert_eq!(env["PULUMI_HOME"]["value"], "/share/.pulumi");
        assert_eq!(
            ps["volumes"][1]["secret"]["secretName"],
            "web-workspace-plan"
        );
        // No secret value in the StatefulSet; the plan (a Secret) holds the literal.
        let text = serde_json::to_string(&d.statefulset).unwrap();
        assert!(!text.contains("do-not-leak-3f1"));
        let secret = build_plan_secret(&ws, &d, &with_uid(d.statefulset.clone())).unwrap();
        assert_eq!(secret.metadata.name.as_deref(), Some("web-workspace-plan"));
        assert_eq!(
            secret.metadata.owner_references.as_ref().unwrap()[0].uid,
            "sts-uid"
        );
        let plan_text = &secret.string_data.as_ref().unwrap()["plan.json"];
        assert!(plan_text.contains("do-not-leak-3f1"));
        let back: WorkspacePlan = serde_json::from_str(plan_text).unwrap();
        assert_eq!(back, d.plan);
    }

    #[test]
    fn the_hash_follows_what_is_applied() {
        let s = stack(json!({}));
        let ws = workspace(&s);
        let a = desired(&ws, &cfg(), None).unwrap();
        assert_eq!(a.hash, desired(&ws, &cfg(), None).unwrap().hash);
        let mut newer = ws.clone();
        newer.spec.git.as_mut().unwrap().git_ref = Some("c".repeat(40));
        newer.metadata.generation = Some(4);
        let b = desired(&newer, &cfg(), None).unwrap();
        assert_ne!(a.hash, b.hash);
        let pod_hash = |d: &Desired| {
            serde_json::to_value(&d.statefulset).unwrap()["spec"]["template"]["metadata"]
                ["annotations"]["auto.pulumi.com/revision-hash"]
                .clone()
        };
        assert_ne!(pod_hash(&a), pod_hash(&b), "a new revision rolls the pod");
        assert_eq!(b.plan.workspace.revision, "c".repeat(40));
        let other_runner = JobConfig {
            runner_image: "r:2".into(),
            ..cfg()
        };
        assert_ne!(a.hash, desired(&ws, &other_runner, None).unwrap().hash);
    }

    #[test]
    fn a_workspace_without_a_stack_is_refused() {
        let mut ws = workspace(&stack(json!({})));
        ws.spec.stacks = None;
        assert!(desired(&ws, &cfg(), None)
            .unwrap_err()
            .to_string()
            .contains("names no stack"));
    }

    /// Update Jobs mount the cache and follow the workspace pod only once the Workspace
    /// reports a retained workspace (`status.address`).
    #[test]
    fn update_jobs_use_the_cache_of_a_retained_workspace() {
        let s = stack(json!({}));
        let mut ws = workspace(&s);
        let mut update = crate::stack::objects::build_update(
            &s,
            UpdateType::Up,
            "Initial stack update",
            &"b".repeat(40),
        );
        update.metadata.uid = Some("update-uid".into());
        let job = |ws: &Workspace| {
            serde_json::to_value(
                build_job(&update, ws, &cfg(), crate::update::job::JobShape::default()).unwrap(),
            )
            .unwrap()["spec"]["template"]["spec"]
                .clone()
        };
        let plain = job(&ws);
        assert!(plain.get("affinity").is_none());
        assert_eq!(plain["volumes"].as_array().unwrap().len(), 4);

        ws.status = Some(WorkspaceStatus {
            address: Some("web-workspace-0".into()),
            ..Default::default()
        });
        let retained = job(&ws);
        let vols = retained["volumes"].as_array().unwrap();
        assert_eq!(vols[4]["name"], "cache");
        assert_eq!(
            vols[4]["persistentVolumeClaim"]["claimName"],
            "cache-web-workspace-0"
        );
        let mounts = retained["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap();
        assert!(mounts
            .iter()
            .any(|m| m["name"] == "cache" && m["mountPath"] == "/share/.pulumi"));
        let term = &retained["affinity"]["podAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
        assert_eq!(
            term["labelSelector"]["matchLabels"]["auto.pulumi.com/workspace-name"],
            "web"
        );
        // Init containers never see the cache (they run in the runner image, not Pulumi's).
        for c in retained["initContainers"].as_array().unwrap() {
            assert!(!c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "cache"));
        }
    }
}
