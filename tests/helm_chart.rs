//! The Helm chart (`charts/pulumi-operator`) installs what `kustomize/base` installs: the same
//! RBAC rules (the chart reads them from `files/`, which must equal the kustomize roles), the
//! same CRDs, and a Deployment with the same essentials. No cluster needed.

use serde_norway::Value;
use std::path::{Path, PathBuf};
use test_support::repo_root as root;

fn chart() -> PathBuf {
    root().join("charts/pulumi-operator")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn documents(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .filter_map(|doc| serde_norway::from_str::<Value>(doc).ok())
        .filter(|v| !v.is_null())
        .collect()
}

/// The rules of the role `name` in kustomize/base/rbac.yaml.
fn kustomize_rules(name: &str) -> Value {
    documents(&read(&root().join("kustomize/base/rbac.yaml")))
        .into_iter()
        .find(|d| {
            matches!(d["kind"].as_str(), Some("ClusterRole" | "Role"))
                && d["metadata"]["name"].as_str() == Some(name)
        })
        .unwrap_or_else(|| panic!("no role {name} in kustomize/base/rbac.yaml"))["rules"]
        .clone()
}

#[test]
fn the_chart_grants_what_kustomize_grants() {
    for (role, file) in [
        ("pulumi-operator", "clusterrole-rules.yaml"),
        (
            "pulumi-operator-leader-election",
            "leader-election-rules.yaml",
        ),
        ("pulumi-operator-edit", "edit-rules.yaml"),
        ("pulumi-operator-view", "view-rules.yaml"),
    ] {
        let in_chart: Value =
            serde_norway::from_str(&read(&chart().join("files").join(file))).expect("rules parse");
        assert_eq!(
            in_chart,
            kustomize_rules(role),
            "charts/pulumi-operator/files/{file} differs from the rules of {role} in \
             kustomize/base/rbac.yaml: change both"
        );
    }
    // Every rules file is used by the RBAC template.
    let template = read(&chart().join("templates/rbac.yaml"));
    for file in [
        "clusterrole-rules.yaml",
        "leader-election-rules.yaml",
        "edit-rules.yaml",
        "view-rules.yaml",
    ] {
        assert!(template.contains(&format!("files/{file}")), "{file} unused");
    }
}

#[test]
fn the_chart_ships_the_generated_crds() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root().join("crds")).expect("crds/") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let name = path.file_name().expect("name").to_owned();
        let copy = chart().join("crds").join(&name);
        assert_eq!(
            read(&copy),
            read(&path),
            "{} differs from crds/: regenerate both with `cargo run -p pulumi-operator-api --bin crdgen`",
            copy.display()
        );
        names.push(name);
    }
    let in_chart = std::fs::read_dir(chart().join("crds"))
        .expect("chart crds/")
        .count();
    assert_eq!(in_chart, names.len(), "the chart's crds/ holds other files");
}

/// What the kustomize Deployment says that the chart must say too: container names, ports,
/// probes, the env it sets, security context and resources (the chart's defaults in
/// values.yaml).
#[test]
fn the_chart_deployment_has_the_kustomize_essentials() {
    let deployment = &documents(&read(&root().join("kustomize/base/deployment.yaml")))[0];
    let pod = &deployment["spec"]["template"]["spec"];
    let values: Value =
        serde_norway::from_str(&read(&chart().join("values.yaml"))).expect("values parse");
    let template = read(&chart().join("templates/deployment.yaml"));

    assert_eq!(values["podSecurityContext"], pod["securityContext"]);
    let operator = &pod["containers"][0];
    let runner = &pod["initContainers"][0];
    assert_eq!(values["securityContext"], operator["securityContext"]);
    assert_eq!(values["securityContext"], runner["securityContext"]);
    assert_eq!(values["resources"], operator["resources"]);
    assert_eq!(
        values["terminationGracePeriodSeconds"],
        pod["terminationGracePeriodSeconds"]
    );
    for container in [operator, runner] {
        let name = container["name"].as_str().expect("name");
        assert!(
            template.contains(&format!("- name: {name}\n")),
            "no container {name}"
        );
    }
    for env in operator["env"].as_sequence().expect("env") {
        let name = env["name"].as_str().expect("env name");
        assert!(
            template.contains(&format!("- name: {name}\n")),
            "the chart does not set {name}"
        );
    }
    for arg in operator["args"].as_sequence().expect("args") {
        let flag = arg.as_str().expect("arg").split('=').next().expect("flag");
        assert!(template.contains(flag), "the chart does not pass {flag}");
    }
    for probe in ["livenessProbe", "readinessProbe"] {
        let path = operator[probe]["httpGet"]["path"].as_str().expect("probe");
        assert!(
            template.contains(&format!(
                "{probe}:\n          httpGet: {{path: {path}, port: http}}"
            )),
            "{probe} differs"
        );
    }
}

