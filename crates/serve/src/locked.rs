//! Mutexes that stay usable after a panic. The engine keeps unwinding (Cargo.toml): a panic in
//! one request ends that request with a 500, and a lock it held is poisoned. `locked` takes
//! the guard anyway, so one request's panic does not turn every later request into a panic.
//! The state behind a poisoned lock is what the panicking thread left: the engine's state is
//! counters, maps and queues that each critical section updates in single steps, so the worst
//! case is one sandbox or zygote that the engine loses track of (its cgroup is still killed and
//! removed at shutdown, or by `cleanup` after a crash).

use std::sync::{Mutex, MutexGuard, PoisonError};

pub trait Locked<T> {
    /// `lock()`, ignoring poison.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
