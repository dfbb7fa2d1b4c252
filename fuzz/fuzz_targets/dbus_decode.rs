//! A D-Bus message from the bus as hostile input (the systemd cgroup driver reads systemd's
//! replies and signals): framing by the fixed header, the decoder of every type, and the round
//! trip of whatever decodes (sprout_cgroups::systemd::fuzz_dbus_decode). Any panic, which
//! includes an out-of-bounds read, is a bug.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sprout_cgroups::systemd::fuzz_dbus_decode(data);
});