/// The chart's stack identity guard (`stackIdentityGuard.enabled`, off by default) has the
/// rules of the kustomize component (`kustomize/components/stack-identity-guard`): its
/// files/stack-identity-guard.yaml is the component's policy less the first variable, the
/// operator's user, which the template sets to the release's ServiceAccount; the binding and the
/// parameter ConfigMap say what the component's say.
#[test]
fn the_chart_guards_stack_identities_as_the_component_does() {
    let component = root().join("kustomize/components/stack-identity-guard");
    let docs = documents(&read(&component.join("policy.yaml")));
    let of_kind = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} in the component's policy.yaml"))
            .clone()
    };
    let policy = of_kind("ValidatingAdmissionPolicy");
    let binding = of_kind("ValidatingAdmissionPolicyBinding");
    let rules: Value =
        serde_norway::from_str(&read(&chart().join("files/stack-identity-guard.yaml")))
            .expect("the chart's guard rules parse");
    let spec = &policy["spec"];
    assert_eq!(
        rules["matchConstraints"], spec["matchConstraints"],
        "charts/pulumi-operator/files/stack-identity-guard.yaml differs from the component's \
         policy.yaml (matchConstraints): change both"
    );
    assert_eq!(
        rules["validations"], spec["validations"],
        "charts/pulumi-operator/files/stack-identity-guard.yaml differs from the component's \
         policy.yaml (validations): change both"
    );
    let variables = spec["variables"].as_sequence().expect("variables");
    assert_eq!(variables[0]["name"].as_str(), Some("operator"));
    assert_eq!(
        variables[0]["expression"].as_str(),
        Some(
            "request.userInfo.username == 'system:serviceaccount:pulumi-operator:pulumi-operator'"
        ),
        "the component exempts kustomize/base's operator ServiceAccount"
    );
    assert_eq!(
        rules["variables"]
            .as_sequence()
            .expect("the chart's variables"),
        &variables[1..],
        "charts/pulumi-operator/files/stack-identity-guard.yaml differs from the component's \
         policy.yaml (variables after `operator`): change both"
    );
    // The binding enforces the policy where the policy applies, with the component's ConfigMap.
    assert_eq!(binding["spec"]["policyName"], policy["metadata"]["name"]);
    assert_eq!(
        binding["spec"]["matchResources"]["namespaceSelector"],
        spec["matchConstraints"]["namespaceSelector"]
    );
    assert_eq!(
        spec["matchConstraints"]["namespaceSelector"]["matchLabels"]
            ["pulumi-operator-rs.dev/stack-identity-guard"]
            .as_str(),
        Some("enforced")
    );
    let params = &documents(&read(&component.join("parameters.yaml")))[0];
    assert_eq!(
        binding["spec"]["paramRef"]["name"],
        params["metadata"]["name"]
    );
    assert_eq!(
        binding["spec"]["paramRef"]["namespace"],
        params["metadata"]["namespace"]
    );
    assert_eq!(params["data"]["serviceAccounts"].as_str(), Some("pulumi"));

    // The chart: off by default, the same default ServiceAccounts, the shared rules used.
    let values: Value =
        serde_norway::from_str(&read(&chart().join("values.yaml"))).expect("values parse");
    let guard = &values["stackIdentityGuard"];
    assert_eq!(
        guard["enabled"].as_bool(),
        Some(false),
        "the guard is opt-in"
    );
    assert_eq!(
        guard["serviceAccounts"]
            .as_sequence()
            .expect("stackIdentityGuard.serviceAccounts")
            .iter()
            .map(|v| v.as_str().expect("a name"))
            .collect::<Vec<_>>()
            .join(","),
        params["data"]["serviceAccounts"].as_str().expect("names")
    );
    let template = read(&chart().join("templates/stack-identity-guard.yaml"));
    for expected in [
        "files/stack-identity-guard.yaml",
        ".Values.stackIdentityGuard.enabled",
        ".Values.stackIdentityGuard.serviceAccounts",
        "validationActions: [Deny]",
        "parameterNotFoundAction: Deny",
        "failurePolicy: Fail",
        "- name: operator\n",
    ] {
        assert!(
            template.contains(expected),
            "the chart's guard: no {expected}"
        );
    }
}
