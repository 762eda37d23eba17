//! Self-tests of the test harness against the real control plane: the apiserver, etcd and
//! controller-manager are real; the node agent stands in for the kubelet. Needs the local
//! cluster (`tests/local-cluster.sh up`); without it every test fails and says how to start it.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use std::time::Duration;
use test_support::{wait_for, wait_until, TestNamespace};

const T: Duration = Duration::from_secs(60);

async fn pod_of_job(ns: &TestNamespace, job: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let selector = format!("job-name={job}");
    wait_for(T, "the job's pod", || async {
        pods.list(&kube::api::ListParams::default().labels(&selector))
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await
}

async fn terminated_pod(ns: &TestNamespace, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(T, &format!("pod {name} to finish"), || async {
        let p = pods.get(name).await.ok()?;
        let phase = p.status.as_ref()?.phase.clone()?;
        (phase == "Succeeded" || phase == "Failed").then_some(p)
    })
    .await
}

fn terminated(pod: &Pod) -> k8s_openapi::api::core::v1::ContainerStateTerminated {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .unwrap_or_else(|| panic!("no terminated state in {:?}", pod.status))
}

#[tokio::test]
async fn job_completes_and_kubectl_logs_shows_its_output() {
    let ns = TestNamespace::new("echo").await;
    ns.kubectl(&[
        "create",
        "job",
        "hello",
        "--image=busybox",
        "--",
        "sh",
        "-c",
        "echo hello",
    ]);
    ns.kubectl(&[
        "wait",
        "--for=condition=complete",
        "job/hello",
        "--timeout=60s",
    ]);
    assert_eq!(ns.kubectl(&["logs", "job/hello"]), "hello\n");
    let ts = ns.kubectl(&["logs", "job/hello", "--timestamps"]);
    assert!(
        ts.ends_with(" hello\n") && ts.starts_with("20"),
        "timestamps missing: {ts:?}"
    );
}

#[tokio::test]
async fn failing_job_is_failed_with_the_exit_code() {
    let ns = TestNamespace::new("exit3").await;
    ns.apply(
        r#"
apiVersion: batch/v1
kind: Job
metadata: {name: three}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: main, image: busybox, command: [sh, -c, "echo about to fail; exit 3"]}
"#,
    );
    ns.kubectl(&[
        "wait",
        "--for=condition=failed",
        "job/three",
        "--timeout=60s",
    ]);
    let pod = pod_of_job(&ns, "three").await;
    let pod = terminated_pod(&ns, pod.metadata.name.as_deref().unwrap()).await;
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Failed")
    );
    let t = terminated(&pod);
    assert_eq!(t.exit_code, 3);
    assert_eq!(t.reason.as_deref(), Some("Error"));
}

#[tokio::test]
async fn termination_message_file_and_log_fallback_reach_pod_status() {
    let ns = TestNamespace::new("termmsg").await;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: file}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'printf "{\"outcome\":\"ok\"}" > /dev/termination-log']
---
apiVersion: v1
kind: Pod
metadata: {name: custom-path}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    terminationMessagePath: /tmp/my-result
    command: [sh, -c, 'echo -n custom > /tmp/my-result']
---
apiVersion: v1
kind: Pod
metadata: {name: fallback}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    terminationMessagePolicy: FallbackToLogsOnError
    command: [sh, -c, 'echo line1; echo last words; exit 1']
"#,
    );
    let t = terminated(&terminated_pod(&ns, "file").await);
    assert_eq!(t.message.as_deref(), Some(r#"{"outcome":"ok"}"#));
    let t = terminated(&terminated_pod(&ns, "custom-path").await);
    assert_eq!(t.message.as_deref(), Some("custom"));
    let t = terminated(&terminated_pod(&ns, "fallback").await);
    assert_eq!(t.message.as_deref(), Some("line1\nlast words"));
}

#[tokio::test]
async fn deleting_a_pod_sends_sigterm_then_sigkill_after_the_grace_period() {
    let ns = TestNamespace::new("sigterm").await;
    let marker = std::env::temp_dir().join(format!("harness-sigterm-{}", ns.name));
    std::fs::create_dir_all(&marker).unwrap();
    let m = marker.display();
    ns.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: polite}}
spec:
  terminationGracePeriodSeconds: 20
  volumes: [{{name: m, hostPath: {{path: "{m}"}}}}]
  containers:
  - name: main
    image: busybox
    volumeMounts: [{{name: m, mountPath: /marker}}]
    command: [sh, -c, 'trap "echo got-term > /marker/polite; exit 0" TERM; echo $$$$ > /marker/polite.pid; while true; do sleep 0.1; done']
---
apiVersion: v1
kind: Pod
metadata: {{name: stubborn}}
spec:
  terminationGracePeriodSeconds: 2
  volumes: [{{name: m, hostPath: {{path: "{m}"}}}}]
  containers:
  - name: main
    image: busybox
    volumeMounts: [{{name: m, mountPath: /marker}}]
    command: [sh, -c, 'trap "echo ignored-term > /marker/stubborn" TERM; echo $$$$ > /marker/stubborn.pid; while true; do sleep 0.1; done']
