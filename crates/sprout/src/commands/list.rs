//! `list`: the containers under `--root`, as a table or runc's JSON.

use clap::Args;
use sprout_runtime::state::Store;
use sprout_runtime::{Error, Result};

#[derive(Args)]
pub struct ListArgs {
    #[arg(short = 'q', long)]
    pub quiet: bool,
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
}

/// One `list --format json` entry: runc's fields, in runc's order.
#[derive(serde::Serialize)]
struct ListEntry<'a> {
    #[serde(rename = "ociVersion")]
    oci_version: &'a str,
    id: &'a str,
    pid: i32,
    status: &'a str,
    bundle: &'a std::path::Path,
    rootfs: &'a std::path::Path,
    created: &'a str,
    #[serde(skip_serializing_if = "std::collections::HashMap::is_empty")]
    annotations: &'a std::collections::HashMap<String, String>,
    owner: &'a str,
}

/// `explicit_root`: `--root` was given. As runc: a default root that does not exist yet is an
/// empty list, an explicit one that does not exist is an error.
pub fn run(store: &Store, a: &ListArgs, explicit_root: bool) -> Result<i32> {
    let (quiet, format) = (a.quiet, a.format.as_str());
    if explicit_root && !store.root.exists() {
        return Err(Error::msg(format!(
            "--root {}: no such directory",
            store.root.display()
        )));
    }
    let ids = store.ids()?;
    if quiet {
        for id in ids {
            println!("{id}");
        }
        return Ok(0);
    }
    let mut rows = Vec::new();
    for id in &ids {
        if let Ok(st) = store.load(id) {
            let status = st.status(store);
            // Still being created: not a container yet, for `list` as for `state` (runc lists
            // the containers whose state it can load; it writes it once create is done).
            if st.pid == 0 || status == sprout_runtime::state::Status::Creating {
                continue;
            }
            rows.push((st, status));
        }
    }
    match format {
        "json" => {
            let v: Vec<ListEntry> = rows
                .iter()
                .map(|(st, status)| ListEntry {
                    oci_version: sprout_runtime::config::OCI_VERSION,
                    id: &st.id,
                    pid: if *status == sprout_runtime::state::Status::Stopped {
                        0
                    } else {
                        st.pid
                    },
                    status: status.as_str(),
                    bundle: &st.bundle,
                    rootfs: &st.rootfs,
                    created: &st.created,
                    annotations: &st.annotations,
                    owner: if st.owner.is_empty() {
                        "root"
                    } else {
                        st.owner.as_str()
                    },
                })
                .collect();
            // runc encodes its nil slice: `null` when there is no container.
            let line = if v.is_empty() {
                "null".to_string()
            } else {
                serde_json::to_string(&v).map_err(|e| Error::msg(e.to_string()))?
            };
            println!("{line}");
        }
        "table" => {
            println!(
                "{:<20} {:<8} {:<10} {:<40} {:<32} OWNER",
                "ID", "PID", "STATUS", "BUNDLE", "CREATED"
            );
            for (st, status) in rows {
                let pid = if status == sprout_runtime::state::Status::Stopped {
                    0
                } else {
                    st.pid
                };
                println!(
                    "{:<20} {:<8} {:<10} {:<40} {:<32} root",
                    st.id,
                    pid,
                    status.as_str(),
                    st.bundle.display(),
                    st.created
                );
            }
        }
        other => {
            return Err(Error::msg(format!(
                "--format {other:?}: expected table or json"
            )))
        }
    }
    Ok(0)
}
