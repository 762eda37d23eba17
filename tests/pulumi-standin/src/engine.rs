//! `preview`, `up`, `refresh` and `destroy`: planning by diffing program inputs with state,
//! executing steps with the stand-in resource providers, state journaling (pending operations),
//! locking, the human-readable display, the event log, history and signals.

use crate::backend::{Checkpoint, PendingOp, ResState, Snapshot};
use crate::cli::Parsed;
use crate::crypto::Secrets;
use crate::events::{self, EventLog};
use crate::program::{self, Monitor, RegResult, Registration};
use crate::project::{self, StackFile};
use crate::session::{self, Session};
use crate::util::{self, exit, Failure, Res};
use crate::value::{Show, Val};
use serde_json::{json, Value as J};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    Update,
    Preview,
    Refresh,
    Destroy,
}

impl Op {
    fn noun(self) -> &'static str {
        match self {
            Op::Update | Op::Preview => "update",
            Op::Refresh => "refresh",
            Op::Destroy => "destroy",
        }
    }
}

/// Options of one engine run, from the command's flags.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    pub targets: Vec<String>,
    pub excludes: Vec<String>,
    pub target_dependents: bool,
    pub exclude_dependents: bool,
    pub replaces: Vec<String>,
    pub expect_no_changes: bool,
    pub continue_on_error: bool,
    pub exclude_protected: bool,
    pub clear_pending_creates: bool,
    pub import_pending_creates: Vec<(String, String)>,
    pub refresh: bool,
    pub diff: bool,
    pub json: bool,
    pub suppress_outputs: bool,
    pub suppress_progress: bool,
    pub show_sames: bool,
    pub color: String,
}

fn glob_match(pat: &str, s: &str) -> bool {
    if !pat.contains('*') {
        return pat == s;
    }
    let parts: Vec<&str> = pat.split('*').collect();
    let mut rest = s;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(j) => rest = &rest[j + part.len()..],
                None => return false,
            }
        }
    }
    true
}

fn parse_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Ok(n) = s.parse::<f64>() {
        return Some(n);
    }
    let mut total = 0.0;
    let mut num = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
            i += 1;
            continue;
        }
        let mut unit = String::new();
        while i < chars.len() && chars[i].is_ascii_alphabetic() {
            unit.push(chars[i]);
            i += 1;
        }
        let n: f64 = num.parse().ok()?;
        num.clear();
        total += n * match unit.as_str() {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
    }
    if !num.is_empty() {
        return None;
    }
    Some(total)
}

enum StepFail {
    Failed(String),
    Hard,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Same,
    Create,
    Update,
    Replace,
    Delete,
    Refresh,
}

impl Kind {
    fn op(self) -> &'static str {
        match self {
            Kind::Same => "same",
            Kind::Create => "create",
            Kind::Update => "update",
            Kind::Replace => "replace",
            Kind::Delete => "delete",
            Kind::Refresh => "refresh",
        }
    }
    fn symbol(self) -> &'static str {
        match self {
            Kind::Same | Kind::Refresh => "   ",
            Kind::Create => " + ",
            Kind::Update => " ~ ",
            Kind::Replace => " +-",
            Kind::Delete => " - ",
        }
    }
    fn progress(self) -> (&'static str, &'static str) {
        match self {
            Kind::Same => ("", ""),
            Kind::Create => ("creating", "created"),
            Kind::Update => ("updating", "updated"),
            Kind::Replace => ("replacing", "replaced"),
            Kind::Delete => ("deleting", "deleted"),
            Kind::Refresh => ("refreshing", ""),
        }
    }
}

struct Engine<'a> {
    s: &'a Session,
    secrets: &'a Secrets,
    salt: Option<String>,
    op: Op,
    dry: bool,
    o: &'a Opts,
    log: EventLog,
    quiet: bool,
    old: Snapshot,
    old_by_urn: HashMap<String, ResState>,
    done: Vec<ResState>,
    seen: HashSet<String>,
    deleted: HashSet<String>,
    pending: Vec<PendingOp>,
    changes: BTreeMap<String, i64>,
    diags: Vec<(Option<String>, String, String)>,
    failed: bool,
    cancelled: bool,
    hard: bool,
    notified: usize,
    stack_urn: String,
    targeted: HashSet<String>,
    excluded: HashSet<String>,
    replaced_old: Vec<ResState>,
    steps_json: Vec<J>,
    now: String,
}

fn state_json(r: &ResState) -> J {
    let blind = |m: &BTreeMap<String, Val>| {
        J::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), v.to_json(Show::Blind)))
                .collect(),
        )
    };
    let mut o = json!({
        "type": r.typ, "urn": r.urn, "id": r.id, "parent": r.parent,
        "inputs": blind(&r.inputs), "outputs": blind(&r.outputs), "provider": "",
    });
    if r.custom {
        o["custom"] = J::Bool(true);
    }
    if r.protect {
        o["protect"] = J::Bool(true);
    }
    o
}

fn fmt_val(v: &Val, indent: usize) -> String {
    let pad = " ".repeat(indent);
    match v {
        Val::Secret(_) => "[secret]".into(),
        Val::Unknown => "output<string>".into(),
        Val::Str(s) => format!("{s:?}"),
        Val::Map(m) if m.is_empty() => "{}".into(),
        Val::Map(m) => {
            let w = m.keys().map(|k| k.len()).max().unwrap_or(0);
            let mut out = "{\n".to_string();
            for (k, v) in m {
                out.push_str(&format!(
                    "{pad}    {k}{}: {}\n",
                    " ".repeat(w - k.len()),
                    fmt_val(v, indent + 4)
                ));
            }
            out.push_str(&format!("{pad}}}"));
            out
        }
        Val::List(l) if l.is_empty() => "[]".into(),
        Val::List(l) => {
            let mut out = "[\n".to_string();
            for (i, v) in l.iter().enumerate() {
                out.push_str(&format!("{pad}    [{i}]: {}\n", fmt_val(v, indent + 4)));
            }
            out.push_str(&format!("{pad}]"));
            out
        }
        other => other.interp_string(),
    }
}

impl<'a> Engine<'a> {
    fn say(&self, line: &str) {
        if !self.quiet {
            println!("{line}");
            let _ = std::io::stdout().flush();
        }
    }

    fn diag(&mut self, urn: Option<&str>, severity: &str, msg: &str) {
        let mut d = json!({
            "prefix": format!("{severity}: "),
            "message": format!("{msg}\n"),
            "color": self.o.color,
            "severity": severity,
        });
        if let Some(u) = urn {
            d["urn"] = J::String(u.to_string());
        }
        self.log.emit("diagnosticEvent", d);
        self.diags.push((
            urn.map(str::to_string),
            severity.to_string(),
            msg.to_string(),
        ));
    }

    fn count(&mut self, k: Kind) {
        *self.changes.entry(k.op().to_string()).or_default() += 1;
    }

