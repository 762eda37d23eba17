//! `pulumi-runner run` end to end against the real Pulumi CLI (file backend, passphrase, the
//! test provider plugins), without Kubernetes (the plan names no outputs Secret, so none is
//! written). The simulated Pulumi Cloud case uses the CLI stand-in.

mod common;

use common::*;
use pulumi_operator_api::plan::{FailureReason, Operation, Outcome, RunPlan};
use pulumi_operator_api::workspace::{ConfigItem, ConfigValueFrom};
use serde_json::json;
use std::time::{Duration, Instant};

const CONFIG_PROGRAM: &str = r#"name: proj
runtime: yaml
config:
  greeting: {type: string}
  count: {type: integer}
  settings: {type: object}
  data: {type: object}
  dbPassword: {type: string}
  apiToken: {type: string}
  creds: {type: object}
resources:
  rec:
    type: standin:index:Record
    properties:
      greeting: ${greeting}
      count: ${count}
      region: ${settings.region}
      first: ${data.nums[0]}
      password: ${dbPassword}
      token: ${apiToken}
      user: ${creds.user}
outputs:
  greeting: ${rec.greeting}
  count: ${rec.count}
  region: ${rec.region}
  first: ${rec.first}
  password: ${rec.password}
  token: ${rec.token}
  user: ${rec.user}
"#;

const DB_PASSWORD: &str = "db-pw-from-env-4711";
const API_TOKEN: &str = "api-token-from-file-0815";
const CREDS_SECRET: &str = "structured-secret-pw-99";

fn value(key: &str, v: serde_json::Value) -> ConfigItem {
    ConfigItem {
        key: key.into(),
        value: Some(v),
        ..Default::default()
    }
}

fn config_plan(w: &World) -> RunPlan {
    let token = w.file("api-token", API_TOKEN);
    let creds = w.file(
        "creds.json",
        &json!({"user": "admin", "password": CREDS_SECRET}).to_string(),
    );
    let mut p = plan(Operation::Up, None);
    p.stack.config = vec![
        value("greeting", json!("hello")),
        value("count", json!(3)),
        value("settings", json!({"region": "eu-west-1"})),
        ConfigItem {
            path: Some(true),
            ..value("data.nums[0]", json!("1"))
        },
        value("aws:region", json!("us-east-2")),
        ConfigItem {
            key: "dbPassword".into(),
            value_from: Some(ConfigValueFrom {
                env: Some("DB_PASSWORD".into()),
                ..Default::default()
            }),
            secret: Some(true),
            ..Default::default()
        },
        ConfigItem {
            key: "apiToken".into(),
            value_from: Some(ConfigValueFrom {
                path: Some(token.to_string_lossy().into_owned()),
                ..Default::default()
            }),
            secret: Some(true),
            ..Default::default()
        },
        ConfigItem {
            key: "creds".into(),
            value_from: Some(ConfigValueFrom {
                path: Some(creds.to_string_lossy().into_owned()),
                json: Some(true),
                ..Default::default()
            }),
            secret: Some(true),
            ..Default::default()
        },
    ];
    p
}

