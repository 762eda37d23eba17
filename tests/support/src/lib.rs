//! Test-only support for cluster tests: a `kube::Client` for the local test cluster, a
//! temporary namespace per test (removed afterwards), `kubectl` as a user would run it, and
//! polling helpers. A missing cluster is a loud failure that names the command to start it.

pub mod helm;
pub mod processes;
pub mod workload;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const START_CLUSTER: &str = "eval \"$(tests/local-cluster.sh up | tail -n1)\"";

/// The repository root (the workspace that holds `tests/`).
pub fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).map(PathBuf::from).unwrap_or(here)
}

/// A binary of this workspace, from the profile directory the running test was built in
/// (`<target>/<profile>/deps/<test>-<hash>` → `<target>/<profile>/<name>`): tests/run.sh builds
/// them with `cargo build --workspace --bins` in the same profile first.
pub fn workspace_binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile_dir = test
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not under <target>/<profile>/deps", test.display()));
    let bin = profile_dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build --workspace --bins` in this profile \
         (tests/run.sh does)",
        bin.display()
    );
    bin
}

pub fn kubeconfig() -> String {
    match std::env::var("KUBECONFIG") {
        Ok(k) if !k.is_empty() && std::path::Path::new(&k).exists() => k,
        _ => panic!(
            "\n\nCLUSTER TESTS NEED THE LOCAL TEST CLUSTER, and KUBECONFIG does not point at one.\n\
             Start it from the repository root with:\n\n    {START_CLUSTER}\n\n\
             or run every test with tests/run.sh, which starts it for you.\n"
        ),
    }
}

/// A client for the local cluster; panics with the command that starts it when it is absent.
pub async fn client() -> Client {
    let path = kubeconfig();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&path)
            .unwrap_or_else(|e| panic!("reading {path}: {e}")),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("kubeconfig {path}: {e}"));
    let client = Client::try_from(config).unwrap_or_else(|e| panic!("client for {path}: {e}"));
    if let Err(e) = client.apiserver_version().await {
        panic!("\n\nTHE LOCAL TEST CLUSTER DOES NOT ANSWER ({e}).\nStart it from the repository root with:\n\n    {START_CLUSTER}\n");
    }
    client
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A namespace that exists for one test and is deleted when dropped (pods in it are stopped by
/// the node agent as part of the deletion).
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    pub async fn new(prefix: &str) -> TestNamespace {
        let client = client().await;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let suffix = format!(
            "{:x}{n}",
            std::process::id() ^ (Instant::now().elapsed().subsec_nanos())
        );
        let mut name: String = format!("t-{prefix}-{suffix}")
            .to_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        name.truncate(63);
        let name = name.trim_end_matches('-').to_string();
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"test-support/temporary": "true"}}
        }))
        .expect("namespace object");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        // Pods cannot be created before the namespace's default ServiceAccount exists.
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        wait_until(
            Duration::from_secs(30),
            "the default ServiceAccount",
            || async { sas.get_opt("default").await.ok().flatten().is_some() },
        )
        .await;
        TestNamespace { name, client }
    }

    /// Runs kubectl in this namespace; panics with its output when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        kubectl(&[&["-n", &self.name], args].concat())
    }

    /// `kubectl apply -f -` of a YAML document in this namespace.
    pub fn apply(&self, yaml: &str) -> String {
        let (ok, out, err) = kubectl_stdin(&["-n", &self.name, "apply", "-f", "-"], yaml);
        assert!(
            ok,
            "kubectl apply failed:\n{out}\n{err}\n--- manifest ---\n{yaml}"
        );
        out
    }

    /// Runs kubectl in this namespace and returns (success, stdout, stderr).
    pub fn kubectl_result(&self, args: &[&str]) -> (bool, String, String) {
        kubectl_result(&[&["-n", &self.name], args].concat())
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("KEEP_TEST_NAMESPACES").is_some() {
            eprintln!(
                "keeping namespace {} (KEEP_TEST_NAMESPACES is set)",
                self.name
            );
            return;
        }
        // Drop cannot await: kubectl does the deletion without waiting for it to finish.
        let _ = kubectl_result(&["delete", "namespace", &self.name, "--wait=false"]);
    }
}

/// Runs kubectl against the test cluster; panics with its output when it fails.
pub fn kubectl(args: &[&str]) -> String {
    let (ok, out, err) = kubectl_result(args);
    assert!(ok, "kubectl {} failed:\n{out}\n{err}", args.join(" "));
    out
}

pub fn kubectl_result(args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs kubectl with `input` on its standard input; returns (success, stdout, stderr).
pub fn kubectl_stdin(args: &[&str], input: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("running kubectl: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("kubectl: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls `check` every 200 ms until it is true; panics naming `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `get` until it returns `Some`; panics naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut get: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = get().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

static INSTALL: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// The operator's namespace in the kustomize install.
pub const OPERATOR_NAMESPACE: &str = "pulumi-operator";

/// `kubectl get pods -o OUTPUT` of the running operator pods.
pub fn running_operator_pods(output: &str) -> String {
    kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=pulumi-operator",
        "--field-selector=status.phase=Running",
        "-o",
        output,
    ])
}

/// The `/metrics` text of each running operator pod, with the pod's UID, sorted by UID.
pub fn operator_metrics_by_pod() -> Vec<(String, String)> {
    use std::io::{Read, Write};
    let pods = running_operator_pods(
        "jsonpath={range .items[*]}{.metadata.uid} {.status.podIP}{\"\\n\"}{end}",
    );
    let mut out = Vec::new();
    for line in pods.lines() {
        let mut parts = line.split_whitespace();
        let (Some(uid), Some(ip)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Ok(mut s) = std::net::TcpStream::connect((ip, 8080)) else {
            continue;
        };
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n"
        );
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        out.push((uid.to_string(), text));
    }
    out.sort();
    out
}

