//! The operation's event log (`--event-log`), read once, line by line, in bounded memory.
//!
//! Each line a program prints becomes an event of its own (`diagnosticEvent`), so a program
//! that prints a gigabyte leaves a log as large; the runner needs only a few events of it: the
//! stack's outputs, the summary, a preview's changes and the policy violations. Only lines
//! naming one of those kinds are parsed, and a line longer than [`MAX_EVENT_LINE`] is skipped
//! (its head tells whether it held the stack's outputs, which are then asked of the CLI).

use crate::outputs::StackOutputs;
use crate::policy::report::Violations;
use crate::report::log;
use pulumi_operator_api::plan::Summary;
use pulumi_operator_api::ResourceChange;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::Path;

/// Longer lines are skipped. No summary, step or policy event comes near it; the stack's
/// outputs may (they are then read from `stack output`, and most could not be kept anyway).
pub const MAX_EVENT_LINE: usize = 16 * 1024 * 1024;
/// How much of a skipped line is kept to tell what it was.
const HEAD: usize = 64 * 1024;

/// The event kinds read here, as their key appears in a line (a key, not text inside a string:
/// quotes in a string are escaped).
const KINDS: [&str; 4] = [
    "\"resOutputsEvent\":",
    "\"summaryEvent\":",
    "\"resourcePreEvent\":",
    "\"policyEvent\":",
];

/// The stack resource's outputs, as far as the log tells.
#[derive(Debug, Default)]
enum LoggedOutputs {
    #[default]
    None,
    Seen(Value),
    /// Its last event was too long to read.
    TooLong,
}

/// What the runner reads from an operation's event log.
#[derive(Debug, Default)]
pub struct EventLog {
    /// The log could be opened.
    pub found: bool,
    outputs: LoggedOutputs,
    /// The last `summaryEvent`.
    pub summary: Option<Summary>,
    /// What a preview says an `up` would change ([`EventLog::changes`]).
    changes: Vec<ResourceChange>,
    change_index: HashMap<String, usize>,
    /// The policy packs' violations.
    pub violations: Violations,
    /// Lines skipped for their length.
    pub skipped: usize,
}