#[test]
fn up_with_plain_structured_and_secret_config_then_up_again() {
    let w = World::new();
    w.fetch_program(CONFIG_PROGRAM);
    let p = config_plan(&w);
    let env = [("DB_PASSWORD", DB_PASSWORD)];

    let ran = w.run("run", &p, &env);
    ran.assert_ok();
    let r = &ran.result;
    assert_eq!(r.outcome, Outcome::Succeeded);
    assert_eq!(r.message, "up succeeded");
    let summary = r.summary.as_ref().expect("summary");
    assert_eq!(summary.result.as_deref(), Some("succeeded"));
    assert_eq!(
        summary.resource_changes.get("create"),
        Some(&2),
        "{summary:?}"
    );
    let project = r.project.as_ref().expect("project");
    assert_eq!(
        (project.name.as_str(), project.runtime.as_str()),
        ("proj", "yaml")
    );
    assert!(
        r.outputs.is_none(),
        "the Secret step is skipped in this test"
    );
    // Pulumi's own output is streamed.
    assert!(ran.stdout.contains("Updating (dev)"), "{}", ran.stdout);
    // Secret values never show up in the logs, and no argv the runner logs holds them: the
    // structured secret is set leaf by leaf, each value on stdin.
    for s in [DB_PASSWORD, API_TOKEN, CREDS_SECRET, PASSPHRASE] {
        assert!(!ran.stdout.contains(s), "{s} in stdout");
        assert!(!ran.stderr.contains(s), "{s} in stderr:\n{}", ran.stderr);
    }
    assert!(
        ran.stderr
            .contains(r#"config set --stack dev --path --secret -- proj:["creds"]["password"]"#),
        "{}",
        ran.stderr
    );

    // The config landed as the CLI stores it.
    let stack_yaml = std::fs::read_to_string(w.workspace().join("Pulumi.dev.yaml")).unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&stack_yaml).unwrap();
    let config = &doc["config"];
    assert_eq!(config["proj:greeting"], serde_norway::Value::from("hello"));
    // The real CLI writes the number back as a string when a later `config set` rewrites
    // the file; either way the program reads 3 (see the outputs below).
    assert!(
        [serde_norway::Value::from(3), serde_norway::Value::from("3")]
            .contains(&config["proj:count"]),
        "{stack_yaml}"
    );
    assert_eq!(
        config["proj:settings"]["region"],
        serde_norway::Value::from("eu-west-1")
    );
    assert_eq!(config["proj:data"]["nums"][0], serde_norway::Value::from(1));
    assert_eq!(config["aws:region"], serde_norway::Value::from("us-east-2"));
    let creds = &config["proj:creds"];
    for (k, v) in [
        ("proj:dbPassword", &config["proj:dbPassword"]),
        ("proj:apiToken", &config["proj:apiToken"]),
        ("proj:creds.user", &creds["user"]),
        ("proj:creds.password", &creds["password"]),
    ] {
        assert!(
            v["secure"].is_string(),
            "{k} is not encrypted:\n{stack_yaml}"
        );
    }
    assert!(!stack_yaml.contains(DB_PASSWORD) && !stack_yaml.contains(CREDS_SECRET));

    // The outputs the program computed from that config.
    let outputs: serde_json::Value = serde_json::from_str(&w.pulumi(&[
        "stack",
        "output",
        "--json",
        "--show-secrets",
        "--stack",
        "dev",
    ]))
    .unwrap();
    assert_eq!(outputs["greeting"], json!("hello"));
    assert_eq!(outputs["count"], json!(3));
    assert_eq!(outputs["region"], json!("eu-west-1"));
    assert_eq!(outputs["first"], json!(1));
    assert_eq!(outputs["password"], json!(DB_PASSWORD));
    assert_eq!(outputs["token"], json!(API_TOKEN));
    assert_eq!(outputs["user"], json!("admin"));
    let masked = w.pulumi(&["stack", "output", "--json", "--stack", "dev"]);
    assert!(
        masked.contains("[secret]") && !masked.contains(DB_PASSWORD),
        "{masked}"
    );

    // Again: nothing changes.
    let ran = w.run("run", &p, &env);
    ran.assert_ok();
    let summary = ran.result.summary.as_ref().expect("summary");
    assert_eq!(
        summary.resource_changes.get("same"),
        Some(&2),
        "{summary:?}"
    );
    assert_eq!(summary.resource_changes.get("create"), None, "{summary:?}");
}

#[test]
fn missing_config_source_is_config_invalid_before_pulumi_runs() {
    let w = World::new();
    w.fetch_program(CONFIG_PROGRAM);
    let ran = w.run("run", &config_plan(&w), &[]);
    ran.assert_failed(FailureReason::ConfigInvalid);
    assert!(
        ran.result.message.contains("DB_PASSWORD"),
        "{}",
        ran.result.message
    );
    assert!(!ran.stderr.contains("running pulumi"), "{}", ran.stderr);
}

#[test]
fn failing_programs_are_classified() {
    let w = World::new();
    w.fetch_program(
        "name: proj\nruntime: yaml\nresources:\n  boom:\n    type: standin:index:Fail\n    properties:\n      message: the widget exploded\n",
    );
    let ran = w.run("run", &plan(Operation::Up, None), &[]);
    ran.assert_failed(FailureReason::UpdateFailed);
    assert!(
        ran.result.message.contains("the widget exploded"),
        "{}",
        ran.result.message
    );
    assert!(ran.result.project.is_some());

    // A program that does not evaluate (the stand-in has no compile step, so its evaluation
    // errors classify as UpdateFailed; the contract's compile patterns are unit-tested).
    let w = World::new();
    w.fetch_program(
        "name: proj\nruntime: yaml\nresources:\n  r:\n    type: standin:index:Record\n    properties:\n      v: ${nope.x}\n",
    );
    let ran = w.run("run", &plan(Operation::Up, None), &[]);
    let reason = ran.result.reason;
    assert!(
        matches!(
            reason,
            Some(FailureReason::CompileError | FailureReason::UpdateFailed)
        ),
        "{:?}",
        ran.result
    );
    assert!(
        ran.result.message.contains("nope"),
        "{}\nstdout:\n{}\nstderr:\n{}",
        ran.result.message,
        ran.stdout,
        ran.stderr
    );

    // A project file that is not YAML at all.
    let w = World::new();
    w.fetch_program("name: proj\nruntime: yaml\nresources: [${x}]\n");
    let ran = w.run("run", &plan(Operation::Up, None), &[]);
    ran.assert_failed(FailureReason::CompileError);
}

