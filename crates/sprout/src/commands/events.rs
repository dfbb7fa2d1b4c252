//! `events`: resource stats every `--interval` and OOM notifications, as JSON lines (runc's
//! format); `--stats` prints the stats once.

use std::io::Write;

use clap::Args;
use sprout_runtime::state::Store;
use sprout_runtime::{Error, Result};

#[derive(Args)]
pub struct EventsArgs {
    #[arg(long)]
    pub stats: bool,
    #[arg(long, default_value = "5s")]
    pub interval: String,
    pub id: String,
}

fn parse_interval(s: &str) -> Result<std::time::Duration> {
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .parse()
        .map_err(|_| Error::msg(format!("--interval {s:?}: expected e.g. 5s, 500ms")))?;
    if v <= 0.0 {
        return Err(Error::msg(format!("--interval {s:?}: must be positive")));
    }
    Ok(std::time::Duration::from_secs_f64(v * mult))
}

pub fn run(store: &Store, a: &EventsArgs) -> Result<i32> {
    let (id, once, interval) = (a.id.as_str(), a.stats, a.interval.as_str());
    let every = parse_interval(interval)?;
    let st = store.load(id)?;
    let cg = st
        .cgroup
        .clone()
        .ok_or_else(|| Error::msg(format!("container {id:?} has no cgroup")))?;
    let emit = |typ: &str, data: Option<sprout_cgroups::Stats>| {
        let line = event_line(typ, id, data);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let stats = || cg.stats().map(Some);
    if once {
        emit("stats", stats()?);
        return Ok(0);
    }
    let mut oom = cg.oom_events().ok();
    loop {
        if st.status(store) == sprout_runtime::state::Status::Stopped {
            return Ok(0);
        }
        emit("stats", stats()?);
        match oom.as_mut() {
            Some(o) => match o.wait(Some(every))? {
                sprout_cgroups::OomWait::Oom(_) => emit("oom", None),
                sprout_cgroups::OomWait::Gone => return Ok(0),
                _ => {}
            },
            None => std::thread::sleep(every),
        }
    }
}

/// One event as runc prints it: `{"type":…,"id":…,"data":…}` in that order, `data` left out
/// when there is none (the oom event). `data` is serialized as it is (not through a
/// `serde_json::Value`, whose map would sort the keys): the stats in runc's field order.
#[derive(serde::Serialize)]
struct Event<'a, T: serde::Serialize> {
    #[serde(rename = "type")]
    typ: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<T>,
}

fn event_line<T: serde::Serialize>(typ: &str, id: &str, data: Option<T>) -> String {
    serde_json::to_string(&Event { typ, id, data }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::event_line;

    #[test]
    fn events_are_printed_in_runcs_key_order() {
        assert_eq!(
            event_line(
                "stats",
                "c1",
                Some(serde_json::json!({"pids": {"current": 1}}))
            ),
            r#"{"type":"stats","id":"c1","data":{"pids":{"current":1}}}"#
        );
        assert_eq!(
            event_line::<()>("oom", "c1", None),
            r#"{"type":"oom","id":"c1"}"#
        );
        // runc 1.5.1's order and its always-present members, zeros left out as it does.
        let mut st = sprout_cgroups::Stats::default();
        st.pids.current = 1;
        assert_eq!(
            event_line("stats", "c1", Some(st)),
            r#"{"type":"stats","id":"c1","data":{"cpu":{},"cpuset":{"cpu_exclusive":0,"mem_hardwall":0,"mem_exclusive":0,"memory_migrate":0,"memory_spread_page":0,"memory_spread_slab":0,"memory_pressure":0,"sched_load_balance":0,"sched_relax_domain_level":0},"memory":{},"pids":{"current":1},"blkio":{},"hugetlb":{},"intel_rdt":{},"network_interfaces":null}}"#
        );
    }
}
