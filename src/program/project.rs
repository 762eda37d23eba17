//! A Program rendered (pure): the Pulumi.yaml its Stacks run, its sha256 digest, and the
//! Flux-style `status.artifact` PKO publishes for it.

use crate::runtime::error::Result;
use pulumi_operator_api::{Artifact, ProgramDefinition, ProgramStatus};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The Pulumi.yaml of a Program: project name = the Program's name, runtime `yaml`.
#[derive(Serialize)]
struct ProjectFile<'a> {
    name: &'a str,
    runtime: &'static str,
    #[serde(flatten)]
    program: &'a ProgramDefinition,
}

/// Renders the Program as Pulumi.yaml text. Deterministic: maps are ordered, so the same
/// Program always gives the same bytes (and digest).
pub fn render_project(name: &str, program: Option<&ProgramDefinition>) -> Result<String> {
    let empty = ProgramDefinition::default();
    let file = ProjectFile {
        name,
        runtime: "yaml",
        program: program.unwrap_or(&empty),
    };
    Ok(serde_norway::to_string(&file)?)
}

/// The largest rendered program an operation can carry: it reaches the Job as a ConfigMap,
/// whose data the API server caps at 1 MiB (1,048,576 bytes); the rest is headroom for the
/// key and the object's other fields.
pub const MAX_RENDERED_PROGRAM_BYTES: usize = 1_000_000;

/// Why a rendered program cannot run, if it is too large for its ConfigMap.
pub fn too_large(name: &str, rendered: &str) -> Option<String> {
    (rendered.len() > MAX_RENDERED_PROGRAM_BYTES).then(|| {
        format!(
            "program {name:?} renders to {} bytes of Pulumi.yaml, more than the {} an operation \
             can carry (a ConfigMap holds at most 1 MiB); move large values out of the Program \
             (a file in a git repository, or a config value from a Secret or ConfigMap)",
            rendered.len(),
            MAX_RENDERED_PROGRAM_BYTES
        )
    })
}

pub fn digest(content: &str) -> String {
    let hash = Sha256::digest(content.as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The artifact a Program's status advertises. The program reaches update Jobs through a
/// ConfigMap rather than an unauthenticated HTTP server, so `url` names the Program itself.
pub fn artifact(
    namespace: &str,
    name: &str,
    generation: i64,
    rendered: &str,
    now: jiff::Timestamp,
) -> Artifact {
    Artifact {
        path: format!("programs/{namespace}/{name}/{generation}/Pulumi.yaml"),
        url: format!("program://{namespace}/{name}/{generation}"),
        revision: generation.to_string(),
        digest: Some(digest(rendered)),
        last_update_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        size: Some(rendered.len() as i64),
        metadata: None,
    }
}

/// Whether the status already describes this generation and content.
pub fn status_current(status: Option<&ProgramStatus>, generation: i64, digest: &str) -> bool {
    status.is_some_and(|s| {
        s.observed_generation == Some(generation)
            && s.artifact.as_ref().and_then(|a| a.digest.as_deref()) == Some(digest)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_program_too_large_for_its_config_map_says_so() {
        let big = program(&format!(
            "resources:\n  r:\n    type: standin:index:Record\n    properties: {{value: {}}}\n",
            "x".repeat(MAX_RENDERED_PROGRAM_BYTES)
        ));
        let text = render_project("big", Some(&big)).unwrap();
        let message = too_large("big", &text).expect("too large");
        assert!(message.contains("more than the 1000000"), "{message}");
        let small = render_project("small", None).unwrap();
        assert_eq!(too_large("small", &small), None);
    }

    use super::*;

    fn program(yaml: &str) -> ProgramDefinition {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn renders_pulumi_yaml_with_name_and_runtime() {
        let p = program(
            r#"
resources:
  pet:
    type: random:RandomPet
    properties: {length: 2}
outputs:
  name: ${pet.id}
configuration:
  size: {type: Number, default: 3}
"#,
        );
        let text = render_project("my-program", Some(&p)).unwrap();
        let back: serde_norway::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(back["name"], "my-program");
        assert_eq!(back["runtime"], "yaml");
        assert_eq!(back["resources"]["pet"]["type"], "random:RandomPet");
        assert_eq!(back["resources"]["pet"]["properties"]["length"], 2);
        assert_eq!(back["outputs"]["name"], "${pet.id}");
        assert_eq!(back["configuration"]["size"]["type"], "Number");
        assert!(
            text.starts_with("name: my-program\nruntime: yaml\n"),
            "{text}"
        );
    }

    #[test]
    fn digest_is_deterministic_and_content_addressed() {
        let a = render_project("p", Some(&program("outputs: {a: '1', b: '2'}"))).unwrap();
        let b = render_project("p", Some(&program("outputs: {b: '2', a: '1'}"))).unwrap();
        let c = render_project("p", Some(&program("outputs: {a: '1'}"))).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&c));
        assert!(digest(&a).starts_with("sha256:") && digest(&a).len() == 71);
    }

    #[test]
    fn artifact_and_status_currency() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let art = artifact("ns", "p", 3, "x", now);
        assert_eq!(art.revision, "3");
        assert_eq!(art.size, Some(1));
        let d = art.digest.clone().unwrap();
        let status = ProgramStatus {
            observed_generation: Some(3),
            artifact: Some(art),
        };
        assert!(status_current(Some(&status), 3, &d));
        assert!(!status_current(Some(&status), 4, &d));
        assert!(!status_current(Some(&status), 3, "sha256:other"));
        assert!(!status_current(None, 3, &d));
    }
}