/// One line of the log: whole, or only its head when it was too long.
enum Line<'a> {
    Whole(&'a [u8]),
    TooLong(&'a [u8]),
}

impl EventLog {
    /// Reads the log at `path` (nothing when it cannot be opened).
    pub fn read(path: &Path) -> EventLog {
        let mut events = EventLog::default();
        let Ok(file) = std::fs::File::open(path) else {
            return events;
        };
        events.found = true;
        let reader = std::io::BufReader::with_capacity(64 * 1024, file);
        if let Err(e) = each_line(reader, MAX_EVENT_LINE, |line| events.line(line)) {
            log(format!("cannot read all of the event log: {e}"));
        }
        if events.skipped > 0 {
            log(format!(
                "{} event log line(s) over {} MiB skipped",
                events.skipped,
                MAX_EVENT_LINE / (1024 * 1024)
            ));
        }
        events
    }

    /// The events of `text` (tests, and logs already in memory).
    pub fn from_text(text: &str) -> EventLog {
        let mut events = EventLog {
            found: true,
            ..Default::default()
        };
        let _ = each_line(text.as_bytes(), MAX_EVENT_LINE, |line| events.line(line));
        events
    }

    /// The stack's outputs as the log recorded them, secret values masked (see
    /// [`StackOutputs::from_logged`]); `None` when the caller must ask the CLI.
    pub fn outputs(&self) -> Option<StackOutputs> {
        match &self.outputs {
            LoggedOutputs::Seen(v) => StackOutputs::from_logged(v.clone()),
            LoggedOutputs::TooLong => {
                log("the stack's outputs event is too long to read; asking the CLI");
                None
            }
            LoggedOutputs::None => None,
        }
    }

    /// The resources a preview's log says an `up` would change, one entry per resource (a
    /// replacement's three steps are one `replace`), in the order of the log. Refresh steps,
    /// reads and unchanged resources are not changes.
    pub fn changes(self) -> Vec<ResourceChange> {
        self.changes
    }

    fn line(&mut self, line: Line<'_>) {
        match line {
            Line::Whole(bytes) => self.event(bytes),
            Line::TooLong(head) => {
                self.skipped += 1;
                if held_stack_outputs(head) {
                    self.outputs = LoggedOutputs::TooLong;
                }
            }
        }
    }

    fn event(&mut self, bytes: &[u8]) {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        // Most lines are the program's own output: only the kinds read here are parsed.
        if !KINDS.iter().any(|k| text.contains(k)) {
            return;
        }
        let Ok(event) = serde_json::from_str::<Value>(text) else {
            return;
        };
        if let Some(meta) = event.pointer("/resOutputsEvent/metadata") {
            if meta.get("type").and_then(Value::as_str) == Some("pulumi:pulumi:Stack") {
                if let Some(outputs) = meta.pointer("/new/outputs") {
                    self.outputs = LoggedOutputs::Seen(outputs.clone());
                }
            }
        } else if let Some(s) = event.get("summaryEvent") {
            self.summary = Some(Summary {
                result: Some(
                    s.get("result")
                        .and_then(Value::as_str)
                        .unwrap_or("succeeded")
                        .to_string(),
                ),
                resource_changes: resource_changes(s.get("resourceChanges")),
            });
        } else if let Some(meta) = event.pointer("/resourcePreEvent/metadata") {
            self.step(meta);
        } else if let Some(p) = event.get("policyEvent") {
            self.violations.add(p);
        }
    }

    /// A step a preview announces.
    fn step(&mut self, meta: &Value) {
        let (Some(op), Some(urn)) = (
            meta.get("op").and_then(Value::as_str),
            meta.get("urn").and_then(Value::as_str),
        ) else {
            return;
        };
        let operation = match op {
            "create" | "update" | "delete" | "replace" => op,
            "create-replacement" | "delete-replaced" | "discard-replaced" => "replace",
            _ => return,
        };
        match self.change_index.get(urn) {
            // A replacement is announced by several steps: it stays one `replace`.
            Some(&i) => {
                if operation == "replace" {
                    self.changes[i].operation = "replace".into();
                }
            }
            None => {
                self.change_index
                    .insert(urn.to_string(), self.changes.len());
                self.changes.push(ResourceChange {
                    urn: urn.to_string(),
                    operation: operation.to_string(),
                });
            }
        }
    }
}

/// Whether a line too long to read held the stack's outputs: a `resOutputsEvent` whose head
/// names the stack's type, or does not reach the type at all.
fn held_stack_outputs(head: &[u8]) -> bool {
    let head = String::from_utf8_lossy(head);
    head.contains(KINDS[0])
        && (head.contains("\"type\":\"pulumi:pulumi:Stack\"") || !head.contains("\"type\":"))
}

/// A `resourceChanges` object as counts by operation.
pub fn resource_changes(v: Option<&Value>) -> BTreeMap<String, i64> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Calls `on` with each line of `reader` (without its newline; empty lines skipped), holding
/// at most `max` bytes of one: a longer line is passed as its first [`HEAD`] bytes.
fn each_line(
    mut reader: impl BufRead,
    max: usize,
    mut on: impl FnMut(Line<'_>),
) -> std::io::Result<()> {
    let mut line: Vec<u8> = Vec::new();
    let mut too_long = false;
    let mut emit = |line: &[u8], too_long: bool| match (too_long, line.is_empty()) {
        (true, _) => on(Line::TooLong(line)),
        (false, false) => on(Line::Whole(line)),
        (false, true) => {}
    };
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        let newline = buf.iter().position(|&b| b == b'\n');
        let piece = &buf[..newline.unwrap_or(buf.len())];
        if !too_long && line.len() + piece.len() > max {
            too_long = true;
            line.truncate(HEAD);
        }
        let room = if too_long {
            HEAD.saturating_sub(line.len())
        } else {
            piece.len()
        };
        line.extend_from_slice(&piece[..room.min(piece.len())]);
        let used = piece.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            emit(&line, too_long);
            line.clear();
            too_long = false;
        }
    }
    emit(&line, too_long);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[u8], max: usize) -> Vec<(bool, String)> {
        let mut out = Vec::new();
        // A reader that hands out a few bytes at a time: lines span reads.
        let reader = std::io::BufReader::with_capacity(7, text);
        each_line(reader, max, |line| {
            out.push(match line {
                Line::Whole(b) => (false, String::from_utf8_lossy(b).into_owned()),
                Line::TooLong(b) => (true, String::from_utf8_lossy(b).into_owned()),
            })
        })
        .unwrap();
        out
    }

    #[test]
    fn lines_are_whole_up_to_the_limit_and_heads_beyond() {
        let long = "y".repeat(HEAD + 100);
        let text = format!("a\n\nbcdefghij\n{long}\nlast");
        let got = lines(text.as_bytes(), HEAD + 10);
        assert_eq!(
            got,
            vec![
                (false, "a".to_string()),
                (false, "bcdefghij".to_string()),
                (true, "y".repeat(HEAD)),
                (false, "last".to_string()),
            ]
        );
        assert_eq!(lines(b"abc", 2), vec![(true, "abc".to_string())]);
        assert!(lines(b"", 2).is_empty());
    }

    fn outputs_event(outputs: &str) -> String {
        format!(
            r#"{{"sequence":3,"timestamp":1,"resOutputsEvent":{{"metadata":{{"op":"same","urn":"u1","type":"pulumi:pulumi:Stack","new":{{"outputs":{outputs}}}}}}}}}"#
        )
    }

    #[test]
    fn the_last_stack_outputs_win_over_anything_the_program_prints() {
        let fake = serde_json::to_string(&outputs_event(r#"{"v":"forged"}"#)).unwrap();
        let mut log = vec![
            outputs_event(r#"{"v":"old"}"#),
            outputs_event(r#"{"v":"real"}"#),
        ];
        for i in 0..300 {
            log.push(format!(
                r#"{{"sequence":{i},"timestamp":1,"diagnosticEvent":{{"message":{fake},"severity":"info"}}}}"#
            ));
        }
        log.push(r#"{"sequence":9,"summaryEvent":{"resourceChanges":{"same":2}}}"#.into());
        let events = EventLog::from_text(&log.join("\n"));
        let outputs = events.outputs().unwrap();
        assert_eq!(outputs.values["v"], serde_json::json!("real"));
        let summary = events.summary.unwrap();
        assert_eq!(summary.result.as_deref(), Some("succeeded"));
        assert_eq!(summary.resource_changes["same"], 2);
    }

    #[test]
    fn a_stack_outputs_event_too_long_to_read_is_asked_of_the_cli() {
        let big = format!(r#"{{"big":"{}"}}"#, "x".repeat(MAX_EVENT_LINE));
        let log = [outputs_event(r#"{"v":"older"}"#), outputs_event(&big)].join("\n");
        let events = EventLog::from_text(&log);
        assert_eq!(events.skipped, 1);
        assert!(events.outputs().is_none());
        // Another resource's long outputs do not matter.
        let other = outputs_event(&big).replace("pulumi:pulumi:Stack", "k8s:core/v1:ConfigMap");
        let log = [outputs_event(r#"{"v":"kept"}"#), other].join("\n");
        let outputs = EventLog::from_text(&log).outputs().unwrap();
        assert_eq!(outputs.values["v"], serde_json::json!("kept"));
    }
}
