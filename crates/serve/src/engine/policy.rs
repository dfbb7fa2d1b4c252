//! The engine's pure choices, over plain data (no cgroups, no processes, no locks): what
//! eviction takes first, and which zygote a new sandbox is forked from. The engine builds
//! these views under its locks and acts on the answer; the rules are unit-tested here. Times
//! are any ordered value (the engine's `Instant`s; plain numbers in the tests).

use std::collections::HashSet;

/// A zygote slot as eviction sees it.
pub(super) struct ZygoteView<'a, T> {
    pub key: &'a str,
    /// The zygote it was (or is being) forked from; a failed slot has none.
    pub parent: Option<&'a str>,
    /// Ready: its number of packages (0: the root zygote) and its last use. `None`: starting
    /// or failed, never evicted (a starting one still keeps its parent in the cache).
    pub ready: Option<(usize, T)>,
}

/// What eviction takes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Victim {
    /// The idle sandbox at this index.
    Sandbox(usize),
    /// The zygote at this index of the views.
    Zygote(usize),
}

/// An idle sandbox as eviction sees it.
#[derive(Clone, Copy)]
pub(super) struct IdleView<T> {
    /// When it was last used.
    pub t: T,
    /// Frozen: idle for `freeze_after_ms` or more.
    pub frozen: bool,
    /// Its handler has another sandbox (busy or idle): evicting it costs that handler
    /// parallelism, not a start on its next request.
    pub surplus: bool,
}

/// The eviction order over the idle sandboxes (busy ones are not idle, so never taken) and
/// the leaf zygotes (ready, not the root, no ready or starting zygote forked from it), as
/// they share the memory budget. A *surplus* sandbox (its handler keeps another) goes first,
/// the least recently used of them; then the least recently used of the others and of the
/// leaf zygotes, a sandbox before a zygote used at the same time; among equal keys the first
/// in the given order.
///
/// `growing`: the eviction is for a handler that already has a sandbox (all busy) and wants
/// one more. Then only a frozen sandbox may go, and no zygote: a recently used sandbox would
/// be started again for its own handler's next request, and under a cyclic access pattern
/// (round-robin over more handlers' sandboxes than fit) every request would evict one and
/// start one; the growing handler waits for its own busy sandbox instead.
///
/// `None`: nothing can go (empty, all busy / parents / the root, or nothing frozen for a
/// growing handler). Pass no zygotes to evict sandboxes only.
pub(super) fn eviction_victim<T: Ord + Copy>(
    idle: &[IdleView<T>],
    zygotes: &[ZygoteView<'_, T>],
    growing: bool,
) -> Option<Victim> {
    let sb = idle
        .iter()
        .enumerate()
        .filter(|(_, s)| !growing || s.frozen)
        .min_by_key(|(_, s)| (!s.surplus, s.t))
        .map(|(i, s)| (i, *s));
    if growing {
        return sb.map(|(i, _)| Victim::Sandbox(i));
    }
    let parents: HashSet<&str> = zygotes.iter().filter_map(|z| z.parent).collect();
    let leaf = zygotes
        .iter()
        .enumerate()
        .filter_map(|(j, z)| match z.ready {
            Some((n, t)) if n > 0 && !parents.contains(z.key) => Some((j, t)),
            _ => None,
        })
        .min_by_key(|(_, t)| *t);
    match (sb, leaf) {
        (Some((i, s)), l) if s.surplus || l.is_none_or(|(_, tz)| s.t <= tz) => {
            Some(Victim::Sandbox(i))
        }
        (_, Some((j, _))) => Some(Victim::Zygote(j)),
        _ => None,
    }
}

/// Where a new sandbox stands against `max_sandboxes` and the memory budget. Sandboxes being
/// destroyed (`dying`) still hold processes, mounts and a cgroup: they count until gone.
#[derive(Clone, Copy, Debug)]
pub(super) struct Room {
    pub live: usize,
    pub dying: usize,
    pub max: usize,
    /// Memory of the live sandboxes, of the dying ones, of the zygotes; the estimate for a
    /// new sandbox; the budget (bytes).
    pub mem: u64,
    pub dying_mem: u64,
    pub zygote_mem: u64,
    pub est: u64,
    pub budget: u64,
    /// Other requests waiting for room for a handler without a sandbox (they evict too).
    pub others_waiting: usize,
    /// This request's handler has sandboxes (all busy): see [`eviction_victim`].
    pub growing: bool,
    /// An eviction was just tried and found nothing to take.
    pub nothing_to_evict: bool,
}

/// What a request that needs a new sandbox does.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    Start,
    /// Evict one victim (then ask again).
    Evict,
    /// Wait: for the dying sandboxes to be gone, a sandbox to become idle (evictable, or the
    /// handler's own), or the deadline.
    Wait,
}