/// The `/metrics` text of all running operator pods, one after the other.
pub fn operator_metrics() -> String {
    operator_metrics_by_pod()
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The sum of a counter's series (all labels) over the running operator pods.
pub fn metric_total(text: &str, name: &str) -> u64 {
    let prefix = format!("{name}{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// Installs the operator as a user would (`kubectl apply --server-side -k kustomize/quickstart`)
/// once per test binary, and waits until its Deployment is available. The images it names
/// run the freshly built binaries (the node agent's image map; `tests/run.sh` builds them).
pub async fn install_operator() {
    INSTALL
        .get_or_init(|| async {
            let dir = repo_root().join("kustomize/quickstart");
            let dir = dir.to_string_lossy().into_owned();
            kubectl(&["apply", "--server-side", "--force-conflicts", "-k", &dir]);
            // Tests may use short resync periods (PKO's floor is 60 s).
            kubectl(&[
                "-n",
                OPERATOR_NAMESPACE,
                "set",
                "env",
                "deployment/pulumi-operator",
                "MIN_RESYNC_SECONDS=1",
                // The GitHub API stand-in is plain http on its own loopback address.
                &format!("GITHUB_API_HOSTS=api.github.com,{GITHUB_API_STANDIN_HOST}"),
                "ALLOW_INSECURE_GITHUB_API=true",
                // The tests' git servers listen on loopback, which the operator does not
                // contact for a Stack by default (`localhost` and other loopback addresses
                // stay refused: e2e_sources checks it).
                &format!("GIT_ALLOWED_INTERNAL_HOSTS={GIT_SERVER_HOST}"),
            ]);
            kubectl(&[
                "-n",
                OPERATOR_NAMESPACE,
                "rollout",
                "status",
                "deployment/pulumi-operator",
                "--timeout=120s",
            ]);
        })
        .await;
}

/// Deletes an object and ignores "not found".
pub async fn delete_quietly<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// A git repository for end-to-end tests: a bare repository (served to the cluster) and a
/// working copy to commit to.
pub struct GitRepo {
    pub bare: PathBuf,
    pub work: PathBuf,
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running git: {e}"));
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl GitRepo {
    /// Creates `<root>/<name>.git` (bare) and a working copy next to it.
    pub fn new(root: &std::path::Path, name: &str) -> GitRepo {
        let bare = root.join(format!("{name}.git"));
        let work = root.join(format!("{name}-work"));
        std::fs::create_dir_all(&bare).expect("bare dir");
        git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        // Served over HTTP by git-http-backend, which needs this for dumb clients only;
        // harmless otherwise.
        git(&bare, &["config", "http.receivepack", "false"]);
        std::fs::create_dir_all(&work).expect("work dir");
        git(&work, &["init", "-q", "-b", "main"]);
        git(
            &work,
            &[
                "remote",
                "add",
                "origin",
                bare.to_str().expect("utf-8 path"),
            ],
        );
        GitRepo { bare, work }
    }

    /// Writes files (path → content), commits them to `main`, pushes, and returns the SHA.
    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> String {
        for (path, content) in files {
            let p = self.work.join(path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).expect("dirs");
            }
            std::fs::write(&p, content).expect("write file");
        }
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "-q", "-m", message]);
        git(&self.work, &["push", "-q", "origin", "main"]);
        git(&self.work, &["rev-parse", "HEAD"])
    }

    /// As [`GitRepo::commit`], with owned (path, content) pairs ([`program_files`]).
    pub fn commit_files(&self, files: &[(String, String)], message: &str) -> String {
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        self.commit(&refs, message)
    }
}

/// The files of a test program under tests/programs/<name> (TypeScript, Python...), as
/// (path, content) pairs to commit.
pub fn program_files(name: &str) -> Vec<(String, String)> {
    let dir = repo_root().join("tests/programs").join(name);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("program dir entry").path();
        if path.is_file() {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let content = std::fs::read_to_string(&path).expect("program file");
            files.push((name, content));
        }
    }
    files.sort();
    files
}

/// The claim that [`DEPENDENCY_CACHE_TEMPLATE`] names.
pub const DEPENDENCY_CACHE_CLAIM: &str = "pulumi-dependencies";

/// A Stack's `workspaceTemplate` (spec-level lines) naming the namespace's dependency cache
/// claim: later operations of a TypeScript or Python program link their dependencies back
/// instead of installing them again.
pub const DEPENDENCY_CACHE_TEMPLATE: &str = "  workspaceTemplate:
    spec:
      podTemplate:
        spec:
          volumes:
          - name: dependency-cache
            persistentVolumeClaim: {claimName: pulumi-dependencies}
";

/// The address the tests' git servers (HTTP and SSH) listen on, which the operator installed
/// by [`install_operator`] may contact (`GIT_ALLOWED_INTERNAL_HOSTS`).
pub const GIT_SERVER_HOST: &str = "127.0.0.1";

/// A loopback HTTP git server (`tests/git-http-server.py`, git's own `git http-backend`)
/// serving every bare repository under `root`; stopped when dropped.
pub struct GitServer {
    pub url: String,
    child: std::process::Child,
}

