//! What the runner checks in a checkout (git clone or unpacked artifact) before it links the
//! workspace to it. The repository is the tenant's: its program runs in the pod anyway, but the
//! runner and Pulumi read some files on the stack's behalf and may show their content in
//! messages (the project file, stack configuration). So:
//!
//! - the program directory and those files must stay inside the checkout once every symlink is
//!   followed ([`resolve_inside`]); other symlinks are left alone (only the program reads them);
//! - git submodules are not fetched (gitoxide's clone never does, so no submodule URL, not even
//!   an `ext::` command, is ever contacted): the log says so, and a program directory inside a
//!   submodule fails with that reason;
//! - Git LFS content is not fetched: pointer files in the program directory are named in the
//!   log, and a project file that is a pointer fails.

use crate::error::Failure;
use crate::report::log;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Symlinks followed while resolving one path, as Linux allows (`ELOOP` beyond).
pub const MAX_LINKS: usize = 40;
/// Files looked at for LFS pointers in the program directory: bounds the scan of a huge tree.
pub const LFS_SCAN_MAX_FILES: usize = 10_000;
/// Pointer files are about 130 bytes; larger files are not read.
pub const LFS_POINTER_MAX_BYTES: u64 = 1024;
const LFS_PREFIX: &[u8] = b"version https://git-lfs.github.com/spec/v1";
/// `.gitmodules` is read up to this size (only its `path` lines are wanted).
const GITMODULES_MAX_BYTES: u64 = 64 * 1024;
/// How many paths a log line names.
const SHOWN_PATHS: usize = 20;

/// Why a path does not stay inside the checkout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Escape {
    /// The last symlink followed on the way, as (path in the checkout, its target).
    #[error("{}", outside(.0))]
    Outside(Option<(PathBuf, PathBuf)>),
    #[error("more than {MAX_LINKS} symlinks on the way (a loop?) at {:?}", .0.display().to_string())]
    TooManyLinks(PathBuf),
    #[error("cannot read the symlink {:?}: {}", .0.display().to_string(), .1)]
    Unreadable(PathBuf, String),
}

fn outside(link: &Option<(PathBuf, PathBuf)>) -> String {
    match link {
        Some((link, target)) => format!(
            "{:?} is a symlink to {:?}, outside the checkout",
            link.display().to_string(),
            target.display().to_string()
        ),
        None => "it is outside the checkout".to_string(),
    }
}

/// One step of a path being resolved.
enum Step {
    Root,
    Up,
    Name(OsString),
}

fn steps(path: &Path) -> Vec<Step> {
    // Reversed: the resolver pops the next step from the end.
    path.components()
        .rev()
        .filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => Some(Step::Root),
            Component::ParentDir => Some(Step::Up),
            Component::Normal(n) => Some(Step::Name(n.to_os_string())),
            Component::CurDir => None,
        })
        .collect()
}

/// Where `path` (relative to `root`, or absolute) leads once every symlink on the way is
/// followed, as the kernel would; `root` must be canonical. Nothing outside `root` is ever
/// looked at (another container may see other files there): leaving it, other than through
/// `root`'s own ancestors on the way back in, is an [`Escape`], and so is ending outside it.
/// The final path need not exist.
pub fn resolve_inside(root: &Path, path: &Path) -> Result<PathBuf, Escape> {
    let mut pending = steps(path);
    let mut current = root.to_path_buf();
    let mut links = 0;
    let mut last_link: Option<(PathBuf, PathBuf)> = None;
    while let Some(step) = pending.pop() {
        let name = match step {
            Step::Root => {
                current = PathBuf::from("/");
                continue;
            }
            Step::Up => {
                current.pop();
                continue;
            }
            Step::Name(name) => name,
        };
        let next = current.join(&name);
        // Root's ancestors are canonical (no symlinks); anything else outside is not ours.
        if !next.starts_with(root) && !root.starts_with(&next) {
            return Err(Escape::Outside(last_link));
        }
        let is_link = std::fs::symlink_metadata(&next).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            current = next;
            continue;
        }
        let shown = next.strip_prefix(root).unwrap_or(&next).to_path_buf();
        links += 1;
        if links > MAX_LINKS {
            return Err(Escape::TooManyLinks(shown));
        }
        let target = std::fs::read_link(&next)
            .map_err(|e| Escape::Unreadable(shown.clone(), e.to_string()))?;
        pending.extend(steps(&target));
        last_link = Some((shown, target));
    }
    if current.starts_with(root) {
        Ok(current)
    } else {
        Err(Escape::Outside(last_link))
    }
}

