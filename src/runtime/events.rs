//! Publishes Kubernetes Events (events.k8s.io/v1) about the operator's objects.
//!
//! A repeat of the same event about the same object (type, reason, action and note) within
//! [`SERIES_WINDOW`] adds to the first one's series, which `kubectl describe` shows as
//! "(x3 over 2m)"; a different note is a new Event, so the newest message is always readable.
//! (kube-runtime's `Recorder` keys repeats by reason only, keeping the first note, and caches a
//! whole Event per key: megabytes with thousands of Stacks.) What is kept per recent event is
//! its key's hash, its name and its count.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::Client;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

/// How long a published event is remembered for a series (kube-runtime's and client-go's).
pub const SERIES_WINDOW: jiff::SignedDuration = jiff::SignedDuration::from_secs(6 * 60);

/// One event, as it is published.
pub struct Note<'a> {
    pub type_: EventType,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

/// A recently published event.
#[derive(Clone, Debug, PartialEq)]
struct Recent {
    namespace: String,
    name: String,
    count: i32,
    last: jiff::Timestamp,
}

#[derive(Default)]
struct Remembered {
    events: HashMap<u64, Recent>,
    pruned: Option<jiff::Timestamp>,
}

impl Remembered {
    /// Forgets events older than the window (at most once a minute: a scan of all of them).
    fn prune(&mut self, now: jiff::Timestamp) {
        if self
            .pruned
            .is_some_and(|p| now.duration_since(p) < jiff::SignedDuration::from_secs(60))
        {
            return;
        }
        self.pruned = Some(now);
        self.events.retain(|_, r| !expired(r, now));
    }
}

fn expired(r: &Recent, now: jiff::Timestamp) -> bool {
    now.duration_since(r.last) >= SERIES_WINDOW
}

pub struct Publisher {
    client: Client,
    controller: String,
    instance: String,
    hasher: RandomState,
    remembered: Mutex<Remembered>,
}

/// What publishing an event does.
#[derive(Debug, PartialEq)]
enum Step {
    Create(Box<Event>),
    /// Adds one to the series of the named Event.
    Repeat {
        namespace: String,
        name: String,
        series: EventSeries,
    },
}

impl Publisher {
    pub fn new(client: Client, controller: &str, instance: &str) -> Publisher {
        Publisher {
            client,
            controller: controller.into(),
            instance: instance.into(),
            hasher: RandomState::new(),
            remembered: Mutex::new(Remembered::default()),
        }
    }

    fn key(&self, regarding: &ObjectReference, ev: &Note) -> u64 {
        let type_ = match ev.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        self.hasher.hash_one((
            &regarding.uid,
            &regarding.namespace,
            &regarding.kind,
            &regarding.name,
            type_,
            ev.reason,
            ev.action,
            ev.note,
        ))
    }

    /// What to send for `ev` (whose key is `key`) now, from what was sent before.
    fn step(&self, key: u64, regarding: &ObjectReference, ev: &Note, now: jiff::Timestamp) -> Step {
        let recent = self.remembered.lock().ok().and_then(|mut r| {
            r.prune(now);
            r.events.get(&key).filter(|r| !expired(r, now)).cloned()
        });
        match recent {
            Some(r) => Step::Repeat {
                namespace: r.namespace,
                name: r.name,
                series: EventSeries {
                    count: r.count.saturating_add(1),
                    last_observed_time: MicroTime(now),
                },
            },
            None => Step::Create(Box::new(self.event(regarding, ev, now))),
        }
    }

    fn event(&self, regarding: &ObjectReference, ev: &Note, now: jiff::Timestamp) -> Event {
        Event {
            action: Some(ev.action.into()),
            reason: Some(ev.reason.into()),
            note: Some(ev.note.into()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        }
    }

    fn remember(&self, key: u64, recent: Recent) {
        if let Ok(mut r) = self.remembered.lock() {
            r.events.insert(key, recent);
        }
    }

    /// Publishes `ev` about `regarding` (in its namespace; "default" for a cluster object).
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        ev: &Note<'_>,
    ) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        let key = self.key(regarding, ev);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let create = |event: Event| {
            let events = events.clone();
            async move {
                let created = events.create(&PostParams::default(), &event).await?;
                Ok::<_, kube::Error>(Recent {
                    namespace: namespace.to_string(),
                    name: created.metadata.name.unwrap_or_default(),
                    count: 1,
                    last: now,
                })
            }
        };
        let recent = match self.step(key, regarding, ev, now) {
            Step::Create(event) => create(*event).await?,
            Step::Repeat {
                namespace,
                name,
                series,
            } => {
                let patch = serde_json::json!({ "series": &series });
                let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
                match events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => Recent {
                        namespace,
                        name,
                        count: series.count,
                        last: now,
                    },
                    // Gone (its TTL, or deleted): a new one.
                    Err(kube::Error::Api(e)) if e.code == 404 => {
                        create(self.event(regarding, ev, now)).await?
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        self.remember(key, recent);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publisher() -> Publisher {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Publisher::new(kube::Client::try_from(config).unwrap(), "op", "op-1")
    }

    fn stack(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("pulumi.com/v1".into()),
            kind: Some("Stack".into()),
            name: Some("s".into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    /// The step for `ev` about the Stack with `uid`.
    fn step(p: &Publisher, uid: &str, ev: &Note, now: jiff::Timestamp) -> Step {
        p.step(p.key(&stack(uid), ev), &stack(uid), ev, now)
    }

    const FAILED: Note = Note {
        type_: EventType::Warning,
        reason: "StackUpdateFailure",
        action: "Reconcile",
        note: "first",
    };

    #[tokio::test]
    async fn a_repeat_adds_to_the_series_and_another_note_is_a_new_event() {
        let p = publisher();
        let t0: jiff::Timestamp = "2026-11-25T10:00:00Z".parse().unwrap();
        let Step::Create(event) = step(&p, "1", &FAILED, t0) else {
            panic!("a first event is created");
        };
        assert_eq!(event.note.as_deref(), Some("first"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reporting_controller.as_deref(), Some("op"));
        assert_eq!(event.reporting_instance.as_deref(), Some("op-1"));
        let name = event.metadata.name.clone().unwrap();
        assert!(name.starts_with("s."));
        p.remember(
            p.key(&stack("1"), &FAILED),
            Recent {
                namespace: "ns".into(),
                name: name.clone(),
                count: 1,
                last: t0,
            },
        );
        let t1 = t0 + jiff::SignedDuration::from_secs(30);
        assert_eq!(
            step(&p, "1", &FAILED, t1),
            Step::Repeat {
                namespace: "ns".into(),
                name,
                series: EventSeries {
                    count: 2,
                    last_observed_time: MicroTime(t1)
                }
            }
        );
        // Another message, another object (same name, new uid), another type: new Events.
        let other = Note {
            note: "second",
            ..FAILED
        };
        assert!(matches!(step(&p, "1", &other, t1), Step::Create(_)));
        assert!(matches!(step(&p, "2", &FAILED, t1), Step::Create(_)));
        let normal = Note {
            type_: EventType::Normal,
            ..FAILED
        };
        assert!(matches!(step(&p, "1", &normal, t1), Step::Create(_)));
        // After the window, a new Event; and what is old is forgotten.
        let later = t0 + SERIES_WINDOW;
        assert!(matches!(step(&p, "1", &FAILED, later), Step::Create(_)));
        assert!(p.remembered.lock().unwrap().events.is_empty());
    }
}
