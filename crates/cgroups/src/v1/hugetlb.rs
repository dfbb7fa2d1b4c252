//! v1 `hugetlb`: hugetlb.<size>.limit_in_bytes (and .rsvd); on a hybrid host without a v1
//! hugetlb hierarchy, the cgroup2 leaf's files. Usage, maximum usage and failcnt per size as
//! statistics (without a v1 hierarchy, `v2/hugetlb.rs` reads the leaf's).

use std::path::Path;

use oci_spec::runtime::LinuxResources;

use crate::resources::{self as r, not_mounted, set, try_set};
use crate::stats::{hugetlb_sizes, u};
use crate::{HugetlbStats, Layout, Manager, Result, Stats};

pub(super) fn apply(m: &Manager, res: &LinuxResources) -> Result<()> {
    let Some(limits) = res.hugepage_limits().as_deref() else {
        return Ok(());
    };
    if limits.is_empty() {
        return Ok(());
    }
    let vals = r::hugepage_values(limits)?;
    if let Some(h) = m.v1_hier("hugetlb") {
        for (size, lim) in &vals {
            let v = lim.to_string();
            set(
                &h.dir,
                &format!("hugetlb.{size}.limit_in_bytes"),
                &v,
                "hugepageLimits",
                false,
            )?;
            try_set(
                &h.dir,
                &format!("hugetlb.{size}.rsvd.limit_in_bytes"),
                &v,
                "hugepageLimits",
            )?;
        }
        return Ok(());
    }
    // Hybrid without a v1 hugetlb hierarchy: drive it on the cgroup2 leaf.
    if let (Layout::Hybrid, Some(u)) = (m.layout(), m.unified_hier()) {
        return crate::v2::hugetlb::write(u, &vals, Some(m.created()));
    }
    Err(not_mounted("hugepageLimits", "hugetlb"))
}

pub(super) fn stats(d: &Path, st: &mut Stats) -> Result<()> {
    for size in hugetlb_sizes(d, ".usage_in_bytes") {
        let h = HugetlbStats {
            usage: u(d, &format!("hugetlb.{size}.usage_in_bytes"))?,
            max: u(d, &format!("hugetlb.{size}.max_usage_in_bytes"))?,
            failcnt: u(d, &format!("hugetlb.{size}.failcnt"))?,
        };
        st.hugetlb.insert(size, h);
    }
    Ok(())
}
