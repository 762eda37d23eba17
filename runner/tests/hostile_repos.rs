//! Hostile git repositories (issue 44 §7): symlinks out of the checkout, submodules with
//! `file://` and `ext::` URLs, Git LFS pointers. Real repositories built with the `git` CLI,
//! fetched by the runner binary over `file://` (no Pulumi CLI needed).

mod common;

use common::*;
use pulumi_operator_api::plan::{FailureReason, Operation, Source};
use std::os::unix::fs::symlink;
use std::path::Path;

const PROJECT: &str = "name: app\nruntime: yaml\n";
const POINTER: &str = "version https://git-lfs.github.com/spec/v1\noid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 12345\n";

/// A world without the Pulumi CLI: `fetch` only needs git.
fn world() -> World {
    let root = tempfile::Builder::new()
        .prefix("runner-hostile-")
        .tempdir()
        .expect("temp dir");
    for d in ["share", "state", "home", "files"] {
        std::fs::create_dir_all(root.path().join(d)).expect("dir");
    }
    World { root, cli: vec![] }
}

fn fetch(w: &World, repo: &Repo, dir: &str) -> Ran {
    let source = Source::Git {
        url: repo.file_url(),
        commit: None,
        reference: None,
        shallow: false,
        dir: (!dir.is_empty()).then(|| dir.to_string()),
    };
    w.run("fetch", &plan(Operation::Up, Some(source)), &[])
}

/// Asserts a SourceUnavailable failure whose message has every one of `parts`, and that the
/// workspace was not linked.
fn assert_refused(w: &World, ran: &Ran, parts: &[&str]) {
    ran.assert_failed(FailureReason::SourceUnavailable);
    for part in parts {
        assert!(
            ran.result.message.contains(part),
            "{part:?} not in {:?}",
            ran.result.message
        );
    }
    assert!(
        std::fs::symlink_metadata(w.workspace()).is_err(),
        "the workspace was linked"
    );
}

/// Commits what is in the working copy (symlinks included) and pushes it.
fn commit_work(repo: &Repo, files: &[(&str, &str)]) -> String {
    repo.commit(files, "hostile")
}

#[test]
fn a_program_directory_that_leads_out_of_the_checkout_is_refused() {
    let w = world();
    let repo = Repo::new(&w.path("git"), "prog");
    symlink("/etc", repo.work.join("abs")).unwrap();
    // From <share>/source: the world's temp dir and above.
    symlink("../../..", repo.work.join("rel")).unwrap();
    std::fs::create_dir_all(repo.work.join("nested")).unwrap();
    symlink("../abs", repo.work.join("nested/through")).unwrap();
    commit_work(&repo, &[("app/Pulumi.yaml", PROJECT)]);

    for (dir, link, target) in [
        ("abs", "abs", "/etc"),
        ("rel", "rel", "../../.."),
        // Passing through a symlink that leads out.
        ("abs/ssl", "abs", "/etc"),
        ("nested/through", "abs", "/etc"),
    ] {
        let ran = fetch(&w, &repo, dir);
        assert_refused(
            &w,
            &ran,
            &[
                &format!("the program directory {dir:?} leads outside the checkout"),
                &format!("{link:?} is a symlink to {target:?}"),
            ],
        );
    }
    // The rest of the repository is fine.
    fetch(&w, &repo, "app").assert_ok();
}

#[test]
fn project_and_stack_files_that_link_out_of_the_checkout_are_refused() {
    let w = world();
    let canary = "canary-c0ffee-secret-token";
    let secret = w.file("token", canary);
    let cases: Vec<(&str, String)> = vec![
        ("Pulumi.yaml", "/etc/passwd".to_string()),
        // Absent in this container, present in a pod's: never looked at.
        (
            "Pulumi.yaml",
            "/var/run/secrets/kubernetes.io/serviceaccount/token".to_string(),
        ),
        ("Pulumi.yml", secret.display().to_string()),
        // Relative, from <share>/source/app.
        ("Pulumi.dev.yaml", "../../../files/token".to_string()),
        ("Main.yaml", "../../../files/token".to_string()),
    ];
    for (i, (name, target)) in cases.iter().enumerate() {
        let repo = Repo::new(&w.path("git"), &format!("prog{i}"));
        let mut files = vec![("README", "x")];
        if *name != "Pulumi.yaml" && *name != "Pulumi.yml" {
            files.push(("app/Pulumi.yaml", PROJECT));
        }
        std::fs::create_dir_all(repo.work.join("app")).unwrap();
        symlink(target, repo.work.join("app").join(name)).unwrap();
        commit_work(&repo, &files);
        let ran = fetch(&w, &repo, "app");
        assert_refused(
            &w,
            &ran,
            &[
                &format!("\"app/{name}\" cannot be used"),
                &format!("is a symlink to {target:?}, outside the checkout"),
                "commit the file itself",
            ],
        );
        for text in [&ran.result.message, &ran.stdout, &ran.stderr] {
            assert!(!text.contains(canary), "{text}");
            assert!(!text.contains("root:x:0"), "{text}");
        }
    }
}

#[test]
fn a_stack_config_dir_in_the_checkout_is_checked_too() {
    let w = world();
    let repo = Repo::new(&w.path("git"), "prog");
    std::fs::create_dir_all(repo.work.join("config")).unwrap();
    symlink("/etc/passwd", repo.work.join("config/Pulumi.dev.yaml")).unwrap();
    commit_work(
        &repo,
        &[(
            "app/Pulumi.yaml",
            "name: app\nruntime: yaml\nstackConfigDir: ../config\n",
        )],
    );
    let ran = fetch(&w, &repo, "app");
    assert_refused(&w, &ran, &["\"config/Pulumi.dev.yaml\" cannot be used"]);
}

