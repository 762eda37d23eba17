//! The checked-in CRDs under `crds/` must be exactly what the Rust types generate, and must be
//! installable on Kubernetes 1.20.

use std::path::PathBuf;

use pulumi_operator_api::crd::{self, REGENERATE_COMMAND};
use serde_json::Value;

fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("crds")
}

#[test]
fn checked_in_crds_are_up_to_date() {
    let files = crd::rendered_files().expect("CRDs generate");
    let mut stale = Vec::new();
    for (name, expected) in &files {
        let path = crds_dir().join(name);
        match std::fs::read_to_string(&path) {
            Ok(actual) if &actual == expected => {}
            Ok(_) => stale.push(format!("{} differs", path.display())),
            Err(e) => stale.push(format!("{} cannot be read: {e}", path.display())),
        }
    }
    // A leftover file would still be installed by `kubectl apply -f crds/`.
    if let Ok(entries) = std::fs::read_dir(crds_dir()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !files.iter().any(|(expected, _)| *expected == name) {
                stale.push(format!("crds/{name} is not generated any more; delete it"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the CRDs under crds/ are out of date with the Rust types in api/:\n  {}\n\
         Regenerate them from the repository root with:\n\n    {REGENERATE_COMMAND}\n",
        stale.join("\n  ")
    );
}

#[test]
fn there_is_one_file_per_crd_plus_kustomization() {
    let names: Vec<String> = crd::rendered_files()
        .expect("CRDs generate")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "pulumi.com_stacks.yaml",
            "pulumi.com_programs.yaml",
            "auto.pulumi.com_workspaces.yaml",
            "auto.pulumi.com_updates.yaml",
            "policy.pulumi-operator-rs.dev_stackpolicies.yaml",
            "Kustomization",
        ]
    );
}

#[test]
fn every_schema_is_structural_and_has_no_cel() {
    for (file, crd) in crd::all().expect("CRDs generate") {
        let json = serde_json::to_value(&crd).expect("serializes");
        let text = json.to_string();
        assert!(
            !text.contains("x-kubernetes-validations"),
            "{file}: CEL rule"
        );
        for version in crd.spec.versions {
            let schema = version
                .schema
                .and_then(|s| s.open_api_v3_schema)
                .expect("schema");
            let schema = serde_json::to_value(schema).expect("serializes");
            let problems = crd::structural_violations(&schema);
            assert!(
                problems.is_empty(),
                "{file} {}: {problems:#?}",
                version.name
            );
        }
    }
}

#[test]
fn crds_are_small_enough_for_client_side_apply() {
    // `kubectl apply` (client-side) stores the whole object in an annotation limited to
    // 256 KiB; stay well below it.
    for (file, crd) in crd::all().expect("CRDs generate") {
        let size = serde_json::to_string(&crd).expect("serializes").len();
        assert!(size < 200 * 1024, "{file} is {size} bytes of JSON");
    }
}

#[test]
fn common_crd_properties() {
    for (file, crd) in crd::all().expect("CRDs generate") {
        let names = &crd.spec.names;
        // StackPolicy is the administrator's: cluster-scoped; the rest belong to namespaces.
        let scope = if crd.spec.names.kind == "StackPolicy" {
            "Cluster"
        } else {
            "Namespaced"
        };
        assert_eq!(crd.spec.scope, scope, "{file}");
        assert_eq!(
            names.categories.as_deref(),
            Some(&["pulumi".to_string()][..]),
            "{file}"
        );
        assert!(
            names.short_names.as_ref().is_some_and(|s| !s.is_empty()),
            "{file}"
        );
        assert_eq!(
            crd.spec.versions.iter().filter(|v| v.storage).count(),
            1,
            "{file}: exactly one storage version"
        );
        for version in &crd.spec.versions {
            assert!(version.served, "{file} {}", version.name);
            let status = version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref());
            assert!(
                status.is_some(),
                "{file} {}: status subresource",
                version.name
            );
            assert!(
                version
                    .additional_printer_columns
                    .as_ref()
                    .is_some_and(|c| !c.is_empty()),
                "{file} {}: print columns",
                version.name
            );
        }
    }
}

#[test]
fn stack_versions_share_one_schema() {
    let crds = crd::all().expect("CRDs generate");
    let (_, stacks) = crds
        .iter()
        .find(|(file, _)| file == "pulumi.com_stacks.yaml")
        .expect("stacks CRD");
    let v1 = stacks
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1")
        .expect("v1");
    let v1alpha1 = stacks
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1alpha1")
        .expect("v1alpha1");
    assert!(v1.storage && v1.served);
    assert!(!v1alpha1.storage && v1alpha1.served);
    assert_eq!(v1alpha1.deprecated, Some(true));
    let props = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
        let schema = v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("schema");
        serde_json::to_value(&schema.properties).expect("serializes")
    };
    assert_eq!(props(v1), props(v1alpha1));
}

