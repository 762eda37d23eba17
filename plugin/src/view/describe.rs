//! `kubectl pulumi describe`: the chain Stack → its Updates → each Update's Job → its pods,
//! with states, conditions and the last messages, built from the objects as read.

use crate::view::format::{age, short, table, Cell};
use crate::view::history::{history, HistoryRow};
use crate::view::rows::{row, StackRow, Viewed};
use crate::view::terminal::{terminal_safe, terminal_safe_text};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use kube::ResourceExt;
use pulumi_operator_api::names;
use serde::Serialize;

/// One status condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConditionPart {
    /// Its type.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
}

/// One container of a pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPart {
    /// Its name (`bootstrap`, `fetch`, `pulumi`, ...).
    pub name: String,
    /// Whether it is an init container.
    pub init: bool,
    /// `Waiting`, `Running` or `Terminated`, with the reason and exit code.
    pub state: String,
    /// The kubelet's message, if any.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One pod of a Job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PodPart {
    /// Its name.
    pub name: String,
    /// Its phase.
    pub phase: String,
    /// Its containers, init containers first.
    pub containers: Vec<ContainerPart>,
}

/// An Update's Job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobPart {
    /// Its name (the Update's).
    pub name: String,
    /// `Running`, `Succeeded`, `Failed` or `Pending`.
    pub state: String,
    /// Why it failed (its `Failed` condition).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// One Update with its Job and pods.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UpdatePart {
    /// The Update as `history` shows it.
    #[serde(flatten)]
    pub update: HistoryRow,
    /// Its Job, while it exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobPart>,
    /// Its pods, while they exist.
    pub pods: Vec<PodPart>,
}

/// One Event about the Stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventPart {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// When it was last seen (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// Everything `describe` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Chain {
    /// The Stack as `get` shows it.
    pub stack: StackRow,
    /// The Pulumi stack name (`spec.stack`).
    pub pulumi_stack: String,
    /// Where the program comes from.
    pub source: String,
    /// Whether `spec.suspend` is set.
    pub suspended: bool,
    /// The Stack's conditions.
    pub conditions: Vec<ConditionPart>,
    /// Its Updates, oldest first, with their Jobs and pods.
    pub updates: Vec<UpdatePart>,
    /// The last Events about the Stack, oldest first.
    pub events: Vec<EventPart>,
}

/// What `describe` reads.
pub struct Objects<'a> {
    /// The Stack.
    pub stack: &'a Viewed,
    /// Its namespace's Updates labelled with its name.
    pub updates: &'a [pulumi_operator_api::Update],
    /// Jobs labelled with its name.
    pub jobs: &'a [Job],
    /// Pods labelled with its name.
    pub pods: &'a [Pod],
    /// Events about it.
    pub events: &'a [Event],
}

fn source(stack: &pulumi_operator_api::Stack) -> String {
    let spec = &stack.spec;
    if let Some(p) = &spec.program_ref {
        return format!("Program {}", p.name);
    }
    if let Some(f) = &spec.flux_source {
        return format!(
            "{} {} {}",
            f.source_ref.kind,
            f.source_ref.name,
            f.dir.clone().unwrap_or_default()
        );
    }
    let git = &spec.git;
    let at = git
        .commit
        .clone()
        .or_else(|| git.branch.clone().map(|b| format!("branch {b}")));
    let mut s = format!(
        "{} @ {}",
        git.project_repo.clone().unwrap_or_default(),
        at.unwrap_or_default()
    );
    if let Some(dir) = git.repo_dir.as_ref().filter(|d| !d.is_empty()) {
        s.push_str(&format!(" (dir {dir})"));
    }
    s
}

fn container_state(s: &ContainerStatus) -> (String, String) {
    let Some(state) = s.state.as_ref() else {
        return ("Unknown".into(), String::new());
    };
    if let Some(t) = &state.terminated {
        let reason = t.reason.clone().unwrap_or_default();
        // A successful container's termination message is the runner's report: noise here.
        let message = match t.exit_code {
            0 => String::new(),
            _ => t.message.clone().unwrap_or_default(),
        };
        return (
            format!("Terminated {reason} (exit {})", t.exit_code),
            message,
        );
    }
    if let Some(w) = &state.waiting {
        return (
            format!("Waiting {}", w.reason.clone().unwrap_or_default()),
            w.message.clone().unwrap_or_default(),
        );
    }
    ("Running".into(), String::new())
}