    fn urn(&self, qualified_type: &str, name: &str) -> String {
        format!(
            "urn:pulumi:{}::{}::{}::{}",
            self.s.stack, self.s.project.name, qualified_type, name
        )
    }

    /// Handles newly arrived signals; returns true once cancellation was requested.
    fn poll_signals(&mut self) -> bool {
        let n = events::signal_count();
        while self.notified < n {
            self.notified += 1;
            let term = events::last_was_sigterm();
            let msg = if self.notified == 1 {
                let mut m = if term {
                    "SIGTERM received; cancelling. If you would like to terminate immediately, send SIGTERM again.".to_string()
                } else {
                    "^C received; cancelling. If you would like to terminate immediately, press ^C again.".to_string()
                };
                if !self.dry {
                    m.push_str("\nNote that terminating immediately may lead to orphaned resources and other inconsistencies.");
                }
                m
            } else {
                self.hard = true;
                if term {
                    "SIGTERM received; terminating".to_string()
                } else {
                    "^C received; terminating".to_string()
                }
            };
            self.say(&msg);
            self.log.emit(
                "stdoutEvent",
                json!({"message": format!("{msg}\n"), "color": self.o.color}),
            );
        }
        if n >= 1 {
            self.cancelled = true;
        }
        n >= 1
    }

    fn persist(&mut self) -> Res<()> {
        if self.dry {
            return Ok(());
        }
        let mut resources = self.done.clone();
        let in_done: HashSet<String> = resources.iter().map(|r| r.urn.clone()).collect();
        for r in &self.old.resources {
            if !self.seen.contains(&r.urn)
                && !self.deleted.contains(&r.urn)
                && !in_done.contains(&r.urn)
            {
                resources.push(r.clone());
            }
        }
        // Keep the stack resource first.
        if let Some(i) = resources.iter().position(|r| r.urn == self.stack_urn) {
            let st = resources.remove(i);
            resources.insert(0, st);
        }
        let snap = Snapshot {
            resources,
            pending: self.pending.clone(),
            metadata: self.old.metadata.clone(),
        };
        let chk = Checkpoint {
            stack: self.s.checkpoint.stack.clone(),
            latest: Some(snap.to_json(self.secrets, self.salt.as_deref())?),
        };
        self.s
            .backend
            .save_checkpoint(&self.s.project.name, &self.s.stack, &chk)
    }

    /// Sleeps as an in-flight step. A first signal lets the step finish (the engine waits for
    /// in-flight steps) unless `abort_on_cancel`, which fails it with `context canceled`; a
    /// second signal is a hard stop.
    fn sleep(&mut self, secs: f64, abort_on_cancel: bool) -> Result<(), StepFail> {
        let end = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
        while Instant::now() < end {
            if self.poll_signals() {
                if self.hard {
                    return Err(StepFail::Hard);
                }
                if abort_on_cancel {
                    return Err(StepFail::Failed("context canceled".into()));
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            std::thread::sleep(left.min(Duration::from_millis(25)));
        }
        Ok(())
    }

    fn fail_phase(inputs: &BTreeMap<String, Val>, phase: &str) -> Option<String> {
        let want = inputs
            .get("phase")
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "create".into());
        if want == phase || want == "always" {
            Some(
                inputs
                    .get("message")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| "standin:index:Fail failed as requested".into()),
            )
        } else {
            None
        }
    }

    fn sleep_secs(typ: &str, inputs: &BTreeMap<String, Val>, phase: &str) -> f64 {
        let keys: &[&str] = match (typ, phase) {
            ("standin:index:Sleep", "create") => &["seconds", "createDuration"],
            ("standin:index:Sleep", "delete") => &["deleteSeconds", "destroyDuration"],
            (_, "create") => &["createDuration"],
            (_, "delete") => &["destroyDuration"],
            _ => &[],
        };
        for k in keys {
            if let Some(v) = inputs.get(*k) {
                let v = v.unsecret();
                let secs = match &v {
                    Val::Num(n) => Some(*n),
                    Val::Str(s) => parse_duration(s),
                    _ => None,
                };
                if let Some(s) = secs {
                    return s;
                }
            }
        }
        0.0
    }

    /// The provider side of a step: returns the new id.
    fn provide(
        &mut self,
        kind: Kind,
        typ: &str,
        inputs: &BTreeMap<String, Val>,
        old_id: &str,
    ) -> Result<String, StepFail> {
        let phase = match kind {
            Kind::Create | Kind::Replace => "create",
            Kind::Update => "update",
            Kind::Delete => "delete",
            _ => return Ok(old_id.to_string()),
        };
        match typ {
            "standin:index:Fail" => {
                if let Some(m) = Self::fail_phase(inputs, phase) {
                    return Err(StepFail::Failed(m));
                }
            }
            "standin:index:Sleep" | "time:Sleep" | "time:index:Sleep" => {
                let secs = Self::sleep_secs(typ, inputs, phase);
                if secs > 0.0 {
                    let abort = inputs
                        .get("abortOnCancel")
                        .map(|v| v.unsecret() == Val::Bool(true))
                        .unwrap_or(false);
                    self.sleep(secs, abort)?;
                }
            }
            _ => {}
        }
        Ok(match phase {
            "create" => {
                if typ.starts_with("time:") {
                    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
                } else {
                    util::hex(&util::random_bytes(4))
                }
            }
            _ => old_id.to_string(),
        })
    }

    fn outputs_for(
        inputs: &BTreeMap<String, Val>,
        secret_outs: &[String],
    ) -> BTreeMap<String, Val> {
        let mut outs = inputs.clone();
        for k in secret_outs {
            if let Some(v) = outs.remove(k) {
                outs.insert(k.clone(), Val::secret(v));
            }
        }
        outs
    }

    fn program_view(r: &ResState) -> BTreeMap<String, Val> {
        let mut m = r.outputs.clone();
        m.insert(
            "id".into(),
            if r.id.is_empty() {
                Val::Unknown
            } else {
                Val::Str(r.id.clone())
            },
        );
        m.insert("urn".into(), Val::Str(r.urn.clone()));
        m
    }

    fn pre_event(
        &mut self,
        kind: Kind,
        old: Option<&ResState>,
        new: Option<&ResState>,
        keys: &[String],
    ) {
        let r = new.or(old).expect("a state");
        let mut md = json!({
            "op": kind.op(), "urn": r.urn, "type": r.typ,
            "old": old.map(state_json).unwrap_or(J::Null),
            "new": new.map(state_json).unwrap_or(J::Null),
            "detailedDiff": J::Null, "provider": "",
        });
        if !keys.is_empty() {
            md["keys"] = json!(keys);
            md["diffs"] = json!(keys);
        }
        if r.typ == "pulumi:pulumi:Stack" {
            md["logical"] = J::Bool(true);
        }
        let mut ev = json!({ "metadata": md });
        if self.dry {
            ev["planning"] = J::Bool(true);
        }
        self.log.emit("resourcePreEvent", ev.clone());
        if self.dry && (kind != Kind::Same || self.o.show_sames) {
            self.steps_json.push(ev["metadata"].clone());
        }
    }

