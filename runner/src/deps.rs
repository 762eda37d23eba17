//! The dependency cache: a program's installed dependencies (`node_modules`, the virtualenv)
//! kept in a directory the Job mounts, under the digest of everything that decides them (the
//! lockfile, the manifest, the runtime and its version), so that a later operation of the same
//! program links them back instead of downloading and installing again.
//!
//! An entry is written once (copied to a temporary name, then renamed into place) and never
//! changed afterwards, so Jobs that share the directory never see half an entry. A Node.js
//! program without a lockfile is kept too, under the digest of its `package.json`, with the lock
//! its install wrote; but the same manifest can install newer versions tomorrow, so such an
//! entry is used only for [`LOCKLESS_MAX_AGE`] and then replaced by a new one under a new name.
//! The package managers' own download caches live in the directory as well.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long an entry kept without a lockfile is used. `package.json` names ranges (`^3.0.0`)
/// that resolve to newer releases as they appear, so past this age an operation installs
/// afresh and keeps a new entry: a program gets its dependencies' new releases at most a day
/// late, and pays one full install a day instead of one per operation.
pub const LOCKLESS_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// What the cache can do for one project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CachePlan {
    /// The installed dependencies, the directory `dir` of the workspace, are kept whole under
    /// `<cache>/<key>/<dir>`; `lockless`: keyed by `package.json` alone, see [`Entry`].
    Installed {
        key: String,
        dir: String,
        lockless: bool,
    },
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