fn pod_part(pod: &Pod) -> PodPart {
    let status = pod.status.clone().unwrap_or_default();
    let mut containers = Vec::new();
    let groups = [
        (true, status.init_container_statuses),
        (false, status.container_statuses),
    ];
    for (init, list) in groups {
        for c in list.unwrap_or_default() {
            let (state, message) = container_state(&c);
            containers.push(ContainerPart {
                name: c.name.clone(),
                init,
                state,
                message,
            });
        }
    }
    PodPart {
        name: pod.name_any(),
        phase: status.phase.unwrap_or_default(),
        containers,
    }
}

fn job_part(job: &Job) -> JobPart {
    let status = job.status.clone().unwrap_or_default();
    let failed = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Failed" && c.status == names::STATUS_TRUE);
    let state = match () {
        _ if failed.is_some() => "Failed",
        _ if status.succeeded.unwrap_or(0) > 0 => "Succeeded",
        _ if status.active.unwrap_or(0) > 0 => "Running",
        _ => "Pending",
    };
    let message = failed
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    JobPart {
        name: job.name_any(),
        state: state.into(),
        message,
    }
}

fn event_part(e: &Event) -> EventPart {
    let time = e
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0));
    EventPart {
        kind: e.type_.clone().unwrap_or_default(),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        time: time.map(|t| t.to_string()),
    }
}

/// The chain from the objects read; at most the last `max_events` Events.
pub fn chain(objects: &Objects<'_>, max_events: usize) -> Chain {
    let stack = &objects.stack.stack;
    let uid = stack.uid().unwrap_or_default();
    let updates = history(objects.updates, &uid)
        .into_iter()
        .map(|h| {
            let of_update = |labels: &std::collections::BTreeMap<String, String>| {
                labels.get(names::UPDATE_NAME_LABEL) == Some(&h.name)
            };
            UpdatePart {
                job: objects
                    .jobs
                    .iter()
                    .find(|j| j.name_any() == h.name)
                    .map(job_part),
                pods: objects
                    .pods
                    .iter()
                    .filter(|p| of_update(p.labels()))
                    .map(pod_part)
                    .collect(),
                update: h,
            }
        })
        .collect();
    let mut events: Vec<EventPart> = objects.events.iter().map(event_part).collect();
    events.sort_by(|a, b| a.time.cmp(&b.time));
    let skip = events.len().saturating_sub(max_events);
    let conditions = stack
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    Chain {
        stack: row(objects.stack),
        pulumi_stack: stack.spec.stack.clone(),
        source: source(stack),
        suspended: objects.stack.suspended,
        conditions: conditions
            .into_iter()
            .map(|c| ConditionPart {
                kind: c.type_,
                status: c.status,
                reason: c.reason,
                message: c.message,
            })
            .collect(),
        updates,
        events: events.into_iter().skip(skip).collect(),
    }
}

fn since(time: Option<&str>, now: jiff::Timestamp) -> String {
    time.and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| format!("{} ago", age(now.as_second() - t.as_second())))
        .unwrap_or_else(|| "-".into())
}

/// Multi-line text under a label: escaped ([`terminal_safe_text`]), its lines indented.
fn lines(text: &str, indent: &str) -> String {
    terminal_safe_text(text.trim_end()).replace('\n', &format!("\n{indent}"))
}

fn render_update(u: &UpdatePart, now: jiff::Timestamp, out: &mut String) {
    let e = terminal_safe;
    let h = &u.update;
    let result = if h.reason.is_empty() {
        h.result.as_str().to_string()
    } else {
        format!("{} ({})", h.result.as_str(), e(&h.reason))
    };
    out.push_str(&format!("  {} {} {result}", e(&h.name), e(&h.kind)));
    if h.start_time.is_some() {
        out.push_str(&format!(
            ", started {}",
            since(h.start_time.as_deref(), now)
        ));
    }
    if let Some(d) = h.duration_seconds {
        out.push_str(&format!(", took {}", crate::view::format::duration(d)));
    }
    if !h.revision.is_empty() {
        let revision: String = h.revision.chars().take(12).collect();
        out.push_str(&format!(", revision {}", e(&revision)));
    }
    if !h.note.is_empty() {
        out.push_str(&format!(" [{}]", e(&h.note)));
    }
    out.push('\n');
    if !h.message.is_empty() {
        out.push_str(&format!("    Message: {}\n", lines(&h.message, "      ")));
    }
    match &u.job {
        Some(j) if j.message.is_empty() => {
            out.push_str(&format!("    Job {}: {}\n", e(&j.name), e(&j.state)))
        }
        Some(j) => out.push_str(&format!(
            "    Job {}: {} ({})\n",
            e(&j.name),
            e(&j.state),
            e(&j.message)
        )),
        None => out.push_str(
            "    Job: gone (deleted with its finished Update's TTL, or not created yet)\n",
        ),
    }
    for p in &u.pods {
        out.push_str(&format!("    Pod {}: {}\n", e(&p.name), e(&p.phase)));
        for c in &p.containers {
            let init = if c.init { " (init)" } else { "" };
            let message = if c.message.is_empty() {
                String::new()
            } else {
                format!(": {}", e(&short(&c.message, 100)))
            };
            out.push_str(&format!(
                "      {}{init}: {}{message}\n",
                e(&c.name),
                e(&c.state)
            ));
        }
    }
}

