//! Benchmark (not a test of correctness): the runner's own cost with the real Pulumi CLI, next
//! to a bare `pulumi up` of the same program on the same machine. Run by hand (release build):
//!
//!   cargo test --release -p pulumi-runner --test bench_runner -- --ignored --nocapture
//!
//! `BENCH_RUNNER_ROUNDS` (default 5) sets how many times each case runs; medians are printed.
//! It prints figures and asserts only that every run succeeded, never a time.

mod common;

use common::*;
use pulumi_operator_api::plan::{Operation, RunPlan};
use pulumi_operator_api::workspace::ConfigItem;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A small program: one resource of the test provider, plain config, one output.
const PROGRAM: &str = r#"name: bench
runtime: yaml
config:
  greeting: {type: string}
resources:
  rec:
    type: standin:index:Record
    properties:
      greeting: ${greeting}
outputs:
  greeting: ${rec.greeting}
"#;

fn bench_plan() -> RunPlan {
    let mut p = plan(Operation::Up, None);
    p.stack.config = vec![ConfigItem {
        key: "greeting".into(),
        value: Some(json!("hello")),
        ..Default::default()
    }];
    p
}

/// The real CLI with the world's environment, as a user would run it by hand.
fn bare(w: &World, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = w.pulumi_command(args).output().expect("run pulumi");
    assert!(
        out.status.success(),
        "pulumi {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    start.elapsed()
}

fn bare_first(w: &World) -> Duration {
    bare(w, &["stack", "init", "dev", "--non-interactive"])
        + bare(
            w,
            &[
                "config",
                "set",
                "greeting",
                "hello",
                "--stack",
                "dev",
                "--non-interactive",
            ],
        )
        + bare_up(w)
}

fn bare_up(w: &World) -> Duration {
    bare(
        w,
        &[
            "up",
            "--yes",
            "--skip-preview",
            "--stack",
            "dev",
            "--non-interactive",
        ],
    )
}

/// One runner run: its wall time, the time from its start to the start of the operation's
/// CLI process (the runner's overhead before Pulumi works), and how many CLI processes it ran.
struct RunnerRun {
    total: Duration,
    to_operation: Duration,
    processes: usize,
    /// When each CLI process started (ms after the runner's start) and its command.
    timeline: Vec<String>,
}

fn runner_run(w: &World, p: &RunPlan) -> RunnerRun {
    let start = Instant::now();
    let mut child = w
        .command("run", p)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the runner");
    let mut to_operation = None;
    let mut processes = 0;
    let mut lines = Vec::new();
    let mut timeline = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("running pulumi ") {
                processes += 1;
                timeline.push(format!(
                    "{:>6} ms  {}",
                    start.elapsed().as_millis(),
                    &line[at + "running ".len()..]
                ));
                if line.contains("running pulumi --non-interactive up ") && to_operation.is_none() {
                    to_operation = Some(start.elapsed());
                }
            }
            lines.push(line);
        }
    }
    let status = child.wait().expect("wait for the runner");
    let total = start.elapsed();
    assert!(status.success(), "the runner failed:\n{}", lines.join("\n"));
    timeline.push(format!("{:>6} ms  the runner ended", total.as_millis()));
    RunnerRun {
        total,
        to_operation: to_operation.unwrap_or(total),
        processes,
        timeline,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

#[test]
#[ignore = "a benchmark: run by hand with --ignored --nocapture"]
fn runner_cost_next_to_a_bare_pulumi_up() {
    let rounds: usize = std::env::var("BENCH_RUNNER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(5);
    let p = bench_plan();

    // A new stack: `stack init` + `config set` + `up` by hand, against the runner's first run.
    let (mut bare_new, mut runner_new) = (Vec::new(), Vec::new());
    let (mut overhead_new, mut processes_new) = (Vec::new(), 0);
    // The same stack again, nothing changed: `up` by hand against the runner's run.
    let (mut bare_again, mut runner_again) = (Vec::new(), Vec::new());
    let (mut overhead_again, mut processes_again) = (Vec::new(), 0);
    let mut timeline = Vec::new();
    for _ in 0..rounds {
        let by_hand = World::new();
        by_hand.fetch_program(PROGRAM);
        bare_new.push(bare_first(&by_hand));
        bare_again.push(bare_up(&by_hand));

        let w = World::new();
        w.fetch_program(PROGRAM);
        let first = runner_run(&w, &p);
        runner_new.push(first.total);
        overhead_new.push(first.to_operation);
        processes_new = first.processes;
        // As the operator plans it once an operation of the Stack succeeded.
        let mut known = p.clone();
        known.stack.exists = true;
        let again = runner_run(&w, &known);
        runner_again.push(again.total);
        overhead_again.push(again.to_operation);
        processes_again = again.processes;
        timeline = again.timeline;
    }
    let report = |case: &str,
                  bare: Vec<Duration>,
                  runner: Vec<Duration>,
                  overhead: Vec<Duration>,
                  processes: usize| {
        let (b, r) = (median(bare), median(runner));
        println!(
            "| {case} | {} ms | {} ms | {:.2}× | {} ms | {processes} |",
            ms(b),
            ms(r),
            r.as_secs_f64() / b.as_secs_f64(),
            ms(median(overhead)),
        );
    };
    println!("\nrunner cost, medians of {rounds} rounds (release runner, real Pulumi CLI, file backend, passphrase):\n");
    println!("| case | by hand | runner | ratio | runner start → `pulumi up` | CLI processes |");
    println!("|---|---|---|---|---|---|");
    report(
        "new stack (by hand: stack init, config set, up)",
        bare_new,
        runner_new,
        overhead_new,
        processes_new,
    );
    report(
        "same stack again (by hand: up)",
        bare_again,
        runner_again,
        overhead_again,
        processes_again,
    );
    println!("\nthe last run of the same stack, CLI processes as they started:\n");
    for line in timeline {
        println!("    {line}");
    }
}