const RECORD: &str =
    "name: proj\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      v: one\noutputs:\n  v: ${rec.v}\n";

#[test]
fn expect_no_changes_and_preview() {
    let w = World::new();
    w.fetch_program(RECORD);
    w.run("run", &plan(Operation::Up, None), &[]).assert_ok();

    // Unchanged: expectNoChanges holds.
    let mut p = plan(Operation::Up, None);
    p.options.expect_no_changes = true;
    w.run("run", &p, &[]).assert_ok();

    // Changed program: a preview reports the change (summary from the event log)…
    w.fetch_program(&RECORD.replace("v: one", "v: two"));
    let ran = w.run("run", &plan(Operation::Preview, None), &[]);
    ran.assert_ok();
    let summary = ran.result.summary.as_ref().expect("preview summary");
    assert_eq!(
        summary.resource_changes.get("update"),
        Some(&1),
        "{summary:?}"
    );

    // …and an update that expects no changes fails with ExpectedNoChanges.
    let ran = w.run("run", &p, &[]);
    ran.assert_failed(FailureReason::ExpectedNoChanges);

    // refresh + expectNoRefreshChanges: a refresh with --expect-no-changes runs first.
    let mut p = plan(Operation::Up, None);
    p.options.refresh = true;
    p.options.expect_no_refresh_changes = true;
    let ran = w.run("run", &p, &[]);
    ran.assert_ok();
    assert!(
        ran.stderr
            .contains("refresh --yes --skip-preview --expect-no-changes"),
        "{}",
        ran.stderr
    );
}

/// `spec.approval`: a preview that saves its plan hands it over sealed with the Update's key
/// (nothing readable in the log); an `up` given that plan keeps to it, and fails once the
/// program would do anything else.
#[test]
fn a_saved_plan_is_handed_over_sealed_and_an_up_keeps_to_it() {
    use pulumi_operator_api::sealed;
    let w = World::new();
    w.fetch_program(RECORD);
    w.run("run", &plan(Operation::Up, None), &[]).assert_ok();

    w.fetch_program(&RECORD.replace("v: one", "v: two"));
    let key = sealed::new_key().unwrap();
    let mut preview = plan(Operation::Preview, None);
    preview.options.save_plan = true;
    preview.outputs_key = Some(key.clone());
    let ran = w.run("run", &preview, &[]);
    ran.assert_ok();
    assert!(ran.stderr.contains("--save-plan="), "{}", ran.stderr);
    let line = sealed::find_line(&ran.stderr).expect("a sealed line");
    assert_eq!(ran.result.outputs_digest, Some(sealed::digest(line)));
    assert!(
        !ran.stderr.contains("resourcePlans"),
        "the plan travels sealed"
    );
    let saved = sealed::open(&key, line)
        .unwrap()
        .plan
        .expect("a saved plan");
    assert!(saved.contains("resourcePlans"), "{saved}");

    // Kept to: the up the plan was made for succeeds.
    let mut up = plan(Operation::Up, None);
    up.apply_plan = Some(saved.clone());
    let ran = w.run("run", &up, &[]);
    ran.assert_ok();
    assert!(ran.stderr.contains("--plan="), "{}", ran.stderr);
    assert_eq!(
        w.pulumi(&["stack", "output", "v", "--stack", "dev"]).trim(),
        "two"
    );

    // A program that changed since the plan: the up refuses to do anything else.
    w.fetch_program(&RECORD.replace("v: one", "v: three"));
    let ran = w.run("run", &up, &[]);
    assert_eq!(ran.code, Some(1), "{:?}", ran.result);
    assert!(
        ran.result.message.contains("violates plan"),
        "{}",
        ran.result.message
    );
    assert_eq!(
        w.pulumi(&["stack", "output", "v", "--stack", "dev"]).trim(),
        "two"
    );
}

