//! What the policy packs found, read from the operation's `--event-log`: the engine writes a
//! `policyEvent` per violation (`resourceUrn`, `message` in Pulumi's colour markup,
//! `policyName`, `policyPackName`, `policyPackVersion`, `enforcementLevel`: the Go type
//! `apitype.PolicyEvent` of the CLI 3.259).

use crate::classify::strip_ansi;
use pulumi_operator_api::policy::{
    PolicyReport, PolicyViolation, MAX_REPORTED_VIOLATIONS, MAX_VIOLATION_MESSAGE,
};
use std::collections::BTreeMap;

/// The report of one operation: `packs` are the plan's labels; each (pack, policy, resource)
/// once, with its first message; the counts exact, the items at most
/// [`MAX_REPORTED_VIOLATIONS`], mandatory ones first.
pub fn from_event_log(event_log: &str, packs: Vec<String>) -> PolicyReport {
    let mut seen = Violations::default();
    for line in event_log.lines() {
        if let Ok(event) = serde_json::from_str::<serde_json::Value>(line) {
            if let Some(e) = event.get("policyEvent") {
                seen.add(e);
            }
        }
    }
    seen.report(packs)
}

/// The violations of an event log so far, each (pack, policy, resource) once.
#[derive(Debug, Default)]
pub struct Violations(BTreeMap<(String, String, String), PolicyViolation>);

impl Violations {
    /// Takes in one `policyEvent`.
    pub fn add(&mut self, event: &serde_json::Value) {
        let v = violation(event);
        let key = (v.pack.clone(), v.policy.clone(), v.urn.clone());
        match self.0.get_mut(&key) {
            // Reported at two levels (cannot happen with one pack): the stricter one counts.
            Some(first) if v.is_mandatory() => first.enforcement_level = v.enforcement_level,
            Some(_) => {}
            None => {
                self.0.insert(key, v);
            }
        }
    }

    /// The report of one operation (see [`from_event_log`]).
    pub fn report(self, packs: Vec<String>) -> PolicyReport {
        let mut items: Vec<PolicyViolation> = self.0.into_values().collect();
        // Mandatory first, then by pack, policy and resource (the map's order, kept by a
        // stable sort).
        items.sort_by_key(|v| !v.is_mandatory());
        let violations = items.len() as i64;
        let mandatory = items.iter().filter(|v| v.is_mandatory()).count() as i64;
        items.truncate(MAX_REPORTED_VIOLATIONS);
        PolicyReport {
            packs,
            violations,
            mandatory,
            items,
            // The operator knows which packs it asked for, and whether its check failed.
            digest: None,
            check_failure: None,
        }
    }
}

