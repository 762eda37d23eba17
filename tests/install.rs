//! The install, as a user does it: `kubectl apply --server-side -k kustomize/quickstart` on the
//! local cluster, the operator running in-cluster from its image (mapped to the freshly built
//! binary) with its own ServiceAccount and the shipped RBAC.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use std::io::{Read, Write};
use std::time::Duration;
use test_support::{
    install_operator, kubectl, wait_for, wait_until, TestNamespace, OPERATOR_NAMESPACE,
};

const LEASE: &str = "pulumi-operator-leader";

async fn operator_pods(client: &kube::Client) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    pods.list(&ListParams::default().labels("app.kubernetes.io/name=pulumi-operator"))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn is_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn lease_holder(client: &kube::Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    leases
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

#[tokio::test]
async fn operator_runs_in_cluster_holds_the_lease_and_a_standby_takes_over() {
    install_operator().await;
    let client = test_support::client().await;

    // Ready with its own ServiceAccount token: the pod authenticates as the operator's SA.
    let pods = operator_pods(&client).await;
    let pod = pods
        .iter()
        .find(|p| is_ready(p))
        .expect("a Ready operator pod");
    assert_eq!(
        pod.spec.as_ref().unwrap().service_account_name.as_deref(),
        Some("pulumi-operator")
    );
    let name = pod.metadata.name.clone().unwrap();
    let holder = wait_for(Duration::from_secs(30), "a lease holder", || {
        lease_holder(&client)
    })
    .await;
    let leader = operator_pods(&client)
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(&holder));
    assert!(
        leader.is_some(),
        "lease held by {holder}, not by an operator pod (have {name})"
    );

    // The metrics endpoint answers on the pod's address, and the fleet gauges count what the
    // API server holds (the leader computes them from its caches at each scrape: polled until
    // the caches have caught up).
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let leader_ip = leader
        .and_then(|p| p.status.and_then(|s| s.pod_ip))
        .unwrap_or(ip);
    let (stacks, programs) = wait_for(
        Duration::from_secs(60),
        "fleet gauges matching the API",
        || {
            let metrics = http_get(&leader_ip, 8080, "/metrics");
            let client = client.clone();
            async move {
                let stacks = Api::<pulumi_operator_api::Stack>::all(client.clone())
                    .list_metadata(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .len() as f64;
                let programs = Api::<pulumi_operator_api::Program>::all(client)
                    .list_metadata(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .len() as f64;
                let seen = (
                    gauge(&metrics, "stacks_active"),
                    gauge(&metrics, "programs_active"),
                );
                (seen == (Some(stacks), Some(programs))).then_some(seen)
            }
        },
    )
    .await;
    eprintln!("stacks_active {stacks:?}, programs_active {programs:?}: as listed");

    // A second replica stays standby, then takes over when the leader's pod is deleted.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let scale = |n: i32| serde_json::json!({"spec": {"replicas": n}});
    deployments
        .patch_scale(
            "pulumi-operator",
            &PatchParams::default(),
            &Patch::Merge(&scale(2)),
        )
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(60),
        "two Ready operator pods",
        || async {
            operator_pods(&client)
                .await
                .iter()
                .filter(|p| is_ready(p))
                .count()
                == 2
        },
    )
    .await;
    let leader = lease_holder(&client).await.unwrap();
    let standby = operator_pods(&client)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .find(|n| *n != leader)
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        lease_holder(&client).await.as_deref(),
        Some(leader.as_str()),
        "the standby took the lease early"
    );

    // Cordon the node so that the leader's replacement pod stays Pending: the takeover must
    // come from the standby that was already running.
    kubectl(&["cordon", "local-node"]);
    let started = std::time::Instant::now();
    kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "delete",
        "pod",
        &leader,
        "--wait=false",
    ]);
    // The lease lasts 15 s; a released lease is taken sooner.
    let took_over = tokio::time::timeout(Duration::from_secs(20), async {
        while lease_holder(&client).await.as_deref() != Some(standby.as_str()) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    kubectl(&["uncordon", "local-node"]);
    assert!(
        took_over.is_ok(),
        "the standby did not take the lease within the lease duration"
    );
    eprintln!("standby took over after {:?}", started.elapsed());
    deployments
        .patch_scale(
            "pulumi-operator",
            &PatchParams::default(),
            &Patch::Merge(&scale(1)),
        )
        .await
        .unwrap();
}

/// The value of an unlabelled gauge in a Prometheus exposition.
fn gauge(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

fn http_get(host: &str, port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect((host, port))
        .unwrap_or_else(|e| panic!("connect {host}:{port}: {e}"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test]
async fn kubectl_explain_and_get_pulumi_show_the_api() {
    install_operator().await;
    let explain = kubectl(&["explain", "stack.spec.workspaceReclaimPolicy"]);
    assert!(
        explain.contains("Retain") && explain.contains("Delete") && explain.contains("StatefulSet"),
        "{explain}"
    );
    // A field's own documentation (the doc comment on the Rust type), not kubectl's frame.
    let explain = kubectl(&["explain", "update.spec.type"]);
    assert!(
        explain.contains("The operation: `up`, `preview`, `refresh` or `destroy`."),
        "{explain}"
    );
    let explain = kubectl(&["explain", "stackpolicy.spec.packs.config"]);
    assert!(
        explain.contains("--policy-pack-config") && explain.contains("enforcementLevel"),
        "{explain}"
    );

    let ns = TestNamespace::new("getpulumi").await;
    ns.apply(
        r#"
apiVersion: pulumi.com/v1
kind: Program
metadata: {name: prog}
program:
  outputs: {hello: world}
---
apiVersion: auto.pulumi.com/v1alpha1
kind: Workspace
metadata: {name: ws}
spec:
  image: pulumi/pulumi:3.202.0-nonroot
  git: {url: "https://example.invalid/repo.git", ref: main}
---
apiVersion: auto.pulumi.com/v1alpha1
kind: Update
metadata: {name: upd}
spec: {workspaceName: ws, stackName: dev, type: preview}
---
# Refers to a Program that does not exist: it stalls (SourceUnavailable) and runs nothing.
apiVersion: pulumi.com/v1
kind: Stack
metadata: {name: stk}
spec: {stack: dev, programRef: {name: missing}}
"#,
    );
    let listed = ns.kubectl(&["get", "pulumi", "-o", "name"]);
    for kind in [
        "stack.pulumi.com/stk",
        "program.pulumi.com/prog",
        "workspace.auto.pulumi.com/ws",
        "update.auto.pulumi.com/upd",
    ] {
        assert!(
            listed.contains(kind),
            "`kubectl get pulumi` lacks {kind}:\n{listed}"
        );
    }
    // Stacks are in the category too (a Stack here would start operations, so check the CRD).
    let crd = kubectl(&[
        "get",
        "crd",
        "stacks.pulumi.com",
        "-o",
        "jsonpath={.spec.names.categories}",
    ]);
    assert!(crd.contains("pulumi"), "{crd}");
}

#[tokio::test]
async fn program_gets_a_sha256_artifact_that_follows_its_generation() {
    install_operator().await;
    let ns = TestNamespace::new("program").await;
    ns.apply(
        r#"
apiVersion: pulumi.com/v1
kind: Program
metadata: {name: hello}
program:
  resources:
    rec: {type: "standin:index:Record", properties: {value: one}}
  outputs: {value: "${rec.value}"}
"#,
    );
    let programs: Api<pulumi_operator_api::Program> = Api::namespaced(ns.client.clone(), &ns.name);
    let first = wait_for(Duration::from_secs(30), "the program artifact", || async {
        let p = programs.get("hello").await.ok()?;
        let st = p.status?;
        (st.observed_generation == Some(1)).then_some(st.artifact?)
    })
    .await;
    let digest = first.digest.clone().unwrap();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert_eq!(first.revision, "1");

    ns.kubectl(&[
        "patch",
        "program",
        "hello",
        "--type=merge",
        "-p",
        r#"{"program":{"outputs":{"value":"two"}}}"#,
    ]);
    let second = wait_for(Duration::from_secs(30), "the new artifact", || async {
        let st = programs.get("hello").await.ok()?.status?;
        (st.observed_generation == Some(2)).then_some(st.artifact?)
    })
    .await;
    assert_eq!(second.revision, "2");
    assert_ne!(second.digest, first.digest);
}

/// With the CRDs missing the operator exits at once and says how to install them. A small
/// loopback HTTP server plays an API server that knows none of our kinds.
#[test]
fn operator_exits_with_an_instruction_when_crds_are_missing() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}"#;
            let _ = write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let dir = std::env::temp_dir().join(format!("no-crds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(test_support::workspace_binary("pulumi-operator"))
        .env("KUBECONFIG", &kubeconfig)
        .args(["--http-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("CustomResourceDefinition for stacks.pulumi.com/v1 is not installed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("kubectl apply --server-side -k kustomize/base"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `kubectl auth can-i` as `user` (a ServiceAccount `ns:name` or a plain user), in `ns` or
/// cluster-wide.
fn can_i(user: &str, verb: &str, resource: &str, ns: Option<&str>) -> bool {
    let subject = match user.split_once(':') {
        Some((ns, name)) => format!("system:serviceaccount:{ns}:{name}"),
        None => user.to_string(),
    };
    // `kind/x` would name an object x: a subresource goes in its own flag.
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, sub)) => (r, format!("--subresource={sub}")),
        None => (resource, String::new()),
    };
    let mut args = vec!["auth", "can-i", verb, resource, "--as", &subject];
    if !subresource.is_empty() {
        args.push(&subresource);
    }
    match ns {
        Some(n) => args.extend(["-n", n]),
        None => args.push("--all-namespaces"),
    }
    let (_, out, _) = test_support::kubectl_result(&args);
    out.trim() == "yes"
}

#[tokio::test]
async fn installed_roles_grant_least_privilege() {
    test_support::install_operator().await;
    let ns = test_support::TestNamespace::new("rbac").await;
    let op = "pulumi-operator:pulumi-operator";
    // What the operator does, it may do.
    for (verb, resource) in [
        ("get", "secrets"),
        ("create", "secrets"),
        ("create", "jobs.batch"),
        ("watch", "stacks.pulumi.com"),
        ("patch", "stacks.pulumi.com/status"),
        ("create", "updates.auto.pulumi.com"),
        ("get", "configmaps"),
        ("create", "configmaps"),
        ("get", "pods/log"),
    ] {
        assert!(
            can_i(op, verb, resource, None),
            "the operator cannot {verb} {resource}"
        );
    }
    // What it never does, it may not: no reading every Secret, no deleting ConfigMaps, no
    // rights over RBAC or the cluster's own workloads.
    for (verb, resource) in [
        ("list", "secrets"),
        ("watch", "secrets"),
        ("delete", "secrets"),
        ("update", "secrets"),
        ("delete", "configmaps"),
        ("list", "configmaps"),
        ("create", "pods"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("escalate", "clusterroles.rbac.authorization.k8s.io"),
        ("impersonate", "serviceaccounts"),
        ("create", "serviceaccounts/token"),
        ("patch", "deployments.apps"),
        ("create", "pods/exec"),
        ("delete", "jobs.batch"),
        ("update", "stacks.pulumi.com/status"),
        ("delete", "leases.coordination.k8s.io"),
        ("create", "events"),
    ] {
        assert!(
            !can_i(op, verb, resource, None),
            "the operator may {verb} {resource}"
        );
    }

    // A namespace editor manages Stacks and the rest, but cannot write what the operator
    // reports (a forged Complete Update would be believed).
    ns.kubectl(&[
        "create",
        "rolebinding",
        "editor",
        "--clusterrole=edit",
        "--user=jane",
    ]);
    let n = Some(ns.name.as_str());
    test_support::wait_until(
        std::time::Duration::from_secs(20),
        "the binding to apply",
        || async { can_i("jane", "create", "stacks.pulumi.com", n) },
    )
    .await;
    for (verb, resource) in [
        ("create", "stacks.pulumi.com"),
        ("delete", "updates.auto.pulumi.com"),
        ("patch", "workspaces.auto.pulumi.com"),
        ("create", "programs.pulumi.com"),
        ("get", "stacks.pulumi.com"),
    ] {
        assert!(
            can_i("jane", verb, resource, n),
            "an editor cannot {verb} {resource}"
        );
    }
    for resource in [
        "stacks.pulumi.com/status",
        "updates.auto.pulumi.com/status",
        "workspaces.auto.pulumi.com/status",
        "programs.pulumi.com/status",
    ] {
        for verb in ["update", "patch"] {
            assert!(
                !can_i("jane", verb, resource, n),
                "an editor may {verb} {resource}"
            );
        }
    }
    // A viewer reads, and writes nothing.
    ns.kubectl(&[
        "create",
        "rolebinding",
        "viewer",
        "--clusterrole=view",
        "--user=joe",
    ]);
    test_support::wait_until(
        std::time::Duration::from_secs(20),
        "the binding to apply",
        || async { can_i("joe", "get", "stacks.pulumi.com", n) },
    )
    .await;
    assert!(!can_i("joe", "create", "stacks.pulumi.com", n));
    assert!(!can_i("joe", "patch", "updates.auto.pulumi.com/status", n));
}
