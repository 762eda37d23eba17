//! Helpers for the runner's end-to-end tests: temp share/state dirs, plans, running the built
//! runner binary with the real Pulumi CLI (its YAML language host and the test provider
//! plugins, built by tests/build-tools.sh) first on PATH, git repositories. Only Pulumi Cloud
//! cases, which the real CLI cannot reach here, put the Cloud stand-in before it
//! (`World::cloud_standin`).
#![allow(dead_code)]

use pulumi_operator_api::plan::{Operation, RunPlan, RunResult, Source, StackPlan};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

pub const PASSPHRASE: &str = "runner-test-passphrase";

pub fn runner_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_pulumi-runner"))
}

/// The Pulumi Cloud stand-in: a wrapper run before the real `pulumi` (tests/pulumi-cloud-shim).
pub fn cloud_shim_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/pulumi-cloud-shim")
}

/// The directory holding the real `pulumi`, `pulumi-language-yaml` and the test provider
/// plugins (tests/build-tools.sh, which `tests/run.sh` runs through `local-cluster.sh up`).
pub fn pulumi_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/build-tools.sh");
            let out = Command::new(&script)
                .args(["--print", "pulumi"])
                .output()
                .expect("run tests/build-tools.sh --print");
            assert!(
                out.status.success(),
                "the Pulumi CLI is not built; build it with: tests/build-tools.sh"
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

/// One test's world: a share volume, a file backend, a PULUMI_HOME, a result file.
pub struct World {
    pub root: tempfile::TempDir,
    /// The directories put first on PATH: the `pulumi` the runner finds is in the first.
    pub cli: Vec<PathBuf>,
}

impl World {
    pub fn new() -> World {
        World::with_cli(vec![pulumi_dir()])
    }

    /// A world whose `pulumi` is the real CLI behind the Pulumi Cloud stand-in, for what the
    /// real CLI cannot reach here (a Pulumi Cloud backend, ESC environments).
    pub fn cloud_standin() -> World {
        World::with_cli(vec![cloud_shim_dir(), pulumi_dir()])
    }

    /// PATH with the world's CLI directories first.
    pub fn path_env(&self) -> String {
        let mut dirs: Vec<String> = self.cli.iter().map(|d| d.display().to_string()).collect();
        dirs.push(std::env::var("PATH").unwrap_or_default());
        dirs.join(":")
    }

    fn with_cli(cli: Vec<PathBuf>) -> World {
        let root = tempfile::Builder::new()
            .prefix("runner-test-")
            .tempdir()
            .expect("temp dir");
        for d in ["share", "state", "home", "files"] {
            std::fs::create_dir_all(root.path().join(d)).expect("dir");
        }
        World { root, cli }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    pub fn share(&self) -> PathBuf {
        self.path("share")
    }

    pub fn workspace(&self) -> PathBuf {
        self.path("share/workspace")
    }

    pub fn backend_url(&self) -> String {
        format!("file://{}", self.path("state").display())
    }

    /// Writes a file under `files/` and returns its path.
    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.path("files").join(name);
        std::fs::write(&p, content).expect("write file");
        p
    }

    /// A runner command with the test environment (stand-in first on PATH).
    pub fn command(&self, subcommand: &str, plan: &RunPlan) -> Command {
        let plan_file = self.path("plan.json");
        std::fs::write(
            &plan_file,
            serde_json::to_string_pretty(plan).expect("plan json"),
        )
        .expect("write plan");
        let mut cmd = Command::new(runner_bin());
        cmd.arg(subcommand)
            .arg("--plan")
            .arg(&plan_file)
            .arg("--share")
            .arg(self.share())
            .arg("--result-file")
            .arg(self.path("result.json"))
            .env_clear()
            .env("PATH", self.path_env())
            .env("HOME", self.path("home"))
            .env("PULUMI_HOME", self.path("home/.pulumi"))
            .env("PULUMI_BACKEND_URL", self.backend_url())
            .env("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs a subcommand to its end.
    pub fn run(&self, subcommand: &str, plan: &RunPlan, env: &[(&str, &str)]) -> Ran {
        let mut cmd = self.command(subcommand, plan);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run the runner");
        self.ran(out)
    }

    pub fn ran(&self, out: Output) -> Ran {
        let text = std::fs::read_to_string(self.path("result.json")).unwrap_or_default();
        let _ = std::fs::remove_file(self.path("result.json"));
        let result = RunResult::from_termination_message(&text).unwrap_or_else(|| {
            panic!(
                "no result (exit {:?})\nstdout:\n{}\nstderr:\n{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        Ran {
            code: out.status.code(),
            result,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The world's `pulumi` in the workspace, with the world's backend and passphrase.
    pub fn pulumi_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.cli[0].join("pulumi"));
        cmd.args(args)
            .current_dir(self.workspace())
            .env("PATH", self.path_env())
            .env("PULUMI_SKIP_UPDATE_CHECK", "true")
            .env("PULUMI_HOME", self.path("home/.pulumi"))
            .env("PULUMI_BACKEND_URL", self.backend_url())
            .env("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs the world's `pulumi` directly in the workspace (to inspect what the runner did).
    pub fn pulumi(&self, args: &[&str]) -> String {
        let out = self.pulumi_command(args).output().expect("run pulumi");
        assert!(
            out.status.success(),
            "pulumi {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Fetches a Program (a Pulumi.yaml written under files/) into the share.
    pub fn fetch_program(&self, yaml: &str) {
        let file = self.file("Pulumi.yaml", yaml);
        let plan = plan(
            Operation::Up,
            Some(Source::Program {
                file: file.to_string_lossy().into_owned(),
            }),
        );
        let ran = self.run("fetch", &plan, &[]);
        ran.assert_ok();
    }
}

/// The result of one runner invocation.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub result: RunResult,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn assert_ok(&self) -> &Ran {
        assert_eq!(
            self.code,
            Some(0),
            "expected success: {:?}\nstdout:\n{}\nstderr:\n{}",
            self.result,
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn assert_failed(&self, reason: pulumi_operator_api::plan::FailureReason) -> &Ran {
        assert_eq!(
            (self.code, self.result.reason),
            (Some(1), Some(reason)),
            "{:?}\nstdout:\n{}\nstderr:\n{}",
            self.result,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A plan for the stack `dev` (created when missing).
pub fn plan(operation: Operation, source: Option<Source>) -> RunPlan {
    RunPlan {
        update_name: "st-up-1".into(),
        namespace: "default".into(),
        update_uid: "00000000-0000-0000-0000-000000000001".into(),
        operation,
        source,
        stack: StackPlan {
            name: "dev".into(),
            create: true,
            ..Default::default()
        },
        options: Default::default(),
        // No Kubernetes here: the runner writes no outputs Secret.
        outputs_secret: String::new(),
        outputs_labels: Default::default(),
        outputs_key: None,
        apply_plan: None,
        pulumi_log_level: None,
        lock_holder: None,
        secret_env: Vec::new(),
        secret_env_dirs: Vec::new(),
        dependency_cache: None,
        conflict_retry_delay_ms: None,
        policy_packs: Vec::new(),
        heartbeat: None,
    }
}

/// Runs git in `dir`; panics on failure; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=runner-test",
            "-c",
            "user.email=runner-test@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository `<root>/<name>.git` with a working copy; `commit` returns SHAs.
pub struct Repo {
    pub bare: PathBuf,
    pub work: PathBuf,
}

impl Repo {
    pub fn new(root: &Path, name: &str) -> Repo {
        let bare = root.join(format!("{name}.git"));
        let work = root.join(format!("{name}-work"));
        std::fs::create_dir_all(&bare).expect("bare");
        std::fs::create_dir_all(&work).expect("work");
        git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        git(&work, &["init", "-q", "-b", "main"]);
        Repo { bare, work }
    }

    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> String {
        for (path, content) in files {
            let p = self.work.join(path);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dirs");
            std::fs::write(&p, content).expect("write");
        }
        git(&self.work, &["add", "-A"]);
        git(&self.work, &["commit", "-q", "-m", message]);
        git(
            &self.work,
            &[
                "push",
                "-q",
                self.bare.to_str().expect("utf-8"),
                "HEAD:main",
            ],
        );
        git(&self.work, &["rev-parse", "HEAD"])
    }

    pub fn file_url(&self) -> String {
        format!("file://{}", self.bare.display())
    }
}
