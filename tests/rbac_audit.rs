//! Least privilege, measured: the operator's ClusterRole and leader-election Role grant what the
//! operator was seen to use, and nothing else. The test cluster's API server audits the
//! operator's own requests (tests/local-cluster.sh); this test reads that log after the other
//! tests ran (`tests/run.sh` runs it last) and compares every (API group, resource, verb) used
//! with every one granted.

use serde_json::Value;
use std::collections::BTreeSet;

const OPERATOR_USER: &str = "system:serviceaccount:pulumi-operator:pulumi-operator";

/// Granted rights that no request of the suite uses, each with the reason it stays.
const NOT_REQUESTS: &[(&str, &str, &str, &str)] = &[
    (
        "auto.pulumi.com",
        "workspaces",
        "create",
        "a server-side apply that creates the object is audited as patch but authorized as create too",
    ),
    (
        "apps",
        "statefulsets",
        "create",
        "a server-side apply that creates the object is audited as patch but authorized as create too",
    ),
    (
        "pulumi.com",
        "stacks/finalizers",
        "update",
        "checked by the API server when the operator sets blockOwnerDeletion on an owner reference",
    ),
    (
        "auto.pulumi.com",
        "workspaces/finalizers",
        "update",
        "checked by the API server when the operator sets blockOwnerDeletion on an owner reference",
    ),
    (
        "auto.pulumi.com",
        "updates/finalizers",
        "update",
        "checked by the API server when the operator sets blockOwnerDeletion on an owner reference",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "create",
        "the leader Lease is created once, by the first operator started on the cluster: a run on a \
         cluster where it already exists does not see that request",
    ),
    (
        "",
        "events",
        "list",
        "the Warning Events watch's initial list where the API server does not stream it (no WatchList feature); on this cluster it streams, which is authorized as watch",
    ),
    (
        "",
        "pods",
        "list",
        "the watches' initial list where the API server does not stream it (no WatchList feature); on this cluster it streams, which is authorized as watch",
    ),
    (
        "",
        "namespaces",
        "list",
        "the watches' initial list where the API server does not stream it (no WatchList feature); on this cluster it streams, which is authorized as watch",
    ),
    (
        "batch",
        "jobs",
        "list",
        "the watches' initial list where the API server does not stream it (no WatchList feature); on this cluster it streams, which is authorized as watch",
    ),
    (
        "apps",
        "statefulsets",
        "list",
        "the watches' initial list where the API server does not stream it (no WatchList feature); on this cluster it streams, which is authorized as watch",
    ),
    (
        "",
        "persistentvolumeclaims",
        "list",
        "the watches' initial list where the API server does not stream it (no WatchList feature); on this cluster it streams, which is authorized as watch",
    ),
    (
        "pulumi.com",
        "programs",
        "get",
        "read by name only when the watch cache has not yet seen a Program an Update needs",
    ),
    (
        "source.toolkit.fluxcd.io",
        "ocirepositories",
        "list",
        "one generic watch per Flux kind (src/source/flux.rs) serves GitRepository, OCIRepository \
         and Bucket alike; the suite installs only the GitRepository CRD, to test a missing kind",
    ),
    (
        "source.toolkit.fluxcd.io",
        "ocirepositories",
        "watch",
        "as for list",
    ),
    (
        "source.toolkit.fluxcd.io",
        "ocirepositories",
        "get",
        "read by name when the cache has not seen an OCIRepository a Stack names, as GitRepositories are",
    ),
    (
        "source.toolkit.fluxcd.io",
        "buckets",
        "list",
        "as for OCIRepositories",
    ),
    (
        "source.toolkit.fluxcd.io",
        "buckets",
        "watch",
        "as for OCIRepositories",
    ),
    (
        "source.toolkit.fluxcd.io",
        "buckets",
        "get",
        "as for OCIRepositories",
    ),
];

type Right = (String, String, String);

fn granted() -> BTreeSet<Right> {
    let path = test_support::repo_root().join("kustomize/base/rbac.yaml");
    let text = std::fs::read_to_string(&path).expect("rbac.yaml");
    let mut out = BTreeSet::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let doc: Value = serde::Deserialize::deserialize(doc).expect("yaml");
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        let ours = matches!(
            (doc["kind"].as_str(), name),
            (Some("ClusterRole"), "pulumi-operator")
                | (Some("Role"), "pulumi-operator-leader-election")
        );
        if !ours {
            continue;
        }
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        out.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    out
}

