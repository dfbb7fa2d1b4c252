//! The binary's entry point on the static musl build (`scripts/build.sh` links with
//! `-e sprout_start`): one `madvise(MADV_POPULATE_WRITE)` over the writable segment, then musl's
//! own `_start`.
//!
//! A static-pie relocates itself before `main`: musl's `_start_c` adds the load address to
//! ~2,100 pointers (DT_RELR) spread over `.data.rel.ro` (~40 KB) and `.data`: ~8,800 over 47
//! pages before oci-spec's regex was served by regex-lite (crates/regex-lite-shim). Each first
//! write to one of those pages is a copy-on-write fault of a private file mapping, and on the
//! development host (a nested VM) those faults made `_start_c` the costliest function of a
//! short command: ~0.2 ms of every `sprout` process (perf, cpu-clock samples on its relocation
//! loop). One madvise breaks copy-on-write for the whole range in the kernel instead, before a
//! single relocation is written. A failure (a kernel before 5.14: EINVAL) changes nothing: the
//! relocation then faults the pages in as before.
//!
//! The range: from the page of `__init_array_start` (the RELRO part of the writable segment
//! starts with `.tdata`, a few bytes before it) to `_edata` (the end of `.data`, which the
//! relocations reach last; `.bss` is left alone). Both are linker-defined symbols, reached
//! PC-relative: no relocation is needed to compute them. The stub keeps `%rsp` as the kernel
//! set it (the argument vector `_start` reads) and clears `%rdx` (the ABI's exit-function
//! pointer, zero from the kernel) after the syscall used it.

#[cfg(all(target_arch = "x86_64", target_env = "musl", not(test)))]
std::arch::global_asm!(
    ".globl sprout_start",
    ".type sprout_start,@function",
    "sprout_start:",
    "lea __init_array_start(%rip), %rdi",
    "and $-4096, %rdi",
    "lea _edata(%rip), %rsi",
    "sub %rdi, %rsi",
    "mov $23, %edx", // MADV_POPULATE_WRITE
    "mov $28, %eax", // SYS_madvise
    "syscall",
    "xor %edx, %edx",
    "jmp _start",
    ".size sprout_start, . - sprout_start",
    options(att_syntax)
);
