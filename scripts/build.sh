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
# Why musl when it is there (rustup target x86_64-unknown-linux-musl + musl-gcc): glibc's
# start-up reads the CPU's features and cache sizes with ~40 CPUID instructions, and CPUID
# traps to the hypervisor in a VM: ~0.28 ms of CPU per command on the development host (perf:
# handle_amd, init_cpu_features), before main. musl's start-up does none of that. libseccomp
# comes from Debian's static archive (libseccomp-dev), plus scripts/musl-fortify.c for the one
# glibc-only symbol it calls. scripts/musl-memcpy.c replaces musl's memcpy, slow for the small
# copies that make up nearly all of sprout's, and scripts/musl-open.c its open(), which follows each
# O_CLOEXEC open by a needless fcntl. Without the musl target, or with SPROUT_LIBC=glibc, the binary is
# a glibc static-pie as before (same behaviour, slower start).
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
MUSL=x86_64-unknown-linux-musl
SECCOMP_A=""
for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    [ -f "$d/libseccomp.a" ] && { SECCOMP_A="$d/libseccomp.a"; break; }
done
use_musl() {
    [ "${SPROUT_LIBC:-auto}" != glibc ] || return 1
    command -v musl-gcc >/dev/null || { echo "scripts/build.sh: no musl-gcc (apt-get install musl-tools): glibc build" >&2; return 1; }
    [ -n "$SECCOMP_A" ] || { echo "scripts/build.sh: no libseccomp.a (apt-get install libseccomp-dev): glibc build" >&2; return 1; }
    rustup target list --installed 2>/dev/null | grep -qx "$MUSL" || {
        echo "scripts/build.sh: rust target $MUSL not installed (rustup target add $MUSL): glibc build" >&2
        return 1
    }
}
if use_musl; then
    # Only libseccomp.a in the link search path: the system's library directory would also
    # offer glibc's libc.a to a link that must take musl's.
    DEPS="$REPO/target/musl-deps"
    mkdir -p "$DEPS"
    cp -f "$SECCOMP_A" "$DEPS/libseccomp.a"
    musl-gcc -O2 -c "$REPO/scripts/musl-fortify.c" -o "$DEPS/musl-fortify.o"
    # memcpy for small copies (scripts/musl-memcpy.c), checked against a byte loop first; the
    # object's name carries the source's hash, so that cargo links again when it changes.
    MEMCPY="$DEPS/musl-memcpy-$(sha256sum < "$REPO/scripts/musl-memcpy.c" | cut -c1-12).o"
    if [ ! -f "$MEMCPY" ]; then
        rm -f "$DEPS"/musl-memcpy-*.o
        musl-gcc -O2 -fno-builtin -fno-tree-loop-distribute-patterns -c "$REPO/scripts/musl-memcpy.c" -o "$MEMCPY.tmp"
        musl-gcc -O2 -Wl,--wrap=memcpy "$REPO/scripts/memcpy-check.c" "$MEMCPY.tmp" -o "$DEPS/memcpy-check"
        "$DEPS/memcpy-check" || { echo "scripts/build.sh: scripts/musl-memcpy.c fails its check" >&2; exit 1; }
        mv -f "$MEMCPY.tmp" "$MEMCPY"
    fi
    # open(2) without musl's fcntl after each O_CLOEXEC open (scripts/musl-open.c), checked
    # first; hash-named as above.
    OPEN="$DEPS/musl-open-$(cat "$REPO/scripts/musl-open.c" "$REPO/scripts/open-check.c" | sha256sum | cut -c1-12).o"
    if [ ! -f "$OPEN" ]; then
        rm -f "$DEPS"/musl-open-*.o
        musl-gcc -O2 -c "$REPO/scripts/musl-open.c" -o "$OPEN.tmp"
        musl-gcc -O2 -static -Wl,--wrap=open -Wl,--wrap=open64 "$REPO/scripts/open-check.c" "$OPEN.tmp" -o "$DEPS/open-check"
        "$DEPS/open-check" || { echo "scripts/build.sh: scripts/musl-open.c fails its check" >&2; exit 1; }
        mv -f "$OPEN.tmp" "$OPEN"
    fi
    TGT=${CARGO_TARGET_DIR:-$REPO/target}
    # Text layout (docs/performance.md, "Text layout"): the functions of the start path
    # (crates/sprout/hot-functions.txt) linked first and together, so that a command faults in
    # a few 64 KB windows of text instead of ~50 (peak RSS of `run` 3.8 -> 1.8 MB). lld's
    # --symbol-ordering-file takes exact symbols, and Rust's carry a hash that changes with the
    # toolchain and the dependencies: the list is mapped onto the symbols of the binary just
    # linked (map_hot), and when that mapping changed the binary is linked again with it (the
    # file's name carries its hash, so cargo sees new arguments). The linker is
    # rustc's own rust-lld (gcc-ld/ld.lld, shipped with every toolchain); without it, or with
    # SPROUT_LINK_ORDER=0, GNU ld links as before. The binary keeps its symbols under
    # target/<musl>/release (perf, gdb); target/release/sprout is stripped.
    HOT="$REPO/crates/sprout/hot-functions.txt"
    GCC_LD="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/gcc-ld"
    ORDER=""
    if [ "${SPROUT_LINK_ORDER:-1}" = 1 ] && [ -x "$GCC_LD/ld.lld" ] && [ -f "$HOT" ]; then
        ORDER=$(ls -t "$DEPS"/link-order-*.txt 2>/dev/null | head -1 || true)
        if [ -z "$ORDER" ]; then ORDER="$DEPS/link-order-none.txt"; : > "$ORDER"; fi
    elif [ "${SPROUT_LINK_ORDER:-1}" = 1 ]; then
        echo "scripts/build.sh: no rust-lld at $GCC_LD/ld.lld: GNU ld, default text layout" >&2
    fi
    musl_link() {
        local link=()
        [ -z "$ORDER" ] || link=(-C link-arg=-fuse-ld=lld -C "link-arg=-B$GCC_LD"
            -C "link-arg=-Wl,--symbol-ordering-file=$ORDER" -C link-arg=-Wl,--no-warn-symbol-ordering)
        LIBSECCOMP_LINK_TYPE=static LIBSECCOMP_LIB_PATH="$DEPS" \
            cargo rustc --release -p sprout --bin sprout --target "$MUSL" -- \
            "${FLAGS[@]}" -C link-arg="$DEPS/musl-fortify.o" -C link-arg="$MEMCPY" -C link-arg=-Wl,--wrap=memcpy -C link-arg="$OPEN" -C link-arg=-Wl,--wrap=open -C link-arg=-Wl,--wrap=open64 -C strip=none "${link[@]}" \
            -C link-arg=-Wl,-e,sprout_start
    }
    # The list's entries, in its order, as symbols of binary $1: the same symbol where the
    # binary has it (same toolchain and dependencies), else every symbol that is the same
    # without its hash (several monomorphizations of a generic function: some cold ones too).
    map_hot() {
        nm --defined-only "$1" | awk '$2 == "T" || $2 == "t" { print $3 }' | awk '
            function key(s) { sub(/17h[0-9a-f]+E$/, "", s); gsub(/Cs[0-9A-Za-z]+_/, "C", s); return s }
            FNR == NR { have[$0] = 1; k = key($0); m[k] = m[k] $0 "\n"; next }
            /^#/ || /^$/ { next }
            ($0 in have) { if (!($0 in done)) print $0; done[$0] = 1; next }
            { k = key($0); if (k in m && !(k in used)) { printf "%s", m[k]; used[k] = 1 } }' - "$HOT"
    }
    musl_link
    BIN="$TGT/$MUSL/release/sprout"
    if [ -n "$ORDER" ]; then
        map_hot "$BIN" > "$DEPS/link-order.new"
        sum=$(sha256sum < "$DEPS/link-order.new" | cut -c1-16)
        if [ "$ORDER" != "$DEPS/link-order-$sum.txt" ]; then
            rm -f "$DEPS"/link-order-*.txt
            mv -f "$DEPS/link-order.new" "$DEPS/link-order-$sum.txt"
            ORDER="$DEPS/link-order-$sum.txt"
            listed=$(grep -vc -e '^#' -e '^$' "$HOT")
            # A listed symbol is in the mapping as itself only where the binary has it exactly.
            exact=$(sort -u "$ORDER" | grep -cxF -f <(grep -v -e '^#' -e '^$' "$HOT") || true)
            echo "scripts/build.sh: text layout: $(grep -c . "$ORDER") symbols for $listed listed functions ($exact matched with their hash); linking again with them" >&2
            # Mapped without the hashes (another toolchain, or changed dependencies), the list
            # takes every monomorphization of each name, and the layout is much worse (peak RSS
            # of a `run` 2.3 against 1.7 MB when oci-spec's regex was replaced).
            if [ "$exact" -lt $((listed / 2)) ]; then
                echo "scripts/build.sh: warning: crates/sprout/hot-functions.txt is stale for this toolchain or these dependencies; regenerate it with bench/hot-functions (docs/performance.md, \"Text layout\")" >&2
            fi
            musl_link
        fi
        rm -f "$DEPS/link-order.new"
    fi
    # Everything (tests, bench, demo) runs target/release/sprout.
    mkdir -p target/release
    strip -o target/release/sprout.tmp "$BIN" 2>/dev/null || cp -f "$BIN" target/release/sprout.tmp
    mv -f target/release/sprout.tmp target/release/sprout
else
    cargo rustc --release -p sprout --bin sprout -- "${FLAGS[@]}"
fi
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
