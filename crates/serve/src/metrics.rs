//! Prometheus text metrics: requests by start path and status, latency histograms by start path.

use crate::locked::Locked;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

const BUCKETS: &[f64] = &[
    0.0001, 0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

#[derive(Default)]
struct Hist {
    counts: Vec<u64>,
    sum: f64,
    n: u64,
}

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Hist>,
    sandboxes_started: BTreeMap<String, u64>,
    evictions: u64,
    zygote_evictions: u64,
    kills: BTreeMap<String, u64>,
}

impl Metrics {
    pub fn request(&self, path: &str, status: u16, secs: f64) {
        let mut m = self.inner.locked();
        *m.requests.entry((path.to_string(), status)).or_default() += 1;
        if status < 400 {
            let h = m.latency.entry(path.to_string()).or_default();
            if h.counts.is_empty() {
                h.counts = vec![0; BUCKETS.len()];
            }
            for (i, b) in BUCKETS.iter().enumerate() {
                if secs <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += secs;
            h.n += 1;
        }
    }

    pub fn started(&self, path: &str) {
        *self
            .inner
            .locked()
            .sandboxes_started
            .entry(path.to_string())
            .or_default() += 1;
    }

    pub fn evicted(&self) {
        self.inner.locked().evictions += 1;
    }

    pub fn zygote_evicted(&self) {
        self.inner.locked().zygote_evictions += 1;
    }

    pub fn killed(&self, why: &str) {
        *self
            .inner
            .locked()
            .kills
            .entry(why.to_string())
            .or_default() += 1;
    }

    pub fn render(&self, gauges: &[(&str, &str, f64)]) -> String {
        let m = self.inner.locked();
        let mut s = String::new();
        s.push_str("# HELP sprout_serve_requests_total Requests by start path (none: rejected before a sandbox) and HTTP status.\n# TYPE sprout_serve_requests_total counter\n");
        for ((p, st), n) in &m.requests {
            let _ = writeln!(
                s,
                "sprout_serve_requests_total{{path=\"{p}\",status=\"{st}\"}} {n}"
            );
        }
        s.push_str("# HELP sprout_serve_request_seconds Engine-side latency of successful requests by start path.\n# TYPE sprout_serve_request_seconds histogram\n");
        for (p, h) in &m.latency {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "sprout_serve_request_seconds_bucket{{path=\"{p}\",le=\"{b}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                s,
                "sprout_serve_request_seconds_bucket{{path=\"{p}\",le=\"+Inf\"}} {}",
                h.n
            );
            let _ = writeln!(
                s,
                "sprout_serve_request_seconds_sum{{path=\"{p}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                s,
                "sprout_serve_request_seconds_count{{path=\"{p}\"}} {}",
                h.n
            );
        }
        s.push_str("# TYPE sprout_serve_sandboxes_started_total counter\n");
        for (p, n) in &m.sandboxes_started {
            let _ = writeln!(
                s,
                "sprout_serve_sandboxes_started_total{{path=\"{p}\"}} {n}"
            );
        }
        s.push_str("# TYPE sprout_serve_sandboxes_killed_total counter\n");
        for (w, n) in &m.kills {
            let _ = writeln!(
                s,
                "sprout_serve_sandboxes_killed_total{{reason=\"{w}\"}} {n}"
            );
        }
        let _ = writeln!(
            s,
            "# TYPE sprout_serve_evictions_total counter\nsprout_serve_evictions_total {}",
            m.evictions
        );
        let _ = writeln!(
            s,
            "# TYPE sprout_serve_zygote_evictions_total counter\nsprout_serve_zygote_evictions_total {}",
            m.zygote_evictions
        );
        let mut typed = std::collections::BTreeSet::new();
        for (name, labels, v) in gauges {
            if typed.insert(*name) {
                let _ = writeln!(s, "# TYPE {name} gauge");
            }
            let _ = writeln!(s, "{name}{labels} {v}");
        }
        s
    }
}