/// How long after kube-apiserver starts its authorizer may still lack the RBAC objects.
const AUTHORIZER_START_SECONDS: i64 = 30;

/// When tests/faults.sh started kube-apiserver again (its marks in the apiserver's log).
fn apiserver_restarts(dir: &std::path::Path) -> Vec<jiff::Timestamp> {
    std::fs::read_to_string(dir.join("apiserver.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("--- restarted by tests/faults.sh at "))
        .filter_map(|t| t.trim().parse().ok())
        .collect()
}

/// (rights used, requests refused) from the audit log(s).
fn used() -> (BTreeSet<Right>, Vec<String>) {
    let dir = test_support::repo_root().join(".local-cluster/logs");
    let restarts = apiserver_restarts(&dir);
    let mut used = BTreeSet::new();
    let mut refused = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir)
        .expect("the local cluster's logs")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("audit") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if e["user"]["username"].as_str() != Some(OPERATOR_USER) {
                continue;
            }
            let o = &e["objectRef"];
            let Some(resource) = o["resource"].as_str() else {
                continue; // discovery and the like
            };
            let resource = match o["subresource"].as_str() {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_string(),
            };
            let group = o["apiGroup"].as_str().unwrap_or_default().to_string();
            let verb = e["verb"].as_str().unwrap_or_default().to_string();
            // A terminating namespace refuses new objects with 403 too: not an RBAC refusal.
            let terminating = e["responseStatus"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("is being terminated"));
            // An admission policy's refusal (the stack identity guard, tests/e2e_guard.rs) is
            // not a missing right; the guard's own test asserts the operator passes it.
            let admission = e["responseStatus"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("denied request") || m.contains("denied the request"));
            // Right after kube-apiserver starts again (tests/e2e_faults.rs restarts it), its
            // RBAC authorizer refuses requests until it has read the roles and bindings: not a
            // missing right either.
            let authorizer_starting = e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| {
                    restarts.iter().any(|r| {
                        let after = t.as_second() - r.as_second();
                        (0..=AUTHORIZER_START_SECONDS).contains(&after)
                    })
                });
            if e["responseStatus"]["code"].as_i64() == Some(403)
                && !terminating
                && !admission
                && !authorizer_starting
            {
                refused.push(format!("{verb} {group}/{resource}"));
            }
            used.insert((group, resource, verb));
        }
    }
    assert!(
        files > 0,
        "no audit log in {}: start the cluster with tests/local-cluster.sh up",
        dir.display()
    );
    (used, refused)
}

#[test]
#[ignore = "reads the audit log of a whole test run: tests/run.sh runs it after the other tests"]
fn the_operator_is_granted_what_it_uses_and_nothing_else() {
    let granted = granted();
    let (used, mut refused) = used();
    assert!(
        !used.is_empty(),
        "the audit log has no request of the operator"
    );
    refused.sort_unstable();
    refused.dedup();
    assert!(refused.is_empty(), "the operator was refused: {refused:#?}");
    let exempt: BTreeSet<Right> = NOT_REQUESTS
        .iter()
        .map(|(g, r, v, _)| (g.to_string(), r.to_string(), v.to_string()))
        .collect();
    let unused: Vec<&Right> = granted
        .iter()
        .filter(|r| !used.contains(*r) && !exempt.contains(*r))
        .collect();
    let unexpected: Vec<&Right> = used.iter().filter(|r| !granted.contains(*r)).collect();
    assert!(
        unexpected.is_empty(),
        "used but not granted: {unexpected:#?}"
    );
    eprintln!("used by the operator: {used:#?}");
    // A partial run (`tests/run.sh some_test`) uses fewer rights: RBAC_AUDIT_STRICT=0 only
    // reports what it did not see.
    if std::env::var("RBAC_AUDIT_STRICT").is_ok_and(|v| v == "0") {
        eprintln!(
            "granted but not used in this run ({}): {unused:#?}",
            unused.len()
        );
        return;
    }
    assert!(
        unused.is_empty(),
        "granted but never used in the whole test run (remove them from \
         kustomize/base/rbac.yaml, or say in NOT_REQUESTS why they stay): {unused:#?}"
    );
}