    fn out_event(&mut self, kind: Kind, old: Option<&ResState>, new: Option<&ResState>) {
        let r = new.or(old).expect("a state");
        let mut md = json!({
            "op": kind.op(), "urn": r.urn, "type": r.typ,
            "old": old.map(state_json).unwrap_or(J::Null),
            "new": new.map(state_json).unwrap_or(J::Null),
            "detailedDiff": J::Null, "provider": "",
        });
        if r.typ == "pulumi:pulumi:Stack" {
            md["logical"] = J::Bool(true);
        }
        let mut ev = json!({ "metadata": md });
        if self.dry {
            ev["planning"] = J::Bool(true);
        }
        self.log.emit("resOutputsEvent", ev);
    }

    fn line(&self, kind: Kind, typ: &str, name: &str, what: &str) {
        if kind == Kind::Same && !self.o.show_sames {
            return;
        }
        self.say(&format!("{} {typ} {name} {what}", kind.symbol()));
    }

    fn show_diff(&self, old: &ResState, new_inputs: &BTreeMap<String, Val>, keys: &[String]) {
        if !self.o.diff {
            return;
        }
        for k in keys {
            let before = old.inputs.get(k).map(|v| fmt_val(v, 8));
            let after = new_inputs.get(k).map(|v| fmt_val(v, 8));
            let l = match (before, after) {
                (Some(b), Some(a)) => format!("      ~ {k}: {b} => {a}"),
                (None, Some(a)) => format!("      + {k}: {a}"),
                (Some(b), None) => format!("      - {k}: {b}"),
                _ => continue,
            };
            self.say(&l);
        }
    }

    /// Runs one step with display, events, journaling and failure handling.
    fn step(
        &mut self,
        kind: Kind,
        old: Option<&ResState>,
        new: Option<ResState>,
        keys: &[String],
    ) -> Result<Option<ResState>, StepFail> {
        let r = new.as_ref().or(old).expect("state").clone();
        let name = r.name().to_string();
        self.pre_event(kind, old, new.as_ref(), keys);
        let (ing, ed) = kind.progress();
        if self.dry {
            self.line(kind, &r.typ, &name, kind.op());
            if let (Some(o), Kind::Update | Kind::Replace) = (old, kind) {
                self.show_diff(o, &r.inputs, keys);
            }
            self.count(kind);
            self.out_event(kind, old, new.as_ref());
            return Ok(new);
        }
        if kind == Kind::Same {
            self.count(kind);
            self.out_event(kind, old, new.as_ref());
            return Ok(new);
        }
        let started = Instant::now();
        if !self.o.suppress_progress {
            let diff = if kind == Kind::Update && !keys.is_empty() {
                format!(" [diff: ~{}]", keys.join(","))
            } else {
                String::new()
            };
            self.line(kind, &r.typ, &name, &format!("{ing} (0s){diff}"));
        }
        if let (Some(o), Kind::Update | Kind::Replace) = (old, kind) {
            self.show_diff(o, &r.inputs, keys);
        }
        // Journal the pending operation before calling the provider.
        let pending_kind = match kind {
            Kind::Create | Kind::Replace => "creating",
            Kind::Update => "updating",
            Kind::Delete => "deleting",
            _ => "reading",
        };
        if r.custom {
            self.pending.push(PendingOp {
                resource: r.clone(),
                kind: pending_kind.into(),
            });
            self.persist()
                .map_err(|e| StepFail::Failed(e.to_string()))?;
        }
        let result = if r.custom {
            let old_id = old.map(|o| o.id.clone()).unwrap_or_default();
            let inputs = if kind == Kind::Delete {
                &old.expect("old").inputs
            } else {
                &r.inputs
            };
            self.provide(kind, &r.typ.clone(), &inputs.clone(), &old_id)
        } else {
            Ok(String::new())
        };
        match result {
            Err(StepFail::Hard) => Err(StepFail::Hard),
            Err(StepFail::Failed(msg)) => {
                if r.custom {
                    self.pending.pop();
                }
                self.diag(Some(&r.urn), "error", &msg);
                self.log.emit(
                    "resOpFailedEvent",
                    json!({"metadata": {"op": kind.op(), "urn": r.urn, "type": r.typ, "old": old.map(state_json).unwrap_or(J::Null), "new": new.as_ref().map(state_json).unwrap_or(J::Null), "detailedDiff": J::Null, "provider": ""}, "status": 0, "steps": 1}),
                );
                self.say(&format!(
                    "{} {} {name} {ing} failed error: {msg}",
                    kind.symbol(),
                    r.typ
                ));
                self.failed = true;
                let _ = self.persist();
                Err(StepFail::Failed(msg))
            }
            Ok(id) => {
                if r.custom {
                    self.pending.pop();
                }
                let mut done = new.clone();
                if let Some(d) = &mut done {
                    d.id = id;
                    d.modified = self.now.clone();
                }
                let secs = started.elapsed().as_secs_f64();
                if !self.o.suppress_progress {
                    self.line(kind, &r.typ, &name, &format!("{ed} ({secs:.2}s)"));
                }
                self.count(kind);
                self.out_event(kind, old, done.as_ref());
                Ok(done)
            }
        }
    }

    fn is_targeted(&mut self, urn: &str, deps: &[String]) -> bool {
        let mut ok = true;
        if !self.o.targets.is_empty() {
            ok = self.o.targets.iter().any(|t| glob_match(t, urn))
                || (self.o.target_dependents && deps.iter().any(|d| self.targeted.contains(d)));
        }
        if ok && !self.o.excludes.is_empty() {
            let ex = self.o.excludes.iter().any(|t| glob_match(t, urn))
                || (self.o.exclude_dependents && deps.iter().any(|d| self.excluded.contains(d)));
            if ex {
                self.excluded.insert(urn.to_string());
                ok = false;
            }
        }
        if ok {
            self.targeted.insert(urn.to_string());
        }
        ok
    }

    fn delete_one(&mut self, r: &ResState) -> Result<bool, StepFail> {
        if r.protect {
            if self.op == Op::Destroy && self.o.exclude_protected {
                return Ok(false);
            }
            let msg = format!(
                "unable to delete resource \"{}\"\nas it is currently marked for protection. To unprotect the resource, remove the `protect` flag from the resource in your Pulumi program and run `pulumi up`, or use the command:\n`pulumi state unprotect '{}'`",
                r.urn, r.urn
            );
            self.diag(Some(&r.urn), "error", &msg);
            self.failed = true;
            return Err(StepFail::Failed(msg));
        }
        if r.retain_on_delete && !self.dry {
            self.pre_event(Kind::Delete, Some(r), None, &[]);
            self.count(Kind::Delete);
            self.deleted.insert(r.urn.clone());
            self.out_event(Kind::Delete, Some(r), None);
            let _ = self.persist();
            return Ok(true);
        }
        self.step(Kind::Delete, Some(r), None, &[])?;
        self.deleted.insert(r.urn.clone());
        self.done.retain(|d| d.urn != r.urn);
        let _ = self.persist();
        Ok(true)
    }

