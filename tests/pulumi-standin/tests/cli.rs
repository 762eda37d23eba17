//! Integration tests: run the built stand-in `pulumi` binary through realistic sequences, the
//! way the Go Automation API and our runner drive the real CLI.

use serde_json::Value as J;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_pulumi");

struct Env {
    dir: PathBuf,
    passphrase: Option<String>,
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Env {
    fn new(name: &str) -> Env {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "pulumi-standin-{name}-{}-{nanos}",
            std::process::id()
        ));
        for d in ["state", "home", "proj"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        Env {
            dir,
            passphrase: Some("correct horse".into()),
        }
    }

    fn proj(&self) -> PathBuf {
        self.dir.join("proj")
    }

    fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    fn program(&self, yaml: &str) {
        std::fs::write(self.proj().join("Pulumi.yaml"), yaml).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(self.proj())
            .env(
                "PULUMI_BACKEND_URL",
                format!("file://{}", self.state().display()),
            )
            .env("PULUMI_HOME", self.dir.join("home"))
            .env("PULUMI_SKIP_UPDATE_CHECK", "true")
            .env("PULUMI_AUTOMATION_API", "true")
            .env("PULUMI_DEBUG_COMMANDS", "true")
            .env_remove("PULUMI_ACCESS_TOKEN")
            .env_remove("PULUMI_CONFIG_PASSPHRASE_FILE")
            .env_remove("PULUMI_SKIP_CONFIRMATIONS")
            .env_remove("PULUMI_STANDIN_VERSION")
            .env_remove("PULUMI_STANDIN_LEGACY_EXIT_CODES")
            .stdin(Stdio::null());
        match &self.passphrase {
            Some(p) => c.env("PULUMI_CONFIG_PASSPHRASE", p),
            None => c.env_remove("PULUMI_CONFIG_PASSPHRASE"),
        };
        c
    }

