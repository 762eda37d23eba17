//! Representative user manifests (from the documentation seeds, including the field aliases
//! they use) must pass our CRD schemas and deserialize into the Rust types.

use pulumi_operator_api::crd;
use pulumi_operator_api::validation::{validate_stack, SourceKind};
use pulumi_operator_api::{
    ConfigType, Program, ResourceSelectorType, SecurityProfile, Stack, Update, UpdateType,
    Workspace, WorkspaceReclaimPolicy,
};
use serde::Deserialize;
use serde_json::Value;

const SEEDS: &str = include_str!("fixtures/seeds.yaml");

fn documents() -> Vec<Value> {
    serde_norway::Deserializer::from_str(SEEDS)
        .map(|doc| {
            let yaml = serde_norway::Value::deserialize(doc).expect("valid YAML");
            serde_json::to_value(yaml).expect("JSON-compatible")
        })
        .collect()
}

fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or("?")
}

fn find(kind: &str, wanted: &str) -> Value {
    documents()
        .into_iter()
        .find(|d| d["kind"] == kind && name(d) == wanted)
        .unwrap_or_else(|| panic!("{kind} {wanted} not in fixtures"))
}

#[test]
fn every_seed_manifest_passes_the_crd_schema() {
    let crds = crd::all().expect("CRDs generate");
    let docs = documents();
    assert!(docs.len() >= 20, "fixtures parsed: {}", docs.len());
    for doc in docs {
        let kind = doc["kind"].as_str().expect("kind");
        let (_, crd) = crds
            .iter()
            .find(|(_, crd)| crd.spec.names.kind == kind)
            .unwrap_or_else(|| panic!("no CRD for {kind}"));
        let problems = crd::validate_object(crd, &doc);
        assert!(problems.is_empty(), "{kind} {}: {problems:#?}", name(&doc));
    }
}

#[test]
fn every_seed_manifest_deserializes_and_round_trips() {
    for doc in documents() {
        let kind = doc["kind"].as_str().expect("kind").to_string();
        let label = format!("{kind} {}", name(&doc));
        let reserialized = match kind.as_str() {
            "Stack" => {
                let stack: Stack = serde_json::from_value(doc.clone()).expect(&label);
                assert!(
                    validate_stack(&stack).is_empty(),
                    "{label}: {:?}",
                    validate_stack(&stack)
                );
                serde_json::to_value(stack)
            }
            "Program" => {
                serde_json::to_value(serde_json::from_value::<Program>(doc.clone()).expect(&label))
            }
            "Workspace" => serde_json::to_value(
                serde_json::from_value::<Workspace>(doc.clone()).expect(&label),
            ),
            "Update" => {
                serde_json::to_value(serde_json::from_value::<Update>(doc.clone()).expect(&label))
            }
            other => panic!("unexpected kind {other}"),
        }
        .expect("serializes");
        // Nothing the user wrote may be lost (or added) by a read-modify-write cycle.
        // (Quantities such as `cpu: 1` come back as strings, which means the same.)
        assert_eq!(
            quantities_as_strings(&strip_nulls(&doc), false),
            strip_nulls(&reserialized),
            "{label}"
        );
    }
}

