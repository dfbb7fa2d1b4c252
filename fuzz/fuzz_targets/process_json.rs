//! process.json (`exec --process`) as hostile input: the same deserialisation and checks `exec`
//! does, then the program resolution and environment setup that run before execve; plus the
//! other strings the CLI takes from its caller (container ids, signal names, --cap names).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = sprout_runtime::state::validate_id(s);
        let _ = sprout_runtime::lifecycle::parse_signal(s);
        let full = if s.to_ascii_uppercase().starts_with("CAP_") { s.to_ascii_uppercase() } else { format!("CAP_{}", s.to_ascii_uppercase()) };
        let _: Result<oci_spec::runtime::Capability, _> = serde_json::from_value(serde_json::Value::String(full));
    }
    let de = &mut serde_json::Deserializer::from_slice(data);
    let proc: oci_spec::runtime::Process = match serde_path_to_error::deserialize(de) {
        Ok(p) => p,
        Err(e) => {
            let _ = format!("process.json: {}: {}", e.path(), e.inner());
            return;
        }
    };
    if proc.args().as_ref().is_none_or(|a| a.is_empty()) {
        return;
    }
    // Program lookup in PATH (stat only) and argv/envp construction, as before execve.
    let _ = sprout_runtime::init::prepare_exec(&proc);
    if let Some(r) = proc.rlimits() {
        for l in r {
            let _ = (l.typ(), l.soft(), l.hard());
        }
    }
});