    fn print_pending_warning(&mut self) {
        if self.old.pending.is_empty() {
            return;
        }
        let mut msg = format!(
            "Attempting to deploy or update resources with {} pending operations from previous deployment.",
            self.old.pending.len()
        );
        for p in &self.old.pending {
            msg.push_str(&format!(
                "\n  * {}, interrupted while {}",
                p.resource.urn, p.kind
            ));
        }
        msg.push_str("\nThese resources are in an unknown state because the Pulumi CLI was interrupted while waiting for changes to these resources to complete. You should confirm whether or not the operations listed completed successfully by checking the state of the appropriate provider. For example, if you are using AWS, you can confirm using the AWS Console.\n\nOnce you have confirmed the status of the interrupted operations, you can repair your stack using `pulumi refresh` which will refresh the state from the provider you are using and clear the pending operations if there are any.\n\nNote that `pulumi refresh` will need to be run interactively to clear pending CREATE operations.");
        self.diag(None, "warning", &msg);
    }
}

impl Monitor for Engine<'_> {
    fn register(&mut self, reg: Registration) -> RegResult {
        if self.poll_signals() {
            return RegResult::Stop;
        }
        let parent_urn = reg
            .options
            .parent
            .clone()
            .unwrap_or_else(|| self.stack_urn.clone());
        let qualified = if parent_urn == self.stack_urn {
            reg.typ.clone()
        } else {
            let ptype = parent_urn.split("::").nth(2).unwrap_or_default();
            format!("{ptype}${}", reg.typ)
        };
        let urn = self.urn(&qualified, &reg.name);
        if !self.seen.insert(urn.clone()) {
            self.diag(
                Some(&urn),
                "error",
                &format!("Duplicate resource URN '{urn}'; try giving it a unique name"),
            );
            self.failed = true;
            return RegResult::Stop;
        }
        let mut deps = reg.dependencies.clone();
        for d in &reg.options.depends_on {
            if !deps.contains(d) {
                deps.push(d.clone());
            }
        }
        let old = self.old_by_urn.get(&urn).cloned();
        if !self.is_targeted(&urn, &deps) {
            return match old {
                Some(o) => {
                    self.done.push(o.clone());
                    RegResult::Ok(Self::program_view(&o))
                }
                None => RegResult::Skipped,
            };
        }
        let mut inputs = reg.inputs.clone();
        if let Some(o) = &old {
            for k in &reg.options.ignore_changes {
                match o.inputs.get(k) {
                    Some(v) => inputs.insert(k.clone(), v.clone()),
                    None => inputs.remove(k),
                };
            }
        }
        let mut new = ResState {
            urn: urn.clone(),
            typ: reg.typ.clone(),
            custom: true,
            id: old.as_ref().map(|o| o.id.clone()).unwrap_or_default(),
            parent: parent_urn,
            protect: reg.options.protect,
            retain_on_delete: reg.options.retain_on_delete,
            outputs: Self::outputs_for(&inputs, &reg.options.additional_secret_outputs),
            inputs,
            dependencies: deps,
            created: old
                .as_ref()
                .map(|o| o.created.clone())
                .unwrap_or_else(|| self.now.clone()),
            modified: old
                .as_ref()
                .map(|o| o.modified.clone())
                .unwrap_or_else(|| self.now.clone()),
        };
        let (kind, keys) = match &old {
            None => (Kind::Create, vec![]),
            Some(o) => {
                let mut keys: Vec<String> = o
                    .inputs
                    .keys()
                    .chain(new.inputs.keys())
                    .filter(|k| {
                        o.inputs.get(*k).map(Val::unsecret) != new.inputs.get(*k).map(Val::unsecret)
                    })
                    .cloned()
                    .collect();
                keys.sort();
                keys.dedup();
                let forced = self.o.replaces.iter().any(|t| glob_match(t, &urn));
                let roc = &reg.options.replace_on_changes;
                let replace = forced
                    || keys.iter().any(|k| roc.iter().any(|r| r == "*" || r == k))
                    || (reg.typ.starts_with("time:") || reg.typ == "standin:index:Sleep")
                        && keys.iter().any(|k| k == "triggers");
                if replace {
                    (Kind::Replace, keys)
                } else if !keys.is_empty() {
                    (Kind::Update, keys)
                } else {
                    (Kind::Same, keys)
                }
            }
        };
        if self.dry && matches!(kind, Kind::Create | Kind::Replace) {
            new.id.clear();
        }
        if kind == Kind::Same {
            if let Some(o) = &old {
                new.outputs = o.outputs.clone();
                for k in &reg.options.additional_secret_outputs {
                    if let Some(v) = new.outputs.remove(k) {
                        new.outputs.insert(k.clone(), Val::secret(v));
                    }
                }
            }
        }
        if kind == Kind::Replace {
            if let Some(o) = old.as_ref().filter(|o| o.protect) {
                let msg = format!(
                    "unable to replace resource \"{}\"\nas it is currently marked for protection. To unprotect the resource, remove the `protect` flag from the resource in your Pulumi program and run `pulumi up`, or use the command:\n`pulumi state unprotect '{}'`",
                    o.urn, o.urn
                );
                self.diag(Some(&o.urn), "error", &msg);
                self.failed = true;
                self.done.push(o.clone());
                return self.after_failure(StepFail::Failed(msg));
            }
        }
        if kind == Kind::Replace && reg.options.delete_before_replace && !self.dry {
            if let Some(o) = &old {
                if let Err(e) = self.delete_one(o) {
                    return self.after_failure(e);
                }
                self.deleted.remove(&urn);
            }
        }
        match self.step(kind, old.as_ref(), Some(new), &keys) {
            Ok(Some(st)) => {
                if kind == Kind::Replace && !reg.options.delete_before_replace {
                    if let Some(o) = old {
                        self.replaced_old.push(o);
                    }
                }
                let view = Self::program_view(&st);
                self.done.push(st);
                if let Err(e) = self.persist() {
                    self.diag(None, "error", &e.to_string());
                    return RegResult::Stop;
                }
                RegResult::Ok(view)
            }
            Ok(None) => RegResult::Skipped,
            Err(e) => {
                // A failed update keeps the old state.
                if let Some(o) = old {
                    self.done.push(o);
                }
                self.after_failure(e)
            }
        }
    }
}

impl Engine<'_> {
    fn after_failure(&mut self, e: StepFail) -> RegResult {
        match e {
            StepFail::Hard => RegResult::Stop,
            StepFail::Failed(_) if self.o.continue_on_error && !self.cancelled => RegResult::Failed,
            StepFail::Failed(_) => RegResult::Stop,
        }
    }
}

