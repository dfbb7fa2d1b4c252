//! v2 `hugetlb`: hugetlb.<size>.max (and .rsvd.max where the kernel has it); usage and the
//! `max` event count per size as statistics (also the hybrid leaf's, without a v1 hugetlb
//! hierarchy).

use std::path::{Path, PathBuf};

use oci_spec::runtime::LinuxResources;

use crate::fs::flat_keyed;
use crate::resources::{self as r, set, try_set};
use crate::stats::{hugetlb_sizes, opt_read, u};
use crate::{Hier, HugetlbStats, Manager, Result, Stats};

pub(super) fn apply(_: &Manager, u: &Hier, res: &LinuxResources) -> Result<()> {
    let Some(limits) = res.hugepage_limits().as_deref() else {
        return Ok(());
    };
    let vals = r::hugepage_values(limits)?;
    write(u, &vals, None)
}

/// Write hugetlb.<size>.max (and .rsvd.max where present) on a cgroup2 leaf. With
/// `delegate` (the directories this container made above its leaf), a missing file first
/// enables hugetlb in those (the hybrid tracking leaf is created without controllers, to keep
/// `create` cheap); never above them.
pub(crate) fn write(u: &Hier, vals: &[(String, i64)], delegate: Option<&[PathBuf]>) -> Result<()> {
    let d = u.dir.as_path();
    let mut delegated = false;
    for (size, lim) in vals {
        let file = format!("hugetlb.{size}.max");
        let v = r::max_or(*lim);
        if !try_set(d, &file, &v, "hugepageLimits")? {
            let Some(ours) = delegate.filter(|_| !delegated) else {
                return Err(r::missing(d, &file, "hugepageLimits", true));
            };
            for dir in ours
                .iter()
                .filter(|p| p.starts_with(&u.mount) && **p != u.dir)
            {
                super::enable(dir, &["hugetlb"]);
            }
            delegated = true;
            set(d, &file, &v, "hugepageLimits", true)?;
        }
        try_set(d, &format!("hugetlb.{size}.rsvd.max"), &v, "hugepageLimits")?;
    }
    Ok(())
}

/// hugetlb.<size>.current, and hugetlb.<size>.events' `max` as failcnt.
pub(crate) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    for size in hugetlb_sizes(d, ".current") {
        let mut h = HugetlbStats {
            usage: u(d, &format!("hugetlb.{size}.current"))?,
            ..Default::default()
        };
        if let Some(s) = opt_read(d, &format!("hugetlb.{size}.events"))? {
            h.failcnt = flat_keyed(&s)
                .find(|(k, _)| *k == "max")
                .map(|(_, v)| v)
                .unwrap_or(0);
        }
        st.hugetlb.insert(size, h);
    }
    Ok(())
}
