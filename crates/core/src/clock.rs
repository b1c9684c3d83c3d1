//! The one read of the wall clock, for the callers at the edge (the engine's loops, the API, the CLI): the core's
//! decisions take time as a parameter, and their callers take it from here. A plain `SystemTime` read, no
//! runtime.

/// Unix ms now (wall clock); 0 before 1970, `i64::MAX` past its range.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn now_is_after_2020_and_moves_forward() {
        let a = super::now_ms();
        assert!(a > 1_577_836_800_000, "{a}");
        assert!(super::now_ms() >= a);
    }
}
