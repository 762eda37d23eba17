//! Image → local executable mapping. There is no container runtime: an image name is mapped to
//! an entrypoint on this machine (e.g. the operator image → the freshly built operator binary),
//! or only to directories prepended to PATH (e.g. a Pulumi image → the Pulumi CLI stand-in).
//! An unmapped image runs `command[0]` from the host PATH, so `busybox` pods work.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageMap {
    #[serde(default)]
    pub images: Vec<ImageEntry>,
}

/// One image's stand-in, playing the role of the image's config (ENTRYPOINT, CMD, ENV, USER).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ImageEntry {
    /// Repository name without tag or digest, e.g. `ghcr.io/org/operator`.
    pub image: String,
    /// Match every repository that starts with `image` (e.g. `pulumi/pulumi` matches
    /// `pulumi/pulumi-nodejs`).
    #[serde(default)]
    pub prefix: bool,
    #[serde(default)]
    pub entrypoint: Vec<String>,
    #[serde(default)]
    pub cmd: Vec<String>,
    /// Directories prepended to PATH for containers of this image.
    #[serde(default)]
    pub path: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The image's USER, used for `runAsNonRoot` checks when the pod sets no `runAsUser`.
    #[serde(default)]
    pub user: Option<i64>,
    /// The image user's home directory (its HOME). Each container gets an empty, private one
    /// there, as an image's writable layer gives it: what npm, pip or go cache in HOME lives
    /// and dies with the container, never shared with another pod on this machine.
    #[serde(default)]
    pub home: Option<String>,
}

impl ImageMap {
    /// Reads the mapping file; a missing file is an empty mapping. Read at every container start
    /// so that tests may change it while the agent runs.
    pub fn load(path: Option<&Path>) -> anyhow::Result<ImageMap> {
        let Some(path) = path else {
            return Ok(ImageMap::default());
        };
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(serde_json::from_str(&text)
                .map_err(|e| anyhow::anyhow!("image map {}: {e}", path.display()))?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ImageMap::default()),
            Err(e) => Err(anyhow::anyhow!("image map {}: {e}", path.display())),
        }
    }

    pub fn find(&self, image: &str) -> Option<&ImageEntry> {
        let repo = repository(image);
        self.images.iter().find(|e| e.image == repo).or_else(|| {
            self.images
                .iter()
                .find(|e| e.prefix && repo.starts_with(&e.image))
        })
    }
}

/// `registry/org/name:tag@sha256:...` → `registry/org/name`; `docker.io/library/x` → `x`.
pub fn repository(image: &str) -> String {
    let no_digest = image.split('@').next().unwrap_or(image);
    let last_slash = no_digest.rfind('/').map(|i| i + 1).unwrap_or(0);
    let repo = match no_digest[last_slash..].find(':') {
        Some(colon) => &no_digest[..last_slash + colon],
        None => no_digest,
    };
    repo.strip_prefix("docker.io/library/")
        .or_else(|| repo.strip_prefix("docker.io/"))
        .unwrap_or(repo)
        .to_string()
}

/// Kubernetes' rules for the process argv: `command` replaces the image's ENTRYPOINT, `args`
/// replace its CMD; `command` without `args` drops the image's CMD.
pub fn argv(entry: Option<&ImageEntry>, command: &[String], args: &[String]) -> Vec<String> {
    let (entrypoint, cmd) = entry
        .map(|e| (e.entrypoint.as_slice(), e.cmd.as_slice()))
        .unwrap_or((&[], &[]));
    match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) => entrypoint.iter().chain(args).cloned().collect(),
        (true, true) => entrypoint.iter().chain(cmd).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn repository_strips_tag_digest_and_docker_hub() {
        assert_eq!(repository("busybox"), "busybox");
        assert_eq!(repository("busybox:1.36"), "busybox");
        assert_eq!(repository("docker.io/library/busybox:1"), "busybox");
        assert_eq!(
            repository("localhost:5000/org/img:v1"),
            "localhost:5000/org/img"
        );
        assert_eq!(repository("ghcr.io/a/b@sha256:abc"), "ghcr.io/a/b");
        assert_eq!(repository("pulumi/pulumi:3.1.0-nonroot"), "pulumi/pulumi");
    }

    #[test]
    fn argv_follows_kubernetes_command_args_rules() {
        let e = ImageEntry {
            entrypoint: s(&["/bin/ep"]),
            cmd: s(&["--default"]),
            ..Default::default()
        };
        assert_eq!(argv(Some(&e), &[], &[]), s(&["/bin/ep", "--default"]));
        assert_eq!(argv(Some(&e), &[], &s(&["x"])), s(&["/bin/ep", "x"]));
        assert_eq!(argv(Some(&e), &s(&["sh"]), &[]), s(&["sh"]));
        assert_eq!(
            argv(Some(&e), &s(&["sh"]), &s(&["-c", "x"])),
            s(&["sh", "-c", "x"])
        );
        assert!(argv(None, &[], &[]).is_empty());
    }

    #[test]
    fn find_prefers_exact_then_prefix() {
        let map: ImageMap = serde_json::from_str(
            r#"{"images":[{"image":"pulumi/pulumi","prefix":true,"path":["/p"]},
                          {"image":"pulumi/pulumi-nodejs","path":["/n"]}]}"#,
        )
        .unwrap();
        assert_eq!(map.find("pulumi/pulumi-nodejs:3").unwrap().path, s(&["/n"]));
        assert_eq!(map.find("pulumi/pulumi-python:3").unwrap().path, s(&["/p"]));
        assert!(map.find("busybox").is_none());
    }
}