/// Numbers under `requests`/`limits` maps become strings (k8s-openapi's Quantity is a string).
fn quantities_as_strings(value: &Value, in_quantity_map: bool) -> Value {
    match value {
        Value::Number(n) if in_quantity_map => Value::String(n.to_string()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let quantities = in_quantity_map || k == "requests" || k == "limits";
                    (k.clone(), quantities_as_strings(v, quantities))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| quantities_as_strings(v, false))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Drops map entries that are `null` or `false`: like PKO's `omitempty`, our types do not write
/// back a `false` flag or an absent value, which means the same thing.
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null() && **v != Value::Bool(false))
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

#[test]
fn git_stack_with_env_refs() {
    let stack: Stack = serde_json::from_value(find("Stack", "my-stack")).expect("Stack");
    assert_eq!(stack.spec.stack, "my-org/k8s-nginx/dev");
    assert_eq!(stack.spec.source().kind(), SourceKind::Git);
    assert_eq!(
        stack.spec.git.project_repo.as_deref(),
        Some("https://github.com/pulumi/examples")
    );
    assert!(stack.spec.destroy_on_finalize);
    let token = &stack.spec.env_refs.as_ref().expect("envRefs")["PULUMI_ACCESS_TOKEN"];
    assert_eq!(token.selector_type, ResourceSelectorType::Secret);
    assert_eq!(
        token.secret.as_ref().map(|s| s.key.as_str()),
        Some("accessToken")
    );
    // Unset reclaim policy: our default is Delete (PKO's is Retain).
    assert_eq!(stack.spec.workspace_reclaim_policy, None);
    assert_eq!(stack.spec.reclaim_policy(), WorkspaceReclaimPolicy::Delete);
    assert_eq!(stack.spec.operation_timeout_seconds(), 14_400);
    assert_eq!(stack.spec.resync_frequency_seconds(), 60);
}

#[test]
fn flux_and_program_stacks() {
    let flux: Stack = serde_json::from_value(find("Stack", "random-yaml")).expect("Stack");
    assert_eq!(flux.spec.source().kind(), SourceKind::Flux);
    let source = flux.spec.flux_source.as_ref().expect("fluxSource");
    assert_eq!(source.source_ref.kind, "GitRepository");
    assert_eq!(source.dir.as_deref(), Some("random-yaml/"));
    assert_eq!(flux.spec.resync_frequency_seconds(), 300);
    assert!(flux.spec.continue_resync_on_commit_match && flux.spec.refresh);

    let program: Stack = serde_json::from_value(find("Stack", "staticwebsite")).expect("Stack");
    assert_eq!(program.spec.source().kind(), SourceKind::Program);
    let config = program.spec.config.as_ref().expect("config");
    assert_eq!(config["aws:region"], "us-east-1");
}

#[test]
fn structured_config_keeps_json_types() {
    let stack: Stack = serde_json::from_value(find("Stack", "my-app-structured")).expect("Stack");
    let config = stack.spec.config.expect("config");
    assert_eq!(config["environment"], "production");
    assert_eq!(config["database"]["port"], 5432);
    assert_eq!(config["database"]["ssl"], true);
    assert_eq!(config["regions"][1], "us-east-1");
    assert_eq!(config["maxConnections"], 100);
    assert_eq!(config["enableCaching"], true);
}

#[test]
fn documented_aliases_are_accepted_and_merged() {
    let refs: Stack = serde_json::from_value(find("Stack", "my-app-configrefs")).expect("Stack");
    let config_refs = refs.spec.effective_config_refs();
    assert_eq!(config_refs["database"].key, "database.json");
    assert_eq!(config_refs["database"].json, Some(true));

    let secrets: Stack = serde_json::from_value(find("Stack", "my-app-secretrefs")).expect("Stack");
    let merged = secrets.spec.effective_secrets_refs();
    assert_eq!(
        merged.keys().copied().collect::<Vec<_>>(),
        ["apiKey", "dbPassword"]
    );
    assert_eq!(
        merged["apiKey"].selector_type,
        ResourceSelectorType::Literal
    );

    let log: Stack = serde_json::from_value(find("Stack", "my-stack-custom")).expect("Stack");
    assert_eq!(log.spec.effective_pulumi_log_level(), Some(3));
    let template = log
        .spec
        .workspace_template
        .as_ref()
        .and_then(|t| t.spec.as_ref());
    let pod_spec = template
        .and_then(|s| s.pod_template.as_ref())
        .and_then(|p| p.spec.as_ref())
        .expect("podTemplate.spec");
    assert_eq!(pod_spec["containers"][0]["name"], "pulumi");
    assert_eq!(pod_spec["terminationGracePeriodSeconds"], 3600);

    let env: Stack = serde_json::from_value(find("Stack", "my-app-pulumi-env")).expect("Stack");
    let init = env
        .spec
        .workspace_template
        .and_then(|t| t.spec)
        .and_then(|s| s.init_containers)
        .expect("initContainers");
    assert_eq!(init[0]["name"], "setup-env");

    let legacy: Stack = serde_json::from_value(find("Stack", "s3-bucket-stack")).expect("Stack");
    assert_eq!(legacy.spec.init_on_create, Some(true));
    assert_eq!(legacy.spec.backend.as_deref(), Some("s3://my-s3-backend"));

    let ws: Workspace =
        serde_json::from_value(find("Workspace", "random-yaml-1e2fc47")).expect("Workspace");
    let git = ws.spec.git.as_ref().expect("git");
    assert_eq!(
        git.effective_ref(),
        Some("1e2fc471709448f3c9f7a250f28f1eafcde7017b")
    );
}

#[test]
fn workspace_and_update_fields() {
    let ws: Workspace =
        serde_json::from_value(find("Workspace", "random-yaml-1e2fc47")).expect("Workspace");
    assert_eq!(ws.spec.security_profile, Some(SecurityProfile::Restricted));
    let resources = ws.spec.resources.as_ref().expect("resources");
    let requests = resources.requests.as_ref().expect("requests");
    assert_eq!(requests["cpu"].0, "1");
    assert_eq!(requests["memory"].0, "512Mi");
    let stack = &ws.spec.stacks.as_ref().expect("stacks")[0];
    let config = stack.config.as_ref().expect("config");
    assert_eq!(
        config[0]
            .value_from
            .as_ref()
            .and_then(|v| v.path.as_deref()),
        Some("/var/run/secrets/pulumi/token")
    );
    assert_eq!(config[3].value, Some(serde_json::json!(2)));

    let update: Update =
        serde_json::from_value(find("Update", "random-yaml-19a1b2c3d4e")).expect("Update");
    assert_eq!(update.spec.update_type, Some(UpdateType::Up));
    assert_eq!(update.spec.ttl_after_completed.as_deref(), Some("24h"));
    assert_eq!(update.spec.parallel, Some(10));
}

#[test]
fn programs() {
    let program: Program =
        serde_json::from_value(find("Program", "random-password")).expect("Program");
    let body = program.spec.program.expect("program");
    let configuration = body.configuration.expect("configuration");
    assert_eq!(
        configuration["length"].config_type,
        Some(ConfigType::Number)
    );
    assert_eq!(
        configuration["names"].config_type,
        Some(ConfigType::ListOfStrings)
    );
    let resources = body.resources.expect("resources");
    assert_eq!(resources["password"].resource_type, "random:RandomPassword");
    assert!(resources["password"]
        .options
        .as_ref()
        .is_some_and(|o| o.protect));
    assert_eq!(
        resources["existing"].get.as_ref().map(|g| g.id.as_str()),
        Some("my-pet")
    );

    let big: Program =
        serde_json::from_value(find("Program", "staticwebsite-v2")).expect("Program");
    let resources = big
        .spec
        .program
        .and_then(|p| p.resources)
        .expect("resources");
    assert_eq!(resources.len(), 6);
    assert_eq!(resources["index.html"].resource_type, "aws:s3:BucketObject");
}

#[test]
fn stack_status_from_the_seed_deserializes() {
    // `kubectl get stack random-yaml -oyaml` from seed 002.
    let yaml = r#"
apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: random-yaml
spec:
  stack: dev
status:
  conditions:
  - lastTransitionTime: "2024-10-17T20:41:49Z"
    message: the stack has been processed and is up to date
    reason: ProcessingCompleted
    status: "True"
    type: Ready
  lastUpdate:
    failures: 0
    generation: 2
    lastAttemptedCommit: sha256:44d554df090dcdeb9bae908cd38155c8c93db05f64dc72982027e8e1294af0d3
    lastResyncTime: "2024-10-17T20:41:49Z"
    lastSuccessfulCommit: sha256:44d554df090dcdeb9bae908cd38155c8c93db05f64dc72982027e8e1294af0d3
    name: random-yaml-sjpw5hm8
    permalink: https://app.pulumi.com/eron-pulumi-corp/random/dev/updates/3
    state: succeeded
    type: up
  observedGeneration: 2
  outputs:
    password: '[secret]'
"#;
    let stack: Stack = serde_norway::from_str(yaml).expect("Stack with status");
    let status = stack.status.expect("status");
    let last = status.last_update.expect("lastUpdate");
    assert_eq!(last.update_type, Some(UpdateType::Up));
    assert_eq!(last.state.as_ref().map(|s| s.as_str()), Some("succeeded"));
    assert_eq!(last.failures, Some(0));
    assert_eq!(status.observed_generation, Some(2));
    assert_eq!(status.outputs.expect("outputs")["password"], "[secret]");
    let ready = &status.conditions.expect("conditions")[0];
    assert_eq!(
        (ready.type_.as_str(), ready.status.as_str()),
        ("Ready", "True")
    );
}

#[test]
fn v1alpha1_stack_reads_the_same_objects() {
    let mut doc = find("Stack", "random-yaml");
    doc["apiVersion"] = "pulumi.com/v1alpha1".into();
    let old: pulumi_operator_api::stack::v1alpha1::Stack =
        serde_json::from_value(doc.clone()).expect("v1alpha1 Stack");
    assert_eq!(old.spec.0.stack, "dev");
    let crds = crd::all().expect("CRDs generate");
    let (_, stacks) = &crds[0];
    assert!(crd::validate_object(stacks, &doc).is_empty());
}

#[test]
fn schema_check_catches_unknown_fields_and_bad_enums() {
    let crds = crd::all().expect("CRDs generate");
    let (_, stacks) = &crds[0];
    let mut doc = find("Stack", "random-yaml");
    doc["spec"]["resyncFrequencySecond"] = 5.into();
    doc["spec"]["workspaceReclaimPolicy"] = "Keep".into();
    let problems = crd::validate_object(stacks, &doc);
    assert_eq!(problems.len(), 2, "{problems:#?}");
}

#[test]
fn unknown_enum_values_do_not_break_deserialization() {
    let mut doc = find("Stack", "random-yaml");
    doc["spec"]["workspaceReclaimPolicy"] = "Keep".into();
    doc["spec"]["envRefs"]["PULUMI_ACCESS_TOKEN"]["type"] = "Vault".into();
    let stack: Stack = serde_json::from_value(doc).expect("still readable");
    assert_eq!(
        stack.spec.workspace_reclaim_policy,
        Some(WorkspaceReclaimPolicy::Unknown("Keep".into()))
    );
    let errors = validate_stack(&stack);
    assert_eq!(errors.len(), 2, "{errors:#?}");
}
