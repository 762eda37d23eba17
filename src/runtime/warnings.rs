//! The newest Warning Event about each update Job and pod (FailedCreate: a missing
//! ServiceAccount, a quota, Pod Security; FailedMount, FailedScheduling, ...), from one watch of
//! Warning Events. It says why an operation does not start, and its arrival triggers that
//! Update's reconcile at once. Reading the Events with a list request per waiting Update
//! instead made, in a burst of 3,000 Stacks, one list request in ten that the API server
//! served, each a scan of the namespace's Events.

use k8s_openapi::api::core::v1::Event;
use kube::runtime::reflector::ObjectRef;
use pulumi_operator_api::Update;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// What is kept of an object's newest Warning Event.
#[derive(Clone, Debug, PartialEq)]
struct Noted {
    /// The Event's namespace/name: its deletion (Events expire) forgets it.
    event: String,
    at: i64,
    reason: String,
    message: String,
}

/// The newest Warning per involved object UID, for Jobs and pods only.
#[derive(Default)]
pub struct Warnings {
    by_uid: Mutex<HashMap<String, Noted>>,
    /// The watch has delivered its initial list at least once.
    filled: AtomicBool,
    /// Events of a list being delivered (replaces `by_uid` once complete).
    incoming: Mutex<Option<HashMap<String, Noted>>>,
}

/// The involved object of a Warning Event about a Job or pod, and what is kept of it (pure).
fn warning_of(event: &Event) -> Option<(String, Noted)> {
    if event.type_.as_deref() != Some("Warning") {
        return None;
    }
    let involved = &event.involved_object;
    if !matches!(involved.kind.as_deref(), Some("Job" | "Pod")) {
        return None;
    }
    let uid = involved.uid.clone()?;
    let at = [
        event
            .series
            .as_ref()
            .and_then(|s| s.last_observed_time.as_ref())
            .map(|t| t.0),
        event.last_timestamp.as_ref().map(|t| t.0),
        event.event_time.as_ref().map(|t| t.0),
        event.metadata.creation_timestamp.as_ref().map(|t| t.0),
    ]
    .into_iter()
    .flatten()
    .max()
    .map_or(0, |t| t.as_second());
    Some((
        uid,
        Noted {
            event: format!(
                "{}/{}",
                event.metadata.namespace.as_deref().unwrap_or_default(),
                event.metadata.name.as_deref().unwrap_or_default()
            ),
            at,
            reason: event.reason.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
        },
    ))
}

/// The Update an update Job or pod belongs to, from its name (pure): a Job is named after its
/// Update, its pod after the Job plus `-<5 random characters>`. A name that is not one of
/// ours triggers nothing (the controller skips objects it does not have).
fn update_of(event: &Event) -> Option<ObjectRef<Update>> {
    let involved = &event.involved_object;
    let ns = involved.namespace.as_deref()?;
    let name = involved.name.as_deref()?;
    let update = match involved.kind.as_deref()? {
        "Job" => name,
        "Pod" => name.rsplit_once('-')?.0,
        _ => return None,
    };
    Some(ObjectRef::new(update).within(ns))
}

fn keep_newest(map: &mut HashMap<String, Noted>, uid: String, noted: Noted) -> bool {
    match map.get(&uid) {
        Some(old) if old.at > noted.at => false,
        Some(old) if *old == noted => false,
        _ => {
            map.insert(uid, noted);
            true
        }
    }
}

impl Warnings {
    /// The newest Warning about the object with this UID: (reason, message).
    pub fn latest(&self, uid: &str) -> Option<(String, String)> {
        let map = self.by_uid.lock().ok()?;
        map.get(uid).map(|n| (n.reason.clone(), n.message.clone()))
    }

    /// Whether the watch has listed the Events at least once (before, no Warning is not news).
    pub fn filled(&self) -> bool {
        self.filled.load(Ordering::Acquire)
    }

