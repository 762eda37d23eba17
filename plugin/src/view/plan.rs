//! A saved plan (a Stack with `spec.approval`), summarized: per resource, what the approved
//! `up` would do (create, update, replace, delete) with the resource's type and name. Read
//! from the saved plan itself (the Pulumi plan file in the Secret `<plan>-saved-plan`, all
//! resources) or, without the right to read Secrets, from `status.approval` (at most 20).

use crate::view::format::{table, Cell, Color};
use crate::view::terminal::terminal_safe;
use pulumi_operator_api::{ApprovalStatus, ResourceChange};
use serde::Serialize;
use std::collections::BTreeMap;

/// The operations that change something, in the order they are shown.
pub use pulumi_operator_api::names::PLAN_OPERATIONS as OPERATIONS;

/// One resource the plan changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedChange {
    /// `create`, `update`, `replace` or `delete`.
    pub operation: String,
    /// The resource type, e.g. `kubernetes:core/v1:ConfigMap`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The resource's name in the program.
    pub name: String,
    /// Its URN.
    pub urn: String,
}

/// The type and name of a resource from its URN
/// (`urn:pulumi:<stack>::<project>::<parent$…$type>::<name>`).
pub fn urn_parts(urn: &str) -> (String, String) {
    let parts: Vec<&str> = urn.splitn(4, "::").collect();
    match parts.as_slice() {
        [_, _, qualified, name] => {
            let kind = qualified.rsplit('$').next().unwrap_or(qualified);
            (kind.to_string(), name.to_string())
        }
        _ => (String::new(), urn.to_string()),
    }
}

/// One change from a URN and an operation.
pub fn change(urn: &str, operation: &str) -> PlannedChange {
    let (kind, name) = urn_parts(urn);
    PlannedChange {
        operation: operation.to_string(),
        kind,
        name,
        urn: urn.to_string(),
    }
}

/// The change one resource plan's steps make (`None`: it stays as it is). A replacement's
/// steps (`create-replacement`, `delete-replaced`, ...) are one `replace`.
fn operation_of(steps: &[&str]) -> Option<&'static str> {
    let replace = [
        "replace",
        "create-replacement",
        "delete-replaced",
        "discard-replaced",
    ];
    if steps.iter().any(|s| replace.contains(s)) {
        return Some("replace");
    }
    ["create", "update", "delete"]
        .into_iter()
        .find(|op| steps.contains(op))
}

/// A provider Pulumi creates by itself (`pulumi:providers:<pkg>::default[_<version>]`): the
/// plan lists it, Pulumi's preview (and so the operator's counts) does not.
fn is_default_provider(c: &PlannedChange) -> bool {
    c.kind.starts_with("pulumi:providers:") && c.name.starts_with("default")
}

/// The changes in a Pulumi plan file (`pulumi preview --save-plan`): its `resourcePlans`,
/// by URN, each with the `steps` the `up` may take.
pub fn changes_from_plan_file(text: &str) -> Result<Vec<PlannedChange>, String> {
    let plan: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the saved plan is not JSON: {e}"))?;
    let Some(resources) = plan.get("resourcePlans").and_then(|r| r.as_object()) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<PlannedChange> = resources
        .iter()
        .filter_map(|(urn, rp)| {
            let steps: Vec<&str> = rp
                .get("steps")
                .and_then(|s| s.as_array())
                .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
                .unwrap_or_default();
            operation_of(&steps).map(|op| change(urn, op))
        })
        .filter(|c| !is_default_provider(c))
        .collect();
    sort(&mut out);
    Ok(out)
}

fn sort(changes: &mut [PlannedChange]) {
    let rank = |op: &str| {
        OPERATIONS
            .iter()
            .position(|o| *o == op)
            .unwrap_or(OPERATIONS.len())
    };
    changes.sort_by(|a, b| {
        (rank(&a.operation), &a.kind, &a.name).cmp(&(rank(&b.operation), &b.kind, &b.name))
    });
}

