//! What the kernel's verifier costs for the v2 device program: the runtime's default rule list
//! and longer ones (what device plugins and `--device` add), in sprout's layout
//! (`ebpf::device_filter`) and in runc's devicefilter layout, which sprout used before
//! (rebuilt here from the same rules for the comparison). Prints the instructions, what the
//! verifier walked ("processed") and the median `BPF_PROG_LOAD` time of each. Needs root.
//!   cargo run --release -p sprout-cgroups --example device_filter_load [LOADS]
use std::time::Instant;

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceCgroupBuilder, LinuxDeviceType};
use sprout_cgroups::ebpf::{self, Insn};

fn rule(
    allow: bool,
    t: Option<LinuxDeviceType>,
    maj: Option<i64>,
    min: Option<i64>,
    acc: &str,
) -> LinuxDeviceCgroup {
    let mut b = LinuxDeviceCgroupBuilder::default().allow(allow).access(acc);
    if let Some(t) = t {
        b = b.typ(t);
    }
    if let Some(m) = maj {
        b = b.major(m);
    }
    if let Some(m) = min {
        b = b.minor(m);
    }
    b.build().unwrap()
}

/// A leading deny-all, the config's `extra` rules, then the runtime's defaults (as
/// `sprout_cgroups::with_default_device_rules` appends them).
fn rules(extra: u32) -> Vec<LinuxDeviceCgroup> {
    let c = Some(LinuxDeviceType::C);
    let mut v = vec![rule(false, None, None, None, "rwm")];
    for i in 0..extra {
        let (maj, min) = if i % 3 == 0 { (195, i) } else { (500 + i, 0) };
        let acc = if i % 4 == 1 { "r" } else { "rw" };
        v.push(rule(true, c, Some(maj.into()), Some(min.into()), acc));
    }
    v.extend(sprout_cgroups::default_device_rules(&[]));
    v
}

fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    let regs = if cfg!(target_endian = "little") {
        (src << 4) | dst
    } else {
        (dst << 4) | src
    };
    Insn {
        code,
        regs,
        off,
        imm,
    }
}

/// runc's layout: r2..r5 loaded once, then every rule (the last first) tests them in turn.
fn runc_layout(list: &[LinuxDeviceCgroup]) -> Vec<Insn> {
    let mut p = vec![
        ins(0x61, 2, 1, 0, 0),
        ins(0x54, 2, 0, 0, 0xffff),
        ins(0x61, 3, 1, 0, 0),
        ins(0x74, 3, 0, 0, 16),
        ins(0x61, 4, 1, 4, 0),
        ins(0x61, 5, 1, 8, 0),
    ];
    for r in list.iter().rev() {
        let acc = r.access().as_deref().unwrap_or("");
        let bits = [('r', 2), ('w', 4), ('m', 1)]
            .iter()
            .filter(|(ch, _)| acc.contains(*ch))
            .map(|(_, b)| b)
            .sum::<i32>();
        let mut block = Vec::new();
        match r.typ() {
            Some(LinuxDeviceType::C) => block.push(ins(0x55, 2, 0, 0, 2)),
            Some(LinuxDeviceType::B) => block.push(ins(0x55, 2, 0, 0, 1)),
            _ => {}
        }
        if bits != 7 {
            block.extend([
                ins(0xbc, 1, 3, 0, 0),
                ins(0x54, 1, 0, 0, bits),
                ins(0x5d, 1, 3, 0, 0),
            ]);
        }
        if let Some(m) = r.major() {
            block.push(ins(0x55, 4, 0, 0, m as i32));
        }
        if let Some(m) = r.minor() {
            block.push(ins(0x55, 5, 0, 0, m as i32));
        }
        let conditional = !block.is_empty();
        block.extend([
            ins(0xb7, 0, 0, 0, i32::from(r.allow())),
            ins(0x95, 0, 0, 0, 0),
        ]);
        let len = block.len();
        for (i, x) in block.iter_mut().enumerate() {
            if x.code == 0x55 || x.code == 0x5d {
                x.off = (len - i - 1) as i16;
            }
        }
        p.extend(block);
        if !conditional {
            return p;
        }
    }
    p.extend([ins(0xb7, 0, 0, 0, 0), ins(0x95, 0, 0, 0, 0)]);
    p
}

fn median_load_us(prog: &[Insn], n: usize) -> f64 {
    let mut t: Vec<f64> = (0..n)
        .map(|_| {
            let s = Instant::now();
            drop(ebpf::load(prog).expect("BPF_PROG_LOAD"));
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[n / 2]
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(200, |s| s.parse().expect("LOADS: a number"));
    println!("| rules | layout | instructions | verifier walked | load, median µs ({n} loads) |");
    println!("|---:|---|---:|---:|---:|");
    for extra in [0, 6, 20, 31] {
        let list = rules(extra);
        for (name, prog) in [
            ("sprout", ebpf::device_filter(&list).unwrap()),
            ("runc's", runc_layout(&list)),
        ] {
            let walked = ebpf::verifier_processed(&prog).expect("loading with statistics");
            let us = median_load_us(
                &prog,
                if extra > 6 && name == "runc's" {
                    n / 4 + 1
                } else {
                    n
                },
            );
            println!(
                "| {} | {name} | {} | {walked} | {us:.0} |",
                list.len(),
                prog.len()
            );
        }
    }
}
