//! Admission: which requests run now, which wait, which are turned away at once.
//!
//! A request holds two permits while it runs: one of its handler's (`max_per_handler`) and
//! one of the engine's (`max_sandboxes`). Waiting for them is asynchronous (a tokio
//! semaphore, first come first served): a waiting request costs no thread of the blocking
//! pool, so one slow handler with hundreds of callers cannot starve the pool that every other
//! handler's requests run on, and a permit given back wakes one waiter, not all of them. At
//! most `max_queue_per_handler` requests wait per handler; the next get 503 `busy` at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::locked::Locked;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

struct Gate {
    sem: Arc<Semaphore>,
    waiting: AtomicUsize,
}

pub struct Admission {
    gates: Mutex<HashMap<String, Arc<Gate>>>,
    global: Arc<Semaphore>,
    max_per: usize,
    max_queue: usize,
}

/// Held while a request runs; dropping it lets the next waiter in.
pub struct Ticket {
    _handler: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
}

#[derive(Debug, PartialEq)]
pub enum Refused {
    /// `max_queue_per_handler` requests already wait for this handler.
    QueueFull(usize),
    /// No permit came within the wait.
    Timeout,
}

impl Admission {
    pub fn new(max_per: usize, max_queue: usize, max_total: usize) -> Admission {
        Admission {
            gates: Mutex::new(HashMap::new()),
            global: Arc::new(Semaphore::new(max_total)),
            max_per,
            max_queue,
        }
    }

    fn gate(&self, handler: &str) -> Arc<Gate> {
        let mut g = self.gates.locked();
        if let Some(x) = g.get(handler) {
            return x.clone();
        }
        let x = Arc::new(Gate {
            sem: Arc::new(Semaphore::new(self.max_per)),
            waiting: AtomicUsize::new(0),
        });
        g.insert(handler.to_string(), x.clone());
        x
    }

    /// A ticket for one request of `handler` (a name known to exist: each name keeps a gate),
    /// within `wait` in all.
    pub async fn admit(&self, handler: &str, wait: Duration) -> Result<Ticket, Refused> {
        let deadline = tokio::time::Instant::now() + wait;
        let gate = self.gate(handler);
        let h = match gate.sem.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if gate.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_queue {
                    gate.waiting.fetch_sub(1, Ordering::SeqCst);
                    return Err(Refused::QueueFull(self.max_queue));
                }
                let r = tokio::time::timeout_at(deadline, gate.sem.clone().acquire_owned()).await;
                gate.waiting.fetch_sub(1, Ordering::SeqCst);
                match r {
                    Ok(Ok(p)) => p,
                    _ => return Err(Refused::Timeout),
                }
            }
        };
        let g = match self.global.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                match tokio::time::timeout_at(deadline, self.global.clone().acquire_owned()).await {
                    Ok(Ok(p)) => p,
                    _ => return Err(Refused::Timeout),
                }
            }
        };
        Ok(Ticket {
            _handler: h,
            _global: g,
        })
    }

    /// Requests waiting for `handler` now.
    pub fn waiting(&self, handler: &str) -> usize {
        self.gates
            .locked()
            .get(handler)
            .map_or(0, |g| g.waiting.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn queue_is_bounded_per_handler_and_others_pass() {
        let a = Arc::new(Admission::new(2, 3, 100));
        let w = Duration::from_secs(5);
        let t1 = a.admit("slow", w).await.unwrap();
        let _t2 = a.admit("slow", w).await.unwrap();
        // Three wait, the fourth is turned away at once.
        let mut waiters = vec![];
        for _ in 0..3 {
            let a = a.clone();
            // The ticket stays held in the task's output.
            waiters.push(tokio::spawn(async move { a.admit("slow", w).await.ok() }));
        }
        while a.waiting("slow") < 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(a.admit("slow", w).await.err(), Some(Refused::QueueFull(3)));
        // Another handler is not behind them.
        let other = a.admit("fast", Duration::from_millis(1)).await;
        assert!(other.is_ok());
        // A finished request lets exactly one waiter in.
        drop(t1);
        let mut n = 0;
        while n == 0 {
            tokio::task::yield_now().await;
            n = waiters.iter().filter(|h| h.is_finished()).count();
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(waiters.iter().filter(|h| h.is_finished()).count(), 1);
        assert_eq!(a.waiting("slow"), 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn waits_end_at_their_deadline_and_the_engine_cap_holds() {
        let a = Admission::new(4, 4, 1);
        let _t = a.admit("a", Duration::from_secs(1)).await.unwrap();
        let t0 = std::time::Instant::now();
        assert_eq!(
            a.admit("b", Duration::from_millis(50)).await.err(),
            Some(Refused::Timeout)
        );
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert_eq!(a.waiting("a"), 0);
    }
}