"#
    ));
    ns.kubectl(&[
        "wait",
        "--for=condition=ready",
        "pod/polite",
        "pod/stubborn",
        "--timeout=60s",
    ]);
    wait_until(T, "pid files", || async {
        marker.join("polite.pid").exists() && marker.join("stubborn.pid").exists()
    })
    .await;
    let pid = |f: &str| {
        std::fs::read_to_string(marker.join(f))
            .unwrap()
            .trim()
            .parse::<i32>()
            .unwrap()
    };
    let (polite, stubborn) = (pid("polite.pid"), pid("stubborn.pid"));
    let alive = |p: i32| unsafe { libc::kill(p, 0) == 0 };
    assert!(alive(polite) && alive(stubborn));

    let start = std::time::Instant::now();
    ns.kubectl(&["delete", "pod", "polite", "stubborn", "--wait=false"]);
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_until(T, "both pods to be gone", || async {
        pods.get_opt("polite").await.ok().flatten().is_none()
            && pods.get_opt("stubborn").await.ok().flatten().is_none()
    })
    .await;
    // The polite one stopped on SIGTERM at once; the stubborn one lived out its 2 s grace.
    assert_eq!(
        std::fs::read_to_string(marker.join("polite"))
            .unwrap()
            .trim(),
        "got-term"
    );
    assert_eq!(
        std::fs::read_to_string(marker.join("stubborn"))
            .unwrap()
            .trim(),
        "ignored-term"
    );
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "SIGKILL came before the grace period"
    );
    assert!(
        !alive(polite) && !alive(stubborn),
        "a container process survived its pod"
    );
    let _ = std::fs::remove_dir_all(&marker);
}

#[tokio::test]
async fn secrets_config_maps_downward_api_and_service_account_token_at_real_paths() {
    let ns = TestNamespace::new("volumes").await;
    ns.apply(
        r#"
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {password: s3cr3t, other: x}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {greeting: hello-from-configmap, file.txt: in-a-subpath}
---
apiVersion: v1
kind: Pod
metadata: {name: reader, labels: {app: reader}}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, runAsGroup: 1000}
  volumes:
  - {name: creds, secret: {secretName: creds, items: [{key: password, path: pw}]}}
  - {name: settings, configMap: {name: settings}}
  - {name: info, downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}}
  - name: bound
    projected:
      sources:
      - serviceAccountToken: {path: token, audience: test-audience, expirationSeconds: 3600}
      - configMap: {name: settings, items: [{key: greeting, path: g}]}
  - {name: scratch, emptyDir: {}}
  containers:
  - name: main
    image: busybox
    env:
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: creds, key: password}}}
    - {name: MISSING_OK, valueFrom: {secretKeyRef: {name: nope, key: x, optional: true}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: POD_NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: COMBINED, value: "$(POD_NAME)@$(POD_NS)"}
    envFrom: [{configMapRef: {name: settings}, prefix: CM_}]
    volumeMounts:
    - {name: creds, mountPath: /etc/creds, readOnly: true}
    - {name: settings, mountPath: /etc/settings/file.txt, subPath: file.txt}
    - {name: info, mountPath: /etc/podinfo}
    - {name: bound, mountPath: /var/run/bound}
    - {name: scratch, mountPath: /scratch}
    workingDir: /scratch/work
    command:
    - sh
    - -c
    - |
      echo "env=$PASSWORD cm=$CM_greeting combined=$COMBINED ip=$POD_IP uid=$(id -u) pwd=$(pwd)"
      echo "vol=$(cat /etc/creds/pw) sub=$(cat /etc/settings/file.txt) labels=$(cat /etc/podinfo/labels) g=$(cat /var/run/bound/g)"
      test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo sa-token-ok
      test "$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)" = "$POD_NS" && echo sa-namespace-ok
      test -s /var/run/bound/token && echo bound-token-ok
      touch /etc/creds/x 2>/dev/null || echo read-only-ok
      touch /scratch/w && echo scratch-writable
"#,
    );
    let pod = terminated_pod(&ns, "reader").await;
    let logs = ns.kubectl(&["logs", "reader"]);
    assert_eq!(terminated(&pod).exit_code, 0, "{logs}");
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(
        logs.contains(&format!(
        "env=s3cr3t cm=hello-from-configmap combined=reader@{} ip={ip} uid=1000 pwd=/scratch/work",
        ns.name
    )),
        "{logs}"
    );
    assert!(
        logs.contains("vol=s3cr3t sub=in-a-subpath labels=app=\"reader\" g=hello-from-configmap"),
        "{logs}"
    );
    for line in [
        "sa-token-ok",
        "sa-namespace-ok",
        "bound-token-ok",
        "read-only-ok",
        "scratch-writable",
    ] {
        assert!(logs.contains(line), "missing {line} in:\n{logs}");
    }
}

