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
    let emit = |typ: &str, data: serde_json::Value| {
        let line = event_line(typ, id, data);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let stats = || -> Result<serde_json::Value> {
        serde_json::to_value(cg.stats()?).map_err(|e| Error::msg(e.to_string()))
    };
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
                sprout_cgroups::OomWait::Oom(_) => emit("oom", serde_json::Value::Null),
                sprout_cgroups::OomWait::Gone => return Ok(0),
                _ => {}
            },
            None => std::thread::sleep(every),
        }
    }
}

/// One event as runc prints it: `{"type":…,"id":…,"data":…}` in that order, `data` left out
/// when there is none (the oom event).
#[derive(serde::Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    typ: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    data: serde_json::Value,
}

fn event_line(typ: &str, id: &str, data: serde_json::Value) -> String {
    serde_json::to_string(&Event { typ, id, data }).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::event_line;

    #[test]
    fn events_are_printed_in_runcs_key_order() {
        assert_eq!(
            event_line("stats", "c1", serde_json::json!({"pids": {"current": 1}})),
            r#"{"type":"stats","id":"c1","data":{"pids":{"current":1}}}"#
        );
        assert_eq!(
            event_line("oom", "c1", serde_json::Value::Null),
            r#"{"type":"oom","id":"c1"}"#
        );
    }
}
