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

/// The eviction order: one LRU over the idle sandboxes (`idle`: when each was last used;
/// busy sandboxes are not idle, so never taken) and the leaf zygotes (ready, not the root,
/// no ready or starting zygote forked from it), as they share the memory budget. The least
/// recently used goes; a sandbox before a zygote used at the same time; among equal times
/// the first in the given order. `None`: nothing can go (empty, or all busy / parents /
/// the root). Pass no zygotes to evict sandboxes only.
pub(super) fn eviction_victim<T: Ord + Copy>(
    idle: &[T],
    zygotes: &[ZygoteView<'_, T>],
) -> Option<Victim> {
    let sb = idle
        .iter()
        .enumerate()
        .min_by_key(|(_, t)| **t)
        .map(|(i, t)| (i, *t));
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
        (Some((i, ts)), l) if l.is_none_or(|(_, tz)| ts <= tz) => Some(Victim::Sandbox(i)),
        (_, Some((j, _))) => Some(Victim::Zygote(j)),
        _ => None,
    }
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

    #[test]
    fn eviction_of_nothing_is_none() {
        assert_eq!(eviction_victim::<u32>(&[], &[]), None);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_sandbox() {
        assert_eq!(eviction_victim(&[5, 2, 9], &[]), Some(Victim::Sandbox(1)));
    }

    #[test]
    fn eviction_ties_among_sandboxes_take_the_first() {
        assert_eq!(eviction_victim(&[4, 2, 2], &[]), Some(Victim::Sandbox(1)));
    }

    #[test]
    fn eviction_with_all_sandboxes_busy_and_only_the_root_is_none() {
        // Busy sandboxes are not idle; the root zygote (no packages) never goes.
        let zs = [ready("", None, 0, 1)];
        assert_eq!(eviction_victim(&[], &zs), None);
    }

    #[test]
    fn eviction_takes_an_older_leaf_zygote_before_sandboxes() {
        let zs = [ready("", None, 0, 0), ready("a", Some(""), 1, 3)];
        assert_eq!(eviction_victim(&[7, 5], &zs), Some(Victim::Zygote(1)));
    }

    #[test]
    fn eviction_takes_a_sandbox_before_a_zygote_used_at_the_same_time() {
        let zs = [ready("a", Some(""), 1, 5)];
        assert_eq!(eviction_victim(&[5], &zs), Some(Victim::Sandbox(0)));
        assert_eq!(eviction_victim(&[6], &zs), Some(Victim::Zygote(0)));
    }

    #[test]
    fn eviction_never_takes_the_root_zygote() {
        let zs = [ready("", None, 0, 0), ready("a", Some(""), 1, 9)];
        assert_eq!(eviction_victim(&[], &zs), Some(Victim::Zygote(1)));
        assert_eq!(eviction_victim(&[8], &zs), Some(Victim::Sandbox(0)));
    }

    #[test]
    fn eviction_takes_leaves_before_their_parents() {
        // "a" is older, but "a,b" was forked from it: the leaf goes first.
        let zs = [
            ready("", None, 0, 0),
            ready("a", Some(""), 1, 1),
            ready("a,b", Some("a"), 2, 8),
        ];
        assert_eq!(eviction_victim(&[], &zs), Some(Victim::Zygote(2)));
        // Once the leaf is gone, its parent is a leaf.
        assert_eq!(eviction_victim(&[], &zs[..2]), Some(Victim::Zygote(1)));
    }

    #[test]
    fn eviction_keeps_the_parent_of_a_starting_zygote() {
        let zs = [ready("a", Some(""), 1, 1), starting("a,b", Some("a"))];
        assert_eq!(eviction_victim(&[], &zs), None);
        assert_eq!(eviction_victim(&[4], &zs), Some(Victim::Sandbox(0)));
    }

    #[test]
    fn eviction_lets_a_failed_child_not_keep_its_parent() {
        let failed = ZygoteView {
            key: "a,b",
            parent: None,
            ready: None,
        };
        let zs = [ready("a", Some(""), 1, 1), failed];
        assert_eq!(eviction_victim(&[], &zs), Some(Victim::Zygote(0)));
    }

    #[test]
    fn eviction_never_takes_a_starting_zygote() {
        let zs = [starting("a", Some(""))];
        assert_eq!(eviction_victim(&[], &zs), None);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_of_several_leaves() {
        let zs = [
            ready("a", Some(""), 1, 6),
            ready("b", Some(""), 1, 2),
            ready("c", Some(""), 1, 4),
        ];
        assert_eq!(eviction_victim(&[3], &zs), Some(Victim::Zygote(1)));
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