/// The admission of a new sandbox. Start when there is room counting the dying sandboxes.
/// Otherwise evict only what the waiting requests need beyond what the dying sandboxes will
/// free: an eviction moves a sandbox from live to dying, so live + dying does not drop
/// until the janitors are done, and evicting "while at the cap" took every idle sandbox for
/// one start. Over the memory budget only (not at the cap), with nothing on its way out and
/// nothing to evict, a handler without a sandbox starts anyway (the budget is soft: the
/// estimate is a guess and the zygotes count too); a growing handler waits for its own.
pub(super) fn admit(r: &Room) -> Admit {
    let at_cap = r.live + r.dying >= r.max;
    let over = r.mem + r.dying_mem + r.zygote_mem + r.est > r.budget;
    if !at_cap && !over {
        return Admit::Start;
    }
    let need = r.others_waiting + 1;
    let short_count = at_cap && r.live + need > r.max;
    let short_mem = over && r.mem + r.zygote_mem + need as u64 * r.est > r.budget;
    if (short_count || short_mem) && !r.nothing_to_evict {
        return Admit::Evict;
    }
    if !at_cap && r.dying_mem == 0 && !r.growing {
        return Admit::Start;
    }
    Admit::Wait
}

/// The zygote choice: of the ready zygotes (`ready`: each one's packages and last use), the
/// one whose package set is the largest subset of `want` (the root zygote, with none, is a
/// subset of every set); ties: the most recently used, then the later in the given order.
/// `None`: no ready zygote is a subset.
pub(super) fn zygote_choice<T: Ord + Copy>(
    ready: &[(&[String], T)],
    want: &[&str],
) -> Option<usize> {
    ready
        .iter()
        .enumerate()
        .filter(|(_, (pkgs, _))| pkgs.iter().all(|p| want.contains(&p.as_str())))
        .max_by_key(|(_, (pkgs, t))| (pkgs.len(), *t))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready<'a>(key: &'a str, parent: Option<&'a str>, n: usize, t: u32) -> ZygoteView<'a, u32> {
        ZygoteView {
            key,
            parent,
            ready: Some((n, t)),
        }
    }

    fn starting<'a>(key: &'a str, parent: Option<&'a str>) -> ZygoteView<'a, u32> {
        ZygoteView {
            key,
            parent,
            ready: None,
        }
    }

    /// Idle sandboxes last used at these times, hot, each its handler's only one.
    fn lru(ts: &[u32]) -> Vec<IdleView<u32>> {
        ts.iter()
            .map(|&t| IdleView {
                t,
                frozen: false,
                surplus: false,
            })
            .collect()
    }

    #[test]
    fn eviction_of_nothing_is_none() {
        assert_eq!(eviction_victim::<u32>(&[], &[], false), None);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_sandbox() {
        assert_eq!(
            eviction_victim(&lru(&[5, 2, 9]), &[], false),
            Some(Victim::Sandbox(1))
        );
    }

    #[test]
    fn eviction_ties_among_sandboxes_take_the_first() {
        assert_eq!(
            eviction_victim(&lru(&[4, 2, 2]), &[], false),
            Some(Victim::Sandbox(1))
        );
    }

    #[test]
    fn eviction_with_all_sandboxes_busy_and_only_the_root_is_none() {
        // Busy sandboxes are not idle; the root zygote (no packages) never goes.
        let zs = [ready("", None, 0, 1)];
        assert_eq!(eviction_victim(&[], &zs, false), None);
    }

    #[test]
    fn eviction_takes_an_older_leaf_zygote_before_sandboxes() {
        let zs = [ready("", None, 0, 0), ready("a", Some(""), 1, 3)];
        assert_eq!(
            eviction_victim(&lru(&[7, 5]), &zs, false),
            Some(Victim::Zygote(1))
        );
    }

    #[test]
    fn eviction_takes_a_sandbox_before_a_zygote_used_at_the_same_time() {
        let zs = [ready("a", Some(""), 1, 5)];
        assert_eq!(
            eviction_victim(&lru(&[5]), &zs, false),
            Some(Victim::Sandbox(0))
        );
        assert_eq!(
            eviction_victim(&lru(&[6]), &zs, false),
            Some(Victim::Zygote(0))
        );
    }

    #[test]
    fn eviction_never_takes_the_root_zygote() {
        let zs = [ready("", None, 0, 0), ready("a", Some(""), 1, 9)];
        assert_eq!(eviction_victim(&[], &zs, false), Some(Victim::Zygote(1)));
        assert_eq!(
            eviction_victim(&lru(&[8]), &zs, false),
            Some(Victim::Sandbox(0))
        );
    }

    #[test]
    fn eviction_takes_leaves_before_their_parents() {
        // "a" is older, but "a,b" was forked from it: the leaf goes first.
        let zs = [
            ready("", None, 0, 0),
            ready("a", Some(""), 1, 1),
            ready("a,b", Some("a"), 2, 8),
        ];
        assert_eq!(eviction_victim(&[], &zs, false), Some(Victim::Zygote(2)));
        // Once the leaf is gone, its parent is a leaf.
        assert_eq!(
            eviction_victim(&[], &zs[..2], false),
            Some(Victim::Zygote(1))
        );
    }

    #[test]
    fn eviction_keeps_the_parent_of_a_starting_zygote() {
        let zs = [ready("a", Some(""), 1, 1), starting("a,b", Some("a"))];
        assert_eq!(eviction_victim(&[], &zs, false), None);
        assert_eq!(
            eviction_victim(&lru(&[4]), &zs, false),
            Some(Victim::Sandbox(0))
        );
    }

    #[test]
    fn eviction_lets_a_failed_child_not_keep_its_parent() {
        let failed = ZygoteView {
            key: "a,b",
            parent: None,
            ready: None,
        };
        let zs = [ready("a", Some(""), 1, 1), failed];
        assert_eq!(eviction_victim(&[], &zs, false), Some(Victim::Zygote(0)));
    }

    #[test]
    fn eviction_never_takes_a_starting_zygote() {
        let zs = [starting("a", Some(""))];
        assert_eq!(eviction_victim(&[], &zs, false), None);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_of_several_leaves() {
        let zs = [
            ready("a", Some(""), 1, 6),
            ready("b", Some(""), 1, 2),
            ready("c", Some(""), 1, 4),
        ];
        assert_eq!(
            eviction_victim(&lru(&[3]), &zs, false),
            Some(Victim::Zygote(1))
        );
    }

    fn idle(t: u32, frozen: bool, surplus: bool) -> IdleView<u32> {
        IdleView { t, frozen, surplus }
    }

    #[test]
    fn eviction_takes_a_surplus_sandbox_first() {
        // The oldest (0) is its handler's only sandbox; 5 and 3 have a sibling: 3 goes.
        let v = [
            idle(0, false, false),
            idle(5, false, true),
            idle(3, false, true),
        ];
        assert_eq!(eviction_victim(&v, &[], false), Some(Victim::Sandbox(2)));
        // Before an older leaf zygote too; a non-surplus sandbox does not.
        let zs = [ready("a", Some(""), 1, 1)];
        assert_eq!(eviction_victim(&v, &zs, false), Some(Victim::Sandbox(2)));
        assert_eq!(
            eviction_victim(&v[..1], &zs, false),
            Some(Victim::Sandbox(0))
        );
        assert_eq!(
            eviction_victim(&[idle(2, false, false)], &zs, false),
            Some(Victim::Zygote(0))
        );
    }

    #[test]
    fn eviction_for_a_growing_handler_takes_only_frozen_sandboxes_and_no_zygote() {
        let zs = [ready("a", Some(""), 1, 0)];
        let hot = [idle(1, false, false), idle(2, false, true)];
        assert_eq!(eviction_victim(&hot, &zs, true), None);
        let v = [
            idle(1, false, true),
            idle(4, true, false),
            idle(3, true, false),
        ];
        assert_eq!(eviction_victim(&v, &zs, true), Some(Victim::Sandbox(2)));
        // Not growing: the surplus one, and the zygote before an older non-surplus one.
        assert_eq!(eviction_victim(&v, &zs, false), Some(Victim::Sandbox(0)));
        assert_eq!(
            eviction_victim(&v[1..], &zs, false),
            Some(Victim::Zygote(0))
        );
    }

    /// A roomy budget, 3 sandboxes at most.
    fn room(live: usize, dying: usize) -> Room {
        Room {
            live,
            dying,
            max: 3,
            mem: 0,
            dying_mem: 0,
            zygote_mem: 0,
            est: 8,
            budget: 1000,
            others_waiting: 0,
            growing: false,
            nothing_to_evict: false,
        }
    }

    #[test]
    fn admit_starts_below_the_cap_and_evicts_once_at_it() {
        assert_eq!(admit(&room(2, 0)), Admit::Start);
        assert_eq!(admit(&room(1, 1)), Admit::Start);
        // At the cap: evict one...
        assert_eq!(admit(&room(3, 0)), Admit::Evict);
        // ... and once it is dying, wait for it: no second eviction for the same start.
        assert_eq!(admit(&room(2, 1)), Admit::Wait);
        // A second waiter needs a second eviction, a third none (three dying already).
        let two = Room {
            others_waiting: 1,
            ..room(2, 1)
        };
        assert_eq!(admit(&two), Admit::Evict);
        let three = Room {
            others_waiting: 2,
            ..room(0, 3)
        };
        assert_eq!(admit(&three), Admit::Wait);
        // Nothing to evict: wait (the cap is hard).
        let none = Room {
            nothing_to_evict: true,
            ..room(3, 0)
        };
        assert_eq!(admit(&none), Admit::Wait);
    }

    #[test]
    fn admit_under_the_memory_budget_evicts_what_is_short_then_waits_or_starts_anyway() {
        let r = |mem, dying_mem, zygote_mem| Room {
            mem,
            dying_mem,
            zygote_mem,
            budget: 100,
            est: 8,
            ..room(1, 0)
        };
        assert_eq!(admit(&r(50, 0, 40)), Admit::Start);
        assert_eq!(admit(&r(60, 0, 40)), Admit::Evict);
        // What is dying covers it: wait for it rather than evict more.
        assert_eq!(admit(&r(10, 50, 40)), Admit::Wait);
        // The zygotes alone fill the budget, nothing to evict, nothing dying: start anyway...
        let full = Room {
            nothing_to_evict: true,
            ..r(0, 0, 120)
        };
        assert_eq!(admit(&full), Admit::Start);
        // ... unless the handler has a sandbox of its own to wait for.
        let growing = Room {
            growing: true,
            ..full
        };
        assert_eq!(admit(&growing), Admit::Wait);
    }

    fn pk(s: &[&str]) -> Vec<String> {
        s.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn zygote_choice_of_nothing_is_none() {
        assert_eq!(zygote_choice::<u32>(&[], &["a"]), None);
        assert_eq!(zygote_choice::<u32>(&[], &[]), None);
    }

    #[test]
    fn zygote_choice_falls_back_to_the_root() {
        let (root, b) = (pk(&[]), pk(&["b"]));
        let zs = [(&root[..], 1), (&b[..], 9)];
        assert_eq!(zygote_choice(&zs, &["a"]), Some(0));
        // No packages at all: only the root serves.
        assert_eq!(zygote_choice(&zs, &[]), Some(0));
    }

    #[test]
    fn zygote_choice_is_none_when_no_zygote_is_a_subset() {
        let (b, ab) = (pk(&["b"]), pk(&["a", "b"]));
        let zs = [(&b[..], 1), (&ab[..], 2)];
        assert_eq!(zygote_choice(&zs, &["a"]), None);
        assert_eq!(zygote_choice(&zs, &[]), None);
    }

    #[test]
    fn zygote_choice_takes_the_largest_subset() {
        let (root, a, ab, abc) = (pk(&[]), pk(&["a"]), pk(&["a", "b"]), pk(&["a", "b", "c"]));
        // The exact set when ready; a superset ("a,b,c") never serves.
        let zs = [(&root[..], 9), (&a[..], 9), (&ab[..], 1), (&abc[..], 9)];
        assert_eq!(zygote_choice(&zs, &["a", "b"]), Some(2));
        // Otherwise the largest subset, however old.
        assert_eq!(zygote_choice(&zs, &["a", "b", "d"]), Some(2));
        assert_eq!(zygote_choice(&zs[..2], &["a", "b"]), Some(1));
    }

    #[test]
    fn zygote_choice_ties_go_to_the_most_recently_used_then_the_later() {
        let (a, b) = (pk(&["a"]), pk(&["b"]));
        assert_eq!(
            zygote_choice(&[(&a[..], 3), (&b[..], 7)], &["a", "b"]),
            Some(1)
        );
        assert_eq!(
            zygote_choice(&[(&a[..], 7), (&b[..], 3)], &["a", "b"]),
            Some(0)
        );
        assert_eq!(
            zygote_choice(&[(&a[..], 5), (&b[..], 5)], &["a", "b"]),
            Some(1)
        );
    }
}