/// The violation a `policyEvent` reports.
fn violation(e: &serde_json::Value) -> PolicyViolation {
    let text = |k: &str| {
        e.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    // The engine reports `mandatory` and `advisory` (older CLIs said `warning`).
    let level = match text("enforcementLevel").as_str() {
        "mandatory" => "mandatory",
        _ => "advisory",
    };
    PolicyViolation {
        pack: text("policyPackName"),
        policy: text("policyName"),
        urn: text("resourceUrn"),
        message: clean_message(&text("message")),
        enforcement_level: level.to_string(),
    }
}

/// A message as a status can show it: without Pulumi's colour markup (`<{%fg 1%}>`) or ANSI
/// codes, on one line, at most [`MAX_VIOLATION_MESSAGE`] characters.
pub fn clean_message(raw: &str) -> String {
    let plain = strip_ansi(&strip_markup(raw));
    let one_line = plain
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    cut(&one_line, MAX_VIOLATION_MESSAGE)
}

/// `text` without Pulumi's colour directives (`<{%reset%}>`, `<{%fg 13%}>`…).
fn strip_markup(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<{%") {
        out.push_str(&rest[..start]);
        match rest[start..].find("%}>") {
            Some(end) => rest = &rest[start + end + 3..],
            None => {
                rest = &rest[start..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// At most `max` characters, the cut marked with `...`.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max.saturating_sub(3)).collect();
    format!("{}...", kept.trim_end())
}

/// The failure message of an operation the mandatory violations refused: how many, and the
/// first few (the report lists the rest).
pub fn violation_message(report: &PolicyReport) -> String {
    const SHOWN: usize = 3;
    const SHOWN_MESSAGE: usize = 160;
    let n = report.mandatory;
    let mut parts: Vec<String> = report
        .items
        .iter()
        .filter(|v| v.is_mandatory())
        .take(SHOWN)
        .map(|v| {
            let on = match v.urn.is_empty() {
                true => String::new(),
                false => format!(" on {}", v.urn),
            };
            format!(
                "{}/{}{on}: {}",
                v.pack,
                v.policy,
                cut(&v.message, SHOWN_MESSAGE)
            )
        })
        .collect();
    let listed = parts.len() as i64;
    if n > listed {
        parts.push(format!("and {} more", n - listed));
    }
    let plural = if n == 1 { "" } else { "s" };
    format!(
        "{n} mandatory policy violation{plural}: {}",
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(pack: &str, policy: &str, urn: &str, level: &str, message: &str) -> String {
        serde_json::json!({
            "sequence": 7,
            "timestamp": 1,
            "policyEvent": {
                "resourceUrn": urn,
                "message": message,
                "color": "raw",
                "policyName": policy,
                "policyPackName": pack,
                "policyPackVersion": "0.1.0",
                "policyPackVersionTag": "0.1.0",
                "enforcementLevel": level,
            }
        })
        .to_string()
    }

    const DEPLOY: &str = "urn:pulumi:dev::app::kubernetes:apps/v1:Deployment::app";

    #[test]
    fn violations_are_counted_once_each_mandatory_first() {
        let limits = "<{%reset%}><{%fg 13%}>Every container of a Deployment has CPU and memory \
                      limits.\nContainer \"nginx\" has no cpu or memory limit.<{%reset%}>\n";
        let log = [
            r#"{"sequence":0,"timestamp":1,"preludeEvent":{"config":{}}}"#.to_string(),
            event(
                "k8s-labels",
                "deployment-team-label",
                DEPLOY,
                "advisory",
                "No team label.",
            ),
            event(
                "k8s-limits",
                "deployment-resource-limits",
                DEPLOY,
                "mandatory",
                limits,
            ),
            // The same resource and policy again (a second container): counted once.
            event(
                "k8s-limits",
                "deployment-resource-limits",
                DEPLOY,
                "mandatory",
                "Container \"b\".",
            ),
            event(
                "k8s-limits",
                "deployment-resource-limits",
                "urn:b",
                "mandatory",
                "\u{1b}[31mred\u{1b}[0m",
            ),
            event("k8s-labels", "stack-wide", "", "warning", "x"),
            "not json".to_string(),
            r#"{"summaryEvent":{"resourceChanges":{}}}"#.to_string(),
        ]
        .join("\n");
        let r = from_event_log(&log, vec!["k8s-limits@0123456789ab".into()]);
        assert_eq!(r.packs, vec!["k8s-limits@0123456789ab".to_string()]);
        assert_eq!((r.violations, r.mandatory), (4, 2));
        let got: Vec<(&str, &str, &str, &str)> = r
            .items
            .iter()
            .map(|v| {
                (
                    v.pack.as_str(),
                    v.policy.as_str(),
                    v.urn.as_str(),
                    v.enforcement_level.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "k8s-limits",
                    "deployment-resource-limits",
                    "urn:b",
                    "mandatory"
                ),
                (
                    "k8s-limits",
                    "deployment-resource-limits",
                    DEPLOY,
                    "mandatory"
                ),
                ("k8s-labels", "deployment-team-label", DEPLOY, "advisory"),
                ("k8s-labels", "stack-wide", "", "advisory"),
            ]
        );
        assert_eq!(
            r.items[1].message,
            "Every container of a Deployment has CPU and memory limits. Container \"nginx\" has no \
             cpu or memory limit."
        );
        assert_eq!(r.items[0].message, "red");
        assert_eq!(
            violation_message(&r),
            format!(
                "2 mandatory policy violations: k8s-limits/deployment-resource-limits on urn:b: red; \
                 k8s-limits/deployment-resource-limits on {DEPLOY}: {}",
                r.items[1].message
            )
        );
        let none = from_event_log("", Vec::new());
        assert_eq!(
            (none.violations, none.mandatory, none.items.len()),
            (0, 0, 0)
        );
    }

    #[test]
    fn many_violations_keep_exact_counts() {
        let log: Vec<String> = (0..50)
            .map(|i| {
                event(
                    "p",
                    "q",
                    &format!("urn:{i:02}"),
                    if i % 2 == 0 { "mandatory" } else { "advisory" },
                    "m",
                )
            })
            .collect();
        let r = from_event_log(&log.join("\n"), Vec::new());
        assert_eq!((r.violations, r.mandatory), (50, 25));
        assert_eq!(r.items.len(), MAX_REPORTED_VIOLATIONS);
        assert!(r.items.iter().all(PolicyViolation::is_mandatory));
        let message = violation_message(&r);
        assert!(
            message.starts_with("25 mandatory policy violations: p/q on urn:00: m; "),
            "{message}"
        );
        assert!(message.ends_with("; and 22 more"), "{message}");
    }

    #[test]
    fn messages_are_cut_at_a_character() {
        let long = "é".repeat(400);
        let m = clean_message(&long);
        assert_eq!(m.chars().count(), MAX_VIOLATION_MESSAGE);
        assert!(m.ends_with("é..."));
        assert_eq!(clean_message("  short \n\n  text  "), "short text");
        assert_eq!(
            clean_message("a<{%bold%}>b<{%reset%}>c<{%unterminated"),
            "abc<{%unterminated"
        );
        assert_eq!(cut("abcdef", 5), "ab...");
        assert_eq!(cut("abcde", 5), "abcde");
    }
}
