#!/usr/bin/env bash
# scripts/build.sh: build target/release/sprout as a static-pie executable (what docs/performance.md
# measures), and with --workspace every other workspace binary (sprout-serve, ...) as usual.
#
# Why static: a dynamically linked sprout spends ~0.3-0.6 ms of CPU per command in the dynamic
# loader (libc, libgcc_s) before main; `sprout run` pays it once per container. The flag goes
# to the sprout binary only (`cargo rustc`): as a global RUSTFLAGS it would also reach the
# proc-macro crates, which cannot be built static. `cargo build --release -p sprout` still
# works and gives a dynamically linked binary that behaves the same, ~0.5 ms slower per command.
#
# usage: scripts/build.sh [--workspace] [--no-pie]
#   --no-pie   link a non-PIE static executable: ~0.5 ms less CPU per start here (no start-up
#              relocation of the binary), but no ASLR for the runtime's own image; see
#              docs/performance.md before using it.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
export PATH="$HOME/.cargo/bin:$PATH"
WORKSPACE=0
FLAGS=(-C target-feature=+crt-static)
# Packed relative relocations (DT_RELR, binutils >= 2.38, glibc >= 2.36): a static-pie relocates
# itself before main, and with classic RELA that means reading ~9,600 24-byte entries (230 KB,
# ~57 pages faulted in) per command; RELR encodes the same relocations in ~3 KB. Measured here:
# `sprout --version` 1.12 -> 0.72 ms task-clock, `run` -0.5 ms wall (docs/performance.md).
if ld --help 2>/dev/null | grep -q pack-relative-relocs; then
    FLAGS+=(-C link-arg=-Wl,-z,pack-relative-relocs)
fi
for a in "$@"; do
    case "$a" in
        --workspace) WORKSPACE=1 ;;
        --no-pie) FLAGS+=(-C relocation-model=static) ;;
        *) echo "scripts/build.sh: unknown argument $a" >&2; exit 2 ;;
    esac
done
if [ "$WORKSPACE" = 1 ]; then
    cargo build --release --workspace --exclude sprout
fi
cargo rustc --release -p sprout --bin sprout -- "${FLAGS[@]}"
if command -v ldd >/dev/null && ldd target/release/sprout 2>&1 | grep -q '=>'; then
    echo "scripts/build.sh: target/release/sprout is not static:" >&2
    ldd target/release/sprout >&2
    exit 1
fi
# A libc whose static-pie start-up cannot apply RELR would crash here, not in a container start.
if ! target/release/sprout --version >/dev/null; then
    echo "scripts/build.sh: target/release/sprout does not run (flags: ${FLAGS[*]})" >&2
    exit 1
fi