/// The changes `status.approval` lists (at most 20).
pub fn changes_from_status(resources: &[ResourceChange]) -> Vec<PlannedChange> {
    let mut out: Vec<PlannedChange> = resources
        .iter()
        .map(|r| change(&r.urn, &r.operation))
        .collect();
    sort(&mut out);
    out
}

/// Counts per operation.
pub fn counts(changes: &[PlannedChange]) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for c in changes {
        *out.entry(c.operation.clone()).or_insert(0) += 1;
    }
    out
}

pub use pulumi_operator_api::names::change_summary as count_line;

/// A plan as `kubectl pulumi plan` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanView {
    /// The Stack.
    pub stack: String,
    /// The Stack's namespace.
    pub namespace: String,
    /// The plan's id (the preview Update's name): what `approve --plan` takes.
    pub plan: String,
    /// `AwaitingApproval`, `Applying` or `Applied`.
    pub state: String,
    /// When it was saved (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_time: Option<String>,
    /// The source revision it was made for.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// The Stack generation it was made for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// How many resources it creates, updates, replaces and deletes.
    pub counts: BTreeMap<String, i64>,
    /// The resources it changes.
    pub changes: Vec<PlannedChange>,
    /// Whether `changes` is every change (read from the saved plan) or the first ones the
    /// status lists.
    pub complete: bool,
    /// The last approval that was refused (it named another plan).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub refused: String,
}

/// The plan view from `status.approval`, with the saved plan's changes when they could be read.
pub fn plan_view(
    stack: &str,
    namespace: &str,
    approval: &ApprovalStatus,
    from_file: Option<Vec<PlannedChange>>,
) -> PlanView {
    let complete = from_file.is_some();
    let changes = from_file.unwrap_or_else(|| changes_from_status(&approval.resources));
    let counts = if complete || approval.changes.is_empty() {
        counts(&changes)
    } else {
        approval.changes.clone()
    };
    PlanView {
        stack: stack.to_string(),
        namespace: namespace.to_string(),
        plan: approval.plan.clone().unwrap_or_default(),
        state: approval
            .state
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        planned_time: approval.planned_time.as_ref().map(|t| t.0.to_string()),
        revision: approval.revision.clone().unwrap_or_default(),
        generation: approval.generation,
        counts,
        changes,
        complete,
        refused: approval.refused.clone().unwrap_or_default(),
    }
}

fn op_color(op: &str) -> Option<Color> {
    match op {
        "create" => Some(Color::Green),
        "update" | "replace" => Some(Color::Yellow),
        "delete" => Some(Color::Red),
        _ => None,
    }
}