/// The program directory `sub` of the checkout `root` (canonical), resolved: it must stay
/// inside the checkout and exist; inside a submodule (`submodules`, from `.gitmodules`) it is
/// empty, and the failure says why.
pub fn project_dir(root: &Path, sub: &Path, submodules: &[String]) -> Result<PathBuf, Failure> {
    let shown = sub.display().to_string();
    let dir = resolve_inside(root, sub).map_err(|e| {
        Failure::source_unavailable(format!(
            "the program directory {shown:?} leads outside the checkout ({e}); it must be a \
             directory of the repository itself"
        ))
    })?;
    let in_submodule = submodules.iter().find(|m| sub.starts_with(m.as_str()));
    let has_project = dir.is_dir() && crate::plan::project_file(&dir).is_some();
    match in_submodule {
        Some(module) if !has_project => Err(Failure::source_unavailable(format!(
            "the program directory {shown:?} is inside the git submodule {module:?}, and \
             submodules are not fetched: commit the program into this repository, or point the \
             Stack at the submodule's own repository"
        ))),
        _ if !dir.is_dir() => Err(Failure::source_unavailable(format!(
            "the program directory {shown:?} does not exist in the source"
        ))),
        _ => Ok(dir),
    }
}

/// Whether the runner or Pulumi reads this file of a project directory on the stack's behalf:
/// the project file, stack configuration files (`Pulumi.<stack>.yaml`) and a YAML program's
/// `Main.yaml`.
fn read_on_behalf(name: &str) -> bool {
    let config = [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| name.ends_with(ext));
    config && (name.starts_with("Pulumi.") || name.starts_with("Main."))
}

/// Refuses the files of `project` that Pulumi reads on the stack's behalf
/// ([`read_on_behalf`]) when they are symlinks out of the checkout `root`, there and in the
/// project's `stackConfigDir` when that is inside the checkout (outside, its files are not
/// the repository's).
pub fn check_project_files(root: &Path, project: &Path) -> Result<(), Failure> {
    check_dir_files(root, project)?;
    let Some(config_dir) = stack_config_dir(project) else {
        return Ok(());
    };
    match resolve_inside(root, &project.join(&config_dir)) {
        Ok(dir) if dir.is_dir() => check_dir_files(root, &dir),
        _ => Ok(()),
    }
}

fn check_dir_files(root: &Path, dir: &Path) -> Result<(), Failure> {
    // Listing a directory that could not be read leaves the check to what reads it next.
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
        if !is_link || !read_on_behalf(&name) {
            continue;
        }
        let path = entry.path();
        if let Err(e) = resolve_inside(root, &path) {
            let shown = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            return Err(Failure::source_unavailable(format!(
                "{shown:?} cannot be used: {e}; the runner and Pulumi read this file on the \
                 stack's behalf and could show its content, so it must be a file of the \
                 repository (commit the file itself)"
            )));
        }
    }
    Ok(())
}

/// The project's `stackConfigDir`, when its project file names one.
fn stack_config_dir(project: &Path) -> Option<String> {
    let file = crate::plan::project_file(project)?;
    let text = std::fs::read_to_string(file).ok()?;
    let doc: serde_norway::Value = serde_norway::from_str(&text).ok()?;
    doc.get("stackConfigDir")?.as_str().map(str::to_string)
}

/// Fails when the project file of `project` is a Git LFS pointer; logs the other pointer
/// files of the directory (LFS content is never fetched).
pub fn check_lfs(root: &Path, project: &Path) -> Result<(), Failure> {
    if let Some(file) = crate::plan::project_file(project) {
        if is_lfs_pointer(&file) {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            return Err(Failure::source_unavailable(format!(
                "{name} is a Git LFS pointer; LFS objects are not fetched: commit the file itself"
            )));
        }
    }
    let (pointers, complete) = lfs_pointers(project, LFS_SCAN_MAX_FILES);
    if !pointers.is_empty() {
        let shown: Vec<String> = pointers
            .iter()
            .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
            .collect();
        let scope = if complete {
            String::new()
        } else {
            format!(" (among the first {LFS_SCAN_MAX_FILES} files)")
        };
        log(format!(
            "Git LFS objects are not fetched; these files are LFS pointers{scope}: {}",
            shown_list(&shown)
        ));
    }
    Ok(())
}

/// The LFS pointer files under `dir` (symlinks and `.git` are not followed), and whether all
/// of the tree was looked at (at most `max_files` entries are).
pub fn lfs_pointers(dir: &Path, max_files: usize) -> (Vec<PathBuf>, bool) {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > max_files {
                return (found, false);
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() && entry.file_name() != ".git" {
                pending.push(path);
            } else if kind.is_file() && is_lfs_pointer(&path) {
                found.push(path);
            }
        }
    }
    found.sort();
    (found, true)
}

/// Whether `path` is a small file starting as an LFS pointer does; reads at most 1 KiB.
pub fn is_lfs_pointer(path: &Path) -> bool {
    let small =
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() <= LFS_POINTER_MAX_BYTES);
    if !small {
        return false;
    }
    let mut head = Vec::with_capacity(LFS_PREFIX.len());
    let read = std::fs::File::open(path)
        .and_then(|f| f.take(LFS_PREFIX.len() as u64).read_to_end(&mut head));
    read.is_ok() && head == LFS_PREFIX
}

