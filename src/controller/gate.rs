//! First come, first served: at most `limit` reconciles of one controller work at once, and
//! the others wait in the order they were asked for.
//!
//! kube-runtime's own concurrency limit keeps the objects it cannot run yet in a hash set and
//! takes them out in hash order: under a sustained load (3,000 Stacks applied at once) some
//! Updates were never reconciled while others were served again and again. So each
//! controller runs every scheduled reconcile at once and each of them waits here, on a fair
//! (FIFO) semaphore, before doing any work; it then reads the newest copy of its object, which
//! may have changed while it waited.

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

pub struct Gate {
    permits: Semaphore,
    shutdown: CancellationToken,
}

impl Gate {
    pub fn new(limit: usize, shutdown: CancellationToken) -> Gate {
        Gate {
            permits: Semaphore::new(limit.max(1)),
            shutdown,
        }
    }

    /// Waits for this reconcile's turn; `None` once the operator shuts down (the waiting
    /// reconciles are dropped then, not run one after the other before it can exit).
    pub async fn enter(&self) -> Option<SemaphorePermit<'_>> {
        tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => None,
            permit = self.permits.acquire() => permit.ok(),
        }
    }
}

/// One gate per controller.
pub struct Gates {
    pub stack: Gate,
    pub update: Gate,
    pub workspace: Gate,
    pub program: Gate,
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

    pub fn of(&self, controller: &str) -> &Gate {
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
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[tokio::test]
    async fn waiting_reconciles_enter_in_the_order_they_came() {
        let gate = Arc::new(Gate::new(1, CancellationToken::new()));
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = gate.enter().await.expect("a free gate");
        let mut waiting = Vec::new();
        for i in 0..50 {
            let (gate, order) = (gate.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                let _permit = gate.enter().await.expect("entered");
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
        let gate = Arc::new(Gate::new(1, shutdown.clone()));
        let held = gate.enter().await.expect("a free gate");
        let waiter = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter().await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        shutdown.cancel();
        assert!(!waiter.await.expect("joined"), "no turn after shutdown");
        drop(held);
    }
}