/// The plan as text: what it is, its counts, one line per resource, and what to run next.
/// What comes from the cluster or the program (the plan's id, revision, each resource's
/// operation, type and name) is shown escaped ([`terminal_safe`]).
pub fn render(view: &PlanView, color: bool) -> String {
    let e = terminal_safe;
    let mut out = format!("Stack:     {}/{}\n", e(&view.namespace), e(&view.stack));
    out.push_str(&format!("Plan:      {}\n", e(&view.plan)));
    out.push_str(&format!("State:     {}\n", e(&view.state)));
    if let Some(t) = &view.planned_time {
        out.push_str(&format!("Planned:   {}\n", e(t)));
    }
    if !view.revision.is_empty() {
        out.push_str(&format!("Revision:  {}\n", e(&view.revision)));
    }
    out.push_str(&format!("Changes:   {}\n", count_line(&view.counts)));
    if !view.refused.is_empty() {
        out.push_str(&format!(
            "Refused:   an approval of \"{}\" (not this plan)\n",
            e(&view.refused)
        ));
    }
    if !view.changes.is_empty() {
        out.push('\n');
        let rows: Vec<Vec<Cell>> = view
            .changes
            .iter()
            .map(|c| {
                vec![
                    Cell::colored(&c.operation, op_color(&c.operation)),
                    Cell::plain(&c.kind),
                    Cell::plain(&c.name),
                ]
            })
            .collect();
        out.push_str(&table(&["OPERATION", "TYPE", "NAME"], &rows, color));
    }
    let listed: i64 = view.changes.len() as i64;
    let total: i64 = OPERATIONS.iter().filter_map(|o| view.counts.get(*o)).sum();
    if !view.complete && listed < total {
        out.push_str(&format!(
            "(the first {listed} of {total} changes, from the Stack's status: reading the saved plan \
             Secret {} needs `get secrets`)\n",
            e(&pulumi_operator_api::names::saved_plan_secret_name(&view.plan))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const URN: &str = "urn:pulumi:dev::e2e::kubernetes:core/v1:ConfigMap::settings";

    #[test]
    fn urns_split_into_type_and_name() {
        assert_eq!(
            urn_parts(URN),
            ("kubernetes:core/v1:ConfigMap".into(), "settings".into())
        );
        assert_eq!(
            urn_parts("urn:pulumi:dev::p::my:comp:Comp$standin:index:Record::a::b"),
            ("standin:index:Record".into(), "a::b".into())
        );
        assert_eq!(urn_parts("not-a-urn"), (String::new(), "not-a-urn".into()));
    }

    #[test]
    fn a_plan_file_gives_one_change_per_resource() {
        let plan = json!({
            "manifest": {"time": "2026-01-01T00:00:00Z"},
            "resourcePlans": {
                URN: {"steps": ["create"], "goal": {}},
                "urn:pulumi:dev::e2e::standin:index:Record::kept": {"steps": ["same"]},
                "urn:pulumi:dev::e2e::standin:index:Record::gone": {"steps": ["delete"]},
                "urn:pulumi:dev::e2e::standin:index:Record::swap": {"steps": ["create-replacement", "replace", "delete-replaced"]},
                "urn:pulumi:dev::e2e::standin:index:Record::edit": {"steps": ["update"]},
                "urn:pulumi:dev::e2e::standin:index:Record::read": {"steps": ["read"]},
                "urn:pulumi:dev::e2e::pulumi:providers:standin::default": {"steps": ["create"]},
                "urn:pulumi:dev::e2e::pulumi:providers:aws::mine": {"steps": ["create"]},
            }
        });
        let changes = changes_from_plan_file(&plan.to_string()).expect("parses");
        let summary: Vec<(&str, &str)> = changes
            .iter()
            .map(|c| (c.operation.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("create", "settings"),
                ("create", "mine"),
                ("update", "edit"),
                ("replace", "swap"),
                ("delete", "gone")
            ]
        );
        assert_eq!(
            count_line(&counts(&changes)),
            "2 to create, 1 to update, 1 to replace, 1 to delete"
        );
        assert!(changes_from_plan_file("{}").expect("empty").is_empty());
        assert!(changes_from_plan_file("nope").is_err());
    }

    fn approval() -> ApprovalStatus {
        serde_json::from_value(json!({
            "plan": "app-plan-abc", "state": "AwaitingApproval", "revision": "0123abcd",
            "plannedTime": "2026-01-01T00:00:00Z", "generation": 2,
            "changes": {"create": 25, "same": 3},
            "resources": [{"urn": URN, "operation": "create"}],
        }))
        .expect("approval")
    }

    #[test]
    fn from_status_the_list_is_partial_and_says_so() {
        let view = plan_view("app", "team", &approval(), None);
        assert!(!view.complete);
        assert_eq!(view.counts["create"], 25);
        let text = render(&view, false);
        assert!(text.contains("Plan:      app-plan-abc\n"), "{text}");
        assert!(text.contains("Changes:   25 to create\n"), "{text}");
        assert!(
            text.contains("create      kubernetes:core/v1:ConfigMap   settings\n"),
            "{text}"
        );
        assert!(text.contains("the first 1 of 25 changes"), "{text}");
        assert!(text.contains("app-plan-abc-saved-plan"), "{text}");
    }

    /// Resources whose URNs would, printed raw, erase the `delete` row (erase line, CR, cursor
    /// up), hide behind a hyperlink, read reversed (U+202E) or erase with an 8-bit CSI.
    const HOSTILE: [&str; 4] = [
        "urn:pulumi:dev::e2e::standin:index:Record::db\x1b[2K\r\x1b[1A",
        "urn:pulumi:dev::e2e::standin:index:Record::\x1b]8;;https://x.example/\x07ok\x1b]8;;\x07",
        "urn:pulumi:dev::e2e::standin:index:Record\u{202e}::logs",
        "urn:pulumi:dev::e2e::standin:index:Record::c\u{9b}2K",
    ];

    /// No escape sequence, CR, C1 control or bidi override but the colours `render` adds.
    fn assert_inert(text: &str) {
        let plain = ["31", "32", "33", "0"]
            .iter()
            .fold(text.to_string(), |t, c| {
                t.replace(&format!("\x1b[{c}m"), "")
            });
        for bad in ['\x1b', '\r', '\u{9b}', '\u{202e}', '\x07'] {
            assert!(!plain.contains(bad), "{bad:?} in:\n{text}");
        }
    }

    #[test]
    fn a_hostile_urn_cannot_hide_a_delete() {
        let steps: serde_json::Map<String, serde_json::Value> = HOSTILE
            .iter()
            .map(|u| (u.to_string(), json!({"steps": ["delete"]})))
            .chain([(URN.to_string(), json!({"steps": ["create"]}))])
            .collect();
        let file = json!({"resourcePlans": steps}).to_string();
        let changes = changes_from_plan_file(&file).expect("parses");
        let view = plan_view("app", "team", &approval(), Some(changes));
        let text = render(&view, false);
        for row in [
            "delete      standin:index:Record           db\\x1b[2K\\r\\x1b[1A\n",
            "delete      standin:index:Record           \\x1b]8;;https://x.example/\\x07ok\\x1b]8;;\\x07\n",
            "delete      standin:index:Record           c\\u{9b}2K\n",
            "delete      standin:index:Record\\u{202e}   logs\n",
        ] {
            assert!(text.contains(row), "missing {row:?} in:\n{text}");
        }
        assert!(
            text.contains("Changes:   1 to create, 4 to delete\n"),
            "{text}"
        );
        assert_inert(&text);
        // On a terminal (colours on) as `plan` and `approve` print it.
        let colored = render(&view, true);
        assert!(colored.contains("\x1b[31mdelete\x1b[0m"), "{colored}");
        assert_inert(&colored);
        // The JSON output keeps the URN as it is (serde escapes it).
        let json = serde_json::to_string(&view).expect("json");
        assert!(json.contains("db\\u001b[2K\\r\\u001b[1A"), "{json}");
    }

    #[test]
    fn from_the_status_a_hostile_urn_and_plan_id_are_escaped() {
        let mut a = approval();
        a.plan = Some("p1\x1b[2K\rp2".into());
        a.resources =
            vec![
                serde_json::from_value(json!({"urn": HOSTILE[0], "operation": "delete"}))
                    .expect("a resource change"),
            ];
        let text = render(&plan_view("app", "team", &a, None), false);
        assert!(
            text.contains("delete      standin:index:Record   db\\x1b[2K\\r\\x1b[1A\n"),
            "{text}"
        );
        assert!(text.contains("Plan:      p1\\x1b[2K\\rp2\n"), "{text}");
        assert_inert(&text);
    }

    #[test]
    fn from_the_saved_plan_the_list_is_complete() {
        let file = vec![change(URN, "create"), change(URN, "delete")];
        let view = plan_view("app", "team", &approval(), Some(file));
        assert!(view.complete);
        assert_eq!(count_line(&view.counts), "1 to create, 1 to delete");
        let text = render(&view, false);
        assert!(!text.contains("the first"), "{text}");
        let json = serde_json::to_value(&view).expect("json");
        assert_eq!(json["changes"][1]["type"], "kubernetes:core/v1:ConfigMap");
        assert_eq!(json["plan"], "app-plan-abc");
    }
}
