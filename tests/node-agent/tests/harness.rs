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
    command: [sh, -c, 'trap "echo got-term > /marker/polite; exit 0" TERM; echo $$$$ > /marker/polite.pid; while true; do date +%s%N > /marker/polite.beat; sleep 0.1; done']
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
    command: [sh, -c, 'setsid sh -c "trap \"\" TERM; while true; do date +%s%N > /marker/stubborn.child; sleep 0.1; done" & trap "echo ignored-term > /marker/stubborn" TERM; echo $$$$ > /marker/stubborn.pid; while true; do date +%s%N > /marker/stubborn.beat; sleep 0.1; done']
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
    // Each container is PID 1 of its own PID namespace, as with a container runtime.
    assert_eq!((pid("polite.pid"), pid("stubborn.pid")), (1, 1));
    wait_until(T, "the stubborn pod's detached child", || async {
        marker.join("stubborn.child").exists()
    })
    .await;

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
    // Nothing of either container runs any more, not even the child that left the process
    // group and ignores SIGTERM: the PID namespace ended with its PID 1.
    let beats = || {
        ["polite.beat", "stubborn.beat", "stubborn.child"]
            .map(|f| std::fs::read_to_string(marker.join(f)).unwrap_or_default())
    };
    let before = beats();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(before, beats(), "a container process survived its pod");
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
        // Tokens are requested per pod (TokenRequest, the projected kube-api-access volume);
        // the ServiceAccount must exist before its pod is admitted.
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(ns.client.clone(), &ns.name);
        wait_until(T, "the ServiceAccount", || async {
            sas.get_opt(sa).await.ok().flatten().is_some()
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
    // Also cover /tmp (where a CI checkout may live) unless the parent already is /tmp.
    let (tmp_volume, tmp_mount) = if parent == "/tmp" {
        (String::new(), String::new())
    } else {
        (
            ", {name: tmp, emptyDir: {}}".to_string(),
            ", {name: tmp, mountPath: /tmp}".to_string(),
        )
    };
    ns.apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: shadow}}
spec:
  restartPolicy: Never
  volumes: [{{name: scratch, emptyDir: {{}}}}{tmp_volume}]
  containers:
  - name: main
    image: busybox
    volumeMounts: [{{name: scratch, mountPath: "{parent}"}}{tmp_mount}]
    command: [sh, -c, 'echo -n shadowed-ok > /dev/termination-log']
"#
    ));
    let t = terminated(&terminated_pod(&ns, "shadow").await);
    assert_eq!(t.exit_code, 0, "{t:?}");
    assert_eq!(t.message.as_deref(), Some("shadowed-ok"));
}

/// Runs kubectl in `ns` with optional standard input; returns (exit code, stdout, stderr).
fn kubectl_exit(ns: &TestNamespace, args: &[&str], input: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(["-n", &ns.name])
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes()).expect("stdin");
    }
    let out = child.wait_with_output().expect("kubectl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A long-running pod to exec into: a ConfigMap volume, an emptyDir the container writes to
/// before it sleeps, an environment variable, a non-root user and a working directory.
async fn exec_target(ns: &TestNamespace) {
    ns.apply(
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {greeting: hello-from-configmap}
---
apiVersion: v1
kind: Pod
metadata: {name: target}
spec:
  securityContext: {runAsUser: 1000, runAsGroup: 1000}
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: cfg, configMap: {name: cfg}}
  - {name: data, emptyDir: {}}
  containers:
  - name: main
    image: busybox
    workingDir: /data
    env: [{name: GREETING_FROM_ENV, value: env-works}]
    command: [sh, -c, 'echo written-by-the-container > /data/note; touch /data/ready; exec sleep 3600']
    readinessProbe:
      exec: {command: [cat, /data/ready]}
      periodSeconds: 1
    volumeMounts:
    - {name: cfg, mountPath: /etc/cfg}
    - {name: data, mountPath: /data}
"#,
    );
    ns.kubectl(&[
        "wait",
        "--for=condition=ready",
        "pod/target",
        "--timeout=60s",
    ]);
}

