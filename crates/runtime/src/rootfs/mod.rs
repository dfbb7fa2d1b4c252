//! The container's root filesystem: mount propagation, the spec's mounts, devices, pivot_root,
//! masked and read-only paths.
//!
//! Every mount destination is resolved inside the rootfs with openat2(RESOLVE_IN_ROOT) and the
//! mount is made onto the resulting fd (through /proc/self/fd/N, or move_mount on the fd), so a
//! symlink planted in the rootfs can never redirect a mount to the host (CVE-2021-30465). Bind
//! mounts use the new mount API (open_tree + mount_setattr + move_mount): attributes are set on a
//! detached tree before it is attached, which needs no remount and leaves no window.

mod cgroup;
mod copyup;
mod device;
mod masks;
mod mount;
mod mountapi;
mod options;
mod paths;
mod root;

pub use cgroup::*;
pub use device::*;
pub use masks::*;
pub use mount::*;
pub use mountapi::*;
pub use options::*;
pub use paths::*;
pub use root::*;
