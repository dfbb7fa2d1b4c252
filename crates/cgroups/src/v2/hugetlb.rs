//! v2 `hugetlb`: hugetlb.<size>.max (and .rsvd.max where the kernel has it).

use std::path::PathBuf;

use oci_spec::runtime::LinuxResources;

use crate::resources::{self as r, set, try_set};
use crate::{Hier, Manager, Result};

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