/// Outcome of one engine run.
type Diags = Vec<(Option<String>, String, String)>;
type EngineRun = (Outcome, EventLog, Diags, Vec<J>);

struct Outcome {
    changes: BTreeMap<String, i64>,
    failed: bool,
    cancelled: bool,
    hard: bool,
    outputs: Option<BTreeMap<String, Val>>,
    old_outputs: BTreeMap<String, Val>,
}

#[allow(clippy::too_many_arguments)]
fn run_engine(
    s: &Session,
    secrets: &Secrets,
    config: &BTreeMap<String, Val>,
    op: Op,
    dry: bool,
    o: &Opts,
    log: EventLog,
    quiet: bool,
) -> Res<EngineRun> {
    let old = s.checkpoint.snapshot(Some(secrets))?;
    let stack_name = format!("{}-{}", s.project.name, s.stack);
    let stack_type = "pulumi:pulumi:Stack";
    let stack_urn = format!(
        "urn:pulumi:{}::{}::{stack_type}::{stack_name}",
        s.stack, s.project.name
    );
    let old_outputs = old
        .resources
        .iter()
        .find(|r| r.urn == stack_urn)
        .map(|r| r.outputs.clone())
        .unwrap_or_default();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let mut e = Engine {
        s,
        secrets,
        salt: s.salt(),
        op,
        dry,
        o,
        log,
        quiet,
        old_by_urn: old
            .resources
            .iter()
            .map(|r| (r.urn.clone(), r.clone()))
            .collect(),
        old: old.clone(),
        done: vec![],
        seen: HashSet::new(),
        deleted: HashSet::new(),
        pending: vec![],
        changes: BTreeMap::new(),
        diags: vec![],
        failed: false,
        cancelled: false,
        hard: false,
        notified: 0,
        stack_urn: stack_urn.clone(),
        targeted: HashSet::new(),
        excluded: HashSet::new(),
        replaced_old: vec![],
        steps_json: vec![],
        now,
    };
    // Pending operations from an interrupted deployment.
    match op {
        Op::Refresh => {
            for p in &old.pending {
                if p.kind != "creating" {
                    continue;
                }
                if e.o.clear_pending_creates {
                    continue;
                }
                if let Some((_, id)) =
                    e.o.import_pending_creates
                        .iter()
                        .find(|(u, _)| *u == p.resource.urn)
                {
                    let mut r = p.resource.clone();
                    r.id = id.clone();
                    e.done.push(r);
                    continue;
                }
                e.pending.push(p.clone());
            }
            if !e.pending.is_empty() {
                let msg = format!(
                    "refresh left {} pending create operation(s) in place; in non-interactive mode run `pulumi refresh --clear-pending-creates` or `--import-pending-creates <urn> <id>` to resolve them",
                    e.pending.len()
                );
                e.diag(None, "warning", &msg);
            }
        }
        Op::Update | Op::Preview => {
            e.print_pending_warning();
            e.pending = old
                .pending
                .iter()
                .filter(|p| p.kind == "creating" && !e.o.refresh)
                .cloned()
                .collect();
        }
        Op::Destroy => {
            e.print_pending_warning();
            e.pending = old
                .pending
                .iter()
                .filter(|p| p.kind == "creating")
                .cloned()
                .collect();
        }
    }

    let old_stack = e.old_by_urn.get(&stack_urn).cloned();
    let mut program_outputs = None;
    match op {
        Op::Update | Op::Preview => {
            let mut st = ResState {
                urn: stack_urn.clone(),
                typ: stack_type.into(),
                custom: false,
                id: String::new(),
                parent: String::new(),
                protect: false,
                retain_on_delete: false,
                inputs: BTreeMap::new(),
                outputs: old_outputs.clone(),
                dependencies: vec![],
                created: old_stack
                    .as_ref()
                    .map(|o| o.created.clone())
                    .unwrap_or_else(|| e.now.clone()),
                modified: old_stack
                    .as_ref()
                    .map(|o| o.modified.clone())
                    .unwrap_or_else(|| e.now.clone()),
            };
            let kind = if old_stack.is_some() {
                Kind::Same
            } else {
                Kind::Create
            };
            e.seen.insert(stack_urn.clone());
            e.pre_event(kind, old_stack.as_ref(), Some(&st), &[]);
            if kind == Kind::Create && !e.o.suppress_progress {
                e.line(
                    kind,
                    stack_type,
                    &stack_name,
                    if dry { "create" } else { "creating (0s)" },
                );
            }
            e.done.push(st.clone());
            let _ = e.persist();
            // Run the program.
            let template = program::load_template(&s.project);
            let run = template.and_then(|t| {
                let ctx = program::Context {
                    project: s.project.name.clone(),
                    stack: s.stack.clone(),
                    cwd: s.project.dir.to_string_lossy().into_owned(),
                    config: config.clone(),
                };
                program::Evaluator::new(&t, &ctx).run(&mut e)
            });
            match run {
                Err(msg) => {
                    e.diag(Some(&stack_urn), "error", &msg);
                    e.failed = true;
                }
                Ok(r) => {
                    if r.failed {
                        e.failed = true;
                    }
                    let stopped = r.stopped;
                    if !stopped && !e.hard {
                        program_outputs = Some(r.outputs.clone());
                        st.outputs = r.outputs;
                        if let Some(first) = e.done.iter_mut().find(|x| x.urn == stack_urn) {
                            first.outputs = st.outputs.clone();
                        }
                    }
                    // Deletes of resources no longer in the program, in reverse order.
                    if !stopped && !e.hard && (!e.failed || e.o.continue_on_error) && !e.cancelled {
                        let mut gone: Vec<ResState> = old
                            .resources
                            .iter()
                            .filter(|r| r.urn != stack_urn && !e.seen.contains(&r.urn))
                            .cloned()
                            .collect();
                        gone.reverse();
                        for r in gone {
                            if e.poll_signals() {
                                break;
                            }
                            if !e.is_targeted(&r.urn, &r.dependencies) {
                                continue;
                            }
                            match e.delete_one(&r) {
                                Err(StepFail::Hard) => break,
                                Err(_) if !e.o.continue_on_error => break,
                                _ => {}
                            }
                        }
                        let replaced = std::mem::take(&mut e.replaced_old);
                        for r in replaced.iter().rev() {
                            if e.hard || e.poll_signals() {
                                break;
                            }
                            if e.dry {
                                continue;
                            }
                            // delete-replaced: the old physical resource goes away.
                            let _ = e.provide(Kind::Delete, &r.typ, &r.inputs, &r.id);
                        }
                    }
                }
            }
            if !e.hard {
                e.count(kind);
                if kind == Kind::Create && !dry && !e.o.suppress_progress {
                    e.line(kind, stack_type, &stack_name, "created (0.00s)");
                }
                let new_stack = e.done.iter().find(|x| x.urn == stack_urn).cloned();
                e.out_event(kind, old_stack.as_ref(), new_stack.as_ref());
            }
        }
        Op::Refresh => {
            if let Some(st) = &old_stack {
                e.seen.insert(stack_urn.clone());
                e.done.push(st.clone());
            }
            for r in old.resources.clone() {
                if e.poll_signals() {
                    break;
                }
                if r.urn == stack_urn {
                    e.pre_event(Kind::Same, Some(&r), Some(&r), &[]);
                    e.count(Kind::Same);
                    e.out_event(Kind::Same, Some(&r), Some(&r));
                    continue;
                }
                e.seen.insert(r.urn.clone());
                e.done.push(r.clone());
                if !e.is_targeted(&r.urn, &r.dependencies) {
                    continue;
                }
                e.pre_event(Kind::Refresh, Some(&r), Some(&r), &[]);
                if !e.o.suppress_progress {
                    e.line(
                        Kind::Refresh,
                        &r.typ,
                        r.name(),
                        if dry { "refresh" } else { "refreshing (0s)" },
                    );
                }
                e.count(Kind::Same);
                e.out_event(Kind::Refresh, Some(&r), Some(&r));
            }
            let _ = e.persist();
        }
        Op::Destroy => {
            let mut all: Vec<ResState> = old
                .resources
                .iter()
                .filter(|r| r.urn != stack_urn)
                .cloned()
                .collect();
            all.reverse();
            let mut kept = false;
            for r in all {
                if e.poll_signals() {
                    kept = true;
                    break;
                }
                if !e.is_targeted(&r.urn, &r.dependencies) {
                    kept = true;
                    continue;
                }
                match e.delete_one(&r) {
                    Ok(true) => {}
                    Ok(false) => kept = true,
                    Err(StepFail::Hard) => {
                        kept = true;
                        break;
                    }
                    Err(_) => {
                        kept = true;
                        if !e.o.continue_on_error {
                            break;
                        }
                    }
                }
            }
            if let Some(st) = &old_stack {
                if !kept && !e.failed && !e.cancelled && e.o.targets.is_empty() {
                    if let Err(StepFail::Hard) = e.step(Kind::Delete, Some(st), None, &[]) {
                        e.hard = true;
                    }
                    e.deleted.insert(stack_urn.clone());
                } else {
                    e.seen.insert(stack_urn.clone());
                    e.done.insert(0, st.clone());
                }
            }
            if !e.hard {
                let _ = e.persist();
            }
        }
    }
    e.poll_signals();
    if e.hard {
        // A hard stop leaves the pending operation (already journaled) and the lock behind.
        let changes = e.changes.clone();
        return Ok((
            Outcome {
                changes,
                failed: true,
                cancelled: true,
                hard: true,
                outputs: None,
                old_outputs,
            },
            e.log,
            e.diags,
            e.steps_json,
        ));
    }
    if !e.hard {
        let _ = e.persist();
    }
    let outcome = Outcome {
        changes: e.changes.clone(),
        failed: e.failed,
        cancelled: e.cancelled,
        hard: false,
        outputs: program_outputs,
        old_outputs,
    };
    Ok((outcome, e.log, e.diags, e.steps_json))
}