    /// Takes one event of the watch; returns the Update to look at again, if a new Warning
    /// concerns it.
    pub fn observe(
        &self,
        event: kube::runtime::watcher::Event<Event>,
    ) -> Option<ObjectRef<Update>> {
        use kube::runtime::watcher::Event as W;
        match event {
            W::Init => {
                if let Ok(mut incoming) = self.incoming.lock() {
                    *incoming = Some(HashMap::new());
                }
                None
            }
            W::InitApply(e) => {
                let (uid, noted) = warning_of(&e)?;
                if let Ok(mut incoming) = self.incoming.lock() {
                    keep_newest(incoming.get_or_insert_with(HashMap::new), uid, noted);
                }
                None
            }
            W::InitDone => {
                let listed = self.incoming.lock().ok().and_then(|mut i| i.take());
                if let (Some(listed), Ok(mut map)) = (listed, self.by_uid.lock()) {
                    *map = listed;
                }
                self.filled.store(true, Ordering::Release);
                None
            }
            W::Apply(e) => {
                let (uid, noted) = warning_of(&e)?;
                let newer = keep_newest(&mut *self.by_uid.lock().ok()?, uid, noted);
                newer.then(|| update_of(&e)).flatten()
            }
            W::Delete(e) => {
                let (uid, noted) = warning_of(&e)?;
                let mut map = self.by_uid.lock().ok()?;
                if map.get(&uid).is_some_and(|n| n.event == noted.event) {
                    map.remove(&uid);
                }
                None
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_uid.lock().map(|m| m.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event as W;
    use serde_json::json;

    fn event(name: &str, kind: &str, object: &str, uid: &str, reason: &str, at: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "type": "Warning", "reason": reason, "message": format!("{reason} happened"),
            "lastTimestamp": at,
            "involvedObject": {"kind": kind, "name": object, "namespace": "ns", "uid": uid},
        }))
        .expect("an Event")
    }

    #[test]
    fn a_new_warning_names_its_update_and_is_the_one_kept() {
        let w = Warnings::default();
        let job = event(
            "e1",
            "Job",
            "s-1a2b3c",
            "j",
            "FailedCreate",
            "2026-01-01T00:00:10Z",
        );
        assert_eq!(
            w.observe(W::Apply(job)),
            Some(ObjectRef::new("s-1a2b3c").within("ns"))
        );
        assert_eq!(
            w.latest("j"),
            Some(("FailedCreate".into(), "FailedCreate happened".into()))
        );
        let pod = event(
            "e2",
            "Pod",
            "s-1a2b3c-x7k2p",
            "p",
            "FailedMount",
            "2026-01-01T00:00:20Z",
        );
        assert_eq!(
            w.observe(W::Apply(pod)),
            Some(ObjectRef::new("s-1a2b3c").within("ns"))
        );
        // An older Warning arriving late does not replace the newer one, nor trigger.
        let older = event(
            "e3",
            "Pod",
            "s-1a2b3c-x7k2p",
            "p",
            "Older",
            "2026-01-01T00:00:05Z",
        );
        assert_eq!(w.observe(W::Apply(older)), None);
        assert_eq!(w.latest("p").map(|l| l.0), Some("FailedMount".into()));
        // Normal Events and other kinds are not kept.
        let mut normal = event(
            "e4",
            "Pod",
            "s-1a2b3c-x7k2p",
            "q",
            "Pulled",
            "2026-01-01T00:00:30Z",
        );
        normal.type_ = Some("Normal".into());
        assert_eq!(w.observe(W::Apply(normal)), None);
        let stack = event("e5", "Stack", "s", "s", "Failed", "2026-01-01T00:00:30Z");
        assert_eq!(w.observe(W::Apply(stack)), None);
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn an_expired_event_is_forgotten_and_a_relist_replaces_everything() {
        let w = Warnings::default();
        assert!(!w.filled());
        let e1 = event(
            "e1",
            "Job",
            "u",
            "j",
            "FailedCreate",
            "2026-01-01T00:00:10Z",
        );
        w.observe(W::Init);
        w.observe(W::InitApply(e1.clone()));
        assert_eq!(w.latest("j"), None, "not before the list is complete");
        w.observe(W::InitDone);
        assert!(w.filled());
        assert!(w.latest("j").is_some());
        // A deletion of another Event of the same object keeps the newest one.
        let other = event(
            "e0",
            "Job",
            "u",
            "j",
            "FailedCreate",
            "2026-01-01T00:00:01Z",
        );
        w.observe(W::Delete(other));
        assert!(w.latest("j").is_some());
        w.observe(W::Delete(e1));
        assert_eq!(w.latest("j"), None);
        // A relist that no longer has an Event drops it.
        let e2 = event(
            "e2",
            "Pod",
            "u-abcde",
            "p",
            "FailedMount",
            "2026-01-01T00:00:10Z",
        );
        w.observe(W::Apply(e2));
        w.observe(W::Init);
        w.observe(W::InitDone);
        assert_eq!(w.len(), 0);
    }
}