impl GitServer {
    pub fn start(root: &std::path::Path) -> GitServer {
        use std::io::BufRead;
        let script = repo_root().join("tests/git-http-server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg("--quiet")
            .arg("--root")
            .arg(root)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", script.display()));
        let stdout = child.stdout.take().expect("stdout");
        let mut first = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut first)
            .expect("server's first line");
        let url = first.trim().to_string();
        assert!(
            url.starts_with("http://"),
            "unexpected first line from the git server: {first:?}"
        );
        GitServer { url, child }
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A namespace prepared like a user's: the ServiceAccount `pulumi` with PKO's documented
/// binding (`system:auth-delegator`, no rights on Secrets), a passphrase Secret, and a file backend directory on
/// this machine that every pod of the test cluster can write to (pods are local processes).
pub struct StackNamespace {
    pub ns: TestNamespace,
    pub backend_dir: PathBuf,
    pub backend_url: String,
}

/// The image the test cluster maps to the real Pulumi CLI behind the Pulumi Cloud stand-in
/// (tests/pulumi-cloud-shim): only for what the real CLI cannot reach here, a Pulumi Cloud
/// backend and ESC environments.
pub const CLOUD_STANDIN_IMAGE: &str = "test.local/pulumi-cloud-standin:latest";

pub const TEST_PASSPHRASE: &str = "e2e-passphrase-do-not-leak-7f3a";

impl StackNamespace {
    /// What PKO's documentation grants a Stack whose program manages Kubernetes objects, kept
    /// to the Stack's namespace (a RoleBinding to `cluster-admin`), and the claim a Stack may
    /// name as its dependency cache ([`DEPENDENCY_CACHE_TEMPLATE`]).
    pub fn grant_program_rights(&self) {
        self.ns.apply(&format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: pulumi-cluster-admin}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{kind: ServiceAccount, name: pulumi, namespace: {ns}}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {DEPENDENCY_CACHE_CLAIM}}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 2Gi}}}}
"#,
            ns = self.ns.name
        ));
    }

    pub async fn new(prefix: &str) -> StackNamespace {
        StackNamespace::create(prefix, true).await
    }

    /// A Stack namespace; with `install`, this repository's operator is installed first (a
    /// benchmark may measure another implementation of the API that is already installed).
    pub async fn create(prefix: &str, install: bool) -> StackNamespace {
        if install {
            install_operator().await;
        }
        let ns = TestNamespace::new(prefix).await;
        // Users' Stack namespaces are commonly held to the restricted Pod Security Standard:
        // update Jobs and workspace pods must be admitted as they are.
        ns.kubectl(&[
            "label",
            "namespace",
            &ns.name,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        ]);
        let backend_dir = std::env::temp_dir().join(format!("pulumi-state-{}", ns.name));
        std::fs::create_dir_all(&backend_dir).expect("backend dir");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&backend_dir, std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        ns.apply(&format!(
            r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: pulumi}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: pulumi-stack}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}}
subjects: [{{kind: ServiceAccount, name: pulumi, namespace: {ns}}}]
---
apiVersion: v1
kind: Secret
metadata: {{name: passphrase}}
stringData: {{passphrase: {TEST_PASSPHRASE}}}
"#,
            ns = ns.name
        ));
        let backend_url = format!("file://{}", backend_dir.display());
        StackNamespace {
            ns,
            backend_dir,
            backend_url,
        }
    }
}

/// A loopback HTTP server for files in a directory (plays Flux's source-controller artifact
/// endpoint); stops with the test process.
pub struct FileServer {
    pub url: String,
}