#[test]
fn stack_not_found_without_create() {
    let w = World::new();
    w.fetch_program(RECORD);
    let mut p = plan(Operation::Up, None);
    p.stack.create = false;
    let ran = w.run("run", &p, &[]);
    ran.assert_failed(FailureReason::StackNotFound);
    assert!(ran.result.message.contains("dev"), "{}", ran.result.message);
}

/// With `exists` (an earlier operation succeeded) the runner does not select the stack; when
/// the stack is gone after all, it is created and the operation runs; with `useLocalStackOnly`
/// it fails as without the hint. Outputs and their secrecy come from the event log.
#[test]
fn a_stack_said_to_exist_is_not_selected_and_is_created_when_gone() {
    let w = World::new();
    w.fetch_program(RECORD);
    let mut p = plan(Operation::Up, None);
    p.stack.exists = true;
    p.stack.create = false;
    w.run("run", &p, &[])
        .assert_failed(FailureReason::StackNotFound);

    p.stack.create = true;
    let ran = w.run("run", &p, &[]);
    ran.assert_ok();
    assert!(
        ran.stderr
            .contains("no stack dev although an earlier operation"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("stack select --create --stack dev"),
        "{}",
        ran.stderr
    );

    let ran = w.run("run", &p, &[]);
    ran.assert_ok();
    assert!(!ran.stderr.contains("stack select"), "{}", ran.stderr);
    assert!(!ran.stderr.contains("no stack dev"), "{}", ran.stderr);
    assert_eq!(
        ran.result
            .summary
            .as_ref()
            .and_then(|s| s.resource_changes.get("same")),
        Some(&2),
        "{:?}",
        ran.result
    );
}

/// Runners that create the same stack at the same moment (a retained workspace pod starting
/// beside the first update Job) all get it: the CLI's "already exists" (or its creation lock)
/// ends in a plain select.
#[test]
fn concurrent_creations_of_one_stack_all_succeed() {
    let shared = World::new();
    let worlds: Vec<World> = (0..4)
        .map(|_| {
            let w = World::new();
            w.fetch_program(RECORD);
            w
        })
        .collect();
    let mut p = plan(Operation::Preview, None);
    p.options.retry_on_update_conflict = true;
    p.conflict_retry_delay_ms = Some(200);
    let children: Vec<_> = worlds
        .iter()
        .map(|w| {
            w.command("run", &p)
                .env("PULUMI_BACKEND_URL", shared.backend_url())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start a runner")
        })
        .collect();
    for (w, child) in worlds.iter().zip(children) {
        let out = child.wait_with_output().expect("wait for a runner");
        w.ran(out).assert_ok();
    }
}

#[test]
fn destroy_with_remove() {
    let w = World::new();
    w.fetch_program(RECORD);
    w.run("run", &plan(Operation::Up, None), &[]).assert_ok();
    let mut p = plan(Operation::Destroy, None);
    p.options.remove = true;
    let ran = w.run("run", &p, &[]);
    ran.assert_ok();
    assert_eq!(
        ran.result
            .summary
            .as_ref()
            .and_then(|s| s.resource_changes.get("delete")),
        Some(&2),
        "{:?}",
        ran.result
    );
    let mut p = plan(Operation::Up, None);
    p.stack.create = false;
    w.run("run", &p, &[])
        .assert_failed(FailureReason::StackNotFound);
}

/// Config keys, values and a stack name shaped like the CLI's flags are set and used as
/// such: the runner passes them after `--` or as a flag's value, never where the CLI's flag
/// parser would read them as flags (`--secret:token` was "unknown flag", a stack named `-h`
/// was "removed" by printing `stack rm`'s help).
#[test]
fn option_shaped_config_keys_and_stack_names_are_not_flags() {
    let w = World::new();
    w.fetch_program(
        "name: proj\nruntime: yaml\nconfig:\n  plain: {type: string}\nresources:\n  rec:\n    \
         type: standin:index:Record\n    properties:\n      v: ${plain}\noutputs:\n  v: ${rec.v}\n",
    );
    let secret = |key: &str, v: &str| ConfigItem {
        secret: Some(true),
        ..value(key, json!(v))
    };
    let mut p = plan(Operation::Up, None);
    p.stack.name = "-h".into();
    p.stack.config = vec![
        secret("--secret:token", "dash-secret-4711"),
        secret("-x:k", "dash-secret-0815"),
        value("plain", json!("--force")),
        value("a=b", json!("-v")),
        value("--help", json!("--yes")),
    ];
    let ran = w.run("run", &p, &[]);
    ran.assert_ok();
    let stack_yaml = std::fs::read_to_string(w.workspace().join("Pulumi.-h.yaml")).unwrap();
    let doc: serde_norway::Value = serde_norway::from_str(&stack_yaml).unwrap();
    let config = &doc["config"];
    for key in ["--secret:token", "-x:k"] {
        assert!(config[key]["secure"].is_string(), "{key}:\n{stack_yaml}");
    }
    assert_eq!(
        config["proj:a=b"],
        serde_norway::Value::from("-v"),
        "{stack_yaml}"
    );
    assert_eq!(config["proj:--help"], serde_norway::Value::from("--yes"));
    let outputs = w.pulumi(&["stack", "output", "--json", "--stack", "-h"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&outputs).unwrap()["v"],
        json!("--force")
    );
    for s in ["dash-secret-4711", "dash-secret-0815"] {
        assert!(!ran.stderr.contains(s) && !ran.stdout.contains(s), "{s}");
    }

    let mut p = plan(Operation::Destroy, None);
    p.stack.name = "-h".into();
    p.options.remove = true;
    w.run("run", &p, &[]).assert_ok();
    let stacks = w.pulumi(&["stack", "ls", "--json"]);
    assert!(!stacks.contains("\"-h\""), "the stack is left: {stacks}");
}

#[test]
fn sigterm_interrupts_pulumi_cleanly_and_leaves_no_lock() {
    let w = World::new();
    let program = "name: proj\nruntime: yaml\nresources:\n  nap:\n    type: standin:index:Sleep\n    properties:\n      seconds: 4\n  rec:\n    type: standin:index:Record\n    properties:\n      v: x\n    options:\n      dependsOn: [\"${nap}\"]\n";
    w.fetch_program(program);
    let p = plan(Operation::Up, None);
    let child = w
        .command("run", &p)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the update holds the lock (the Sleep is in flight), then SIGTERM the runner.
    let locks = w.path("state/.pulumi/locks/organization/proj/dev");
    let start = Instant::now();
    while std::fs::read_dir(&locks).map(|d| d.count()).unwrap_or(0) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the update never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let out = child.wait_with_output().unwrap();
    let ran = w.ran(out);
    ran.assert_failed(FailureReason::Interrupted);
    assert!(
        ran.stderr.contains("sending SIGINT to pulumi"),
        "{}",
        ran.stderr
    );
    assert_eq!(
        std::fs::read_dir(&locks).map(|d| d.count()).unwrap_or(0),
        0,
        "the stack is still locked"
    );
    // The stack is usable at once.
    let ran = w.run("run", &p, &[]);
    ran.assert_ok();
}

#[test]
fn update_conflicts_fail_or_are_retried() {
    let w = World::new();
    w.fetch_program(RECORD);
    w.run("run", &plan(Operation::Up, None), &[]).assert_ok();
    // Another "update" holds the DIY lock.
    let locks = w.path("state/.pulumi/locks/organization/proj/dev");
    std::fs::create_dir_all(&locks).unwrap();
    let lock = locks.join("3f1e2c44-other-update.json");
    std::fs::write(
        &lock,
        r#"{"pid": 1, "username": "other", "hostname": "elsewhere", "timestamp": "2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();

    let ran = w.run("run", &plan(Operation::Up, None), &[]);
    ran.assert_failed(FailureReason::UpdateConflict);

    // retryOnUpdateConflict: the lock goes away once the runner met it and waits to retry.
    let mut p = plan(Operation::Up, None);
    p.options.retry_on_update_conflict = true;
    p.conflict_retry_delay_ms = Some(1500);
    let mut cmd = w.command("run", &p);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("start the runner");
    let stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("retry 1 of") {
                std::fs::remove_file(&lock).unwrap();
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    let out = child.wait_with_output().expect("runner output");
    let stderr = reader.join().unwrap();
    let ran = w.ran(out);
    ran.assert_ok();
    assert!(stderr.contains("retry 1 of"), "{stderr}");
}

#[test]
fn wrong_passphrase_and_missing_program() {
    let w = World::new();
    w.fetch_program(RECORD);
    w.run("run", &plan(Operation::Up, None), &[]).assert_ok();
    let ran = w.run(
        "run",
        &plan(Operation::Up, None),
        &[("PULUMI_CONFIG_PASSPHRASE", "not-the-passphrase")],
    );
    ran.assert_failed(FailureReason::ConfigInvalid);
    assert!(
        ran.result.message.contains("passphrase"),
        "{}",
        ran.result.message
    );
    assert!(!ran.result.message.contains("not-the-passphrase"));

    let empty = World::new();
    let ran = empty.run("run", &plan(Operation::Up, None), &[]);
    ran.assert_failed(FailureReason::SourceUnavailable);
}

#[test]
fn simulated_cloud_permalink_environments_and_access_token() {
    // Pulumi Cloud and ESC cannot be reached here: this one case runs the CLI stand-in.
    let w = World::cloud_standin();
    w.fetch_program(RECORD);
    std::fs::create_dir_all(w.path("cloud")).unwrap();
    let cloud = w.path("cloud").to_string_lossy().into_owned();
    let env = [
        ("PULUMI_BACKEND_URL", "https://api.pulumi.com"),
        ("PULUMI_ACCESS_TOKEN", "pul-test-token-123"),
        ("PULUMI_STANDIN_CLOUD_DIR", cloud.as_str()),
    ];
    let mut p = plan(Operation::Up, None);
    p.stack.name = "organization/proj/dev".into();
    p.stack.environment = vec!["proj/a".into(), "proj/b".into()];
    let ran = w.run("run", &p, &env);
    ran.assert_ok();
    assert_eq!(
        ran.result.permalink.as_deref(),
        Some("https://app.pulumi.com/organization/proj/dev/updates/1")
    );
    // Again: the environments are not imported twice.
    let ran = w.run("run", &p, &env);
    ran.assert_ok();
    assert_eq!(
        ran.result.permalink.as_deref(),
        Some("https://app.pulumi.com/organization/proj/dev/updates/2")
    );
    // The environments were added once, in order (the stand-in records what the CLI was asked).
    let listed = std::process::Command::new(w.cli[0].join("pulumi"))
        .args(["--non-interactive", "config", "env", "ls", "--json"])
        .args(["--stack", "organization/proj/dev"])
        .current_dir(w.workspace())
        .env("PATH", w.path_env())
        .envs(env)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        r#"["proj/a","proj/b"]"#,
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(!ran.stderr.contains("pul-test-token-123"));

    // Without a token.
    let ran = w.run("run", &p, &[env[0], ("PULUMI_ACCESS_TOKEN", ""), env[2]]);
    ran.assert_failed(FailureReason::InvalidAccessToken);
}

/// A value from a Secret-backed environment variable, printed by the program in every way it
/// can (a plain config value, an output, its base64, a failure message), never leaves the
/// runner: not in the forwarded output, its own log lines, nor the result.
#[test]
fn secret_env_values_never_leave_the_runner() {
    const CANARY: &str = "canary-env-secret-5150";
    let w = World::new();
    w.fetch_program(
        "name: proj\nruntime: yaml\nconfig:\n  leak: {type: string}\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      v: ${leak}\noutputs:\n  v: ${rec.v}\n  b64:\n    fn::toBase64: ${leak}\n",
    );
    let mut p = plan(Operation::Up, None);
    p.stack.config = vec![value("leak", json!(CANARY))];
    p.secret_env = vec!["APP_TOKEN".into()];
    let b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(CANARY)
    };
    let ran = w.run("run", &p, &[("APP_TOKEN", CANARY)]);
    ran.assert_ok();
    for text in [&ran.stdout, &ran.stderr, &ran.result.message] {
        assert!(!text.contains(CANARY), "leaked:\n{text}");
        assert!(!text.contains(&b64), "leaked as base64:\n{text}");
    }
    assert!(ran.stdout.contains("[secret]"), "{}", ran.stdout);
    assert!(
        ran.stderr
            .contains("outputs holding secret values are reported as secret: b64, v"),
        "{}",
        ran.stderr
    );

    let w = World::new();
    w.fetch_program(
        "name: proj\nruntime: yaml\nconfig:\n  leak: {type: string}\nresources:\n  boom:\n    type: standin:index:Fail\n    properties:\n      message: the widget ${leak} exploded\n",
    );
    let ran = w.run("run", &p, &[("APP_TOKEN", CANARY)]);
    ran.assert_failed(FailureReason::UpdateFailed);
    for text in [&ran.stdout, &ran.stderr, &ran.result.message] {
        assert!(!text.contains(CANARY), "leaked:\n{text}");
    }
    assert!(
        ran.result.message.contains("the widget [secret] exploded"),
        "{}",
        ran.result.message
    );
}