fn has_changes(changes: &BTreeMap<String, i64>) -> bool {
    changes.iter().any(|(k, v)| k != "same" && *v > 0)
}

fn print_summary(changes: &BTreeMap<String, i64>, dry: bool) {
    println!("Resources:");
    let labels = [
        ("create", "+ ", "to create", "created"),
        ("update", "~ ", "to update", "updated"),
        ("delete", "- ", "to delete", "deleted"),
        ("replace", "+-", "to replace", "replaced"),
    ];
    let mut kinds = 0;
    let mut total = 0;
    for (k, sym, p, d) in labels {
        if let Some(n) = changes.get(k).filter(|n| **n > 0) {
            println!("    {sym}{n} {}", if dry { p } else { d });
            kinds += 1;
            total += n;
        }
    }
    let same = changes.get("same").copied().unwrap_or(0);
    if kinds > 1 {
        if same > 0 {
            println!("    {total} changes. {same} unchanged");
        } else {
            println!("    {total} changes");
        }
    } else if same > 0 {
        println!("    {same} unchanged");
    }
    println!();
}

fn print_outputs(outs: &BTreeMap<String, Val>, prefix: &str) {
    if outs.is_empty() {
        return;
    }
    println!("Outputs:");
    let w = outs.keys().map(|k| k.len()).max().unwrap_or(0);
    for (k, v) in outs {
        println!(
            "  {prefix} {k}{}: {}",
            " ".repeat(w - k.len()),
            fmt_val(v, 4)
        );
    }
    println!();
}

fn print_diags(diags: &[(Option<String>, String, String)], stack_label: &str) {
    if diags.is_empty() {
        return;
    }
    println!("Diagnostics:");
    let mut groups: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (urn, sev, msg) in diags {
        let label = match urn {
            Some(u) if !u.contains("::pulumi:pulumi:Stack::") => {
                let parts: Vec<&str> = u.split("::").collect();
                let typ = parts
                    .get(2)
                    .and_then(|t| t.rsplit('$').next())
                    .unwrap_or("");
                format!("{typ} ({})", parts.last().unwrap_or(&""))
            }
            _ => stack_label.to_string(),
        };
        match groups.iter_mut().find(|(l, _)| *l == label) {
            Some((_, v)) => v.push((sev.clone(), msg.clone())),
            None => groups.push((label, vec![(sev.clone(), msg.clone())])),
        }
    }
    for (label, items) in groups {
        println!("  {label}:");
        for (sev, msg) in items {
            let indented = msg.replace('\n', "\n    ");
            println!("    {sev}: {indented}");
        }
        println!();
    }
}

