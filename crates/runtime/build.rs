//! Builds the exec trampoline (trampoline/trampoline.c): a static, libc-free program that
//! sprout loads from a sealed memfd so that no process a container can see is backed by the
//! runtime's own binary (CVE-2019-5736; see src/trampoline.rs). A C compiler is needed at build
//! time only (`cc`, or $SPROUT_TRAMPOLINE_CC / $CC).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "trampoline/trampoline.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=SPROUT_TRAMPOLINE_CC");
    println!("cargo:rerun-if-env-changed=CC");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("trampoline");
    let cc = env::var("SPROUT_TRAMPOLINE_CC")
        .or_else(|_| env::var("CC"))
        .unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args([
            "-Os",
            "-static",
            "-nostdlib",
            "-ffreestanding",
            "-fno-builtin",
            "-fno-tree-loop-distribute-patterns",
            "-fno-pie",
            "-no-pie",
            "-fno-stack-protector",
            "-fno-asynchronous-unwind-tables",
            "-fno-unwind-tables",
            "-Wall",
            "-Werror",
            "-Wl,--build-id=none",
            "-Wl,-z,noexecstack",
            "-Wl,-z,norelro",
            "-Wl,-n",
            "-s",
            "-o",
        ])
        .arg(&out)
        .arg(src)
        .status()
        .unwrap_or_else(|e| panic!("building the exec trampoline: cannot run {cc}: {e}"));
    assert!(
        status.success(),
        "building the exec trampoline with {cc} failed ({status})"
    );
}