impl FileServer {
    pub fn start(dir: PathBuf) -> FileServer {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let n = stream.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or("/")
                    .trim_start_matches('/')
                    .to_string();
                let file = dir.join(path.replace("..", ""));
                let response = match std::fs::read(&file) {
                    Ok(body) => {
                        let mut r = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        r.extend(body);
                        r
                    }
                    Err(_) => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = stream.write_all(&response);
            }
        });
        FileServer {
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

/// A test namespace with a git repository served on loopback and helpers to apply and
/// watch Stacks that use it.
pub struct StackFixture {
    pub sn: StackNamespace,
    pub repo: GitRepo,
    pub server: GitServer,
    _root: TempDir,
}

pub struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl StackFixture {
    pub async fn new(prefix: &str) -> StackFixture {
        StackFixture::create(prefix, true).await
    }

    /// As `new`; without `install`, the operator already in the cluster is used as it is.
    pub async fn create(prefix: &str, install: bool) -> StackFixture {
        let sn = StackNamespace::create(prefix, install).await;
        let root = std::env::temp_dir().join(format!("e2e-git-{}", sn.ns.name));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let repo = GitRepo::new(&root, "app");
        let server = GitServer::start(&root);
        StackFixture {
            sn,
            repo,
            server,
            _root: TempDir(root),
        }
    }

    pub fn url(&self) -> String {
        format!("{}/app.git", self.server.url)
    }

    pub fn ns(&self) -> &str {
        &self.sn.ns.name
    }

    /// A Stack manifest in PKO's shape, on the Pulumi stack `dev`; `source` holds `commit:` or
    /// `branch:` lines.
    pub fn stack_yaml(&self, name: &str, source: &str, extra: &str) -> String {
        self.stack_yaml_on("dev", name, source, extra)
    }

    /// As [`StackFixture::stack_yaml`], on a Pulumi stack named after the Stack: for Stacks
    /// whose operations may overlap in one fixture (one backend), which on a shared stack would
    /// take turns at its lock, and the one that lost would fail.
    pub fn own_stack_yaml(&self, name: &str, source: &str, extra: &str) -> String {
        self.stack_yaml_on(name, name, source, extra)
    }

    fn stack_yaml_on(&self, stack: &str, name: &str, source: &str, extra: &str) -> String {
        format!(
            r#"apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: {name}
spec:
  stack: {stack}
  projectRepo: {url}
  {source}
  backend: {backend}
  serviceAccountName: pulumi
  envRefs:
    PULUMI_CONFIG_PASSPHRASE:
      type: Secret
      secret: {{name: passphrase, key: passphrase}}
{extra}"#,
            url = self.url(),
            backend = self.sn.backend_url,
        )
    }

    pub fn stacks(&self) -> Api<pulumi_operator_api::Stack> {
        Api::namespaced(self.sn.ns.client.clone(), self.ns())
    }

    pub async fn stack(&self, name: &str) -> pulumi_operator_api::Stack {
        self.stacks().get(name).await.unwrap()
    }

    pub async fn wait_stack(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&pulumi_operator_api::Stack) -> bool,
    ) -> pulumi_operator_api::Stack {
        self.wait_stack_for(Duration::from_secs(120), name, what, check)
            .await
    }

    pub async fn wait_stack_for(
        &self,
        timeout: Duration,
        name: &str,
        what: &str,
        check: impl Fn(&pulumi_operator_api::Stack) -> bool,
    ) -> pulumi_operator_api::Stack {
        let stacks = self.stacks();
        let start = Instant::now();
        loop {
            let seen = stacks.get(name).await.ok();
            if let Some(stack) = seen.as_ref().filter(|s| check(s)) {
                return stack.clone();
            }
            if start.elapsed() > timeout {
                // What the Stack last said, and the Updates beside it: a CI log is all there is.
                let status = seen
                    .and_then(|s| s.status)
                    .map(|s| serde_json::to_string_pretty(&s).unwrap_or_default())
                    .unwrap_or_else(|| "(no Stack, or no status)".into());
                let updates = std::process::Command::new("kubectl")
                    .args(["-n", self.ns(), "get", "updates", "-o", "wide"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n\
                     Stack {name}'s last status: {status}\nUpdates:\n{updates}"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Git authentication (tests/e2e_sources.rs and the runner's fetch tests): a git HTTP server
// that requires credentials and logs its requests, a real OpenSSH server, key generation, and a
// stand-in of GitHub's installation-token API.
// ---------------------------------------------------------------------------------------------

/// The loopback git HTTP server (tests/git-http-server.py) with extra arguments (`--user U
/// --password P`, `--token T`) and its request log (one line per request); stopped on drop.
pub struct LoggedGitServer {
    pub url: String,
    child: std::process::Child,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl LoggedGitServer {
    /// The port it listens on (the end of its URL).
    pub fn port(&self) -> String {
        self.url.rsplit(':').next().unwrap_or_default().to_string()
    }

    pub fn start(root: &std::path::Path, args: &[&str]) -> LoggedGitServer {
        use std::io::BufRead;
        let script = repo_root().join("tests/git-http-server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg("--root")
            .arg(root)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", script.display()));
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut first)
            .expect("server's first line");
        let url = first.trim().to_string();
        assert!(
            url.starts_with("http://"),
            "unexpected first line: {first:?}"
        );
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = log.clone();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(mut l) = sink.lock() {
                    l.push(line);
                }
            }
        });
        LoggedGitServer { url, child, log }
    }

    /// The request lines logged so far.
    pub fn requests(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The request lines logged once the log has been still for 300 ms: lines reach it
    /// through a reader thread, after the client has its answer.
    pub fn settled_requests(&self) -> Vec<String> {
        let mut seen = self.requests();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let now = self.requests();
            if now.len() == seen.len() {
                return now;
            }
            seen = now;
        }
    }

    /// How many logged requests contain every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        self.requests()
            .iter()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    }

    /// Reference advertisements of `repo` (one per ls-remote or clone), by status code.
    pub fn advertisements(&self, repo: &str, status: &str) -> usize {
        self.count(&[
            &format!("GET /{repo}/info/refs?service=git-upload-pack"),
            &format!("\" {status} "),
        ])
    }
}

impl Drop for LoggedGitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_tool(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A new SSH key pair (`ssh-keygen -t ed25519`, OpenSSH format; `passphrase` may be empty):
/// (private key, public key line).
pub fn ssh_key_pair(dir: &std::path::Path, name: &str, passphrase: &str) -> (String, String) {
    std::fs::create_dir_all(dir).expect("key dir");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(path.with_extension("pub"));
    let p = path.to_str().expect("utf-8 path");
    run_tool(
        "ssh-keygen",
        &["-q", "-t", "ed25519", "-N", passphrase, "-C", name, "-f", p],
    );
    (
        std::fs::read_to_string(&path).expect("private key"),
        std::fs::read_to_string(format!("{p}.pub")).expect("public key"),
    )
}

/// A new 2048-bit RSA key as a GitHub App has: (PKCS#1 PEM, path of the public key PEM).
pub fn rsa_key_pair(dir: &std::path::Path, name: &str) -> (String, PathBuf) {
    std::fs::create_dir_all(dir).expect("key dir");
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub.pem"));
    let (pr, pu) = (private.to_str().unwrap(), public.to_str().unwrap());
    run_tool("openssl", &["genrsa", "-traditional", "-out", pr, "2048"]);
    run_tool("openssl", &["rsa", "-in", pr, "-pubout", "-out", pu]);
    (std::fs::read_to_string(&private).expect("key"), public)
}

/// Makes sure `getpwuid(uid)` succeeds on this machine: OpenSSH's `ssh` refuses to run for a
/// uid without a passwd entry. Container images provide it (distroless `nonroot` is 65532, our
/// runner image has 1000 and 65532); the test cluster's pods run on this machine, so the
/// entry is added here when missing (needs root).
pub fn ensure_passwd_entry(uid: u32, name: &str) {
    let known = Command::new("getent")
        .args(["passwd", &uid.to_string()])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if known {
        return;
    }
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open("/etc/passwd")
        .unwrap_or_else(|e| panic!("ssh needs a passwd entry for uid {uid}; adding one: {e}"));
    writeln!(
        f,
        "{name}:x:{uid}:{uid}:{name}:/nonexistent:/usr/sbin/nologin"
    )
    .expect("write /etc/passwd");
    eprintln!("added a passwd entry for uid {uid} ({name}) so that ssh can run as it");
}

/// A real OpenSSH server (`/usr/sbin/sshd` from Debian's openssh-server) on a free loopback
/// port, with its own host key and authorized_keys in `dir`; `git-upload-pack` serves the bare
/// repositories over it. Stopped (by pid) on drop.
pub struct SshServer {
    pub port: u16,
    pub user: String,
    dir: PathBuf,
    child: std::process::Child,
    host_public_key: String,
}

impl SshServer {
    pub fn start(dir: &std::path::Path) -> SshServer {
        let sshd = PathBuf::from("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "these tests need OpenSSH's server: apt-get install -y openssh-server"
        );
        std::fs::create_dir_all(dir).expect("sshd dir");
        // The privilege-separation directory sshd insists on.
        let _ = std::fs::create_dir_all("/run/sshd");
        let host_key = dir.join("host_ed25519");
        if !host_key.exists() {
            run_tool(
                "ssh-keygen",
                &[
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-f",
                    host_key.to_str().unwrap(),
                ],
            );
        }
        let host_public_key = std::fs::read_to_string(host_key.with_extension("pub"))
            .expect("host public key")
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        let authorized = dir.join("authorized_keys");
        if !authorized.exists() {
            std::fs::write(&authorized, "").expect("authorized_keys");
        }
        let user = String::from_utf8_lossy(
            &Command::new("id")
                .arg("-un")
                .output()
                .expect("id -un")
                .stdout,
        )
        .trim()
        .to_string();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {pid}\n\
                 AuthorizedKeysFile {ak}\nStrictModes no\nUsePAM no\nPubkeyAuthentication yes\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PermitRootLogin prohibit-password\nAllowUsers {user}\nLogLevel VERBOSE\n\
                 MaxStartups 100:30:200\nMaxSessions 100\n",
                hk = host_key.display(),
                pid = dir.join("sshd.pid").display(),
                ak = authorized.display(),
            ),
        )
        .expect("sshd_config");
        let log = std::fs::File::create(dir.join("sshd.log")).expect("sshd log");
        let child = Command::new(&sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting sshd");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "sshd did not listen on port {port}: {}",
                std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        SshServer {
            port,
            user,
            dir: dir.to_path_buf(),
            child,
            host_public_key,
        }
    }

    /// Allows a public key (a line of `ssh_key_pair`).
    pub fn authorize(&self, public_key: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("authorized_keys"))
            .expect("authorized_keys");
        writeln!(f, "{}", public_key.trim()).expect("write authorized_keys");
    }

    /// The `ssh://` URL of a bare repository on this server.
    pub fn url(&self, bare: &std::path::Path) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            bare.display()
        )
    }

    /// The `known_hosts` line for this server.
    pub fn known_hosts(&self) -> String {
        format!("[127.0.0.1]:{} {}\n", self.port, self.host_public_key)
    }

    /// sshd's log (authentication successes and failures).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SshServer {
    fn drop(&mut self) {
        // By pid: only the server this test started.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Checks a GitHub App JWT the way GitHub does: RS256 signature by the app's key (verified by
/// `openssl dgst`), `iss` = the app ID, `iat` in the past, `exp` in the future and at most
/// ten minutes after `iat` + 60 s. The error says what is wrong.
pub fn verify_github_app_jwt(
    jwt: &str,
    public_key_pem: &std::path::Path,
    app_id: &str,
) -> Result<(), String> {
    let parts: Vec<&str> = jwt.split('.').collect();
    let [h, p, s] = parts.as_slice() else {
        return Err("not a JWT".into());
    };
    let header: serde_json::Value =
        serde_json::from_slice(&base64url_decode(h).ok_or("header is not base64url")?)
            .map_err(|e| format!("header: {e}"))?;
    if header["alg"] != "RS256" {
        return Err(format!("alg is {}", header["alg"]));
    }
    let claims: serde_json::Value =
        serde_json::from_slice(&base64url_decode(p).ok_or("payload is not base64url")?)
            .map_err(|e| format!("payload: {e}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (iat, exp) = (
        claims["iat"].as_i64().ok_or("no iat")?,
        claims["exp"].as_i64().ok_or("no exp")?,
    );
    let iss = match &claims["iss"] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if iss != app_id {
        return Err(format!("iss is {iss}, not {app_id}"));
    }
    if iat > now || exp <= now || exp - iat > 660 {
        return Err(format!("bad times: iat {iat}, exp {exp}, now {now}"));
    }
    let dir = std::env::temp_dir().join(format!(
        "jwt-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("input"), format!("{h}.{p}")).map_err(|e| e.to_string())?;
    std::fs::write(
        dir.join("sig"),
        base64url_decode(s).ok_or("signature is not base64url")?,
    )
    .map_err(|e| e.to_string())?;
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(public_key_pem)
        .arg("-signature")
        .arg(dir.join("sig"))
        .arg(dir.join("input"))
        .output()
        .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        Err("the signature does not verify with the app's public key".into())
    }
}

/// A loopback stand-in of GitHub's API for GitHub Apps: `POST
/// /app/installations/{installation}/access_tokens` with a valid JWT of the app answers 201
/// with `token`; anything else 401/404 with GitHub's error shape.
/// The loopback address the GitHub API stand-in listens on: the test operator may call it
/// (`GITHUB_API_HOSTS`), and nothing else on loopback (the SSRF cases use 127.0.0.1).
pub const GITHUB_API_STANDIN_HOST: &str = "127.0.0.77";

pub struct GitHubApiStandIn {
    pub url: String,
    pub issued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub refused: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl GitHubApiStandIn {
    pub fn start(
        public_key_pem: PathBuf,
        app_id: &str,
        installation_id: &str,
        token: &str,
    ) -> GitHubApiStandIn {
        use std::io::{BufRead, Read, Write};
        let listener = std::net::TcpListener::bind((GITHUB_API_STANDIN_HOST, 0)).expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let issued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let refused = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (app_id, token) = (app_id.to_string(), token.to_string());
        let path = format!("/app/installations/{installation_id}/access_tokens");
        let (issued_c, refused_c) = (issued.clone(), refused.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = std::io::BufReader::new(match stream.try_clone() {
                    Ok(s) => s,
                    Err(_) => continue,
                });
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                let (mut bearer, mut length) = (None, 0usize);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("authorization: bearer ") {
                        bearer = Some(line["authorization: bearer ".len()..].trim().to_string());
                    }
                }
                let mut body = vec![0u8; length];
                let _ = reader.read_exact(&mut body);
                let mut parts = request_line.split_whitespace();
                let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let (status, reply) = if method != "POST" || target != path {
                    ("404 Not Found", serde_json::json!({"message": "Not Found"}))
                } else {
                    match bearer
                        .as_deref()
                        .ok_or_else(|| "no bearer token".to_string())
                        .and_then(|jwt| verify_github_app_jwt(jwt, &public_key_pem, &app_id))
                    {
                        Ok(()) => {
                            issued_c.fetch_add(1, Ordering::SeqCst);
                            (
                                "201 Created",
                                serde_json::json!({"token": token, "expires_at": "2099-01-01T00:00:00Z"}),
                            )
                        }
                        Err(why) => {
                            if let Ok(mut r) = refused_c.lock() {
                                r.push(why.clone());
                            }
                            (
                                "401 Unauthorized",
                                serde_json::json!({"message": format!("A JSON web token could not be decoded ({why})")}),
                            )
                        }
                    }
                };
                let text = reply.to_string();
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
            }
        });
        GitHubApiStandIn {
            url,
            issued,
            refused,
        }
    }
}

/// A Stack is Ready for the generation it has now.
pub fn stack_ready(s: &pulumi_operator_api::Stack) -> bool {
    s.status
        .as_ref()
        .and_then(|x| x.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        && s.status.as_ref().and_then(|x| x.observed_generation) == s.metadata.generation
}

/// The Stack's output `value` as a string ("" when it has none).
pub fn output_value(s: &pulumi_operator_api::Stack) -> String {
    s.status
        .as_ref()
        .and_then(|x| x.outputs.as_ref())
        .and_then(|o| o.get("value"))
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

/// The Stack's `status.lastUpdate` (empty when it has none).
pub fn last_update(s: &pulumi_operator_api::Stack) -> pulumi_operator_api::StackUpdateState {
    s.status
        .clone()
        .and_then(|x| x.last_update)
        .unwrap_or_default()
}

/// A Pulumi YAML program (test provider plugins) that sleeps `seconds` in one resource, then
/// records `rested`, exported as the output `value`: an operation that is still running a few
/// seconds after it started.
pub fn sleeping_program(seconds: u32) -> String {
    format!(
        "name: e2e\nruntime: yaml\nresources:\n  nap:\n    type: standin:index:Sleep\n    properties:\n      seconds: {seconds}\n  rec:\n    type: standin:index:Record\n    properties:\n      value: rested\noutputs:\n  value: ${{rec.value}}\n"
    )
}

/// A pod whose `pulumi` container is running.
pub fn pulumi_running(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.name == "pulumi" && c.state.as_ref().is_some_and(|s| s.running.is_some())
            })
        })
}

