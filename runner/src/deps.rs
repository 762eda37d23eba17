//! The dependency cache: a program's installed dependencies (`node_modules`, the virtualenv)
//! kept in a directory the Job mounts, under the digest of everything that decides them (the
//! lockfile, the manifest, the runtime and its version), so that a later operation of the same
//! program links them back instead of downloading and installing again.
//!
//! An entry is written once (copied to a temporary name, then renamed into place) and never
//! changed afterwards, so Jobs that share the directory never see half an entry. Without a
//! lockfile nothing is kept whole (the same manifest can install different versions tomorrow),
//! but the package managers' own download caches still live in the directory.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// What the cache can do for one project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CachePlan {
    /// The installed dependencies, the directory `dir` of the workspace, are kept whole under
    /// `<cache>/<key>/<dir>`.
    Installed { key: String, dir: String },
    /// Only the package managers' download caches are kept; `why` says why not more.
    DownloadsOnly { why: String },
}

/// The runtime section of a project file: its name and options (`runtime: nodejs` or
/// `runtime: {name: python, options: {virtualenv: venv}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runtime {
    pub name: String,
    pub virtualenv: Option<String>,
    pub toolchain: Option<String>,
}

/// Reads the runtime of a project file (YAML or JSON).
pub fn runtime_of(project_text: &str) -> Option<Runtime> {
    let doc: serde_norway::Value = serde_norway::from_str(project_text).ok()?;
    let runtime = doc.get("runtime")?;
    if let Some(name) = runtime.as_str() {
        return Some(Runtime {
            name: name.to_string(),
            ..Runtime::default()
        });
    }
    let option = |key: &str| {
        runtime
            .get("options")
            .and_then(|o| o.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    Some(Runtime {
        name: runtime.get("name")?.as_str()?.to_string(),
        virtualenv: option("virtualenv"),
        toolchain: option("toolchain"),
    })
}

/// The Node.js lockfiles, in the order npm, yarn and pnpm read them.
const NODE_LOCKFILES: [&str; 4] = [
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
];

/// Decides what the cache keeps for a project. `read` gives a workspace file's bytes;
/// `tool_version` is what `node --version` or `python3 --version` printed (installed packages
/// with native parts only fit the runtime they were built for); `workspace` is the workspace's
/// real path (a virtualenv's scripts name it).
pub fn plan(
    runtime: &Runtime,
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
    tool_version: &str,
    workspace: &str,
) -> CachePlan {
    let mut digest = Sha256::new();
    let mut add = |name: &str, bytes: &[u8]| {
        // Length-prefixed, so that no two different inputs hash alike.
        digest.update((name.len() as u64).to_le_bytes());
        digest.update(name.as_bytes());
        digest.update((bytes.len() as u64).to_le_bytes());
        digest.update(bytes);
    };
    add("runtime", runtime.name.as_bytes());
    add("tool", tool_version.trim().as_bytes());
    add("workspace", workspace.as_bytes());
    let dir = match runtime.name.as_str() {
        "nodejs" => {
            let Some(lockfile) = NODE_LOCKFILES.iter().find_map(|f| Some((*f, read(f)?))) else {
                return CachePlan::DownloadsOnly {
                    why: "the project has no lockfile (package-lock.json, yarn.lock or \
                          pnpm-lock.yaml)"
                        .into(),
                };
            };
            add("package.json", &read("package.json").unwrap_or_default());
            add(lockfile.0, &lockfile.1);
            "node_modules".to_string()
        }
        "python" => {
            match runtime.toolchain.as_deref() {
                None | Some("pip") => {}
                Some(other) => {
                    return CachePlan::DownloadsOnly {
                        why: format!("the {other} toolchain keeps its environment itself"),
                    }
                }
            }
            let Some(venv) = runtime.virtualenv.clone() else {
                return CachePlan::DownloadsOnly {
                    why: "the project names no virtualenv (runtime.options.virtualenv)".into(),
                };
            };
            let Some(requirements) = read("requirements.txt") else {
                return CachePlan::DownloadsOnly {
                    why: "the project has no requirements.txt".into(),
                };
            };
            add("requirements.txt", &requirements);
            add("virtualenv", venv.as_bytes());
            venv
        }
        other => {
            return CachePlan::DownloadsOnly {
                why: format!("{other} programs keep their dependencies in the download caches"),
            }
        }
    };
    // The directory must stay inside the workspace.
    if dir.is_empty() || Path::new(&dir).is_absolute() || dir.split('/').any(|p| p == "..") {
        return CachePlan::DownloadsOnly {
            why: format!("the virtualenv {dir:?} is not a directory inside the project"),
        };
    }
    let key = digest
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    CachePlan::Installed { key, dir }
}

/// The package managers' download caches under `cache`: set for `pulumi install` and the
/// operation (a Go program is built by the operation).
pub fn download_env(cache: &Path) -> Vec<(String, String)> {
    let at = |sub: &str| cache.join(sub).to_string_lossy().into_owned();
    vec![
        ("npm_config_cache".into(), at("npm")),
        ("YARN_CACHE_FOLDER".into(), at("yarn")),
        ("npm_config_store_dir".into(), at("pnpm")),
        ("PIP_CACHE_DIR".into(), at("pip")),
        ("GOMODCACHE".into(), at("go/mod")),
        ("GOCACHE".into(), at("go/build")),
    ]
}

/// The tool whose version decides whether installed packages fit.
pub fn version_command(runtime: &str) -> Option<[&'static str; 2]> {
    match runtime {
        "nodejs" => Some(["node", "--version"]),
        "python" => Some(["python3", "--version"]),
        _ => None,
    }
}

fn entry(cache: &Path, key: &str, dir: &str) -> PathBuf {
    cache.join(key).join(dir)
}

/// Links the cached dependencies into the workspace; `Ok(false)` when there are none yet.
pub fn restore(cache: &Path, key: &str, workspace: &Path, dir: &str) -> std::io::Result<bool> {
    let cached = entry(cache, key, dir);
    if !cached.is_dir() {
        return Ok(false);
    }
    let target = workspace.join(dir);
    if std::fs::symlink_metadata(&target).is_ok() {
        // Committed by mistake, or left by an earlier step: the cached copy is what the
        // lockfile says.
        remove_any(&target)?;
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::os::unix::fs::symlink(&cached, &target)?;
    Ok(true)
}

/// Keeps the workspace's freshly installed `dir` under `key`: copied to a temporary name, then
/// renamed into place, so that nobody sees half an entry; another Job's entry of the same key
/// wins. The workspace then uses the cached copy, as a later operation will.
pub fn store(cache: &Path, key: &str, workspace: &Path, dir: &str) -> std::io::Result<()> {
    let installed = workspace.join(dir);
    if !installed.is_dir() || entry(cache, key, dir).is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(cache)?;
    let partial = cache.join(format!(".partial-{key}-{}", unique_suffix()));
    let _ = remove_any(&partial);
    let copied = copy_tree(&installed, &partial.join(dir));
    if let Err(e) = copied {
        let _ = remove_any(&partial);
        return Err(e);
    }
    match std::fs::rename(&partial, cache.join(key)) {
        Ok(()) => {}
        // Another Job stored the same key first: the same content.
        Err(_) if entry(cache, key, dir).is_dir() => {
            let _ = remove_any(&partial);
        }
        Err(e) => {
            let _ = remove_any(&partial);
            return Err(e);
        }
    }
    Ok(())
}

/// A name part no other operation sharing the directory uses at the same time: every pod's
/// runner has the same pid in its own PID namespace, so the pod's hostname and the time count.
pub fn unique_suffix() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{}-{}-{nanos}", host.trim(), std::process::id())
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Copies a directory tree: files with their permissions, symlinks as symlinks.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for item in std::fs::read_dir(from)? {
        let item = item?;
        let kind = item.file_type()?;
        let dest = to.join(item.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(item.path())?, &dest)?;
        } else if kind.is_dir() {
            copy_tree(&item.path(), &dest)?;
        } else {
            std::fs::copy(item.path(), &dest)?;
        }
    }
    std::fs::set_permissions(to, std::fs::metadata(from)?.permissions())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    fn plan_for(runtime: &Runtime, files: &BTreeMap<String, Vec<u8>>) -> CachePlan {
        plan(
            runtime,
            &|f| files.get(f).cloned(),
            "v20.20.2",
            "/share/source",
        )
    }

    fn node() -> Runtime {
        runtime_of("name: a\nruntime: nodejs\n").unwrap()
    }

    #[test]
    fn reads_runtime_names_and_options() {
        assert_eq!(node().name, "nodejs");
        let py = runtime_of(
            "name: a\nruntime:\n  name: python\n  options: {toolchain: pip, virtualenv: venv}\n",
        )
        .unwrap();
        assert_eq!(py.virtualenv.as_deref(), Some("venv"));
        assert_eq!(py.toolchain.as_deref(), Some("pip"));
        assert_eq!(
            runtime_of(r#"{"name": "j", "runtime": "go"}"#)
                .unwrap()
                .name,
            "go"
        );
        assert_eq!(runtime_of("name: [unclosed"), None);
    }

    #[test]
    fn node_modules_are_kept_under_the_lockfile_digest() {
        let a = files(&[("package.json", "{}"), ("package-lock.json", "lock 1")]);
        let CachePlan::Installed { key, dir } = plan_for(&node(), &a) else {
            panic!("not cached");
        };
        assert_eq!(dir, "node_modules");
        assert_eq!(key.len(), 64);
        // Same inputs, same key; any input changed, another key.
        assert_eq!(plan_for(&node(), &a), plan_for(&node(), &a.clone()));
        let b = files(&[("package.json", "{}"), ("package-lock.json", "lock 2")]);
        assert_ne!(plan_for(&node(), &a), plan_for(&node(), &b));
        let other_node = plan(&node(), &|f| a.get(f).cloned(), "v22.0.0", "/share/source");
        assert_ne!(plan_for(&node(), &a), other_node);
        let yarn = files(&[("package.json", "{}"), ("yarn.lock", "lock 1")]);
        assert!(matches!(
            plan_for(&node(), &yarn),
            CachePlan::Installed { .. }
        ));
    }

    #[test]
    fn without_a_lockfile_only_downloads_are_cached() {
        let plan = plan_for(&node(), &files(&[("package.json", "{}")]));
        assert!(
            matches!(&plan, CachePlan::DownloadsOnly { why } if why.contains("lockfile")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_python_virtualenv_is_kept_when_the_project_names_one() {
        let reqs = files(&[("requirements.txt", "pulumi==3.272.0\n")]);
        let venv = runtime_of(
            "name: a\nruntime: {name: python, options: {toolchain: pip, virtualenv: venv}}\n",
        )
        .unwrap();
        assert!(matches!(
            plan_for(&venv, &reqs),
            CachePlan::Installed { dir, .. } if dir == "venv"
        ));
        let none = runtime_of("name: a\nruntime: python\n").unwrap();
        assert!(matches!(
            plan_for(&none, &reqs),
            CachePlan::DownloadsOnly { why } if why.contains("virtualenv")
        ));
        let poetry =
            runtime_of("name: a\nruntime: {name: python, options: {toolchain: poetry}}\n").unwrap();
        assert!(matches!(
            plan_for(&poetry, &reqs),
            CachePlan::DownloadsOnly { .. }
        ));
        let outside =
            runtime_of("name: a\nruntime: {name: python, options: {virtualenv: ../../etc}}\n")
                .unwrap();
        assert!(matches!(
            plan_for(&outside, &reqs),
            CachePlan::DownloadsOnly { .. }
        ));
    }

    #[test]
    fn go_and_yaml_use_download_caches_only() {
        let go = runtime_of("name: a\nruntime: go\n").unwrap();
        assert!(matches!(
            plan_for(&go, &files(&[("go.sum", "x")])),
            CachePlan::DownloadsOnly { .. }
        ));
        let env = download_env(Path::new("/cache"));
        assert!(env.contains(&("GOMODCACHE".into(), "/cache/go/mod".into())));
        assert!(env.contains(&("npm_config_cache".into(), "/cache/npm".into())));
    }

    #[test]
    fn stored_dependencies_are_restored_as_a_link_to_the_entry() {
        let root = tempfile::tempdir().unwrap();
        let cache = root.path().join("cache");
        let first = root.path().join("first");
        std::fs::create_dir_all(first.join("node_modules/.bin")).unwrap();
        std::fs::write(first.join("node_modules/pkg.js"), "module.exports = 1").unwrap();
        std::os::unix::fs::symlink("../pkg.js", first.join("node_modules/.bin/pkg")).unwrap();

        let second = root.path().join("second");
        std::fs::create_dir_all(&second).unwrap();
        assert!(!restore(&cache, "k1", &second, "node_modules").unwrap());

        store(&cache, "k1", &first, "node_modules").unwrap();
        // Storing twice keeps the first entry and leaves no partial copy.
        store(&cache, "k1", &first, "node_modules").unwrap();
        let names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["k1".to_string()]);

        assert!(restore(&cache, "k1", &second, "node_modules").unwrap());
        let linked = second.join("node_modules");
        assert!(std::fs::symlink_metadata(&linked)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_to_string(linked.join("pkg.js")).unwrap(),
            "module.exports = 1"
        );
        assert_eq!(
            std::fs::read_link(linked.join(".bin/pkg")).unwrap(),
            PathBuf::from("../pkg.js")
        );
        // Another key is another entry.
        assert!(!restore(&cache, "k2", &second, "node_modules").unwrap());
    }
}
