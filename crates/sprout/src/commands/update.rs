//! `update`: change a running container's resource limits (runc's flags, or `--resources`
//! JSON), applied through the container's cgroup.

use clap::Args;
use sprout_runtime::state::Store;
use sprout_runtime::{Error, Result};

/// `update`'s flags, runc's names. The byte sizes, --cpu-quota, --cpu-rt-runtime and
/// --pids-limit take -1 for unlimited (`--memory -1` as well as `--memory=-1`).
#[derive(Args)]
pub struct UpdateArgs {
    #[arg(short = 'r', long)]
    pub resources: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    pub memory: Option<String>,
    #[arg(long = "memory-swap", allow_negative_numbers = true)]
    pub memory_swap: Option<String>,
    #[arg(long = "memory-reservation", allow_negative_numbers = true)]
    pub memory_reservation: Option<String>,
    /// CPU shares (runc spells it --cpu-share; both are accepted).
    #[arg(long = "cpu-shares", visible_alias = "cpu-share")]
    pub cpu_shares: Option<u64>,
    #[arg(long = "cpu-quota", allow_negative_numbers = true)]
    pub cpu_quota: Option<i64>,
    #[arg(long = "cpu-period")]
    pub cpu_period: Option<u64>,
    /// CPU burst in microseconds above the quota (cpu.max.burst; v1 cpu.cfs_burst_us).
    #[arg(long = "cpu-burst")]
    pub cpu_burst: Option<u64>,
    /// 1: the cgroup's tasks run as SCHED_IDLE (cpu.idle); 0: the default.
    #[arg(long = "cpu-idle", allow_negative_numbers = true)]
    pub cpu_idle: Option<String>,
    /// CPU realtime period in microseconds (cgroup v1 cpu.rt_period_us).
    #[arg(long = "cpu-rt-period")]
    pub cpu_rt_period: Option<u64>,
    /// CPU realtime runtime in microseconds within the period (cgroup v1 cpu.rt_runtime_us).
    #[arg(long = "cpu-rt-runtime", allow_negative_numbers = true)]
    pub cpu_rt_runtime: Option<i64>,
    #[arg(long = "cpuset-cpus")]
    pub cpuset_cpus: Option<String>,
    #[arg(long = "cpuset-mems")]
    pub cpuset_mems: Option<String>,
    #[arg(long = "pids-limit", allow_negative_numbers = true)]
    pub pids_limit: Option<i64>,
    #[arg(long = "blkio-weight")]
    pub blkio_weight: Option<u16>,
    /// Intel RDT/CAT L3 cache schema: refused (sprout has no resctrl support), with runc's
    /// words where the host has no CAT.
    #[arg(long = "l3-cache-schema")]
    pub l3_cache_schema: Option<String>,
    /// Intel RDT/MBA memory bandwidth schema: refused as --l3-cache-schema.
    #[arg(long = "mem-bw-schema")]
    pub mem_bw_schema: Option<String>,
    pub id: String,
}

fn parse_bytes(flag: &str, s: &str) -> Result<i64> {
    let s = s.trim();
    if s == "-1" {
        return Ok(-1);
    }
    let (num, mult) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = s[i..].to_ascii_lowercase();
            let m: i64 = match unit.trim_end_matches('b').trim_end_matches('i') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(Error::msg(format!("{flag} {s:?}: unknown unit"))),
            };
            (&s[..i], m)
        }
        None => (s, 1),
    };
    let n: i64 = num
        .trim()
        .parse()
        .map_err(|_| Error::msg(format!("{flag} {s:?}: not a size")))?;
    if n < 0 {
        return Err(Error::msg(format!(
            "{flag} {s:?}: must be -1 (unlimited) or a size"
        )));
    }
    Ok(n * mult)
}