    fn run(&self, args: &[&str]) -> Out {
        let o: Output = self.command(args).output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Runs `pulumi --non-interactive <args>` and asserts success.
    fn ok(&self, args: &[&str]) -> Out {
        let mut full = vec!["--non-interactive"];
        full.extend_from_slice(args);
        let o = self.run(&full);
        assert_eq!(
            o.code, 0,
            "pulumi {args:?} failed\nstdout:\n{}\nstderr:\n{}",
            o.stdout, o.stderr
        );
        o
    }

    fn ni(&self, args: &[&str]) -> Out {
        let mut full = vec!["--non-interactive"];
        full.extend_from_slice(args);
        self.run(&full)
    }

    fn spawn(&self, args: &[&str]) -> Child {
        let mut full = vec!["--non-interactive"];
        full.extend_from_slice(args);
        self.command(&full)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn stack_json(&self, project: &str, stack: &str) -> J {
        let p = self
            .state()
            .join(format!(".pulumi/stacks/{project}/{stack}.json"));
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    fn lock_files(&self, project: &str, stack: &str) -> usize {
        std::fs::read_dir(
            self.state()
                .join(format!(".pulumi/locks/organization/{project}/{stack}")),
        )
        .map(|d| d.count())
        .unwrap_or(0)
    }

    /// Waits until the checkpoint journals a pending operation on a resource whose URN ends
    /// with `suffix` (i.e. that step is in flight).
    fn wait_pending(&self, project: &str, stack: &str, suffix: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let p = self
            .state()
            .join(format!(".pulumi/stacks/{project}/{stack}.json"));
        while Instant::now() < deadline {
            let j: Option<J> = std::fs::read_to_string(&p)
                .ok()
                .and_then(|s| serde_json::from_str(&s).ok());
            let found = j
                .as_ref()
                .and_then(|j| j.pointer("/checkpoint/latest/pending_operations"))
                .and_then(J::as_array)
                .is_some_and(|ops| {
                    ops.iter().any(|o| {
                        o.pointer("/resource/urn")
                            .and_then(J::as_str)
                            .is_some_and(|u| u.ends_with(suffix))
                    })
                });
            if found {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "no pending operation on *{suffix} appeared in {}",
            p.display()
        );
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn json(s: &str) -> J {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn events(path: &Path) -> Vec<J> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(json)
        .collect()
}

fn summary(evs: &[J]) -> J {
    let s: Vec<&J> = evs.iter().filter_map(|e| e.get("summaryEvent")).collect();
    assert_eq!(s.len(), 1, "exactly one summaryEvent expected");
    s[0].clone()
}

const PROGRAM_V1: &str = r#"name: app
runtime: yaml
config:
  greeting:
    type: string
    default: hello
  replicas:
    type: integer
variables:
  message: ${greeting}, ${pulumi.stack}!
resources:
  settings:
    type: standin:index:Record
    properties:
      message: ${message}
      replicas: ${replicas}
      dbPassword: ${dbPassword}
outputs:
  message: ${settings.message}
  replicas: ${settings.replicas}
  password: ${settings.dbPassword}
  conn:
    host: db.local
    token: ${dbPassword}
"#;

#[test]
fn lifecycle_init_config_up_update_destroy() {
    let env = Env::new("lifecycle");
    env.program(PROGRAM_V1);

    // Version probe (no --non-interactive, like the SDK).
    let v = env.run(&["version"]);
    assert_eq!(v.stdout, "v3.259.0\n");

    // PKO: select (404) → init → select → ls.
    let sel = env.ni(&["stack", "select", "--stack", "dev"]);
    assert_eq!(sel.code, 6);
    assert!(
        sel.stderr.contains("error: no stack named 'dev' found"),
        "{}",
        sel.stderr
    );
    let init = env.ok(&["stack", "init", "dev"]);
    assert!(init.stderr.contains("Created stack 'dev'"));
    let again = env.ni(&["stack", "init", "dev"]);
    assert_ne!(again.code, 0);
    assert!(again.stderr.contains("error: stack 'dev' already exists"));
    env.ok(&["stack", "select", "--stack", "dev"]);
    let ls = json(&env.ok(&["stack", "ls", "--json"]).stdout);
    assert_eq!(ls[0]["name"], "dev");
    assert_eq!(ls[0]["current"], true);

    // Config the way the SDK/PKO set it (order of pairs is random there).
    env.ok(&[
        "config",
        "set-all",
        "--stack",
        "dev",
        "--path",
        "--secret",
        "app:[\"dbPassword\"]=s3cret",
        "--plaintext",
        "app:[\"replicas\"]=3",
        "--plaintext",
        "app:nested.list[0]=true",
    ]);
    let stack_yaml = std::fs::read_to_string(env.proj().join("Pulumi.dev.yaml")).unwrap();
    assert!(stack_yaml.contains("encryptionsalt: v1:"), "{stack_yaml}");
    assert!(
        stack_yaml.contains("app:dbPassword:\n    secure: v1:"),
        "{stack_yaml}"
    );
    assert!(stack_yaml.contains("app:replicas: '3'"), "{stack_yaml}");
    assert!(
        stack_yaml.contains("app:nested:\n    list:\n    - true"),
        "{stack_yaml}"
    );
    assert!(!stack_yaml.contains("s3cret"));
    let got = json(
        &env.ok(&["config", "get", "dbPassword", "--json", "--stack", "dev"])
            .stdout,
    );
    assert_eq!(got, serde_json::json!({"value": "s3cret", "secret": true}));
    env.ok(&[
        "config",
        "set-all",
        "--stack",
        "dev",
        "--json",
        r#"{"app:obj": {"value": "{\"a\":1}", "objectValue": {"a": 1}, "secret": false}}"#,
    ]);
    let all = json(&env.ok(&["config", "--json", "--stack", "dev"]).stdout);
    assert_eq!(all["app:obj"]["objectValue"]["a"], 1);
    assert_eq!(all["app:dbPassword"], serde_json::json!({"secret": true}));

    // First update, with the SDK's argv shape.
    let log = env.dir.join("up1.log");
    let up = env.ok(&[
        "up",
        "--yes",
        "--skip-preview",
        "--exec-kind=auto.local",
        "--event-log",
        log.to_str().unwrap(),
        "--message=first deploy",
        "--diff",
        "--exec-agent=pulumi-kubernetes-operator/test",
        "--suppress-progress",
        "--stack",
        "dev",
    ]);
    assert!(up.stdout.contains("Updating (dev):"), "{}", up.stdout);
    assert!(up.stdout.contains("+ 2 created"), "{}", up.stdout);
    assert!(!up.stdout.contains("View Live:"));
    let evs = events(&log);
    assert_eq!(evs[0]["sequence"], 0);
    assert!(evs[0].get("preludeEvent").is_some());
    assert!(evs.last().unwrap().get("cancelEvent").is_some());
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e["sequence"], i as i64);
        assert!(e["timestamp"].is_i64());
    }
    let s = summary(&evs);
    assert_eq!(s["resourceChanges"], serde_json::json!({"create": 2}));
    assert_eq!(s["result"], "succeeded");
    let raw = std::fs::read_to_string(&log).unwrap();
    assert!(raw.lines().last().unwrap().starts_with("{\"sequence\":"));
    assert!(
        !raw.contains("s3cret"),
        "secrets must not leak into the event log"
    );

    // Follow-up calls after a successful up.
    let outs = env
        .ok(&["stack", "output", "--json", "--stack", "dev"])
        .stdout;
    assert!(outs.ends_with("}\n"));
    let outs = json(&outs);
    assert_eq!(outs["message"], "hello, dev!");
    assert_eq!(outs["replicas"], 3);
    assert_eq!(outs["password"], "[secret]");
    assert_eq!(
        outs["conn"],
        serde_json::json!({"host": "db.local", "token": "[secret]"})
    );
    let plain = json(
        &env.ok(&[
            "stack",
            "output",
            "--json",
            "--show-secrets",
            "--stack",
            "dev",
        ])
        .stdout,
    );
    assert_eq!(plain["password"], "s3cret");
    assert_eq!(plain["conn"]["token"], "s3cret");
    let hist = json(
        &env.ok(&[
            "stack",
            "history",
            "--json",
            "--show-secrets",
            "--page-size",
            "1",
            "--page",
            "1",
            "--stack",
            "dev",
        ])
        .stdout,
    );
    let h = &hist[0];
    assert_eq!(h["version"], 1);
    assert_eq!(h["kind"], "update");
    assert_eq!(h["result"], "succeeded");
    assert_eq!(h["message"], "first deploy");
    assert_eq!(h["environment"]["exec.kind"], "auto.local");
    assert_eq!(
        h["environment"]["exec.agent"],
        "pulumi-kubernetes-operator/test"
    );
    assert_eq!(h["resourceChanges"], serde_json::json!({"create": 2}));
    assert_eq!(
        h["config"]["app:dbPassword"],
        serde_json::json!({"value": "s3cret", "secret": true})
    );
    let start = h["startTime"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(start).is_ok() && start.ends_with(".000Z"),
        "{start}"
    );
    let hidden = json(
        &env.ok(&["stack", "history", "--json", "--stack", "dev"])
            .stdout,
    );
    assert_eq!(
        hidden[0]["config"]["app:dbPassword"],
        serde_json::json!({"secret": true})
    );
    let ls = json(&env.ok(&["stack", "ls", "--json"]).stdout);
    assert_eq!(ls[0]["resourceCount"], 2);
    assert!(ls[0]["lastUpdate"].as_str().unwrap().ends_with('Z'));

    // The state file follows the DIY layout and never holds plaintext secrets.
    let chk = env.stack_json("app", "dev");
    assert_eq!(chk["version"], 3);
    assert_eq!(chk["checkpoint"]["stack"], "organization/app/dev");
    let res = &chk["checkpoint"]["latest"]["resources"];
    assert_eq!(res[0]["type"], "pulumi:pulumi:Stack");
    assert_eq!(
        res[1]["urn"],
        "urn:pulumi:dev::app::standin:index:Record::settings"
    );
    assert!(!chk.to_string().contains("s3cret"));

    // Second update: nothing changed.
    let log2 = env.dir.join("up2.log");
    env.ok(&[
        "up",
        "--yes",
        "--skip-preview",
        "--event-log",
        log2.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    assert_eq!(
        summary(&events(&log2))["resourceChanges"],
        serde_json::json!({"same": 2})
    );
    let prev = env.ok(&["preview", "--expect-no-changes", "--stack", "dev"]);
    assert!(prev.stdout.contains("2 unchanged"), "{}", prev.stdout);

    // Change the program: the record is updated in place.
    env.program(&PROGRAM_V1.replace(
        "${greeting}, ${pulumi.stack}!",
        "${greeting} from ${pulumi.project}",
    ));
    let plog = env.dir.join("preview.log");
    let prev = env.ok(&[
        "preview",
        "--diff",
        "--event-log",
        plog.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    assert!(prev.stdout.contains("~ 1 to update"), "{}", prev.stdout);
    let ps = summary(&events(&plog));
    assert_eq!(ps["isPreview"], true);
    assert_eq!(
        ps["resourceChanges"],
        serde_json::json!({"same": 1, "update": 1})
    );
    let up = env.ok(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert!(up.stdout.contains("~ 1 updated"), "{}", up.stdout);
    let outs = json(
        &env.ok(&["stack", "output", "--json", "--stack", "dev"])
            .stdout,
    );
    assert_eq!(outs["message"], "hello from app");
    let hist = json(
        &env.ok(&["stack", "history", "--json", "--stack", "dev"])
            .stdout,
    );
    assert_eq!(hist.as_array().unwrap().len(), 3);
    assert_eq!(hist[0]["version"], 3);
    assert_eq!(
        hist[0]["resourceChanges"],
        serde_json::json!({"same": 1, "update": 1})
    );

    // Removing a resource from the program deletes it.
    env.program("name: app\nruntime: yaml\nconfig:\n  replicas: {type: integer}\noutputs:\n  n: ${replicas}\n");
    let up = env.ok(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert!(up.stdout.contains("- 1 deleted"), "{}", up.stdout);
    env.program(PROGRAM_V1);
    env.ok(&["up", "--yes", "--skip-preview", "--stack", "dev"]);

    // A non-empty stack cannot be removed without --force.
    let rm = env.ni(&["stack", "rm", "--yes", "dev"]);
    assert_eq!(rm.code, 1);
    assert!(
        rm.stderr
            .contains("'dev' still has resources; removal rejected"),
        "{}",
        rm.stderr
    );

    // Destroy, then the history follow-up and stack rm.
    let dlog = env.dir.join("destroy.log");
    let d = env.ok(&[
        "destroy",
        "--yes",
        "--skip-preview",
        "--event-log",
        dlog.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    assert!(d.stdout.contains("- 2 deleted"), "{}", d.stdout);
    assert_eq!(
        summary(&events(&dlog))["resourceChanges"],
        serde_json::json!({"delete": 2})
    );
    let hist = json(
        &env.ok(&[
            "stack",
            "history",
            "--json",
            "--page-size",
            "1",
            "--page",
            "1",
            "--stack",
            "dev",
        ])
        .stdout,
    );
    assert_eq!(hist[0]["kind"], "destroy");
    assert_eq!(
        json(
            &env.ok(&["stack", "output", "--json", "--stack", "dev"])
                .stdout
        ),
        serde_json::json!({})
    );
    let ls = json(&env.ok(&["stack", "ls", "--json"]).stdout);
    assert_eq!(ls[0]["resourceCount"], 0);
    let rm = env.ok(&["stack", "rm", "--yes", "dev"]);
    assert!(rm.stdout.contains("Stack 'dev' has been removed!"));
    assert!(!env.proj().join("Pulumi.dev.yaml").exists());
    assert_eq!(
        json(&env.ok(&["stack", "ls", "--json"]).stdout),
        serde_json::json!([])
    );
}

const SLEEPY: &str = r#"name: sleepy
runtime: yaml
resources:
  first:
    type: standin:index:Record
    properties:
      value: one
  nap:
    type: standin:index:Sleep
    properties:
      seconds: 30
    options:
      dependsOn:
        - ${first}
outputs:
  value: ${first.value}
"#;

#[test]
fn sigkill_leaves_lock_and_pending_operations() {
    let env = Env::new("sigkill");
    env.program(&sleepy(30, false));
    env.ok(&["stack", "init", "dev"]);
    let mut child = env.spawn(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    env.wait_pending("sleepy", "dev", "::nap");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(env.lock_files("sleepy", "dev"), 1);

    // The next update is refused while the lock is held.
    let up = env.ni(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert_eq!(up.code, 1);
    assert!(
        up.stderr.contains("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`."),
        "{}",
        up.stderr
    );
    assert!(
        up.stderr
            .contains("/.pulumi/locks/organization/sleepy/dev/"),
        "{}",
        up.stderr
    );
    assert!(up.stderr.contains("(pid "));

    // The interrupted create is recorded as a pending operation.
    let export = json(&env.ok(&["stack", "export", "--stack", "dev"]).stdout);
    let pending = &export["deployment"]["pending_operations"];
    assert_eq!(pending[0]["type"], "creating");
    assert_eq!(
        pending[0]["resource"]["urn"],
        "urn:pulumi:dev::sleepy::standin:index:Sleep::nap"
    );

    // cancel releases the lock.
    let c = env.ok(&["cancel", "--yes", "--stack", "dev"]);
    assert_eq!(
        c.stdout,
        "The currently running update for 'dev' has been canceled!\n"
    );
    assert_eq!(env.lock_files("sleepy", "dev"), 0);

    // A preview warns about the pending operation; refresh --clear-pending-creates clears it.
    let prev = env.ok(&["preview", "--stack", "dev"]);
    assert!(prev.stdout.contains("Attempting to deploy or update resources with 1 pending operations from previous deployment."), "{}", prev.stdout);
    assert!(prev.stdout.contains("interrupted while creating"));
    env.ok(&[
        "refresh",
        "--yes",
        "--skip-preview",
        "--clear-pending-creates",
        "--stack",
        "dev",
    ]);
    let export = json(&env.ok(&["stack", "export", "--stack", "dev"]).stdout);
    assert!(export["deployment"].get("pending_operations").is_none());

    // stack export | import also drops pending operations.
    let mut child = env.spawn(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    env.wait_pending("sleepy", "dev", "::nap");
    child.kill().unwrap();
    child.wait().unwrap();
    env.ok(&["cancel", "--yes", "--stack", "dev"]);
    let file = env.dir.join("export.json");
    env.ok(&[
        "stack",
        "export",
        "--file",
        file.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    let imp = env.ok(&[
        "stack",
        "import",
        "--file",
        file.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    assert!(
        imp.stderr.contains("removing pending operation 'creating'"),
        "{}",
        imp.stderr
    );
    let export = json(&env.ok(&["stack", "export", "--stack", "dev"]).stdout);
    assert!(export["deployment"].get("pending_operations").is_none());
}

fn sleepy(seconds: u32, abort: bool) -> String {
    SLEEPY.replace(
        "seconds: 30",
        &format!("seconds: {seconds}\n      abortOnCancel: {abort}"),
    )
}

#[test]
fn sigint_mid_sleep_cancels_gracefully() {
    let env = Env::new("sigint");
    env.program(&sleepy(3, false));
    env.ok(&["stack", "init", "dev"]);
    let log = env.dir.join("events.log");
    let child = env.spawn(&[
        "up",
        "--yes",
        "--skip-preview",
        "--event-log",
        log.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    env.wait_pending("sleepy", "dev", "::nap");
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "^C received; cancelling. If you would like to terminate immediately, press ^C again."
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("Note that terminating immediately may lead to orphaned resources"),
        "{stdout}"
    );
    assert!(stdout.contains("error: update canceled"), "{stdout}");
    let evs = events(&log);
    assert!(evs.last().unwrap().get("cancelEvent").is_some());
    assert_eq!(summary(&evs)["result"], "canceled");
    assert!(evs.iter().any(|e| e["stdoutEvent"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("^C received; cancelling."))));
    assert!(evs
        .iter()
        .any(|e| e["diagnosticEvent"]["message"] == "update canceled\n"));
    // The in-flight step finished, the lock is released, nothing is pending.
    assert_eq!(env.lock_files("sleepy", "dev"), 0);
    let chk = env.stack_json("sleepy", "dev");
    assert!(chk["checkpoint"]["latest"]
        .get("pending_operations")
        .is_none());
    let urns: Vec<&str> = chk["checkpoint"]["latest"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["urn"].as_str().unwrap())
        .collect();
    assert!(
        urns.contains(&"urn:pulumi:dev::sleepy::standin:index:Sleep::nap"),
        "{urns:?}"
    );
    let hist = json(
        &env.ok(&["stack", "history", "--json", "--stack", "dev"])
            .stdout,
    );
    assert_eq!(hist[0]["result"], "failed");

    // abortOnCancel: the in-flight Sleep fails with `context canceled` and is not created.
    env.ok(&["destroy", "--yes", "--skip-preview", "--stack", "dev"]);
    env.program(&sleepy(30, true));
    let started = Instant::now();
    let child = env.spawn(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    env.wait_pending("sleepy", "dev", "::nap");
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the Sleep was not interrupted"
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("SIGTERM received; cancelling. If you would like to terminate immediately, send SIGTERM again."), "{stdout}");
    assert!(stdout.contains("context canceled"), "{stdout}");
    assert_eq!(env.lock_files("sleepy", "dev"), 0);
    let chk = env.stack_json("sleepy", "dev");
    let res = chk["checkpoint"]["latest"]["resources"].to_string();
    assert!(!res.contains("::nap"), "{res}");

    // The next update proceeds.
    env.program(&sleepy(0, false));
    let up = env.ok(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert!(up.stdout.contains("+ 1 created"), "{}", up.stdout);
}

#[test]
fn second_sigint_is_a_hard_stop() {
    let env = Env::new("hardstop");
    env.program(&sleepy(30, false));
    env.ok(&["stack", "init", "dev"]);
    let started = Instant::now();
    let child = env.spawn(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    env.wait_pending("sleepy", "dev", "::nap");
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(8), "{stdout}");
    assert!(stdout.contains("^C received; terminating"), "{stdout}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: update cancelled\n"
    );
    // The lock and the pending operation stay behind.
    assert_eq!(env.lock_files("sleepy", "dev"), 1);
    let export = json(&env.ok(&["stack", "export", "--stack", "dev"]).stdout);
    assert_eq!(
        export["deployment"]["pending_operations"][0]["type"],
        "creating"
    );
}

#[test]
fn expect_no_changes_and_failures() {
    let env = Env::new("expect");
    env.program("name: p\nruntime: yaml\nresources:\n  r:\n    type: standin:index:Record\n    properties: {v: 1}\n");
    env.ok(&["stack", "init", "dev"]);
    env.ok(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    env.ok(&[
        "up",
        "--yes",
        "--skip-preview",
        "--expect-no-changes",
        "--stack",
        "dev",
    ]);
    env.program("name: p\nruntime: yaml\nresources:\n  r:\n    type: standin:index:Record\n    properties: {v: 2}\n");
    let prev = env.ni(&["preview", "--expect-no-changes", "--stack", "dev"]);
    assert_eq!(prev.code, 7);
    assert!(
        prev.stderr
            .contains("error: no changes were expected for preview but changes were proposed"),
        "{}",
        prev.stderr
    );
    let up = env.ni(&[
        "up",
        "--yes",
        "--skip-preview",
        "--expect-no-changes",
        "--stack",
        "dev",
    ]);
    assert_eq!(up.code, 7);
    assert!(up
        .stderr
        .contains("no changes were expected for update but changes were proposed"));

    // A failing resource: exit 1, diagnostics on stdout, failed history entry.
    env.program("name: p\nruntime: yaml\nresources:\n  r:\n    type: standin:index:Record\n    properties: {v: 2}\n  bad:\n    type: standin:index:Fail\n    properties: {message: boom happened}\n  after:\n    type: standin:index:Record\n    properties: {x: \"${bad.id}\"}\n");
    let log = env.dir.join("fail.log");
    let up = env.ni(&[
        "up",
        "--yes",
        "--skip-preview",
        "--event-log",
        log.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    assert_eq!(up.code, 1);
    assert!(up.stdout.contains("error: boom happened"), "{}", up.stdout);
    assert!(up.stdout.contains("error: update failed"), "{}", up.stdout);
    assert_eq!(up.stderr, "");
    let evs = events(&log);
    assert_eq!(summary(&evs)["result"], "failed");
    assert!(evs.iter().any(|e| e.get("resOpFailedEvent").is_some()));
    let hist = json(
        &env.ok(&["stack", "history", "--json", "--stack", "dev"])
            .stdout,
    );
    assert_eq!(hist[0]["result"], "failed");

    // A program error (unknown reference): exit 1 with the YAML diagnostic.
    env.program("name: p\nruntime: yaml\noutputs:\n  x: ${missing.value}\n");
    let up = env.ni(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert_eq!(up.code, 1);
    assert!(
        up.stdout
            .contains("resource or variable named \"missing\" could not be found"),
        "{}",
        up.stdout
    );
}

#[test]
fn passphrase_errors() {
    let mut env = Env::new("passphrase");
    env.program("name: p\nruntime: yaml\nconfig:\n  pw: {type: string}\noutputs:\n  pw: ${pw}\n");
    env.ok(&["stack", "init", "dev"]);
    env.ok(&[
        "config", "set", "--stack", "dev", "pw", "--secret", "--", "hunter2",
    ]);
    env.ok(&["up", "--yes", "--skip-preview", "--stack", "dev"]);

    env.passphrase = Some("wrong".into());
    let up = env.ni(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert_ne!(up.code, 0);
    assert!(up.stderr.contains("error: failed to decrypt: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE to the correct passphrase or set PULUMI_CONFIG_PASSPHRASE_FILE to a file containing the passphrase"), "{}", up.stderr);
    let out = env.ni(&[
        "stack",
        "output",
        "--json",
        "--show-secrets",
        "--stack",
        "dev",
    ]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("incorrect passphrase"));
    // Without --show-secrets no decryption is needed.
    let out = env.ok(&["stack", "output", "--json", "--stack", "dev"]);
    assert_eq!(json(&out.stdout)["pw"], "[secret]");

    env.passphrase = None;
    let up = env.ni(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert_ne!(up.code, 0);
    assert!(up.stderr.contains("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment variables"), "{}", up.stderr);
    let init = env.ni(&["stack", "init", "other"]);
    assert!(
        init.stderr.contains("passphrase must be set"),
        "{}",
        init.stderr
    );

    // PULUMI_CONFIG_PASSPHRASE_FILE is read and trimmed.
    let f = env.dir.join("pass.txt");
    std::fs::write(&f, "correct horse\n").unwrap();
    let o = env
        .command(&[
            "--non-interactive",
            "stack",
            "output",
            "--json",
            "--show-secrets",
            "--stack",
            "dev",
        ])
        .env("PULUMI_CONFIG_PASSPHRASE_FILE", &f)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(json(&String::from_utf8_lossy(&o.stdout))["pw"], "hunter2");
}

#[test]
fn invocation_errors_and_exit_codes() {
    let env = Env::new("invocation");
    env.program("name: p\nruntime: yaml\n");
    env.ok(&["stack", "init", "dev"]);

    let r = env.ni(&["up", "--stack", "dev"]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stderr, "error: --yes or --skip-preview or --preview-only must be passed in to proceed when running in non-interactive mode\n");
    let r = env.ni(&["destroy", "--stack", "dev"]);
    assert_eq!(r.code, 2);
    let r = env.ni(&["refresh", "--stack", "dev"]);
    assert_eq!(r.code, 1);
    let r = env.ni(&["preview", "--yes", "--stack", "dev"]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stderr, "error: unknown flag: --yes\n");
    let r = env.ni(&["up", "--yes", "--stack", "nope"]);
    assert_eq!(r.code, 6);
    assert_eq!(r.stderr, "error: no stack named 'nope' found\n");

    // --event-log exists only with PULUMI_DEBUG_COMMANDS.
    let o = env
        .command(&[
            "--non-interactive",
            "preview",
            "--event-log",
            "/dev/null",
            "--stack",
            "dev",
        ])
        .env_remove("PULUMI_DEBUG_COMMANDS")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "error: unknown flag: --event-log\n"
    );

    // Global flags before the subcommand, -C, flag=value forms.
    let r = Command::new(BIN)
        .args(["--non-interactive", "--color", "never", "-C"])
        .arg(env.proj())
        .args(["stack", "ls", "--json"])
        .current_dir(&env.dir)
        .env(
            "PULUMI_BACKEND_URL",
            format!("file://{}", env.state().display()),
        )
        .env("PULUMI_HOME", env.dir.join("home"))
        .output()
        .unwrap();
    assert!(r.status.success());
    assert_eq!(json(&String::from_utf8_lossy(&r.stdout))[0]["name"], "dev");

    // Legacy exit codes (< 3.227): every failure exits 255.
    let o = env
        .command(&["--non-interactive", "up", "--stack", "dev"])
        .env("PULUMI_STANDIN_VERSION", "3.200.0")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(255));

    // Cloud backend without a token.
    let o = env
        .command(&["--non-interactive", "stack", "ls", "--json"])
        .env("PULUMI_BACKEND_URL", "https://api.pulumi.com")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions\n"
    );

    // The selected stack lives in PULUMI_HOME/workspaces.
    let ws: Vec<_> = std::fs::read_dir(env.dir.join("home/workspaces"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(ws.len(), 1);
    let name = ws[0].file_name().to_string_lossy().into_owned();
    assert!(
        name.starts_with("p-") && name.ends_with("-workspace.json"),
        "{name}"
    );
    let content = json(&std::fs::read_to_string(ws[0].path()).unwrap());
    assert_eq!(content["stack"], "dev");
}

#[test]
fn targets_replace_and_protect() {
    let env = Env::new("targets");
    let program = |a: &str, b: &str| {
        format!(
            "name: t\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {{v: {a}}}\n  b:\n    type: standin:index:Record\n    properties: {{v: {b}}}\n    options:\n      replaceOnChanges: [v]\n  c:\n    type: standin:index:Record\n    properties: {{v: 0}}\n    options:\n      protect: true\n"
        )
    };
    env.program(&program("1", "1"));
    env.ok(&["stack", "init", "dev"]);
    env.ok(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    env.program(&program("2", "2"));
    let log = env.dir.join("t.log");
    env.ok(&[
        "up",
        "--yes",
        "--skip-preview",
        "--target=urn:pulumi:dev::t::standin:index:Record::a",
        "--event-log",
        log.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    assert_eq!(
        summary(&events(&log))["resourceChanges"],
        serde_json::json!({"same": 1, "update": 1})
    );
    let up = env.ok(&[
        "up",
        "--yes",
        "--skip-preview",
        "--event-log",
        log.to_str().unwrap(),
        "--stack",
        "dev",
    ]);
    assert!(up.stdout.contains("+-1 replaced"), "{}", up.stdout);
    assert_eq!(
        summary(&events(&log))["resourceChanges"],
        serde_json::json!({"same": 3, "replace": 1})
    );
    let d = env.ni(&["destroy", "--yes", "--skip-preview", "--stack", "dev"]);
    assert_eq!(d.code, 1);
    assert!(
        d.stdout.contains("currently marked for protection"),
        "{}",
        d.stdout
    );
    env.ok(&[
        "destroy",
        "--yes",
        "--skip-preview",
        "--exclude-protected",
        "--stack",
        "dev",
    ]);
    let chk = env.stack_json("t", "dev");
    let n = chk["checkpoint"]["latest"]["resources"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(n, 2, "the stack and the protected resource remain");
}

#[test]
fn simulated_cloud_backend() {
    let mut env = Env::new("cloud");
    env.passphrase = None;
    env.program(&sleepy(3, false).replace("name: sleepy", "name: web"));
    let cloud = env.state();
    let cmd = |args: &[&str]| {
        let mut full = vec!["--non-interactive"];
        full.extend_from_slice(args);
        let mut c = env.command(&full);
        c.env("PULUMI_BACKEND_URL", "https://api.pulumi.com")
            .env("PULUMI_ACCESS_TOKEN", "pul-test")
            .env("PULUMI_STANDIN_CLOUD_DIR", &cloud);
        c
    };
    let run = |args: &[&str]| {
        let o = cmd(args).output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    };
    // The Cloud's default secrets provider needs no passphrase.
    let init = run(&["stack", "init", "organization/web/dev"]);
    assert_eq!(init.code, 0, "{}", init.stderr);
    assert!(init.stderr.contains("Created stack 'organization/web/dev'"));
    let child = cmd(&["up", "--yes", "--skip-preview", "--stack", "dev"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    env.wait_pending("web", "dev", "::nap");
    let ls = json(&run(&["stack", "ls", "--json"]).stdout);
    assert_eq!(ls[0]["updateInProgress"], true);
    assert_eq!(ls[0]["url"], "https://app.pulumi.com/organization/web/dev");
    let conflict = run(&["up", "--yes", "--skip-preview", "--stack", "dev"]);
    assert_eq!(conflict.code, 1);
    assert!(
        conflict
            .stdout
            .starts_with("Updating (organization/web/dev):"),
        "{}",
        conflict.stdout
    );
    assert!(conflict.stderr.starts_with("error: [409] Conflict: Another update is currently in progress.\nTo learn more about possible reasons and resolution, visit https://www.pulumi.com/docs/support/troubleshooting/common-issues/update-conflicts/"), "{}", conflict.stderr);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("View Live: https://app.pulumi.com/organization/web/dev/updates/1\n"),
        "{stdout}"
    );
    let who = run(&["whoami", "--json"]);
    assert_eq!(json(&who.stdout)["user"], "standin-user");
    // No token: the non-interactive login error (exit 3).
    let o = cmd(&["stack", "ls"])
        .env_remove("PULUMI_ACCESS_TOKEN")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
}