/// The submodule paths `.gitmodules` lists at the top of the checkout `root`.
pub fn submodule_paths(root: &Path) -> Vec<String> {
    let file = root.join(".gitmodules");
    // A symlinked `.gitmodules` is not read (git refuses those too).
    let regular = std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file());
    if !regular {
        return Vec::new();
    }
    let mut text = String::new();
    let read = std::fs::File::open(&file)
        .and_then(|f| f.take(GITMODULES_MAX_BYTES).read_to_string(&mut text));
    match read {
        Ok(_) => parse_gitmodules(&text),
        Err(_) => Vec::new(),
    }
}

/// The `path = …` values of a `.gitmodules` text (git's config syntax, simple cases: a value
/// quoted whole, no escapes), without `/` at either end.
pub fn parse_gitmodules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.trim().split_once('=')?;
            if !key.trim().eq_ignore_ascii_case("path") {
                return None;
            }
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            let value = value.trim_matches('/');
            (!value.is_empty()).then(|| value.to_string())
        })
        .collect()
}

/// Logs that the checkout's submodules were not fetched, when it has any.
pub fn log_submodules(submodules: &[String]) {
    if !submodules.is_empty() {
        log(format!(
            "submodules are not fetched: {}",
            shown_list(submodules)
        ));
    }
}

fn shown_list(paths: &[String]) -> String {
    let mut text = paths
        .iter()
        .take(SHOWN_PATHS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN_PATHS {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN_PATHS));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap().join("source");
        std::fs::create_dir_all(root.join("app/real")).unwrap();
        (dir, root)
    }

    #[test]
    fn paths_resolve_inside_or_name_the_link_that_leads_out() {
        let (_dir, root) = root();
        symlink("real", root.join("app/inner")).unwrap();
        symlink("../source/app", root.join("back-in")).unwrap();
        symlink("/etc", root.join("abs")).unwrap();
        symlink("../../..", root.join("up")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        assert_eq!(
            resolve_inside(&root, Path::new("app/inner")).unwrap(),
            root.join("app/real")
        );
        assert_eq!(
            resolve_inside(&root, Path::new("back-in/inner")).unwrap(),
            root.join("app/real")
        );
        // A path that does not exist resolves (whoever opens it finds nothing).
        assert_eq!(
            resolve_inside(&root, Path::new("app/missing")).unwrap(),
            root.join("app/missing")
        );
        let abs = resolve_inside(&root, Path::new("abs/ssl")).unwrap_err();
        assert_eq!(
            abs,
            Escape::Outside(Some((PathBuf::from("abs"), PathBuf::from("/etc"))))
        );
        assert!(
            abs.to_string().contains("\"abs\" is a symlink to \"/etc\""),
            "{abs}"
        );
        assert!(matches!(
            resolve_inside(&root, Path::new("up")),
            Err(Escape::Outside(Some(_)))
        ));
        assert!(matches!(
            resolve_inside(&root, Path::new("loop")),
            Err(Escape::TooManyLinks(_))
        ));
        assert!(resolve_inside(&root, Path::new("/etc/passwd")).is_err());
        assert!(resolve_inside(&root, &root.join("app")).is_ok());
    }

    #[test]
    fn gitmodules_paths() {
        let text = "[submodule \"lib\"]\n\tpath = lib\n\turl = file:///x\n[submodule \"t\"]\n  Path = \"vendor/tool/\"\n  url = ext::sh -c touch% /tmp/x\n";
        assert_eq!(parse_gitmodules(text), vec!["lib", "vendor/tool"]);
        assert!(parse_gitmodules("[core]\n\tbare = false\n").is_empty());
    }

    #[test]
    fn lfs_pointers_are_found_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let pointer = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n";
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("a/b/big.bin"), pointer).unwrap();
        std::fs::write(dir.path().join("x.txt"), "hello").unwrap();
        // Over 1 KiB: not a pointer, whatever it starts with.
        std::fs::write(
            dir.path().join("long"),
            format!("{pointer}{}", "x".repeat(2000)),
        )
        .unwrap();
        let (found, complete) = lfs_pointers(dir.path(), 100);
        assert_eq!(found, vec![dir.path().join("a/b/big.bin")]);
        assert!(complete);
        let (_, complete) = lfs_pointers(dir.path(), 2);
        assert!(!complete);
    }

    #[test]
    fn files_read_on_behalf() {
        for name in [
            "Pulumi.yaml",
            "Pulumi.yml",
            "Pulumi.json",
            "Pulumi.dev.yaml",
            "Main.yaml",
        ] {
            assert!(read_on_behalf(name), "{name}");
        }
        for name in ["index.ts", "Pulumi", "README.md", "package.json"] {
            assert!(!read_on_behalf(name), "{name}");
        }
    }
}
