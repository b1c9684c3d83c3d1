//! Reading what the SMTP sink from `scripts/services` received.
//!
//! `scripts/smtp-sink.py` (aiosmtpd) stores every message it accepts as one `.eml` file in
//! `KLAXON_TEST_SMTP_DIR` (default `/tmp/klaxon-smtp-sink`, one directory for the whole machine so that a sink
//! started from one checkout serves tests run from another), named after the time it arrived.

use std::path::PathBuf;

/// Where the SMTP sink writes messages.
pub fn smtp_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KLAXON_TEST_SMTP_DIR") {
        return PathBuf::from(dir);
    }
    PathBuf::from("/tmp/klaxon-smtp-sink")
}

/// Every stored message whose raw text contains `needle` (e.g. a unique namespace in the subject).
pub fn messages_containing(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(smtp_dir()) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter(|m| m.contains(needle))
        .collect()
}
