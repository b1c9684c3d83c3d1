//! Script calls sent together in one round trip: one pipeline on a single Redis; in a cluster one pipeline per slot
//! (a script may only touch one slot there), all sent at once over each node's connection. A server that lost its
//! scripts (restart, `SCRIPT FLUSH`, failover) answers NOSCRIPT; the scripts are then loaded and only the calls that
//! did not run are sent again. Used by every batched call: the window scripts ([`crate::WindowCounter::hit_batch`])
//! the digest appends ([`crate::Digests::append_all`]) and the open alerts' touches ([`crate::Alerts::touch`]).
//!
//! Within one pipeline Redis runs the calls in order, so calls on the same keys (one slot) see each other's effects
//! in the order they were given.

use std::collections::HashMap;
use std::time::Duration;

use redis::cluster_routing::Slot;
use redis::{Cmd, Pipeline, RedisResult, Script, ServerErrorKind, Value};

use crate::{CounterError, RedisHandle};

/// Attempts per failed cluster slot pipeline inside one batch (see [`eval_all`]).
const SLOT_ATTEMPTS: u32 = 3;
/// Wait before the n-th resend of failed slot pipelines is n times this (a failover takes a few seconds; the
/// batch's own retry covers longer outages).
const SLOT_RETRY_WAIT: Duration = Duration::from_millis(200);

/// One `EVALSHA` of a batch.
pub(crate) struct ScriptCall {
    /// The script (`cmd` runs it by its hash).
    pub script: &'static Script,
    /// Its file name, for logs and errors.
    pub name: &'static str,
    /// The cluster slot of its keys (`None` on single-node Redis).
    pub slot: Option<Slot>,
    /// `EVALSHA <hash> <numkeys> <keys…> <args…>`.
    pub cmd: Cmd,
}

/// `EVALSHA <hash of script>`, its buffers sized up front for about `args` more arguments of `bytes` bytes in all,
/// so that building a batch's call does not grow them again and again (the hot calls have dozens of arguments).
pub(crate) fn evalsha(script: &Script, args: usize, bytes: usize) -> Cmd {
    let hash = script.get_hash();
    let mut cmd = Cmd::with_capacity(args + 2, bytes + hash.len() + "EVALSHA".len());
    cmd.arg("EVALSHA").arg(hash);
    cmd
}

/// Sends `calls` in one round trip (see the module docs) and returns one reply per call, in order; a call the
/// server refused is an error.
///
/// In a cluster, a slot whose pipeline fails is sent again (up to 3 attempts within ~1 s) while the replies of the
/// slots that succeeded are kept. On error, some calls may have run: the scripts are written so that running a
/// call again is safe where it matters (event ids, notification ids).
pub(crate) async fn eval_all(redis: &RedisHandle, calls: &[&ScriptCall]) -> Result<Vec<Value>, CounterError> {
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let mut replies = run(redis, calls).await?;
    // A server that lost its scripts answers NOSCRIPT: nothing ran, so load the scripts and send those calls
    // again, once.
    let missing: Vec<usize> = replies
        .iter()
        .enumerate()
        .filter(|(_, r)| is_noscript(r))
        .map(|(i, _)| i)
        .collect();
    if !missing.is_empty() {
        let mut scripts: Vec<&ScriptCall> = missing.iter().map(|&i| calls[i]).collect();
        scripts.sort_by_key(|c| c.name);
        scripts.dedup_by_key(|c| c.name);
        for call in scripts {
            tracing::info!(script = call.name, "loading counter script after NOSCRIPT");
            call.script.load_async(&mut redis.clone()).await?;
        }
        let retry: Vec<&ScriptCall> = missing.iter().map(|&i| calls[i]).collect();
        let again = run(redis, &retry).await?;
        for (i, r) in missing.into_iter().zip(again) {
            replies[i] = r;
        }
    }
    replies
        .into_iter()
        .map(|r| r.map_err(CounterError::from_redis))
        .collect()
}

/// Sends the calls and returns one reply per call, in order.
async fn run(redis: &RedisHandle, calls: &[&ScriptCall]) -> Result<Vec<RedisResult<Value>>, CounterError> {
    if !redis.is_cluster() {
        return pipeline(&mut redis.clone(), calls.iter().map(|c| &c.cmd)).await;
    }
    // A cluster pipeline must stay in one slot: one pipeline per slot, all sent at once. The cluster
    // connection multiplexes them over one connection per node.
    let mut by_slot: HashMap<Option<Slot>, Vec<usize>> = HashMap::new();
    for (i, call) in calls.iter().enumerate() {
        by_slot.entry(call.slot).or_default().push(i);
    }
    let mut pending: Vec<Vec<usize>> = by_slot.into_values().collect();
    let mut replies: Vec<Option<RedisResult<Value>>> = (0..calls.len()).map(|_| None).collect();
    // When one slot's pipeline fails (its node died, a failover is under way), the other slots' scripts
    // have run: keep their replies and send only the failed slots again, a few times, rather than fail
    // the batch and have every slot run it twice on the batch's retry.
    for attempt in 0..SLOT_ATTEMPTS {
        let sent = pending.iter().map(|idx| {
            let mut conn = redis.clone();
            async move { pipeline(&mut conn, idx.iter().map(|&i| &calls[i].cmd)).await }
        });
        let answers = futures_util::future::join_all(sent).await;
        let mut failed = Vec::new();
        let mut last_error = None;
        for (idx, answer) in pending.into_iter().zip(answers) {
            match answer {
                Ok(rs) => {
                    for (&i, r) in idx.iter().zip(rs) {
                        replies[i] = Some(r);
                    }
                }
                Err(e) => {
                    failed.push(idx);
                    last_error = Some(e);
                }
            }
        }
        pending = failed;
        match last_error {
            None => break,
            Some(e) if attempt + 1 == SLOT_ATTEMPTS => return Err(e),
            Some(e) => {
                tracing::debug!(slots = pending.len(), error = %e, attempt, "cluster slot pipeline failed; sending it again");
                tokio::time::sleep(SLOT_RETRY_WAIT * (attempt + 1)).await;
            }
        }
    }
    replies
        .into_iter()
        .map(|r| {
            r.ok_or(CounterError::BadReply {
                script: "batch",
                detail: "an invocation got no reply".into(),
            })
        })
        .collect()
}

/// Sends commands as one pipeline that reports each command's error on its own.
async fn pipeline<'c>(
    conn: &mut RedisHandle,
    cmds: impl Iterator<Item = &'c Cmd>,
) -> Result<Vec<RedisResult<Value>>, CounterError> {
    let mut pipe = Pipeline::new();
    for cmd in cmds {
        pipe.add_command(cmd.clone());
    }
    let n = pipe.len();
    let replies: Vec<RedisResult<Value>> = pipe.ignore_errors().query_async(conn).await?;
    if replies.len() != n {
        return Err(CounterError::BadReply {
            script: "pipeline",
            detail: format!("{} replies for {n} commands", replies.len()),
        });
    }
    Ok(replies)
}

fn is_noscript(r: &RedisResult<Value>) -> bool {
    matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript))
}
