//! First come, first served, in two lanes: at most `limit` reconciles of one controller work
//! at once, and the others wait in the order they were asked for.
//!
//! kube-runtime's own concurrency limit keeps the objects it cannot run yet in a hash set and
//! takes them out in hash order: under a sustained load (3,000 Stacks applied at once) some
//! Updates were never reconciled while others were served again and again. So each
//! controller runs every scheduled reconcile at once and each of them waits here, before doing
//! any work; it then reads the newest copy of its object, which may have changed while it
//! waited.
//!
//! A change a person made (a new or edited Stack, a deletion, a new Update) waits in the
//! urgent lane, served before the routine one (status folding, retries, re-lists of objects
//! already acted on): with 10,000 Stacks retrying, a Stack just applied must not queue behind
//! all of them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Which lane a reconcile waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Something a person asked for that the operator has not acted on yet.
    Urgent,
    /// Everything else.
    Routine,
}

#[derive(Default)]
struct Lanes {
    free: usize,
    urgent: VecDeque<oneshot::Sender<Turn>>,
    routine: VecDeque<oneshot::Sender<Turn>>,
}

pub struct Gate {
    lanes: Mutex<Lanes>,
    shutdown: CancellationToken,
}

/// The right to run one reconcile; handed to the next waiter when dropped.
pub struct Turn {
    gate: Option<Arc<Gate>>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.hand_over();
        }
    }
}

impl Gate {
    pub fn new(limit: usize, shutdown: CancellationToken) -> Arc<Gate> {
        Arc::new(Gate {
            lanes: Mutex::new(Lanes {
                free: limit.max(1),
                ..Lanes::default()
            }),
            shutdown,
        })
    }

    fn lanes(&self) -> MutexGuard<'_, Lanes> {
        // Nothing panics while holding it; a poisoned lock still holds consistent queues.
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives a released turn to the first live waiter, urgent lane first.
    fn hand_over(self: Arc<Self>) {
        let mut lanes = self.lanes();
        loop {
            let next = match lanes.urgent.pop_front() {
                Some(tx) => tx,
                None => match lanes.routine.pop_front() {
                    Some(tx) => tx,
                    None => {
                        lanes.free += 1;
                        return;
                    }
                },
            };
            let turn = Turn {
                gate: Some(self.clone()),
            };
            match next.send(turn) {
                Ok(()) => return,
                // That waiter is gone (shut down): the next one, without handing over again.
                Err(mut unclaimed) => {
                    unclaimed.gate = None;
                }
            }
        }
    }

    /// Waits for this reconcile's turn; `None` once the operator shuts down (the waiting
    /// reconciles are dropped then, not run one after the other before it can exit). A turn
    /// handed to a waiter that has gone is passed on when it is dropped.
    pub async fn enter(self: &Arc<Self>, lane: Lane) -> Option<Turn> {
        let waiting = {
            let mut lanes = self.lanes();
            if lanes.free > 0 {
                lanes.free -= 1;
                return Some(Turn {
                    gate: Some(self.clone()),
                });
            }
            let (tx, rx) = oneshot::channel();
            match lane {
                Lane::Urgent => lanes.urgent.push_back(tx),
                Lane::Routine => lanes.routine.push_back(tx),
            }
            rx
        };
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => None,
            turn = waiting => turn.ok(),
        }
    }
}

/// One gate per controller.
pub struct Gates {
    pub stack: Arc<Gate>,
    pub update: Arc<Gate>,
    pub workspace: Arc<Gate>,
    pub program: Arc<Gate>,
}

impl Gates {
    pub fn new(limit: usize, shutdown: &CancellationToken) -> Gates {
        Gates {
            stack: Gate::new(limit, shutdown.clone()),
            update: Gate::new(limit, shutdown.clone()),
            workspace: Gate::new(limit, shutdown.clone()),
            program: Gate::new(limit, shutdown.clone()),
        }
    }

    pub fn of(&self, controller: &str) -> &Arc<Gate> {
        match controller {
            "stack" => &self.stack,
            "update" => &self.update,
            "workspace" => &self.workspace,
            _ => &self.program,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    #[tokio::test]
    async fn waiting_reconciles_enter_in_the_order_they_came() {
        let gate = Gate::new(1, CancellationToken::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = gate.enter(Lane::Routine).await.expect("a free gate");
        let mut waiting = Vec::new();
        for i in 0..50 {
            let (gate, order) = (gate.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _permit = gate.enter(Lane::Routine).await.expect("entered");
                order.lock().expect("order").push(i);
            }));
            // Each one is queued before the next one asks.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(first);
        for w in waiting {
            w.await.expect("joined");
        }
        let order = order.lock().expect("order").clone();
        assert_eq!(order, (0..50).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_shutdown_releases_the_waiting_reconciles_without_running_them() {
        let shutdown = CancellationToken::new();
        let gate = Gate::new(1, shutdown.clone());
        let held = gate.enter(Lane::Routine).await.expect("a free gate");
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter(Lane::Routine).await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        shutdown.cancel();
        assert!(!waiter.await.expect("joined"), "no turn after shutdown");
        drop(held);
    }

    #[tokio::test]
    async fn urgent_reconciles_go_before_routine_ones_and_each_lane_keeps_its_order() {
        let gate = Gate::new(1, CancellationToken::new());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = gate.enter(Lane::Routine).await.expect("a free gate");
        let mut waiting = Vec::new();
        for (i, lane) in [
            (0, Lane::Routine),
            (1, Lane::Urgent),
            (2, Lane::Routine),
            (3, Lane::Urgent),
        ] {
            let (gate, order) = (gate.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _turn = gate.enter(lane).await.expect("entered");
                order.lock().expect("order").push(i);
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(first);
        for w in waiting {
            w.await.expect("joined");
        }
        assert_eq!(*order.lock().expect("order"), vec![1, 3, 0, 2]);
    }

    #[tokio::test]
    async fn a_waiter_that_gave_up_does_not_keep_the_turn() {
        let gate = Gate::new(1, CancellationToken::new());
        let held = gate.enter(Lane::Routine).await.expect("a free gate");
        // One waiter gives up (its future is dropped), another waits behind it.
        let gave_up = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter(Lane::Urgent).await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(2)).await;
        gave_up.abort();
        let _ = gave_up.await;
        let next = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter(Lane::Routine).await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(2)).await;
        drop(held);
        let entered = tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("the turn passed on")
            .expect("joined");
        assert!(entered);
        // And the turn came back once that one finished: the gate is free again.
        assert!(gate.enter(Lane::Routine).await.is_some());
    }
}