/// `kubectl exec` streams stdout and stderr and exits with the command's exit code (the
/// Status on channel 3 carries it).
#[tokio::test]
async fn kubectl_exec_prints_output_and_exits_with_the_code() {
    let ns = TestNamespace::new("exec").await;
    exec_target(&ns).await;
    let (code, out, err) = kubectl_exit(
        &ns,
        &[
            "exec",
            "target",
            "--",
            "sh",
            "-c",
            "echo hi; echo oops >&2; exit 3",
        ],
        None,
    );
    assert_eq!(code, 3, "stdout: {out:?}, stderr: {err:?}");
    assert_eq!(out, "hi\n");
    assert!(err.contains("oops"), "{err:?}");
    let (code, out, err) = kubectl_exit(&ns, &["exec", "target", "-c", "main", "--", "true"], None);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    // A container that does not exist is refused before anything runs.
    let (code, _, err) = kubectl_exit(&ns, &["exec", "target", "-c", "nope", "--", "true"], None);
    assert_ne!(code, 0);
    assert!(err.contains("nope"), "{err}");
}

/// The command runs inside the container: its volumes at their paths, what the container wrote,
/// its environment, its user and its working directory.
#[tokio::test]
async fn kubectl_exec_runs_inside_the_container() {
    let ns = TestNamespace::new("execin").await;
    exec_target(&ns).await;
    let out = ns.kubectl(&[
        "exec",
        "target",
        "--",
        "sh",
        "-c",
        "cat /etc/cfg/greeting; echo; cat /data/note; echo $GREETING_FROM_ENV; id -u; id -g; pwd",
    ]);
    assert_eq!(
        out,
        "hello-from-configmap\nwritten-by-the-container\nenv-works\n1000\n1000\n/data\n"
    );
    // What exec writes, the container sees (same volume).
    ns.kubectl(&[
        "exec",
        "target",
        "--",
        "sh",
        "-c",
        "echo from-exec > /data/exec-note",
    ]);
    let out = ns.kubectl(&["exec", "target", "--", "cat", "/data/exec-note"]);
    assert_eq!(out, "from-exec\n");
}

/// `kubectl exec -i` forwards standard input, and its end (v5 close) ends the command's input.
#[tokio::test]
async fn kubectl_exec_forwards_stdin() {
    let ns = TestNamespace::new("execstdin").await;
    exec_target(&ns).await;
    let input = "line one\nline two\n";
    let (code, out, err) = kubectl_exit(&ns, &["exec", "-i", "target", "--", "cat"], Some(input));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, input);
    let (code, out, _) = kubectl_exit(
        &ns,
        &["exec", "-i", "target", "--", "sh", "-c", "wc -l; exit 4"],
        Some(input),
    );
    assert_eq!(code, 4);
    assert_eq!(out.trim(), "2");
}

/// `kubectl exec -it` gets a terminal (kubectl needs one itself: `script` provides it).
#[tokio::test]
async fn kubectl_exec_with_a_tty() {
    let ns = TestNamespace::new("exectty").await;
    exec_target(&ns).await;
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let cmd = format!(
        "kubectl --kubeconfig {kubeconfig} -n {} exec -it target -- sh -c 'tty; exit 5'",
        ns.name
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script (util-linux) runs kubectl on a terminal");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/dev/pts/"), "{text:?}");
    assert_eq!(out.status.code(), Some(5), "{text:?}");
}

