//! Every Stack, Program, Workspace and Update manifest that users are told to write must be
//! accepted, unchanged, by the installed CRDs:
//!
//! - the manifests of the user documentation seeds (`api/tests/fixtures/seeds.yaml`),
//! - our own examples (every YAML file under `examples/`),
//! - the Pulumi Kubernetes Operator's own documentation and examples, the compatibility target
//!   (`tests/fixtures/pko-manifests.yaml`, whose header says where they come from).
//!
//! Each document goes through `kubectl apply --server-side --dry-run=server --validate=strict`
//! in a temporary namespace (the only change made to a document is its `metadata.namespace`,
//! plus a generated `metadata.name` for documentation fragments that have none). kubectl's
//! strict validation falls back to the server's published OpenAPI schema on this 1.20 API
//! server, which has no server-side field validation; because an API server silently prunes
//! unknown fields of a custom resource, the test also checks that the object the server
//! returns still holds every field the document set.
//!
//! A document preceded by a comment line `# expect-rejected: <text>` is invalid for PKO as
//! well: the test asserts that it is rejected, by kubectl's validation and by the API server
//! itself with a message containing `<text>`.
//!
//! Other kinds in the same files (Secrets, ServiceAccounts, RBAC, Flux sources, ...) are
//! ignored.

use pulumi_operator_api::{validate_stack, Stack};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use test_support::{install_operator, kubectl_result, kubectl_stdin, repo_root, TestNamespace};

/// The kinds of our API; documents of other kinds are ignored.
const OUR_KINDS: &[&str] = &["Stack", "Program", "Workspace", "Update"];

/// Our group/versions, as the OpenAPI definitions name them (`com.pulumi.v1.Stack`, ...).
const OPENAPI_DEFINITIONS: &[&str] = &[
    "com.pulumi.v1.Stack",
    "com.pulumi.v1.Program",
    "com.pulumi.auto.v1alpha1.Workspace",
    "com.pulumi.auto.v1alpha1.Update",
];

const EXPECT_REJECTED: &str = "# expect-rejected:";

/// One document of our kinds, with where it comes from.
struct Manifest {
    /// `path:line` of the document's first line, relative to the repository root.
    location: String,
    /// The comment line right after the `---` that opens the document, if any (in
    /// pko-manifests.yaml: the PKO file and lines it was copied from).
    origin: Option<String>,
    kind: String,
    name: Option<String>,
    /// `Some(text)`: the document must be rejected with a message containing `text`.
    expect_rejected: Option<String>,
    object: Value,
}

