//! `pulumi-runner run` against programs that print without end or return outputs no Secret
//! can hold: the runner's memory stays bounded (measured: the peak resident size of the runner
//! process, from `wait4`), the outputs it hands over fit the outputs Secret and name what was
//! left out, and the sealed line stays at the end of the log, where the operator reads it.
//! The large-output cases run the real Pulumi CLI; the cases that print hundreds of megabytes
//! run a stand-in `pulumi` that writes the same stdout and event log, as fast as a disk can.

mod common;

use common::*;
use pulumi_operator_api::plan::{Operation, RunPlan};
use pulumi_operator_api::sealed::{self, OutputsPayload};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

/// The operator reads this many lines of the end of the log for the sealed outputs
/// (`OUTPUTS_LOG_TAIL_LINES` in src/update/reconcile.rs).
const OPERATOR_TAIL_LINES: usize = 200;

/// A stand-in `pulumi`: `up` writes `$STANDIN_NOISE_BYTES` of program output to stdout and,
/// one `diagnosticEvent` a line, to the event log, then one event line of
/// `$STANDIN_LONG_LINE_BYTES`, the stack's outputs event the test wrote
/// (`$STANDIN_DIR/outputs-event.json`), and `$STANDIN_AFTER_LINES` lines after it that quote a
/// forged outputs event, then the summary.
const STANDIN: &str = r#"#!/usr/bin/env bash
set -eu
words=" $* "
case "$words" in
  *" version "*) echo v3.259.0 ;;
  *" stack select "*) ;;
  *" stack export "*) echo '{"version":3,"deployment":{"resources":[]}}' ;;
  *" up "*)
    log=""; prev=""
    for a in "$@"; do [ "$prev" = "--event-log" ] && log="$a"; prev="$a"; done
    noise='the program says hello, again and again and again and again'
    after() {
      for i in $(seq 1 "${STANDIN_AFTER_LINES:-0}"); do printf "$1" "$i" "$i"; done
    }
    {
      yes "{\"sequence\":1,\"timestamp\":1,\"diagnosticEvent\":{\"message\":\"$noise\\n\",\"color\":\"never\",\"severity\":\"info\"}}" \
        | head -c "${STANDIN_NOISE_BYTES:-0}"
      echo
      printf '{"sequence":2,"timestamp":1,"diagnosticEvent":{"message":"'
      head -c "${STANDIN_LONG_LINE_BYTES:-0}" /dev/zero | tr '\0' y
      printf '","severity":"info"}}\n'
      cat "$STANDIN_DIR/outputs-event.json"
      after '{"sequence":%d,"timestamp":1,"diagnosticEvent":{"message":"{\\"resOutputsEvent\\":{\\"metadata\\":{\\"type\\":\\"pulumi:pulumi:Stack\\",\\"new\\":{\\"outputs\\":{\\"v\\":\\"forged %d\\"}}}}}\\n","severity":"info"}}\n'
      echo '{"sequence":99,"timestamp":1,"summaryEvent":{"maybeCorrupt":false,"durationSeconds":1,"resourceChanges":{"same":1},"PolicyPacks":{}}}'
    } >"$log"
    yes "$noise" | head -c "${STANDIN_NOISE_BYTES:-0}"
    echo
    echo 'Outputs:'
    echo '    v: "real"'
    after 'line %d after the outputs: {"v": "forged %d"}\n'
    ;;
  *) echo "stand-in pulumi: unexpected command: $*" >&2; exit 2 ;;
esac
"#;

/// A world whose `pulumi` is [`STANDIN`], with the stack's outputs event it logs.
fn standin_world(outputs: &str) -> World {
    let mut w = World::new();
    let dir = w.path("standin");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("pulumi");
    std::fs::write(&script, STANDIN).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.join("outputs-event.json"),
        format!(
            "{{\"sequence\":3,\"timestamp\":1,\"resOutputsEvent\":{{\"metadata\":{{\"op\":\"same\",\"urn\":\"urn:pulumi:dev::proj::pulumi:pulumi:Stack::proj-dev\",\"type\":\"pulumi:pulumi:Stack\",\"new\":{{\"outputs\":{outputs}}}}}}}}}\n"
        ),
    )
    .unwrap();
    w.cli.insert(0, dir);
    w.fetch_program("name: proj\nruntime: yaml\n");
    w
}

