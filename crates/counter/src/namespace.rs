//! The Redis keys of one namespace, for `klaxon namespace delete`: every key Klaxon writes begins with
//! `<ns>:` (counters `<ns>:{<project>:<rule>:<group>}:…`, digests `<ns>:{dg:…}:…`, dedup `<ns>:{dd:…}`, rate
//! limits `<ns>:{rl:…}`, direct notifications `<ns>:{direct:…}`, mutes `<ns>:mutes:{<project>}`, used action links `<ns>:link-used:{<project>}:<mute id>`).
//!
//! The separator is what keeps namespaces apart: `klaxon:*` never matches a key of `klaxon2`. A namespace whose
//! own name begins with `<ns>:` would match, so namespace names should not contain `:`.

use crate::{CounterError, RedisHandle};

/// The `SCAN … MATCH` glob of every key of `namespace`: the name with glob characters escaped, then `:*`.
pub fn key_pattern(namespace: &str) -> String {
    let mut p = String::with_capacity(namespace.len() + 2);
    for c in namespace.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push_str(":*");
    p
}

/// The keys of `namespace` (on every master of a cluster), at most `limit`, sorted.
pub async fn keys(redis: &RedisHandle, namespace: &str, limit: usize) -> Result<Vec<String>, CounterError> {
    let prefix = format!("{namespace}:");
    let mut keys = redis.scan_keys(&key_pattern(namespace), limit).await?;
    // the pattern is exact; this keeps it so even if a server's glob reads an escape differently
    keys.retain(|k| k.starts_with(&prefix));
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_only_the_namespace() {
        assert_eq!(key_pattern("klaxon"), "klaxon:*");
        assert_eq!(key_pattern("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\:*");
    }
}