fn stack_spec_schema() -> Value {
    let crds = crd::all().expect("CRDs generate");
    let (_, stacks) = crds
        .into_iter()
        .find(|(file, _)| file == "pulumi.com_stacks.yaml")
        .expect("stacks CRD");
    let version = stacks
        .spec
        .versions
        .into_iter()
        .find(|v| v.name == "v1")
        .expect("v1");
    let schema = version
        .schema
        .and_then(|s| s.open_api_v3_schema)
        .expect("schema");
    serde_json::to_value(schema).expect("serializes")["properties"]["spec"].clone()
}

#[test]
fn stack_spec_has_every_pko_field_with_its_json_name() {
    let spec = stack_spec_schema();
    let props = spec["properties"].as_object().expect("properties");
    for field in [
        "accessTokenSecret",
        "envs",
        "envRefs",
        "envSecrets",
        "backend",
        "stack",
        "config",
        "secrets",
        "configRef",
        "secretsRef",
        "secretsProvider",
        "projectRepo",
        "gitAuthSecret",
        "gitAuth",
        "repoDir",
        "commit",
        "branch",
        "shallow",
        "fluxSource",
        "programRef",
        "targets",
        "targetDependents",
        "prerequisites",
        "continueResyncOnCommitMatch",
        "refresh",
        "expectNoRefreshChanges",
        "destroyOnFinalize",
        "runProgram",
        "retryOnUpdateConflict",
        "useLocalStackOnly",
        "resyncFrequencySeconds",
        "serviceAccountName",
        "workspaceTemplate",
        "workspaceReclaimPolicy",
        "environment",
        "updateTemplate",
        "retryMaxBackoffDurationSeconds",
        "preview",
        // extensions and aliases
        "operationTimeoutSeconds",
        "configRefs",
        "secretRefs",
        "pulumiLogLevel",
        "initOnCreate",
    ] {
        let prop = props
            .get(field)
            .unwrap_or_else(|| panic!("spec.{field} is missing"));
        let description = prop["description"].as_str().unwrap_or_default();
        assert!(
            description.len() > 20,
            "spec.{field} needs a user-facing description"
        );
    }
    assert_eq!(spec["required"], serde_json::json!(["stack"]));
    for field in [
        "accessTokenSecret",
        "envs",
        "envSecrets",
        "secrets",
        "gitAuthSecret",
    ] {
        let description = props[field]["description"].as_str().unwrap_or_default();
        assert!(
            description.starts_with("Deprecated:"),
            "spec.{field}: {description}"
        );
    }
    let description = props["operationTimeoutSeconds"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(
        description.starts_with("Extension (not in PKO)"),
        "{description}"
    );
    assert_eq!(props["operationTimeoutSeconds"]["format"], "int64");
    assert_eq!(props["resyncFrequencySeconds"]["format"], "int64");
    assert_eq!(
        props["config"]["additionalProperties"]["x-kubernetes-preserve-unknown-fields"],
        true
    );
}

#[test]
fn reclaim_policy_is_a_plain_string_enum_documented_for_kubectl_explain() {
    let spec = stack_spec_schema();
    let policy = &spec["properties"]["workspaceReclaimPolicy"];
    assert_eq!(policy["type"], "string");
    assert_eq!(policy["enum"], serde_json::json!(["Retain", "Delete"]));
    assert!(
        policy.get("default").is_none(),
        "defaulted in code, not by the API server"
    );
    let text = policy["description"].as_str().expect("description");
    for needle in [
        "Delete",
        "Retain",
        "default",
        "PKO",
        "Job",
        "StatefulSet",
        "kubectl exec",
    ] {
        assert!(
            text.contains(needle),
            "description should mention {needle:?}: {text}"
        );
    }
}

#[test]
fn pod_template_is_a_preserved_object() {
    let spec = stack_spec_schema();
    let pod_template =
        &spec["properties"]["workspaceTemplate"]["properties"]["spec"]["properties"]["podTemplate"];
    assert_eq!(pod_template["type"], "object");
    let pod_spec = &pod_template["properties"]["spec"];
    assert_eq!(pod_spec["type"], "object");
    assert_eq!(pod_spec["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn checked_in_api_reference_is_up_to_date() {
    let expected = pulumi_operator_api::reference::render().expect("reference renders");
    let path = crds_dir()
        .join("..")
        .join(pulumi_operator_api::reference::REFERENCE_FILE);
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "{} is out of date with the Rust types in api/. Regenerate it from the repository root with:\n\n    \
         cargo run -p pulumi-operator-api --bin crdgen\n",
        path.display()
    );
}