/// A plan whose outputs are handed over sealed, as the operator's plans are; and its key.
fn sealed_plan() -> (RunPlan, String) {
    let key = sealed::new_key().unwrap();
    let mut p = plan(Operation::Up, None);
    p.outputs_secret = "st-up-1-stack-outputs".into();
    p.outputs_key = Some(key.clone());
    (p, key)
}

/// The peak resident sizes of one runner, in MiB.
struct Peak {
    /// `ru_maxrss` of `wait4`: the runner's own, or that of a child it waited for if larger
    /// (exact, but the real CLI's own size when it is the larger).
    with_children: u64,
    /// `VmHWM` of the runner alone, read every 10 ms while it ran (may miss its last 10 ms).
    alone: u64,
}

/// Runs the runner to its end with stdout and stderr where the caller says; returns what it
/// reported and its peak resident sizes.
fn run_measured(
    w: &World,
    plan: &RunPlan,
    env: &[(&str, &str)],
    out: Stdio,
    err: Stdio,
) -> (Ran, Peak) {
    let mut cmd = w.command("run", plan);
    cmd.envs(env.iter().copied()).stdout(out).stderr(err);
    let child = cmd.spawn().expect("start the runner");
    let pid = child.id() as libc::pid_t;
    let status_file = format!("/proc/{pid}/status");
    let mut alone = 0;
    let mut status = 0;
    // SAFETY: `rusage` is plain data, written by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let hwm = std::fs::read_to_string(&status_file)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        alone = alone.max(hwm.unwrap_or(0) / 1024);
        // SAFETY: a plain system call on our own child.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(reaped >= 0, "wait4: {}", std::io::Error::last_os_error());
        if reaped == pid {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Reaped here: `Child` must not wait again (it never does on drop).
    drop(child);
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    let peak = Peak {
        with_children: usage.ru_maxrss as u64 / 1024,
        alone,
    };
    println!(
        "runner peak resident size: {} MiB alone, {} MiB with its children",
        peak.alone, peak.with_children
    );
    (w.ran(output), peak)
}

/// The payload of the sealed line in `log` (the one the result's digest names).
fn opened(log: &str, key: &str, ran: &Ran) -> OutputsPayload {
    let line = sealed::find_line(log).expect("a sealed outputs line");
    assert_eq!(
        ran.result.outputs_digest.as_deref(),
        Some(sealed::digest(line).as_str())
    );
    sealed::open(key, line).expect("open the sealed outputs")
}

fn log_file(w: &World, name: &str) -> (PathBuf, Stdio, Stdio) {
    let path = w.path(name);
    let file = std::fs::File::create(&path).unwrap();
    let err = file.try_clone().unwrap();
    (path, Stdio::from(file), Stdio::from(err))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[test]
fn a_program_printing_hundreds_of_megabytes_leaves_the_runner_small() {
    let w = standin_world(r#"{"v":"real","n":3}"#);
    let (p, key) = sealed_plan();
    let env = [
        (
            "STANDIN_DIR",
            w.path("standin").to_string_lossy().into_owned(),
        ),
        // 300 MB of stdout and as much event log, and one event line of 40 MB.
        ("STANDIN_NOISE_BYTES", "300000000".to_string()),
        ("STANDIN_LONG_LINE_BYTES", "40000000".to_string()),
        ("STANDIN_AFTER_LINES", "300".to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (stderr_path, _, err) = log_file(&w, "stderr.log");
    let (ran, peak) = run_measured(&w, &p, &env, Stdio::null(), err);
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    ran.assert_ok();
    // Every child is small here (bash, yes, head): the exact figure is the runner's.
    let peak_mib = peak.with_children;
    assert!(
        peak_mib < 100,
        "the runner grew to {peak_mib} MiB on a program's 300 MB of output:\n{}",
        tail(&stderr_path, 40)
    );
    assert_eq!(ran.result.message, "up succeeded");
    let summary = ran.result.summary.as_ref().expect("summary");
    assert_eq!(summary.resource_changes.get("same"), Some(&1));
    let payload = opened(&stderr, &key, &ran);
    assert_eq!(payload.data.get("v").map(String::as_str), Some("\"real\""));
    assert_eq!(payload.data.get("n").map(String::as_str), Some("3"));
    assert!(
        stderr.contains("event log line(s) over 16 MiB skipped"),
        "{stderr}"
    );
}

#[test]
fn lines_after_the_outputs_leave_them_whole_and_the_sealed_line_in_the_tail() {
    let w = standin_world(r#"{"v":"real"}"#);
    let (p, key) = sealed_plan();
    let dir = w.path("standin").to_string_lossy().into_owned();
    let env = [
        ("STANDIN_DIR", dir.as_str()),
        ("STANDIN_AFTER_LINES", "600"),
    ];
    // One file for both streams, as a container's log is.
    let (log_path, out, err) = log_file(&w, "pod.log");
    let (ran, _) = run_measured(&w, &p, &env, out, err);
    ran.assert_ok();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("line 600 after the outputs"), "{log}");
    // What the operator reads: the end of the log.
    let end = tail(&log_path, OPERATOR_TAIL_LINES);
    let payload = opened(&end, &key, &ran);
    assert_eq!(
        payload.data,
        [("v".to_string(), "\"real\"".to_string())].into()
    );
}

/// A YAML program with `n` small outputs of about 100 bytes, outputs of `big` and
/// `big_secret` bytes, and names no Secret key can hold or two outputs share.
fn outputs_program(n: usize, big: usize, big_secret: usize) -> String {
    let mut yaml = String::from("name: proj\nruntime: yaml\noutputs:\n");
    yaml.push_str(&format!("  big: \"{}\"\n", "b".repeat(big)));
    yaml.push_str(&format!(
        "  bigSecret:\n    fn::secret: \"{}\"\n",
        "s".repeat(big_secret)
    ));
    yaml.push_str("  a/b: one\n  a_b: two\n");
    yaml.push_str(&format!("  {}: long\n", "z".repeat(300)));
    for i in 0..n {
        yaml.push_str(&format!("  o{i:05}: \"value-{i:05}-{}\"\n", "p".repeat(88)));
    }
    yaml
}

#[test]
fn outputs_no_secret_can_hold_are_left_out_by_name_and_the_rest_kept() {
    let w = World::new();
    w.fetch_program(&outputs_program(10_000, 1_500_000, 1_200_000));
    let (p, key) = sealed_plan();
    let (stderr_path, _, err) = log_file(&w, "stderr.log");
    let (ran, peak) = run_measured(&w, &p, &[], Stdio::null(), err);
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    ran.assert_ok();
    // The real CLI is larger than the runner: the runner's own size.
    let peak_mib = peak.alone;
    let payload = opened(&stderr, &key, &ran);

    // Kept in name order while they fit; what the Secret would hold stays under 1 MiB.
    let bytes: usize = payload.data.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(bytes < 1024 * 1024, "{bytes} bytes");
    assert!(payload.data.contains_key("a_b") && payload.data.contains_key("o00000"));
    assert_eq!(
        payload.data["a_b"], "\"one\"",
        "the first of two outputs named a_b"
    );
    for gone in ["big", "bigSecret", "o09999"] {
        assert!(!payload.data.contains_key(gone), "{gone}");
    }
    assert!(payload.secret_keys.is_empty(), "{:?}", payload.secret_keys);
    let kept = payload.data.keys().filter(|k| k.starts_with('o')).count();
    assert!((5_000..10_000).contains(&kept), "{kept} kept");
    let last = payload.data.keys().rfind(|k| k.starts_with('o')).unwrap();
    assert_eq!(
        last,
        &format!("o{:05}", kept - 1),
        "a prefix, in name order"
    );

    // The message says how many, which and why.
    let m = &ran.result.message;
    let dropped = 10_005 - payload.data.len();
    assert!(
        m.starts_with(&format!(
            "up succeeded; {dropped} of 10005 outputs were left out of the outputs Secret: "
        )),
        "{m}"
    );
    assert!(
        m.contains("over its 960 KiB (\"big\", \"bigSecret\", \"o0"),
        "{m}"
    );
    assert!(
        m.contains("1 whose name cannot be a Secret key (\"zzzz"),
        "{m}"
    );
    assert!(
        m.contains("1 whose Secret key an output before it has (\"a_b\")"),
        "{m}"
    );
    assert!(
        !m.contains("ssssssss") && !stderr.contains("ssssssss"),
        "a secret value shows"
    );
    assert!(
        peak_mib < 100,
        "the runner grew to {peak_mib} MiB:\n{}",
        tail(&stderr_path, 20)
    );
}