/// The Node.js lockfiles of npm, yarn, pnpm and bun. Bun's count so that a bun project is
/// keyed by its lock, not taken for one without a lockfile.
const NODE_LOCKFILES: [&str; 6] = [
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "bun.lock",
    "bun.lockb",
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
    let mut lockless = false;
    let dir = match runtime.name.as_str() {
        "nodejs" => {
            lockless = match add_node_inputs(read, &mut add) {
                Ok(lockless) => lockless,
                Err(plan) => return plan,
            };
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
    CachePlan::Installed { key, dir, lockless }
}

/// Adds what decides a Node.js program's `node_modules` to its key: its lockfile with
/// `package.json`, else `package.json` alone (then `Ok(true)`).
fn add_node_inputs(
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
    add: &mut dyn FnMut(&str, &[u8]),
) -> Result<bool, CachePlan> {
    let manifest = read("package.json");
    if let Some((name, lock)) = NODE_LOCKFILES.iter().find_map(|f| Some((*f, read(f)?))) {
        add("package.json", &manifest.unwrap_or_default());
        add(name, &lock);
        return Ok(false);
    }
    let Some(manifest) = manifest else {
        return Err(CachePlan::DownloadsOnly {
            why: "the project has neither a lockfile nor a package.json".into(),
        });
    };
    // Marked, so that an entry installed from ranges is never taken for one installed from a
    // lock (they are also named differently, see `Entry`).
    add("lockless", b"package.json");
    add("package.json", &manifest);
    Ok(true)
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

/// A project's entry in the dependency cache `cache`, as [`plan`] keyed it. An entry keyed by
/// a lockfile is the directory `<key>`, kept for good. One keyed by `package.json` alone
/// (`lockless`) is `<key>.<creation time>` (seconds since the epoch), which also holds the lock
/// the install wrote: it is used while younger than [`LOCKLESS_MAX_AGE`], then a new one is
/// stored under its own new name, so that no entry is ever replaced under a reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub cache: PathBuf,
    pub key: String,
    pub dir: String,
    pub lockless: bool,
}

/// What [`Entry::restore`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restored {
    /// The entry is linked into the workspace: nothing to install.
    Linked,
    /// There is no entry yet.
    Missing,
    /// There are entries without a lockfile, all older than [`LOCKLESS_MAX_AGE`].
    Expired,
}

impl Entry {
    /// What the key is the digest of, for the log.
    pub fn describe(&self) -> String {
        let short = self.key.get(..12).unwrap_or(&self.key);
        if self.lockless {
            format!("package.json digest {short}, no lockfile")
        } else {
            format!("lockfile digest {short}")
        }
    }

    /// The files kept beside `dir`: without a lockfile, the lock the install wrote, so that
    /// a restored tree comes with the lock it was installed from.
    fn beside(&self) -> &'static [&'static str] {
        if self.lockless {
            &NODE_LOCKFILES
        } else {
            &[]
        }
    }

    /// The creation times of this key's entries without a lockfile.
    fn stamps(&self) -> Vec<u64> {
        let prefix = format!("{}.", self.key);
        let Ok(items) = std::fs::read_dir(&self.cache) else {
            return Vec::new();
        };
        items
            .filter_map(|item| item.ok())
            .filter_map(|item| {
                let name = item.file_name();
                name.to_str()?.strip_prefix(&prefix)?.parse().ok()
            })
            .collect()
    }

    /// The name of the entry to use at `now`, or why there is none.
    fn usable(&self, now: SystemTime) -> Result<String, Restored> {
        if !self.lockless {
            return Ok(self.key.clone());
        }
        let now = epoch_secs(now);
        let stamps = self.stamps();
        // The newest young enough; an entry stamped a day ahead of this clock is not trusted.
        let fresh = stamps
            .iter()
            .filter(|t| now.abs_diff(**t) < LOCKLESS_MAX_AGE.as_secs())
            .max();
        match fresh {
            Some(t) => Ok(format!("{}.{t}", self.key)),
            None if stamps.is_empty() => Err(Restored::Missing),
            None => Err(Restored::Expired),
        }
    }

    /// Links the cached dependencies into the workspace (and copies the lock kept with them),
    /// when there is an entry to use at `now`.
    pub fn restore(&self, workspace: &Path, now: SystemTime) -> std::io::Result<Restored> {
        let cached = match self.usable(now) {
            Ok(name) => self.cache.join(name),
            Err(why) => return Ok(why),
        };
        if !cached.join(&self.dir).is_dir() {
            return Ok(Restored::Missing);
        }
        for file in self.beside() {
            let kept = cached.join(file);
            if kept.is_file() {
                let target = workspace.join(file);
                remove_any(&target)?;
                // A copy, not a link: whatever rewrites the program's lock leaves the entry as
                // it is.
                std::fs::copy(&kept, &target)?;
            }
        }
        link_entry(&cached.join(&self.dir), workspace, &self.dir)?;
        Ok(Restored::Linked)
    }

    /// Keeps the workspace's freshly installed `dir` (and the lock kept beside it): under the
    /// key, or without a lockfile under the key and `now`, unless another Job kept an entry
    /// that is still young meanwhile.
    pub fn store(&self, workspace: &Path, now: SystemTime) -> std::io::Result<()> {
        let name = if self.lockless {
            if self.usable(now).is_ok() {
                return Ok(());
            }
            format!("{}.{}", self.key, epoch_secs(now))
        } else {
            self.key.clone()
        };
        write_entry(&self.cache, &name, workspace, &self.dir, self.beside())
    }
}

fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Links the entry's directory `cached` to `dir` in the workspace.
fn link_entry(cached: &Path, workspace: &Path, dir: &str) -> std::io::Result<()> {
    let target = workspace.join(dir);
    if std::fs::symlink_metadata(&target).is_ok() {
        // Committed by mistake, or left by an earlier step: the cached copy is what the
        // lockfile (or package.json) says.
        remove_any(&target)?;
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::os::unix::fs::symlink(cached, &target)
}

/// Keeps the workspace's freshly installed `dir`, and those of the files `beside` that the
/// workspace has, as the entry `name`: copied to a temporary name, then renamed into place, so
/// that nobody sees half an entry; another Job's entry of the same name wins.
fn write_entry(
    cache: &Path,
    name: &str,
    workspace: &Path,
    dir: &str,
    beside: &[&str],
) -> std::io::Result<()> {
    let installed = workspace.join(dir);
    if !installed.is_dir() || cache.join(name).join(dir).is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(cache)?;
    let partial = cache.join(format!(".partial-{name}-{}", unique_suffix()));
    let _ = remove_any(&partial);
    let copied = copy_tree(&installed, &partial.join(dir))
        .and_then(|()| copy_files(workspace, &partial, beside));
    if let Err(e) = copied {
        let _ = remove_any(&partial);
        return Err(e);
    }
    match std::fs::rename(&partial, cache.join(name)) {
        Ok(()) => {}
        // Another Job stored the same name first: the same content.
        Err(_) if cache.join(name).join(dir).is_dir() => {
            let _ = remove_any(&partial);
        }
        Err(e) => {
            let _ = remove_any(&partial);
            return Err(e);
        }
    }
    Ok(())
}

/// Copies those of the regular files `names` that `from` has (a link is not followed).
fn copy_files(from: &Path, to: &Path, names: &[&str]) -> std::io::Result<()> {
    for name in names {
        let file = from.join(name);
        if std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file()) {
            std::fs::copy(&file, to.join(name))?;
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
        let CachePlan::Installed { key, dir, lockless } = plan_for(&node(), &a) else {
            panic!("not cached");
        };
        assert_eq!(dir, "node_modules");
        assert!(!lockless);
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
    fn without_a_lockfile_node_modules_are_kept_under_the_manifest_digest() {
        let a = files(&[(
            "package.json",
            r#"{"dependencies": {"left-pad": "^1.0.0"}}"#,
        )]);
        let CachePlan::Installed { key, dir, lockless } = plan_for(&node(), &a) else {
            panic!("not cached");
        };
        assert_eq!(
            (dir.as_str(), lockless, key.len()),
            ("node_modules", true, 64)
        );
        assert_eq!(plan_for(&node(), &a), plan_for(&node(), &a.clone()));
        // Another package.json, another key.
        let b = files(&[(
            "package.json",
            r#"{"dependencies": {"left-pad": "^1.1.0"}}"#,
        )]);
        assert_ne!(plan_for(&node(), &a), plan_for(&node(), &b));
        // The same package.json with a lock is another kind of entry, under another key.
        let locked = files(&[
            (
                "package.json",
                r#"{"dependencies": {"left-pad": "^1.0.0"}}"#,
            ),
            ("package-lock.json", "{}"),
        ]);
        let CachePlan::Installed {
            key: locked_key,
            lockless,
            ..
        } = plan_for(&node(), &locked)
        else {
            panic!("not cached");
        };
        assert!(!lockless);
        assert_ne!(key, locked_key);
        // A bun project is keyed by its lock.
        let bun = files(&[("package.json", "{}"), ("bun.lock", "{}")]);
        assert!(matches!(
            plan_for(&node(), &bun),
            CachePlan::Installed {
                lockless: false,
                ..
            }
        ));
        // Nothing to key on: only the downloads are kept.
        let plan = plan_for(&node(), &files(&[("index.js", "")]));
        assert!(
            matches!(&plan, CachePlan::DownloadsOnly { why } if why.contains("package.json")),
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

    /// A workspace with `node_modules` as an install leaves it (and, when given, its lock).
    fn installed(at: &Path, lock: Option<&str>) {
        std::fs::create_dir_all(at.join("node_modules/.bin")).unwrap();
        std::fs::write(at.join("node_modules/pkg.js"), "module.exports = 1").unwrap();
        std::os::unix::fs::symlink("../pkg.js", at.join("node_modules/.bin/pkg")).unwrap();
        std::fs::write(at.join("package.json"), "{}").unwrap();
        if let Some(lock) = lock {
            std::fs::write(at.join("package-lock.json"), lock).unwrap();
        }
    }

    fn entry(cache: &Path, key: &str, lockless: bool) -> Entry {
        Entry {
            cache: cache.to_path_buf(),
            key: key.into(),
            dir: "node_modules".into(),
            lockless,
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn stored_dependencies_are_restored_as_a_link_to_the_entry() {
        let root = tempfile::tempdir().unwrap();
        let cache = root.path().join("cache");
        let first = root.path().join("first");
        installed(&first, Some("lock 1"));
        let second = root.path().join("second");
        std::fs::create_dir_all(&second).unwrap();
        let now = SystemTime::now();
        let k1 = entry(&cache, "k1", false);
        assert_eq!(k1.restore(&second, now).unwrap(), Restored::Missing);

        k1.store(&first, now).unwrap();
        // Storing twice keeps the first entry and leaves no partial copy.
        k1.store(&first, now).unwrap();
        assert_eq!(names(&cache), vec!["k1".to_string()]);
        // A lockfile entry holds the installed directory alone (the lock is the program's),
        // and is kept for good.
        assert_eq!(names(&cache.join("k1")), vec!["node_modules".to_string()]);

        let later = now + 10 * LOCKLESS_MAX_AGE;
        assert_eq!(k1.restore(&second, later).unwrap(), Restored::Linked);
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
        assert!(!second.join("package-lock.json").exists());
        // Another key is another entry.
        let k2 = entry(&cache, "k2", false);
        assert_eq!(k2.restore(&second, now).unwrap(), Restored::Missing);
    }

    #[test]
    fn without_a_lockfile_the_lock_the_install_wrote_is_restored_with_the_tree() {
        let root = tempfile::tempdir().unwrap();
        let cache = root.path().join("cache");
        let first = root.path().join("first");
        installed(&first, Some("lock written by npm"));
        let k = entry(&cache, "k1", true);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        k.store(&first, t0).unwrap();
        // A second store while the entry is young keeps the one entry.
        k.store(&first, t0 + HOUR).unwrap();
        assert_eq!(names(&cache), vec!["k1.1750000000".to_string()]);
        assert_eq!(
            names(&cache.join("k1.1750000000")),
            vec!["node_modules".to_string(), "package-lock.json".to_string()]
        );

        // A fresh checkout has package.json alone.
        let second = root.path().join("second");
        std::fs::create_dir_all(&second).unwrap();
        std::fs::write(second.join("package.json"), "{}").unwrap();
        assert_eq!(k.restore(&second, t0 + HOUR).unwrap(), Restored::Linked);
        assert_eq!(
            std::fs::read_link(second.join("node_modules")).unwrap(),
            cache.join("k1.1750000000/node_modules")
        );
        // The lock is a copy beside the link: rewriting it leaves the entry alone.
        let lock = second.join("package-lock.json");
        assert!(std::fs::symlink_metadata(&lock).unwrap().is_file());
        assert_eq!(
            std::fs::read_to_string(&lock).unwrap(),
            "lock written by npm"
        );
        std::fs::write(&lock, "rewritten").unwrap();
        assert_eq!(
            std::fs::read_to_string(cache.join("k1.1750000000/package-lock.json")).unwrap(),
            "lock written by npm"
        );
    }

    #[test]
    fn an_entry_without_a_lockfile_older_than_the_bound_is_a_miss() {
        let root = tempfile::tempdir().unwrap();
        let cache = root.path().join("cache");
        let first = root.path().join("first");
        installed(&first, Some("monday's lock"));
        let k = entry(&cache, "k1", true);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        k.store(&first, t0).unwrap();

        let second = root.path().join("second");
        std::fs::create_dir_all(&second).unwrap();
        let expired = t0 + LOCKLESS_MAX_AGE + HOUR;
        assert_eq!(k.restore(&second, expired).unwrap(), Restored::Expired);
        assert!(std::fs::symlink_metadata(second.join("node_modules")).is_err());
        // An entry stamped more than the bound ahead of this clock is not used either.
        assert_eq!(
            k.restore(&second, t0 - LOCKLESS_MAX_AGE - HOUR).unwrap(),
            Restored::Expired
        );
        // Another key's entries do not count.
        let other = entry(&cache, "k2", true);
        assert_eq!(other.restore(&second, t0).unwrap(), Restored::Missing);

        // The operation installs afresh and keeps a new entry beside the old one, which
        // readers of the old one still have whole.
        let third = root.path().join("third");
        installed(&third, Some("tuesday's lock"));
        k.store(&third, expired).unwrap();
        let new_name = format!("k1.{}", epoch_secs(expired));
        assert_eq!(
            names(&cache),
            vec!["k1.1750000000".to_string(), new_name.clone()]
        );
        assert_eq!(k.restore(&second, expired).unwrap(), Restored::Linked);
        assert_eq!(
            std::fs::read_link(second.join("node_modules")).unwrap(),
            cache.join(&new_name).join("node_modules")
        );
        assert_eq!(
            std::fs::read_to_string(second.join("package-lock.json")).unwrap(),
            "tuesday's lock"
        );
        // A lockfile entry of the same key is another entry.
        assert_eq!(
            entry(&cache, "k1", false)
                .restore(&second, expired)
                .unwrap(),
            Restored::Missing
        );
    }
}
