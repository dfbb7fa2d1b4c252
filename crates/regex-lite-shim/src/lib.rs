//! `regex`, as oci-spec sees it, served by `regex-lite`.
//!
//! oci-spec (the runtime-spec types) depends on `regex` with its default features for one
//! pattern: it validates `process.execCPUAffinity` against `^(\d+(-\d+)?)(,\d+(-\d+)?)*$` while
//! deserializing config.json. Those defaults link regex's Unicode tables (`\d` is Unicode-aware
//! there), and in a static-pie binary every pointer in them is relocated at each start, before
//! `main`: ~34 of the 47 pages of `.data.rel.ro` that `sprout run` relocates and faults in.
//! `regex-lite` (from the regex project, made for small binaries) has no Unicode tables; its
//! `\d` is ASCII, which is what a CPU list is. The workspace's `[patch.crates-io]` puts this
//! crate where `regex` would be, for every crate of the graph (oci-spec is the only one).
//!
//! The whole public surface of `regex-lite` is re-exported: it is the subset of `regex`'s API
//! that oci-spec calls (`Regex::new`, `is_match`, and `RegexBuilder` / `captures` in its
//! distribution module, which sprout does not build). A future oci-spec that needs more of
//! `regex` fails to compile here, loudly, rather than behaving differently.

pub use regex_lite::*;