pub fn run(store: &Store, a: UpdateArgs) -> Result<i32> {
    let UpdateArgs {
        resources,
        memory,
        memory_swap,
        memory_reservation,
        cpu_shares,
        cpu_quota,
        cpu_period,
        cpu_burst,
        cpu_idle,
        cpu_rt_period,
        cpu_rt_runtime,
        cpuset_cpus,
        cpuset_mems,
        pids_limit,
        blkio_weight,
        l3_cache_schema,
        mem_bw_schema,
        id,
    } = a;
    let id = id.as_str();
    let st = store.load(id)?;
    if st.status(store) == sprout_runtime::state::Status::Stopped {
        return Err(Error::msg(format!(
            "container {id:?} is stopped: cannot update it"
        )));
    }
    let mut res: serde_json::Value = match resources {
        Some(p) => {
            let raw = if p == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| Error::os("reading resources from stdin", e))?;
                s
            } else {
                std::fs::read_to_string(&p).map_err(|e| Error::os(format!("--resources {p}"), e))?
            };
            serde_json::from_str(&raw)
                .map_err(|e| Error::msg(format!("--resources: invalid JSON: {e}")))?
        }
        None => serde_json::json!({}),
    };
    // Keys in another case (`"CPU": {"Cpus": ...}`) take the spec's spelling, as runc's Go
    // decoder matches them.
    sprout_runtime::keycase::normalize_resources(&mut res);
    let obj = res
        .as_object_mut()
        .ok_or_else(|| Error::msg("--resources: expected a JSON object"))?;
    let mut set = |section: &str, key: &str, v: serde_json::Value| {
        let e = obj
            .entry(section.to_string())
            .or_insert_with(|| serde_json::json!({}));
        e[key] = v;
    };
    if let Some(m) = memory {
        set("memory", "limit", parse_bytes("--memory", &m)?.into());
    }
    if let Some(m) = memory_swap {
        set("memory", "swap", parse_bytes("--memory-swap", &m)?.into());
    }
    if let Some(m) = memory_reservation {
        set(
            "memory",
            "reservation",
            parse_bytes("--memory-reservation", &m)?.into(),
        );
    }
    if let Some(v) = cpu_shares {
        set("cpu", "shares", v.into());
    }
    if let Some(v) = cpu_quota {
        set("cpu", "quota", v.into());
    }
    if let Some(v) = cpu_period {
        set("cpu", "period", v.into());
    }
    if let Some(v) = cpu_burst {
        set("cpu", "burst", v.into());
    }
    if let Some(v) = cpu_idle {
        let idle: i64 = v
            .trim()
            .parse()
            .map_err(|_| Error::msg(format!("--cpu-idle {v:?}: not a number (0 or 1)")))?;
        set("cpu", "idle", idle.into());
    }
    if let Some(v) = cpu_rt_period {
        set("cpu", "realtimePeriod", v.into());
    }
    if let Some(v) = cpu_rt_runtime {
        set("cpu", "realtimeRuntime", v.into());
    }
    if let Some(v) = cpuset_cpus {
        set("cpu", "cpus", v.into());
    }
    if let Some(v) = cpuset_mems {
        set("cpu", "mems", v.into());
    }
    if let Some(v) = pids_limit {
        set("pids", "limit", v.into());
    }
    if let Some(v) = blkio_weight {
        set("blockIO", "weight", v.into());
    }
    // An explicit pids limit of 0 is 1, as in runc ≥ 1.2 (-1 is unlimited); `{}` changes nothing.
    if let Some(l) = res
        .pointer_mut("/pids/limit")
        .filter(|l| l.as_i64() == Some(0))
    {
        *l = 1.into();
    }
    let mut r: oci_spec::runtime::LinuxResources =
        serde_json::from_value(res).map_err(|e| Error::msg(format!("--resources: {e}")))?;
    // runc's checks and words (its update.go), before anything is applied; where the host has
    // the feature, refused as linux.intelRdt is in a config.
    let l3 = l3_cache_schema.is_some_and(|s| !s.is_empty());
    let mb = mem_bw_schema.is_some_and(|s| !s.is_empty());
    // /proc/self/mounts is read only when a schema is given.
    let rdt = (l3 || mb)
        .then(sprout_runtime::config::resctrl_mount)
        .flatten();
    let has = |what: &str| {
        rdt.as_ref()
            .is_some_and(|m| m.join("info").join(what).exists())
    };
    if l3 && !has("L3") {
        return Err(Error::msg("Intel RDT/CAT: l3 cache schema is not enabled"));
    }
    if mb && !has("MB") {
        return Err(Error::msg(
            "Intel RDT/MBA: memory bandwidth schema is not enabled",
        ));
    }
    if l3 || mb {
        return Err(Error::msg(
            "--l3-cache-schema, --mem-bw-schema: Intel RDT is not supported by sprout",
        ));
    }
    // The device rules stay those of the config, with the defaults after them, as runc's
    // `update` keeps them: rules given here would replace the allowlist (v2) or add to it (v1)
    // without the defaults.
    r.set_devices(None);
    st.cgroup
        .as_ref()
        .ok_or_else(|| Error::msg("container has no cgroup"))?
        .apply(&r)?;
    Ok(0)
}