fn render_head(c: &Chain, now: jiff::Timestamp, out: &mut String) {
    let e = terminal_safe;
    let s = &c.stack;
    out.push_str(&format!(
        "Name:        {}\nNamespace:   {}\n",
        e(&s.name),
        e(&s.namespace)
    ));
    out.push_str(&format!(
        "Stack:       {}\nSource:      {}\n",
        e(&c.pulumi_stack),
        e(&c.source)
    ));
    out.push_str(&format!("State:       {}\n", s.state.as_str()));
    if !s.reason.is_empty() {
        out.push_str(&format!("Reason:      {}\n", e(&s.reason)));
    }
    if !s.message.is_empty() {
        out.push_str(&format!(
            "Message:     {}\n",
            lines(&s.message, "             ")
        ));
    }
    if let Some(l) = &s.last_operation {
        let when = since(l.time.as_deref(), now);
        out.push_str(&format!(
            "Last:        {} {} {} ({when})\n",
            e(&l.kind),
            e(&l.name),
            e(&l.state)
        ));
    }
    if let Some(op) = &s.current_operation {
        out.push_str(&format!("Running:     {}\n", e(op)));
    }
}

/// The chain as text.
pub fn render(c: &Chain, now: jiff::Timestamp) -> String {
    let mut out = String::new();
    render_head(c, now, &mut out);
    if !c.conditions.is_empty() {
        out.push_str("Conditions:\n");
        let rows: Vec<Vec<Cell>> = c
            .conditions
            .iter()
            .map(|k| {
                vec![
                    Cell::plain(&k.kind),
                    Cell::plain(&k.status),
                    Cell::plain(&k.reason),
                    Cell::plain(short(&k.message, 100)),
                ]
            })
            .collect();
        let t = table(&["TYPE", "STATUS", "REASON", "MESSAGE"], &rows, false);
        out.push_str(&indent(&t));
    }
    out.push_str(&format!("Updates ({}, oldest first):\n", c.updates.len()));
    if c.updates.is_empty() {
        out.push_str("  none kept\n");
    }
    for u in &c.updates {
        render_update(u, now, &mut out);
    }
    out.push_str("Events:\n");
    if c.events.is_empty() {
        out.push_str("  none (Events are kept for about an hour)\n");
    }
    let rows: Vec<Vec<Cell>> = c
        .events
        .iter()
        .map(|e| {
            vec![
                Cell::plain(&e.kind),
                Cell::plain(&e.reason),
                Cell::plain(since(e.time.as_deref(), now)),
                Cell::plain(short(&e.message, 120)),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&indent(&table(
            &["TYPE", "REASON", "AGE", "MESSAGE"],
            &rows,
            false,
        )));
    }
    out
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects() -> (
        Viewed,
        Vec<pulumi_operator_api::Update>,
        Vec<Job>,
        Vec<Pod>,
        Vec<Event>,
    ) {
        let stack = Viewed::from_json(json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "app", "namespace": "team", "uid": "u-1", "generation": 1},
            "spec": {"stack": "dev", "projectRepo": "https://git.example/app.git", "commit": "abc", "repoDir": "infra"},
            "status": {"observedGeneration": 1, "currentUpdate": {"name": "app-2"},
                       "conditions": [{"type": "Reconciling", "status": "True", "reason": "StackProcessing",
                                       "message": "stack is being processed", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        })).expect("stack");
        let owner = json!([{"apiVersion": "pulumi.com/v1", "kind": "Stack", "name": "app", "uid": "u-1", "controller": true}]);
        let update: pulumi_operator_api::Update = serde_json::from_value(json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {"name": "app-2", "namespace": "team", "ownerReferences": owner},
            "spec": {"type": "up"},
            "status": {"startTime": "2026-01-01T00:59:00Z",
                       "conditions": [{"type": "Progressing", "status": "True", "reason": "Progressing", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        })).expect("update");
        let job: Job =
            serde_json::from_value(json!({"metadata": {"name": "app-2"}, "status": {"active": 1}}))
                .expect("job");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "app-2-x", "labels": {"auto.pulumi.com/update-name": "app-2"}},
            "status": {"phase": "Pending",
                "initContainerStatuses": [
                    {"name": "bootstrap", "image": "r", "imageID": "", "ready": true, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                    {"name": "fetch", "image": "r", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"running": {}}}],
                "containerStatuses": [{"name": "pulumi", "image": "p", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "PodInitializing"}}}]},
        })).expect("pod");
        let event: Event = serde_json::from_value(json!({
            "metadata": {"name": "e1"}, "involvedObject": {"kind": "Stack", "name": "app"},
            "type": "Normal", "reason": "StackUpdateDetected", "message": "Initial stack update",
            "lastTimestamp": "2026-01-01T00:58:00Z"}))
        .expect("event");
        (stack, vec![update], vec![job], vec![pod], vec![event])
    }

    #[test]
    fn the_chain_links_stack_updates_jobs_and_pods() {
        let (stack, updates, jobs, pods, events) = objects();
        let c = chain(
            &Objects {
                stack: &stack,
                updates: &updates,
                jobs: &jobs,
                pods: &pods,
                events: &events,
            },
            10,
        );
        assert_eq!(c.source, "https://git.example/app.git @ abc (dir infra)");
        assert_eq!(c.updates.len(), 1);
        assert_eq!(
            c.updates[0].job.as_ref().map(|j| j.state.as_str()),
            Some("Running")
        );
        assert_eq!(c.updates[0].pods[0].containers.len(), 3);
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().expect("time");
        let text = render(&c, now);
        for want in [
            "State:       Reconciling\n",
            "Running:     app-2\n",
            "  app-2 up Running, started 60s ago\n",
            "    Job app-2: Running\n",
            "    Pod app-2-x: Pending\n",
            "      bootstrap (init): Terminated Completed (exit 0)\n",
            "      pulumi: Waiting PodInitializing\n",
            "  Normal   StackUpdateDetected   2m ago   Initial stack update\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        let json = serde_json::to_value(&c).expect("json");
        assert_eq!(json["updates"][0]["name"], "app-2");
        assert_eq!(json["updates"][0]["job"]["state"], "Running");
    }

    #[test]
    fn messages_from_the_cluster_are_shown_escaped() {
        let (mut stack, mut updates, jobs, mut pods, mut events) = objects();
        let hide = "\x1b[2K\r\x1b[1A";
        let status = stack.stack.status.get_or_insert_with(Default::default);
        status.current_update =
            Some(serde_json::from_value(json!({"name": format!("app-2{hide}")})).expect("current"));
        if let Some(c) = status.conditions.as_mut().and_then(|c| c.first_mut()) {
            c.message = format!("busy{hide}\u{202e}");
        }
        if let Some(s) = updates[0].status.as_mut() {
            s.message = Some(format!("failed:\n  delete db{hide}\n\u{9b}2Kdone"));
        }
        events[0].message = Some("\x1b]8;;https://x.example/\x07click\x1b]8;;\x07".into());
        let waiting = json!({"waiting": {"reason": format!("Err{hide}"), "message": "m\u{200b}"}});
        let pod_status = pods[0].status.get_or_insert_with(Default::default);
        if let Some(c) = pod_status
            .container_statuses
            .as_mut()
            .and_then(|c| c.first_mut())
        {
            c.state = Some(serde_json::from_value(waiting).expect("state"));
        }
        let c = chain(
            &Objects {
                stack: &stack,
                updates: &updates,
                jobs: &jobs,
                pods: &pods,
                events: &events,
            },
            10,
        );
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().expect("time");
        let text = render(&c, now);
        for want in [
            "Running:     app-2\\x1b[2K\\r\\x1b[1A\n",
            "busy\\x1b[2K\\r\\x1b[1A\\u{202e}\n",
            "    Message: failed:\n        delete db\\x1b[2K\\r\\x1b[1A\n      \\u{9b}2Kdone\n",
            "      pulumi: Waiting Err\\x1b[2K\\r\\x1b[1A: m\\u{200b}\n",
            "\\x1b]8;;https://x.example/\\x07click\\x1b]8;;\\x07\n",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        for bad in ['\x1b', '\r', '\x07', '\u{9b}', '\u{202e}', '\u{200b}'] {
            assert!(!text.contains(bad), "{bad:?} in:\n{text}");
        }
    }

    #[test]
    fn a_gone_job_and_few_events() {
        let (stack, updates, _, _, events) = objects();
        let c = chain(
            &Objects {
                stack: &stack,
                updates: &updates,
                jobs: &[],
                pods: &[],
                events: &events,
            },
            0,
        );
        assert!(c.events.is_empty());
        let now: jiff::Timestamp = "2026-01-01T01:00:00Z".parse().expect("time");
        assert!(render(&c, now).contains("Job: gone"));
    }
}