#[test]
fn symlinks_that_stay_inside_the_checkout_are_fine() {
    let w = world();
    let repo = Repo::new(&w.path("git"), "prog");
    let work = &repo.work;
    std::fs::create_dir_all(work.join("shared")).unwrap();
    std::fs::create_dir_all(work.join("real/app")).unwrap();
    // The program directory through a symlink, its project file and stack file too.
    symlink("real/app", work.join("app")).unwrap();
    symlink(
        "../../shared/project.yaml",
        work.join("real/app/Pulumi.yaml"),
    )
    .unwrap();
    symlink(
        "../../shared/dev.yaml",
        work.join("real/app/Pulumi.dev.yaml"),
    )
    .unwrap();
    // Out and back in through the checkout's own directory name.
    symlink("../source/shared", work.join("back-in")).unwrap();
    // Not read on the stack's behalf: only the program reads it, and it runs in the pod anyway.
    symlink("/etc/hostname", work.join("real/app/hostname.txt")).unwrap();
    commit_work(
        &repo,
        &[
            ("shared/project.yaml", PROJECT),
            ("shared/dev.yaml", "config: {}\n"),
        ],
    );
    let ran = fetch(&w, &repo, "app");
    ran.assert_ok();
    assert_eq!(
        ran.result.project.as_ref().map(|p| p.name.as_str()),
        Some("app")
    );
    assert_eq!(
        std::fs::read_to_string(w.workspace().join("Pulumi.yaml")).unwrap(),
        PROJECT
    );
    // gitoxide checked them out as symlinks (this test is about symlinks).
    assert!(std::fs::symlink_metadata(w.path("share/source/app"))
        .unwrap()
        .file_type()
        .is_symlink());
    fetch(&w, &repo, "back-in").assert_ok();
}

/// A repository whose `.gitmodules` lists `lib` (a `file://` URL of another repository) and
/// `tool` (an `ext::` command that touches `marker`), both gitlinks at a commit of `lib`.
fn repo_with_submodules(w: &World, marker: &Path) -> Repo {
    let lib = Repo::new(&w.path("git"), "lib");
    let lib_head = lib.commit(&[("Pulumi.yaml", PROJECT)], "lib");
    let repo = Repo::new(&w.path("git"), "prog");
    let gitmodules = format!(
        "[submodule \"lib\"]\n\tpath = lib\n\turl = {}\n[submodule \"tool\"]\n\tpath = tool\n\turl = ext::sh -c touch% {}\n",
        lib.file_url(),
        marker.display()
    );
    std::fs::create_dir_all(repo.work.join("app")).unwrap();
    std::fs::write(repo.work.join(".gitmodules"), gitmodules).unwrap();
    std::fs::write(repo.work.join("app/Pulumi.yaml"), PROJECT).unwrap();
    git(&repo.work, &["add", ".gitmodules", "app"]);
    for path in ["lib", "tool"] {
        let info = format!("160000,{lib_head},{path}");
        git(&repo.work, &["update-index", "--add", "--cacheinfo", &info]);
    }
    git(&repo.work, &["commit", "-q", "-m", "submodules"]);
    let bare = repo.bare.to_str().unwrap().to_string();
    git(&repo.work, &["push", "-q", &bare, "HEAD:main"]);
    repo
}

#[test]
fn submodules_are_never_fetched_and_their_commands_never_run() {
    let w = world();
    let marker = w.path("pwned-submodule-ext");
    let repo = repo_with_submodules(&w, &marker);

    let ran = fetch(&w, &repo, "app");
    ran.assert_ok();
    assert!(
        ran.stderr.contains("submodules are not fetched: lib, tool"),
        "{}",
        ran.stderr
    );
    assert!(!marker.exists(), "the ext:: command ran");
    for path in ["lib", "tool"] {
        let dir = w.path("share/source").join(path);
        let empty = std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_none());
        assert!(empty, "{} was fetched", dir.display());
    }

    // A program in a submodule: the failure says why it is empty.
    let ran = fetch(&w, &repo, "lib");
    assert_refused(
        &w,
        &ran,
        &[
            "\"lib\" is inside the git submodule \"lib\"",
            "submodules are not fetched",
        ],
    );
    assert!(!marker.exists(), "the ext:: command ran");

    // The control: git itself, allowed to, does run the command, so the payload is real.
    let clone = w.path("control");
    let _ = std::process::Command::new("git")
        .args([
            "-c",
            "protocol.ext.allow=always",
            "-c",
            "protocol.file.allow=always",
        ])
        .args(["clone", "-q", "--recurse-submodules"])
        .arg(&repo.bare)
        .arg(&clone)
        .output()
        .expect("git clone");
    assert!(
        marker.exists(),
        "the control clone did not run the ext:: command"
    );
}

#[test]
fn git_lfs_pointers_are_named_and_a_pointer_project_file_fails() {
    let w = world();
    let repo = Repo::new(&w.path("git"), "prog");
    commit_work(
        &repo,
        &[
            ("app/Pulumi.yaml", POINTER),
            ("ok/Pulumi.yaml", PROJECT),
            ("ok/assets/logo.png", POINTER),
            ("ok/data/big.bin", POINTER),
            ("ok/notes.txt", "version 2\n"),
        ],
    );
    let ran = fetch(&w, &repo, "app");
    assert_refused(
        &w,
        &ran,
        &["Pulumi.yaml is a Git LFS pointer; LFS objects are not fetched: commit the file itself"],
    );

    let ran = fetch(&w, &repo, "ok");
    ran.assert_ok();
    assert!(
        ran.stderr.contains(
            "Git LFS objects are not fetched; these files are LFS pointers: ok/assets/logo.png, ok/data/big.bin\n"
        ),
        "{}",
        ran.stderr
    );
}