impl StackFixture {
    /// How many lock files the file backend holds (0: no stack is locked).
    pub fn lock_files(&self) -> usize {
        fn count(p: &std::path::Path) -> usize {
            std::fs::read_dir(p)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| {
                            if e.path().is_dir() {
                                count(&e.path())
                            } else {
                                1
                            }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        count(&self.sn.backend_dir.join(".pulumi/locks"))
    }

    /// Waits for an operation pod of `stack` whose `pulumi` container runs.
    pub async fn running_runner_pod(&self, stack: &str) -> k8s_openapi::api::core::v1::Pod {
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.sn.ns.client.clone(), self.ns());
        let selector = format!("pulumi.com/stack-name={stack}");
        wait_for(
            Duration::from_secs(120),
            "the pulumi container to run",
            || async {
                let list = pods
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await
                    .ok()?;
                list.items.into_iter().find(pulumi_running)
            },
        )
        .await
    }

    /// The names of the Jobs of `stack` (one per operation still recorded).
    pub fn stack_jobs(&self, stack: &str) -> Vec<String> {
        kubectl(&[
            "-n",
            self.ns(),
            "get",
            "jobs",
            "-l",
            &format!("pulumi.com/stack-name={stack}"),
            "-o",
            "name",
        ])
        .lines()
        .map(str::to_string)
        .collect()
    }
}

/// Kills the operator's process with SIGKILL (no shutdown of any kind) and waits until an
/// operator runs again: the node agent restarts the container in the same pod, with the
/// kubelet's growing CrashLoopBackOff; after two restarts the dead pod is removed instead, and
/// the Deployment's new pod takes the leader lease once it expires.
/// The operator process of `pod` (the node agent gives each container its pod's HOSTNAME), by
/// PID: never another process whose command line happens to match.
fn operator_pid(pod: &str) -> u32 {
    let hostname = format!("HOSTNAME={}", pod.trim());
    let operators: Vec<u32> = processes()
        .into_iter()
        .filter(|p| {
            p.argv
                .first()
                .is_some_and(|a| a.ends_with("/pulumi-operator"))
                && p.environ.contains(&hostname)
        })
        .map(|p| p.pid)
        .collect();
    assert_eq!(
        operators.len(),
        1,
        "the operator process of pod {pod}: {operators:?}"
    );
    operators[0]
}

/// The running operator, frozen (SIGSTOP) until this is dropped (SIGCONT): its watches are away
/// while the cluster changes, as after a long GC pause or a frozen VM.
pub struct FrozenOperator(u32);

impl FrozenOperator {
    pub fn freeze() -> FrozenOperator {
        let pods = running_operator_pods("jsonpath={.items[*].metadata.name}");
        let pod = pods
            .split_whitespace()
            .next()
            .expect("a running operator pod");
        let pid = operator_pid(pod);
        assert!(
            signal(pid, "-STOP"),
            "could not freeze the operator ({pid})"
        );
        FrozenOperator(pid)
    }
}

impl Drop for FrozenOperator {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

pub async fn kill_operator() {
    let get = |path: &str| {
        kubectl(&[
            "-n",
            OPERATOR_NAMESPACE,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=pulumi-operator",
            "-o",
            &format!("jsonpath={{.items[*]{path}}}"),
        ])
    };
    let state = |path: &str| {
        get(&format!(
            ".status.containerStatuses[?(@.name==\"operator\")].{path}"
        ))
    };
    let running = || !state("state.running.startedAt").trim().is_empty();
    wait_until(Duration::from_secs(120), "the operator to run", || async {
        running()
    })
    .await;
    let pod = get(".metadata.name");
    let before = state("restartCount");
    let operator = operator_pid(&pod);
    assert!(
        kill_pid(operator),
        "could not kill the operator ({operator})"
    );
    if before.trim().parse::<u32>().unwrap_or(0) >= 2 {
        kubectl(&[
            "-n",
            OPERATOR_NAMESPACE,
            "delete",
            "pod",
            pod.trim(),
            "--grace-period=0",
            "--force",
            "--wait=false",
        ]);
        wait_until(
            Duration::from_secs(120),
            "a new operator pod to run",
            || {
                let pod = pod.clone();
                async move { get(".metadata.name").trim() != pod.trim() && running() }
            },
        )
        .await;
        return;
    }
    wait_until(
        Duration::from_secs(120),
        "the operator container to restart",
        || {
            let before = before.clone();
            async move { state("restartCount") != before && running() }
        },
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Real S3 state (tests/e2e_s3.rs): SeaweedFS, a real S3-compatible server built by
// tests/build-tools.sh, on loopback.
// ---------------------------------------------------------------------------------------------

/// A tool tests/build-tools.sh built (`helm`, `weed`, `prometheus`, ...), once it is there: CI
/// builds the ones only late tests need beside the tests, and this waits for that build.
pub fn tool(name: &str) -> PathBuf {
    let out = Command::new(repo_root().join("tests/build-tools.sh"))
        .args(["--print", name])
        .output()
        .expect("run tests/build-tools.sh --print");
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !dir.is_empty(),
        "{name} is not built: build the test tools with tests/build-tools.sh"
    );
    PathBuf::from(dir).join(name)
}

fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// SeaweedFS's single-process S3 server (`weed mini`) on loopback with one bucket and one
/// identity whose keys it requires (unsigned requests are refused); stopped when dropped.
pub struct S3Server {
    pub dir: PathBuf,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    ports: Vec<u16>,
    child: Option<std::process::Child>,
}

impl S3Server {
    pub fn start(dir: PathBuf) -> S3Server {
        std::fs::create_dir_all(dir.join("data")).expect("s3 data dir");
        let mut server = S3Server {
            dir,
            bucket: "pulumi-state".into(),
            access_key: "e2e-access-key".into(),
            secret_key: "e2e-secret-key-0f9c2d7e41".into(),
            // S3, master, volume, filer, admin, then their gRPC ports.
            ports: (0..10).map(|_| free_loopback_port()).collect(),
            child: None,
        };
        let identities = serde_json::json!({"identities": [{
            "name": "pulumi",
            "credentials": [{"accessKey": server.access_key, "secretKey": server.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]});
        std::fs::write(server.dir.join("s3.json"), identities.to_string()).expect("s3.json");
        server.resume();
        server
    }

    pub fn port(&self) -> u16 {
        self.ports[0]
    }

    /// The state backend URL the Pulumi CLI takes for this bucket.
    pub fn backend_url(&self) -> String {
        format!(
            "s3://{}?endpoint=http://127.0.0.1:{}&use_path_style=true&region=us-east-1&response_checksum_validation=when_required",
            self.bucket,
            self.port()
        )
    }

    /// Starts the server (again, on the same data and ports) and waits until it takes writes.
    pub fn resume(&mut self) {
        let p = &self.ports;
        let data = self.dir.join("data");
        let log =
            std::fs::File::create(self.dir.join(format!("weed-{}.log", p[0]))).expect("weed log");
        let args = vec![
            "-logtostderr".to_string(),
            "mini".into(),
            format!("-dir={}", data.display()),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-s3.port={}", p[0]),
            format!("-master.port={}", p[1]),
            format!("-volume.port={}", p[2]),
            format!("-filer.port={}", p[3]),
            format!("-admin.port={}", p[4]),
            format!("-s3.port.grpc={}", p[5]),
            format!("-master.port.grpc={}", p[6]),
            format!("-volume.port.grpc={}", p[7]),
            format!("-filer.port.grpc={}", p[8]),
            format!("-admin.port.grpc={}", p[9]),
            "-admin.port.legacy=0".into(),
            "-admin.ui=false".into(),
            "-webdav=false".into(),
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            "-master.telemetry=false".into(),
            format!("-s3.config={}", self.dir.join("s3.json").display()),
            "-master.volumeSizeLimitMB=64".into(),
            "-volume.max=4".into(),
            "-volume.preStopSeconds=0".into(),
            format!("-bucket={}", self.bucket),
        ];
        let child = Command::new(tool("weed"))
            .args(&args)
            .current_dir(&data)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start weed mini");
        self.child = Some(child);
        // Writes are refused for a while after a restart (the master's start-up delay): ready
        // once a signed PUT succeeds.
        let deadline = Instant::now() + Duration::from_secs(90);
        while !self.put_probe() {
            assert!(
                Instant::now() < deadline,
                "SeaweedFS did not take writes within 90 s (log: {})",
                self.dir.display()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Stops the server (SIGTERM, then SIGKILL); its data stays for [`S3Server::resume`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn curl(&self, extra: &[&str], path: &str) -> std::process::Output {
        let user = format!("{}:{}", self.access_key, self.secret_key);
        let url = format!("http://127.0.0.1:{}/{}{path}", self.port(), self.bucket);
        let mut args = vec![
            "-s",
            "-m",
            "10",
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
            "--user",
            &user,
        ];
        args.extend_from_slice(extra);
        args.push(&url);
        Command::new("curl").args(&args).output().expect("curl")
    }

    fn put_probe(&self) -> bool {
        let probe = self.dir.join("probe");
        let _ = std::fs::write(&probe, b"ready");
        let probe = probe.to_string_lossy().into_owned();
        let out = self.curl(
            &["-o", "/dev/null", "-w", "%{http_code}", "-T", &probe],
            "/probe",
        );
        String::from_utf8_lossy(&out.stdout).trim() == "200"
    }

    /// The keys under `prefix` in the bucket (ListObjectsV2).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        // Signed: the query in its canonical form (`/` escaped), or the signature differs.
        let prefix = prefix.replace('/', "%2F");
        let out = self.curl(&[], &format!("?list-type=2&prefix={prefix}"));
        let body = String::from_utf8_lossy(&out.stdout).into_owned();
        body.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(str::to_string)
            .collect()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// [`kill_pulumi_up`], tried for up to 30 s: the lock can be seen a moment before `pulumi up`
/// is visible in /proc on a loaded machine. Returns how many were killed.
pub async fn kill_pulumi_up_soon(needle: &str) -> usize {
    for _ in 0..60 {
        let killed = kill_pulumi_up(needle);
        if killed > 0 {
            return killed;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    0
}

/// A process seen in /proc: its PID, arguments and environment.
pub struct Process {
    pub pid: u32,
    pub argv: Vec<String>,
    pub environ: Vec<String>,
}

/// The operator process's resident memory (KiB) and threads, read from /proc: the test node
/// runs pods as local processes, so this works while the API server does not answer.
pub fn operator_usage() -> Option<(u64, u64)> {
    let pid = processes().into_iter().find(|p| {
        p.argv
            .first()
            .is_some_and(|a| a.ends_with("/pulumi-operator"))
    })?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.pid)).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmRSS:")?, field("Threads:")?))
}

/// Every process this user can read in /proc (the node agent runs the pods' containers as
/// processes of this machine).
pub fn processes() -> Vec<Process> {
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some(Process {
                pid,
                argv: split(std::fs::read(entry.path().join("cmdline")).unwrap_or_default()),
                environ: split(std::fs::read(entry.path().join("environ")).unwrap_or_default()),
            })
        })
        .collect()
}

/// Sends SIGKILL to one process; whether it was sent.
pub fn kill_pid(pid: u32) -> bool {
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success())
}

/// Sends SIGKILL to the `pulumi` CLI processes running `up` (not the runner, not the plugins)
/// whose environment contains `needle` (a backend's directory or URL); returns how many.
pub fn kill_pulumi_up(needle: &str) -> usize {
    processes()
        .into_iter()
        .filter(|p| {
            let is_cli = p
                .argv
                .first()
                .is_some_and(|a| a.ends_with("/pulumi") || a == "pulumi")
                && p.argv.iter().any(|a| a == "up");
            is_cli && p.environ.iter().any(|e| e.contains(needle))
        })
        .filter(|p| kill_pid(p.pid))
        .count()
}

/// The Stack's `Reconciling` condition as (reason, message), if it is true.
pub fn reconciling(s: &pulumi_operator_api::Stack) -> Option<(String, String)> {
    s.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Reconciling" && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

/// The files of the policy pack `tests/policy-packs/<name>`, as `packs/<name>/<file>`, for a
/// test repository's commit.
pub fn pack_files(name: &str) -> Vec<(String, String)> {
    let dir = repo_root().join("tests/policy-packs").join(name);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("pack dir entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            let content = std::fs::read_to_string(&p).expect("pack file");
            (format!("packs/{name}/{file}"), content)
        })
        .collect();
    files.sort();
    files
}