impl Manifest {
    fn label(&self) -> String {
        let name = self.name.as_deref().unwrap_or("<no name>");
        match &self.origin {
            Some(origin) => format!("{} {} {name} [{origin}]", self.location, self.kind),
            None => format!("{} {} {name}", self.location, self.kind),
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Splits a multi-document YAML file and keeps the documents of our kinds.
fn manifests_in(path: &Path) -> Vec<Manifest> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let rel = relative(path);

    // (first line number, lines) of each document; `---` lines separate documents.
    let mut chunks: Vec<(usize, Vec<&str>)> = vec![(1, Vec::new())];
    for (i, line) in text.lines().enumerate() {
        if line == "---" || line.starts_with("--- ") {
            chunks.push((i + 2, Vec::new()));
        } else {
            chunks.last_mut().expect("a chunk").1.push(line);
        }
    }

    let mut out = Vec::new();
    for (index, (first_line, lines)) in chunks.into_iter().enumerate() {
        let body = lines.join("\n");
        let yaml: serde_norway::Value = serde_norway::from_str(&body)
            .unwrap_or_else(|e| panic!("{rel}:{first_line}: not valid YAML: {e}"));
        if yaml.is_null() {
            continue; // only comments
        }
        let object: Value = serde_json::to_value(&yaml)
            .unwrap_or_else(|e| panic!("{rel}:{first_line}: not JSON-compatible: {e}"));
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        if !OUR_KINDS.contains(&kind.as_str()) {
            continue;
        }
        let leading_comments: Vec<&str> = lines
            .iter()
            .map(|l| l.trim())
            .take_while(|l| l.is_empty() || l.starts_with('#'))
            .filter(|l| !l.is_empty())
            .collect();
        // The first chunk of a file starts with the file's header, not with a note about the
        // document.
        let origin = (index > 0)
            .then(|| leading_comments.first())
            .flatten()
            .filter(|l| !l.starts_with(EXPECT_REJECTED))
            .map(|l| l.trim_start_matches('#').trim().to_string());
        let expect_rejected = leading_comments
            .iter()
            .find_map(|l| l.strip_prefix(EXPECT_REJECTED))
            .map(|t| t.trim().to_string());
        let content_line = first_line
            + lines
                .iter()
                .take_while(|l| {
                    let l = l.trim();
                    l.is_empty() || l.starts_with('#')
                })
                .count();
        out.push(Manifest {
            location: format!("{rel}:{content_line}"),
            origin,
            name: object["metadata"]["name"].as_str().map(str::to_string),
            kind,
            expect_rejected,
            object,
        });
    }
    out
}

fn yaml_files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The three sources, each with its documents of our kinds.
fn sources() -> Vec<(&'static str, Vec<Manifest>)> {
    let root = repo_root();
    let examples: Vec<Manifest> = yaml_files_under(&root.join("examples"))
        .iter()
        .flat_map(|file| manifests_in(file))
        .collect();
    vec![
        (
            "documentation seeds (api/tests/fixtures/seeds.yaml)",
            manifests_in(&root.join("api/tests/fixtures/seeds.yaml")),
        ),
        ("our examples (examples/)", examples),
        (
            "PKO documentation and examples (tests/fixtures/pko-manifests.yaml)",
            manifests_in(&root.join("tests/fixtures/pko-manifests.yaml")),
        ),
    ]
}

/// Whether kubectl failed because it could not reach the API server (which another engineer
/// may be restarting) rather than because the server refused the document.
fn is_connection_failure(stderr: &str) -> bool {
    [
        "Unable to connect to the server",
        "connection refused",
        "connection reset",
        "TLS handshake timeout",
        "the server is currently unable to handle the request",
        "i/o timeout",
        "server sent GOAWAY",
    ]
    .iter()
    .any(|needle| stderr.contains(needle))
}

/// Runs kubectl with `input`, retrying for a few minutes while the API server is unreachable.
async fn kubectl_with_retry(args: &[&str], input: &str) -> (bool, String, String) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let (ok, out, err) = kubectl_stdin(args, input);
        if ok || !is_connection_failure(&err) || Instant::now() > deadline {
            return (ok, out, err);
        }
        eprintln!(
            "kubectl cannot reach the API server ({}); retrying in 10s",
            err.trim()
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// Waits until the server publishes the OpenAPI schemas of our kinds, which kubectl's
/// client-side validation reads (a freshly installed CRD appears there after a moment).
async fn wait_for_published_schemas() {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (ok, out, err) = kubectl_result(&["get", "--raw", "/openapi/v2"]);
        let missing: Vec<&str> = OPENAPI_DEFINITIONS
            .iter()
            .copied()
            .filter(|d| !out.contains(&format!("\"{d}\"")))
            .collect();
        if ok && missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the API server does not publish the OpenAPI schemas {missing:?}: {err}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The places where `returned` lost or changed what `sent` set (`sent` ⊆ `returned`).
fn lost_fields(sent: &Value, returned: &Value, path: &str, out: &mut Vec<String>) {
    match (sent, returned) {
        (Value::Object(sent), Value::Object(returned)) => {
            for (key, value) in sent {
                let here = format!("{path}.{key}");
                match returned.get(key) {
                    Some(r) => lost_fields(value, r, &here, out),
                    None => out.push(format!("{here}: dropped by the server")),
                }
            }
        }
        (Value::Array(sent), Value::Array(returned)) if sent.len() == returned.len() => {
            for (i, (s, r)) in sent.iter().zip(returned).enumerate() {
                lost_fields(s, r, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(s), Value::Number(r)) if s.as_f64() == r.as_f64() => {}
        (s, r) if s == r => {}
        (s, r) => out.push(format!("{path}: sent {s}, the server returned {r}")),
    }
}

/// Applies one manifest (server-side dry run) and returns what is wrong, if anything.
async fn check(manifest: &Manifest, namespace: &str, generated_name: &str) -> Option<String> {
    let mut object = manifest.object.clone();
    if !object["metadata"].is_object() {
        object["metadata"] = serde_json::json!({});
    }
    object["metadata"]["namespace"] = Value::from(namespace);
    if manifest.name.is_none() {
        object["metadata"]["name"] = Value::from(generated_name);
    }
    let input = serde_json::to_string_pretty(&object).expect("JSON");
    let dry_run = |validate: &'static str| {
        [
            "apply",
            "--server-side",
            "--dry-run=server",
            validate,
            "-o",
            "json",
            "-f",
            "-",
        ]
    };

    let (ok, out, err) = kubectl_with_retry(&dry_run("--validate=strict"), &input).await;
    if let Some(expected) = &manifest.expect_rejected {
        if ok {
            return Some(format!(
                "expected a rejection ({expected}), but kubectl accepted it:\n{out}"
            ));
        }
        // The API server's own verdict, without kubectl's copy of the schema.
        let (ok, out, err) = kubectl_with_retry(&dry_run("--validate=false"), &input).await;
        return if ok {
            Some(format!(
                "expected the API server to reject it ({expected}), but it accepted it:\n{out}"
            ))
        } else if !err.contains(expected.as_str()) {
            Some(format!(
                "rejected, but not with a message containing {expected:?}:\n{}",
                err.trim()
            ))
        } else {
            None
        };
    }
    if !ok {
        return Some(err.trim().to_string());
    }
    let returned: Value = match serde_json::from_str(&out) {
        Ok(v) => v,
        Err(e) => return Some(format!("kubectl printed no object ({e}):\n{out}")),
    };
    let mut lost = Vec::new();
    lost_fields(&object, &returned, "", &mut lost);
    (!lost.is_empty()).then(|| {
        format!(
            "accepted, but the server did not keep what was sent (unknown fields are pruned):\n  {}",
            lost.join("\n  ")
        )
    })
}

#[tokio::test]
async fn every_documented_manifest_applies_to_our_crds() {
    install_operator().await;
    wait_for_published_schemas().await;
    let namespace = TestNamespace::new("manifests").await;

    let mut failures = Vec::new();
    let mut summary = Vec::new();
    for (source, manifests) in sources() {
        let rejected = manifests
            .iter()
            .filter(|m| m.expect_rejected.is_some())
            .count();
        summary.push(format!(
            "{source}: {} documents ({} expected to be rejected)",
            manifests.len(),
            rejected
        ));
        for (i, manifest) in manifests.iter().enumerate() {
            let generated = format!("{}-unnamed-{i}", manifest.kind.to_lowercase());
            if let Some(problem) = check(manifest, &namespace.name, &generated).await {
                failures.push(format!("--- {}\n{problem}", manifest.label()));
            }
        }
    }
    eprintln!("{}", summary.join("\n"));
    assert!(
        failures.is_empty(),
        "{} manifest(s) failed:\n{}\n\n{}",
        failures.len(),
        failures.join("\n\n"),
        summary.join("\n")
    );
}

/// Guards against the cluster test passing on an empty set: each source has what we expect.
#[test]
fn every_source_has_its_manifests() {
    let sources = sources();
    let count =
        |source: usize, kind: &str| sources[source].1.iter().filter(|m| m.kind == kind).count();
    // The seeds: 21 Stacks and Programs, a Workspace and an Update.
    assert!(sources[0].1.len() >= 20, "seeds: {}", sources[0].1.len());
    assert!(count(0, "Workspace") >= 1 && count(0, "Update") >= 1);
    // Our examples: five Stacks and a Program.
    assert!(
        count(1, "Stack") >= 5,
        "examples: {} Stacks",
        count(1, "Stack")
    );
    assert!(count(1, "Program") >= 1);
    // PKO: 10 Stacks (2 of them fragments expected to be rejected), 2 Programs, 1 Workspace.
    assert!(count(2, "Stack") >= 10, "PKO: {} Stacks", count(2, "Stack"));
    assert!(count(2, "Program") >= 2 && count(2, "Workspace") >= 1);
    for (source, manifests) in &sources {
        for m in manifests {
            if m.expect_rejected.is_none() {
                assert!(m.name.is_some(), "{source}: {} has no name", m.label());
            }
        }
    }
}

/// Our examples are not only schema-valid: the operator accepts them too (no `Stalled
/// SpecInvalid` for a missing source, a short commit SHA, a cross-namespace reference, ...).
#[test]
fn our_example_stacks_pass_the_operators_validation() {
    let examples = yaml_files_under(&repo_root().join("examples"));
    let mut stacks = 0;
    for file in &examples {
        for m in manifests_in(file) {
            assert!(
                m.expect_rejected.is_none(),
                "{}: examples must apply",
                m.label()
            );
            if m.kind != "Stack" {
                continue;
            }
            let stack =
                Stack::deserialize(&m.object).unwrap_or_else(|e| panic!("{}: {e}", m.label()));
            let errors = validate_stack(&stack);
            assert!(errors.is_empty(), "{}: {errors:?}", m.label());
            assert_eq!(
                stack.metadata.namespace.as_deref(),
                Some("default"),
                "{}: examples run in `default`, next to the quickstart's ServiceAccount",
                m.label()
            );
            assert_eq!(
                stack.spec.service_account_name.as_deref(),
                Some("pulumi"),
                "{}: examples use the quickstart's ServiceAccount `pulumi`",
                m.label()
            );
            stacks += 1;
        }
    }
    assert!(stacks >= 5, "{stacks} example Stacks");
}