/// StatefulSet volumeClaimTemplates: the agent provisions a volume for each claim, Kubernetes'
/// PV controller binds them (`kubectl get pvc` shows Bound), the data outlives the pod, and a
/// deleted claim's volume is deleted too.
#[tokio::test]
async fn statefulset_claims_are_bound_and_outlive_their_pod() {
    let ns = TestNamespace::new("pvc").await;
    ns.apply(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      securityContext: {runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000}
      containers:
      - name: main
        image: busybox
        command: [sh, -c, 'echo start >> /data/starts; exec sleep 3600']
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 2Gi}}}
"#,
    );
    let pvc = "data-web-0";
    let api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(ns.client.clone(), &ns.name);
    let bound = wait_for(T, "the claim to be Bound", || async {
        api.get_opt(pvc)
            .await
            .ok()
            .flatten()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
    })
    .await;
    let st = bound.status.unwrap();
    assert_eq!(st.capacity.unwrap()["storage"].0, "2Gi");
    assert_eq!(st.access_modes.unwrap(), ["ReadWriteOnce"]);
    let volume = bound.spec.unwrap().volume_name.unwrap();
    assert_eq!(
        ns.kubectl(&["get", "pvc", pvc, "-o", "jsonpath={.status.phase}"]),
        "Bound"
    );
    ns.kubectl(&[
        "wait",
        "--for=condition=ready",
        "pod/web-0",
        "--timeout=60s",
    ]);
    ns.kubectl(&["delete", "pod", "web-0", "--wait=true"]);
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_until(T, "the StatefulSet's new pod to run", || async {
        pods.get_opt("web-0").await.ok().flatten().is_some_and(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.and_then(|s| s.phase).as_deref() == Some("Running")
        })
    })
    .await;
    wait_until(T, "the second start to be recorded", || async {
        let (_, out, _) = ns.kubectl_result(&["exec", "web-0", "--", "cat", "/data/starts"]);
        out == "start\nstart\n"
    })
    .await;

    ns.kubectl(&["delete", "statefulset", "web", "--wait=true"]);
    ns.kubectl(&["delete", "pvc", pvc]);
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(ns.client.clone());
    wait_until(T, "the released volume to be deleted", || async {
        matches!(pvs.get_opt(&volume).await, Ok(None))
    })
    .await;
}

/// A volume mounted inside another volume (a cache at /share/.pulumi inside the emptyDir at
/// /share, as retained workspaces and their update Jobs do): its mount point is created in
/// the container's namespace, after the outer mount, as a container runtime does.
#[tokio::test]
async fn nested_volume_mounts_get_their_mount_points() {
    let ns = TestNamespace::new("nested").await;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: nested}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, runAsGroup: 1000}
  volumes: [{name: share, emptyDir: {}}, {name: cache, emptyDir: {}}]
  containers:
  - name: main
    image: busybox
    volumeMounts: [{name: share, mountPath: /share}, {name: cache, mountPath: /share/.cache/inner}]
    command: [sh, -c, 'echo hi > /share/.cache/inner/x && cat /share/.cache/inner/x > /dev/termination-log']
"#,
    );
    let t = terminated(&terminated_pod(&ns, "nested").await);
    assert_eq!(t.exit_code, 0, "{t:?}");
    assert_eq!(t.message.as_deref(), Some("hi\n"));
}

/// `resources.limits.memory` is enforced (a memory cgroup): a container that goes over it is
/// killed by the kernel and reported `OOMKilled` with exit code 137, as by the kubelet.
#[tokio::test]
async fn a_container_over_its_memory_limit_is_oom_killed() {
    let ns = TestNamespace::new("oom").await;
    ns.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: hungry}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'echo eating; tail /dev/zero']
    resources: {limits: {memory: 32Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: modest}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'echo fine']
    resources: {limits: {memory: 32Mi}}
"#,
    );
    let pod = terminated_pod(&ns, "hungry").await;
    let t = terminated(&pod);
    assert_eq!(
        (t.reason.as_deref(), t.exit_code),
        (Some("OOMKilled"), 137),
        "{t:?}"
    );
    let pod = terminated_pod(&ns, "modest").await;
    let t = terminated(&pod);
    assert_eq!((t.reason.as_deref(), t.exit_code), (Some("Completed"), 0));
}