#[tokio::test]
async fn rbac_is_real_for_a_pods_own_service_account_token() {
    let ns = TestNamespace::new("rbac").await;
    let script = r#"
      TOKEN=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token)
      NS=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)
      curl -s -o /dev/null -w "code=%{http_code}\n" --cacert /var/run/secrets/kubernetes.io/serviceaccount/ca.crt \
        -H "Authorization: Bearer $TOKEN" https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$NS/secrets/target
"#;
    let indented = script
        .lines()
        .map(|l| format!("      {l}"))
        .collect::<Vec<_>>()
        .join("\n");
    ns.apply(
        r#"
apiVersion: v1
kind: Secret
metadata: {name: target}
stringData: {k: v}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: nobody}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-target}
rules: [{apiGroups: [""], resources: [secrets], resourceNames: [target], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-target}
subjects: [{kind: ServiceAccount, name: reader}]
"#,
    );
    for sa in ["nobody", "reader"] {
        // The token controller creates each ServiceAccount's token Secret asynchronously.
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(ns.client.clone(), &ns.name);
        wait_until(T, "the token secret", || async {
            sas.get_opt(sa)
                .await
                .ok()
                .flatten()
                .and_then(|s| s.secrets)
                .is_some_and(|s| !s.is_empty())
        })
        .await;
        ns.apply(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: as-{sa}}}
spec:
  serviceAccountName: {sa}
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command:
    - sh
    - -c
    - |
{indented}
"#
        ));
    }
    terminated_pod(&ns, "as-nobody").await;
    terminated_pod(&ns, "as-reader").await;
    assert_eq!(ns.kubectl(&["logs", "as-nobody"]).trim(), "code=403");
    assert_eq!(ns.kubectl(&["logs", "as-reader"]).trim(), "code=200");
}

#[tokio::test]
async fn readiness_probe_and_restart_on_failure() {
    let ns = TestNamespace::new("probe").await;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: slow-ready}
spec:
  volumes: [{name: s, emptyDir: {}}]
  containers:
  - name: main
    image: busybox
    volumeMounts: [{name: s, mountPath: /state}]
    command: [sh, -c, 'sleep 2; touch /state/ready; exec sleep 600']
    readinessProbe:
      exec: {command: [test, -f, /state/ready]}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: flaky}
spec:
  restartPolicy: OnFailure
  volumes: [{name: s, emptyDir: {}}]
  containers:
  - name: main
    image: busybox
    volumeMounts: [{name: s, mountPath: /state}]
    command: [sh, -c, 'if [ -f /state/once ]; then echo second run; exit 0; fi; touch /state/once; echo first run; exit 1']
"#,
    );
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let p = pods.get("slow-ready").await.unwrap();
    assert!(!ready(&p), "ready before the probe could succeed");
    ns.kubectl(&[
        "wait",
        "--for=condition=ready",
        "pod/slow-ready",
        "--timeout=60s",
    ]);

    let flaky = terminated_pod(&ns, "flaky").await;
    let st = flaky.status.unwrap();
    assert_eq!(st.phase.as_deref(), Some("Succeeded"));
    let cs = &st.container_statuses.unwrap()[0];
    assert_eq!(cs.restart_count, 1);
    assert_eq!(ns.kubectl(&["logs", "flaky"]), "second run\n");
    assert_eq!(ns.kubectl(&["logs", "flaky", "--previous"]), "first run\n");
}

#[tokio::test]
async fn unmapped_image_without_command_cannot_be_pulled() {
    let ns = TestNamespace::new("pull").await;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: nothing}
spec:
  containers: [{name: main, image: "registry.invalid/no/such:image"}]
"#,
    );
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let message = wait_for(T, "the ErrImagePull waiting reason", || async {
        let p = pods.get("nothing").await.ok()?;
        let waiting = p
            .status?
            .container_statuses?
            .first()?
            .state
            .clone()?
            .waiting?;
        (waiting.reason.as_deref() == Some("ErrImagePull"))
            .then_some(waiting.message.unwrap_or_default())
    })
    .await;
    assert!(
        message.contains("registry.invalid/no/such:image"),
        "{message}"
    );
}

/// A volume mounted over a directory that holds the agent's own state (here: the parent of
/// the checkout, where `.local-cluster` lives) must not hide the files the agent binds into
/// the container afterwards (the termination-message file).
#[tokio::test]
async fn volume_over_the_agents_state_directory_does_not_break_the_container() {
    let ns = TestNamespace::new("shadow").await;
    let root = test_support::repo_root();
    let parent = root.parent().unwrap_or(&root).display().to_string();
    ns.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: shadow}}
spec:
  restartPolicy: Never
  volumes: [{{name: scratch, emptyDir: {{}}}}, {{name: tmp, emptyDir: {{}}}}]
  containers:
  - name: main
    image: busybox
    volumeMounts: [{{name: scratch, mountPath: "{parent}"}}, {{name: tmp, mountPath: /tmp}}]
    command: [sh, -c, 'echo -n shadowed-ok > /dev/termination-log']
"#
    ));
    let t = terminated(&terminated_pod(&ns, "shadow").await);
    assert_eq!(t.exit_code, 0, "{t:?}");
    assert_eq!(t.message.as_deref(), Some("shadowed-ok"));
}