fn parse_opts(p: &Parsed, op: Op) -> Res<Opts> {
    let mut targets = p.arr("target");
    let mut replaces = p.arr("replace");
    for t in p.arr("target-replace") {
        targets.push(t.clone());
        replaces.push(t);
    }
    let excludes = p.arr("exclude");
    if !targets.is_empty() && !excludes.is_empty() {
        return Err(Failure::new(
            exit::CONFIGURATION,
            "if any flags in the group [target exclude] are set none of the others can be; [exclude target] were all set",
        ));
    }
    let ipc = p.arr("import-pending-creates");
    if !ipc.len().is_multiple_of(2) {
        return util::err("an even number of arguments must be passed to --import-pending-creates, alternating between URNs and IDs");
    }
    let color = match p.str("color").as_deref() {
        None | Some("auto") => {
            // SAFETY: isatty only inspects the descriptor.
            if std::env::var_os("NO_COLOR").is_some() || unsafe { libc::isatty(1) } != 1 {
                "never".to_string()
            } else {
                "always".to_string()
            }
        }
        Some(c @ ("always" | "never" | "raw")) => c.to_string(),
        Some(other) => {
            return util::err(format!(
            "unsupported color option: '{other}'.  Supported values are: auto, always, never, raw"
        ))
        }
    };
    let refresh = match p.str("refresh").as_deref() {
        None => false,
        Some("true" | "always" | "1") => true,
        Some("false" | "0" | "") => false,
        Some(other) => {
            return util::err(format!(
                "invalid value '{other}' for --refresh: must be true, false or always"
            ))
        }
    };
    let _ = op;
    Ok(Opts {
        targets,
        excludes,
        target_dependents: p.bool("target-dependents"),
        exclude_dependents: p.bool("exclude-dependents"),
        replaces,
        expect_no_changes: p.bool("expect-no-changes"),
        continue_on_error: p.bool("continue-on-error")
            || util::env_truthy("PULUMI_CONTINUE_ON_ERROR"),
        exclude_protected: p.bool("exclude-protected"),
        clear_pending_creates: p.bool("clear-pending-creates"),
        import_pending_creates: ipc
            .chunks(2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect(),
        refresh,
        diff: p.bool("diff"),
        json: p.bool("json"),
        suppress_outputs: p.bool("suppress-outputs"),
        suppress_progress: p.bool("suppress-progress"),
        show_sames: p.bool("show-sames"),
        color,
    })
}

/// Applies `--config/-c key=value` flags to the stack config file.
fn apply_config_flags(p: &Parsed, s: &mut Session) -> Res<()> {
    let pairs = p.arr("config");
    if pairs.is_empty() {
        return Ok(());
    }
    for pair in pairs {
        let (k, v) = project::split_pair(&pair)?;
        let key = project::parse_key(&k, &s.project.name)?;
        project::config_set(
            &mut s.stack_file.config,
            &key,
            p.bool("config-path"),
            serde_yaml::Value::String(v),
        )?;
    }
    s.stack_file.save()
}

/// Decodes the stack config for the program (secrets decrypted and marked).
pub fn decode_config(sf: &StackFile, secrets: &Secrets) -> Res<BTreeMap<String, Val>> {
    let mut out = BTreeMap::new();
    for (k, v) in &sf.config {
        out.insert(k.clone(), project::decode_value(v, Some(secrets))?);
    }
    Ok(out)
}

pub fn history_config(sf: &StackFile) -> J {
    let mut o = serde_json::Map::new();
    for (k, v) in &sf.config {
        o.insert(k.clone(), serde_json::to_value(v).unwrap_or(J::Null));
    }
    J::Object(o)
}

/// The entry point for `preview`, `up`, `refresh` and `destroy`.
pub fn run_op(p: &Parsed, op: Op) -> Res<()> {
    let preview_only = p.bool("preview-only");
    let skip_preview = p.bool("skip-preview");
    let yes = p.bool("yes") || skip_preview || util::env_truthy("PULUMI_SKIP_CONFIRMATIONS");
    let dry = op == Op::Preview || preview_only;
    if op != Op::Preview && !yes && !preview_only && !session::interactive(p) {
        let msg = "--yes or --skip-preview or --preview-only must be passed in to proceed when running in non-interactive mode";
        return Err(Failure::new(
            if op == Op::Refresh {
                exit::ERROR
            } else {
                exit::CONFIGURATION
            },
            msg,
        ));
    }
    if p.str("client").is_some() {
        return util::err("--client (inline programs served by a language host) is not supported by this Pulumi CLI test stand-in");
    }
    let opts = parse_opts(p, op)?;
    let mut s = Session::open(p, None)?;
    if op != Op::Destroy || p.bool("run-program") {
        if s.project.runtime.is_empty() {
            return util::err("project is missing a 'runtime' attribute");
        }
        if s.project.runtime != "yaml" && (op == Op::Update || op == Op::Preview) {
            return util::err(format!(
                "this Pulumi CLI test stand-in runs only `runtime: yaml` programs (the project uses '{}')",
                s.project.runtime
            ));
        }
    }
    s.ensure_salt_in_stack_file()?;
    let secrets = s.writable_secrets()?;
    secrets.require_ready()?;
    apply_config_flags(p, &mut s)?;
    let config = decode_config(&s.stack_file, &secrets)?;

    // Lock the stack (previews do not lock on the file backend).
    let lock = if dry {
        None
    } else {
        match s.backend.lock(&s.project.name, &s.stack) {
            Ok(l) => Some(l),
            Err(e) => {
                // The Cloud answers 409 after the banner is already on stdout.
                if s.backend.cloud && !opts.json {
                    let banner = match op {
                        Op::Refresh => "Refreshing",
                        Op::Destroy => "Destroying",
                        _ => "Updating",
                    };
                    println!("{banner} ({}):", s.display_ref());
                    println!();
                }
                return Err(e);
            }
        }
    };
    events::install_handlers();
    let result = run_locked(p, op, dry, skip_preview, &opts, &s, &secrets, &config);
    match (&result, &lock) {
        (Err(f), Some(_))
            if f.code == exit::CANCELLED
                && f.message
                    .as_deref()
                    .is_some_and(|m| m.ends_with("cancelled")) => {}
        (_, Some(l)) => s.backend.unlock(l),
        _ => {}
    }
    let _ = std::io::stdout().flush();
    match result {
        Ok(Some(after)) => after(&s),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    }
}

type After = Box<dyn FnOnce(&Session) -> Res<()>>;

#[allow(clippy::too_many_arguments)]
fn run_locked(
    p: &Parsed,
    op: Op,
    dry: bool,
    skip_preview: bool,
    opts: &Opts,
    s: &Session,
    secrets: &Secrets,
    config: &BTreeMap<String, Val>,
) -> Res<Option<After>> {
    let start = Instant::now();
    let start_unix = util::now_unix();
    let label = s.display_ref();
    let stack_label = format!("pulumi:pulumi:Stack ({}-{})", s.project.name, s.stack);
    let quiet = opts.json;
    let permalink_flag = p.str("suppress-permalink");
    let show_permalink = !opts.json
        && match permalink_flag.as_deref() {
            Some("false") => true,
            Some(_) => false,
            None => s.backend.cloud,
        };

    // `up` without --skip-preview previews first (display only).
    if op == Op::Update && !skip_preview && !quiet {
        println!("Previewing update ({label}):");
        println!();
        let (out, _, diags, _) = run_engine(
            s,
            secrets,
            config,
            Op::Update,
            true,
            opts,
            EventLog::open(None, false),
            false,
        )?;
        print_diags(&diags, &stack_label);
        if let Some(o) = &out.outputs {
            if !opts.suppress_outputs {
                print_outputs(o, " ");
            }
        }
        print_summary(&out.changes, true);
        if opts.expect_no_changes && has_changes(&out.changes) {
            return Err(Failure::new(
                exit::NO_CHANGES,
                "no changes were expected for update but changes were proposed",
            ));
        }
        if out.failed {
            return Err(Failure::bail(exit::ERROR));
        }
    }

    let banner = match (op, dry) {
        (Op::Update, false) => "Updating",
        (Op::Update | Op::Preview, true) => "Previewing update",
        (Op::Refresh, false) => "Refreshing",
        (Op::Refresh, true) => "Previewing refresh",
        (Op::Destroy, false) => "Destroying",
        (Op::Destroy, true) => "Previewing destroy",
        (Op::Preview, false) => "Previewing update",
    };
    if !quiet {
        println!("{banner} ({label}):");
        println!();
        if s.backend.cloud && show_permalink {
            let console = s.backend.console_url(&s.project.name, &s.stack);
            if dry {
                println!("View Live: {console}/previews/{}", util::uuid());
            } else {
                let next = s.backend.history(&s.project.name, &s.stack).len() + 1;
                println!("View Live: {console}/updates/{next}");
            }
            println!();
        }
    }
    let event_log = p.str("event-log");
    let mut log = EventLog::open(event_log.as_deref(), opts.json && !dry);
    log.emit(
        "preludeEvent",
        json!({ "config": project::prelude_config(&s.stack_file.config) }),
    );
    let (out, mut log, diags, steps) = run_engine(s, secrets, config, op, dry, opts, log, quiet)?;
    let secs = start.elapsed().as_secs_f64().ceil() as i64;

    if out.hard {
        let _ = std::io::stdout().flush();
        return Err(Failure::new(
            exit::CANCELLED,
            format!("{} cancelled", op.noun()),
        ));
    }
    let mut diags = diags;
    if out.cancelled {
        let msg = format!("{} canceled", if dry { "preview" } else { op.noun() });
        log.emit(
            "diagnosticEvent",
            json!({"prefix": "error: ", "message": format!("{msg}\n"), "color": opts.color, "severity": "error"}),
        );
        diags.push((None, "error".into(), msg));
    } else if out.failed {
        let msg = format!("{} failed", if dry { "preview" } else { op.noun() });
        log.emit(
            "diagnosticEvent",
            json!({"prefix": "error: ", "message": format!("{msg}\n"), "color": opts.color, "severity": "error"}),
        );
        diags.push((None, "error".into(), msg));
    }
    let result = if out.cancelled {
        "canceled"
    } else if out.failed {
        "failed"
    } else {
        "succeeded"
    };
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Summary<'a> {
        maybe_corrupt: bool,
        duration_seconds: i64,
        resource_changes: &'a BTreeMap<String, i64>,
        #[serde(rename = "PolicyPacks")]
        policy_packs: J,
        is_preview: bool,
        result: &'a str,
    }
    let summary = Summary {
        maybe_corrupt: false,
        duration_seconds: secs,
        resource_changes: &out.changes,
        policy_packs: json!({}),
        is_preview: dry,
        result,
    };
    log.emit_raw("summaryEvent", &serde_json::to_string(&summary)?);
    log.emit("cancelEvent", json!({}));

    if !quiet {
        print_diags(&diags, &stack_label);
        if !opts.suppress_outputs {
            match op {
                Op::Destroy if !dry => print_outputs(&out.old_outputs, "-"),
                Op::Refresh => {}
                _ => {
                    if let Some(o) = &out.outputs {
                        print_outputs(o, " ");
                    }
                }
            }
        }
        print_summary(&out.changes, dry);
        if !dry {
            println!("Duration: {secs}s");
            println!();
        }
        if show_permalink && !s.backend.cloud {
            println!("Permalink: {}", s.stack_json_url());
        }
    } else if dry {
        // `preview --json`: a digest of the plan.
        let digest = json!({
            "config": project::prelude_config(&s.stack_file.config),
            "steps": steps,
            "outputs": out.outputs.as_ref().map(|o| J::Object(o.iter().map(|(k, v)| (k.clone(), v.to_json(Show::Blind))).collect())).unwrap_or(json!({})),
            "diagnostics": diags.iter().map(|(u, sev, m)| json!({"urn": u, "message": m, "severity": sev})).collect::<Vec<_>>(),
            "changeSummary": out.changes,
            "duration": start.elapsed().as_nanos() as u64,
        });
        print!("{}", util::json_pretty(&digest, 2));
    }

    // History (not for previews).
    if !dry {
        let mut env = serde_json::Map::new();
        let kind = p.str("exec-kind").unwrap_or_default();
        let kind = match kind.as_str() {
            "auto.local" | "auto.inline" | "cli" => kind,
            _ => "cli".to_string(),
        };
        env.insert("exec.kind".into(), J::String(kind));
        if let Some(a) = p.str("exec-agent").filter(|a| !a.is_empty()) {
            env.insert("exec.agent".into(), J::String(a));
        }
        env.insert("updatePlan".into(), J::String("false".into()));
        let info = json!({
            "kind": op.noun(),
            "startTime": start_unix,
            "message": p.str("message").unwrap_or_default(),
            "environment": env,
            "config": history_config(&s.stack_file),
            "result": if out.failed || out.cancelled { "failed" } else { "succeeded" },
            "endTime": util::now_unix(),
            "resourceChanges": out.changes,
        });
        let chk = s.backend.load_checkpoint(&s.project.name, &s.stack)?;
        s.backend
            .add_history(&s.project.name, &s.stack, &info, &chk)?;
    }

    if out.failed || out.cancelled {
        return Err(Failure::bail(exit::ERROR));
    }
    if opts.expect_no_changes && has_changes(&out.changes) {
        let what = if dry { "preview" } else { op.noun() };
        return Err(Failure::new(
            exit::NO_CHANGES,
            format!("no changes were expected for {what} but changes were proposed"),
        ));
    }
    if op == Op::Destroy && !dry {
        let remove = p.bool("remove") && opts.targets.is_empty();
        if !quiet && !remove {
            println!("The resources in the stack have been deleted, but the history and configuration associated with the stack are still maintained. ");
            println!(
                "If you want to remove the stack completely, run `pulumi stack rm {}`.",
                s.stack
            );
        }
        if remove {
            let after: After = Box::new(|s: &Session| {
                crate::commands::remove_stack(s, false)?;
                println!("The resources in the stack have been deleted, and the history and configuration removed.");
                Ok(())
            });
            return Ok(Some(after));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300s"), Some(300.0));
        assert_eq!(parse_duration("1m30s"), Some(90.0));
        assert_eq!(parse_duration("500ms"), Some(0.5));
        assert_eq!(parse_duration("2"), Some(2.0));
        assert_eq!(parse_duration("x"), None);
    }

    #[test]
    fn globs() {
        assert!(glob_match("urn:*::a", "urn:pulumi:dev::p::t::a"));
        assert!(glob_match("urn:x", "urn:x"));
        assert!(!glob_match("urn:*::b", "urn:pulumi:dev::p::t::a"));
    }
}
