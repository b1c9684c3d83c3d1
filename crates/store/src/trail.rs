//! The delivery trail: one append-only record per delivery outcome in MongoDB collection `deliveries`.
//!
//! ```text
//! sender ──Trail::record (try_send, never waits)──▶ bounded channel ──▶ writer task ──insert_many──▶ deliveries
//!                      └─ channel full: record dropped, klaxon_trail_dropped_total++ (delivery goes on)
//! ```
//! Records are only ever inserted (no upserts, no positional updates), so the trail works on every
//! MongoDB-wire server we target. A TTL index on `at` (default 30 days) is created where the server
//! supports it; where it does not, that is logged once and the trail grows until pruned by an operator.
//! Writing the trail never blocks or fails a delivery: a full channel or a failed insert is only counted
//! (`klaxon_trail_dropped_total` / `klaxon_trail_errors_total`).
//!
//! [`TrailReader`] serves `klaxon deliveries list` and the API: the newest record of each notification wins.
//!
//! The trail lives in the rules' database and shares the [`RuleStore`]'s MongoDB client (opened by
//! [`crate::mongo`]) wherever a process uses both: the writer takes the store, the reader is
//! [`TrailReader::new`].

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use futures_util::TryStreamExt;
use mongodb::bson::{doc, Bson, DateTime, Document};
use mongodb::options::IndexOptions;
use mongodb::{Collection, IndexModel};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::internal_events::{TrailInsertFailed, TrailRecordDropped};
use crate::mongo::{close_client, connect_database, SERVER_SELECTION_TIMEOUT};
use crate::{RuleStore, RulesError};

/// The collection of the trail.
pub const DELIVERIES: &str = "deliveries";
/// Default age after which the TTL index removes records.
pub const DEFAULT_TRAIL_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
/// Records waiting for the writer; more are dropped (and counted).
const QUEUE: usize = 4096;
const SERVER_TIMEOUT: Duration = SERVER_SELECTION_TIMEOUT;
/// The most records one insert carries.
const INSERT_BATCH: usize = 256;
const TTL_INDEX: &str = "klaxon_deliveries_ttl";
/// Documents per cursor batch when reading the trail. The driver's default (101) makes a long read mostly
/// round trips: on PoloDB, 18,000 records took ~7 s with it and ~0.3 s with this.
const READ_BATCH: u32 = 5000;
/// Batch of [`TrailReader::since`] (records are ~250 bytes: well under a reply's 16 MiB).
const SINCE_BATCH: u32 = 20_000;

/// A delivery's state after one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Delivered.
    Sent,
    /// Failed transiently; a retry is scheduled.
    Retrying,
    /// Moved to `<ns>.dead` (permanent failure or attempts exhausted).
    Dead,
    /// Not sent: a process in shadow mode (`--output shadow`) recorded what it would have sent.
    Shadow,
    /// Not sent, and never will be: a reminder or escalation step whose alert was acknowledged, resolved or gone
    /// when its turn came (`last_error` says which).
    Dropped,
    /// Not sent yet: a rule's quiet hours (`quietHours`) hold it until its window ends. Never recorded in the
    /// trail: the listings read it from Redis (`klaxon_counter::held`) until the release, whose records take
    /// its place under the same notification id.
    Held,
}

impl Status {
    /// `sent`, `retrying`, `dead`, `shadow`, `dropped`, `held`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Sent => "sent",
            Status::Retrying => "retrying",
            Status::Dead => "dead",
            Status::Shadow => "shadow",
            Status::Dropped => "dropped",
            Status::Held => "held",
        }
    }
}

impl std::str::FromStr for Status {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sent" => Ok(Status::Sent),
            "retrying" => Ok(Status::Retrying),
            "dead" => Ok(Status::Dead),
            "shadow" => Ok(Status::Shadow),
            "dropped" => Ok(Status::Dropped),
            "held" => Ok(Status::Held),
            other => Err(format!(
                "unknown status `{other}`: use sent, retrying, dead, shadow, dropped or held"
            )),
        }
    }
}

/// One attempt record. `destination` is redacted (`klaxon_channels::redact_endpoint`); `last_error` is the
/// adapters' secret-free reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The notification.
    pub notification_id: String,
    /// Its project.
    pub project_id: String,
    /// Its rule.
    pub rule_id: String,
    /// email, telegram, slack, webhook.
    pub channel: String,
    /// Redacted endpoint.
    pub destination: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// Outcome.
    pub status: Status,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// When the rule fired, unix ms.
    pub fired_at_ms: i64,
    /// When this record was made, unix ms.
    pub at_ms: i64,
}

impl Record {
    fn to_document(&self) -> Document {
        doc! {
            "notificationId": &self.notification_id,
            "projectId": &self.project_id,
            "ruleId": &self.rule_id,
            "channel": &self.channel,
            "destination": &self.destination,
            "attempts": i64::from(self.attempts),
            "status": self.status.as_str(),
            "lastError": self.last_error.as_deref().map(Bson::from).unwrap_or(Bson::Null),
            "firedAt": DateTime::from_millis(self.fired_at_ms),
            "at": DateTime::from_millis(self.at_ms),
        }
    }

    fn from_document(d: &Document) -> Option<Record> {
        let s = |k: &str| d.get_str(k).ok().map(str::to_owned);
        let ms = |k: &str| d.get_datetime(k).ok().map(|t| t.timestamp_millis());
        let attempts = match d.get("attempts") {
            Some(Bson::Int64(n)) => u32::try_from(*n).ok()?,
            Some(Bson::Int32(n)) => u32::try_from(*n).ok()?,
            _ => return None,
        };
        Some(Record {
            notification_id: s("notificationId")?,
            project_id: s("projectId").unwrap_or_default(),
            rule_id: s("ruleId").unwrap_or_default(),
            channel: s("channel").unwrap_or_default(),
            destination: s("destination").unwrap_or_default(),
            attempts,
            status: s("status")?.parse().ok()?,
            last_error: s("lastError"),
            fired_at_ms: ms("firedAt").unwrap_or(0),
            at_ms: ms("at").unwrap_or(0),
        })
    }
}

/// Unix ms now: the clock lives in core ([`klaxon_core::clock::now_ms`]); kept here while callers move.
pub use klaxon_core::clock::now_ms;

/// The sender's handle on the trail. Cheap to clone; [`Trail::disabled`] records nothing.
#[derive(Clone)]
pub struct Trail {
    tx: Option<mpsc::Sender<Record>>,
}

impl std::fmt::Debug for Trail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trail")
            .field("enabled", &self.tx.is_some())
            .finish()
    }
}

impl Trail {
    /// A trail that records nothing.
    pub fn disabled() -> Self {
        Trail { tx: None }
    }

    /// Starts the background writer and returns the handle and the writer's task. The writer writes through
    /// the store `store` resolves to (the process's rule store, so one MongoDB client serves rules and trail;
    /// it may still be connecting: records queue meanwhile) and gives up when it resolves to `None`. It stops
    /// at `shutdown`, after writing what is queued (bounded: 2 s).
    pub fn start<F>(
        store: F,
        ttl: Duration,
        shutdown: CancellationToken,
    ) -> (Self, tokio::task::JoinHandle<()>)
    where
        F: Future<Output = Option<RuleStore>> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(writer(store, ttl, rx, shutdown));
        (Trail { tx: Some(tx) }, task)
    }

    /// Queues a record; never waits. A full queue drops it and counts it in `klaxon_trail_dropped_total`.
    pub fn record(&self, record: Record) {
        if let Some(tx) = &self.tx {
            if tx.try_send(record).is_err() {
                TrailRecordDropped.emit();
            }
        }
    }
}

async fn writer<F>(store: F, ttl: Duration, mut rx: mpsc::Receiver<Record>, shutdown: CancellationToken)
where
    F: Future<Output = Option<RuleStore>>,
{
    // The store connects (and retries) by itself; the writer only waits for it.
    let coll = tokio::select! {
        store = store => match store {
            Some(store) => store.client_database().collection(DELIVERIES),
            None => return,
        },
        _ = shutdown.cancelled() => return,
    };
    ensure_ttl_index(&coll, ttl).await;
    let mut logged_error = false;
    let mut batch = Vec::with_capacity(INSERT_BATCH);
    loop {
        let record = tokio::select! {
            r = rx.recv() => r,
            _ = shutdown.cancelled() => break,
        };
        let Some(record) = record else { return };
        batch.push(record);
        take_ready(&mut rx, &mut batch);
        insert(&coll, &mut batch, &mut logged_error).await;
    }
    // Drain what is queued, bounded.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(record)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        batch.push(record);
        take_ready(&mut rx, &mut batch);
        insert(&coll, &mut batch, &mut logged_error).await;
    }
}

/// Moves the records already queued into `batch`, up to [`INSERT_BATCH`], without waiting: under load one
/// insert carries many records (one MongoDB round trip, one wake-up of the writer), a lone record goes at once.
fn take_ready(rx: &mut mpsc::Receiver<Record>, batch: &mut Vec<Record>) {
    while batch.len() < INSERT_BATCH {
        match rx.try_recv() {
            Ok(record) => batch.push(record),
            Err(_) => break,
        }
    }
}

/// Inserts and empties `batch` (unordered: one bad record does not keep the others out).
async fn insert(coll: &Collection<Document>, batch: &mut Vec<Record>, logged_error: &mut bool) {
    let docs: Vec<Document> = batch.drain(..).map(|r| r.to_document()).collect();
    let insert = coll.insert_many(docs).ordered(false);
    match tokio::time::timeout(SERVER_TIMEOUT, insert).await {
        Ok(Ok(_)) => {
            *logged_error = false;
        }
        failed => {
            let error = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => "timed out".to_owned(),
            };
            let log = !std::mem::replace(logged_error, true);
            TrailInsertFailed { error: &error, log }.emit();
        }
    }
}

async fn ensure_ttl_index(coll: &Collection<Document>, ttl: Duration) {
    let model = IndexModel::builder()
        .keys(doc! {"at": 1})
        .options(
            IndexOptions::builder()
                .name(TTL_INDEX.to_owned())
                .expire_after(ttl)
                .build(),
        )
        .build();
    match tokio::time::timeout(SERVER_TIMEOUT, coll.create_index(model)).await {
        Ok(Ok(_)) => tracing::debug!(index = TTL_INDEX, "delivery trail TTL index ready"),
        Ok(Err(_)) => tracing::debug!(
            index = TTL_INDEX,
            "the MongoDB-wire server does not support createIndexes (PoloDB does not); old delivery records are kept"
        ),
        Err(_) => tracing::debug!(
            index = TTL_INDEX,
            "trail TTL index creation timed out; carrying on"
        ),
    }
}

/// Reads the trail (for `klaxon deliveries list` and the API).
pub struct TrailReader {
    coll: Collection<Document>,
}

impl TrailReader {
    /// Reads through `store`'s MongoDB client (the trail is in the rules' database).
    pub fn new(store: &RuleStore) -> Self {
        TrailReader {
            coll: store.client_database().collection(DELIVERIES),
        }
    }

    /// Ends the sessions and closes the connections (see [`close_client`]); with [`TrailReader::new`], the
    /// store's too.
    pub async fn close(&self) {
        close_client(self.coll.client()).await;
    }

    /// Connects to `database` at `mongo_url` (with the store's options, then a `ping`), for a process that
    /// reads only the trail.
    pub async fn connect(mongo_url: &str, database: &str) -> Result<Self, RulesError> {
        Ok(TrailReader {
            coll: connect_database(mongo_url, database)
                .await?
                .collection(DELIVERIES),
        })
    }

    /// The newest record of each notification (of `project`, if given), filtered by `status`, newest first,
    /// at most `limit`. Reads at most `scan` records.
    pub async fn latest(
        &self,
        project: Option<&str>,
        status: Option<Status>,
        limit: usize,
        scan: usize,
    ) -> Result<Vec<Record>, RulesError> {
        let mut out: Vec<Record> = self
            .newest(project, scan)
            .await?
            .into_iter()
            .filter(|r| status.is_none_or(|s| r.status == s))
            .collect();
        out.truncate(limit);
        Ok(out)
    }

    /// One page of [`TrailReader::latest`]'s listing (no status filter): at most `limit` notifications that
    /// come after `before` (all from the newest when `None`), and whether more follow. Reads newest first and
    /// stops once the page is full (plus the records sharing the last one's `at`), so a page costs about
    /// `limit` × pages-so-far records, never more than `scan`. It relies on the server honouring the sort
    /// (MongoDB and PoloDB do).
    pub async fn page(
        &self,
        project: Option<&str>,
        before: Option<&Cursor>,
        limit: usize,
        scan: usize,
    ) -> Result<(Vec<Record>, bool), RulesError> {
        let mut records = self.newest_first(project, scan).await?;
        // notification → its newest record so far, and whether it belongs on this page
        let mut newest: HashMap<String, (Record, bool)> = HashMap::new();
        let mut on_page = 0usize;
        let mut boundary: Option<i64> = None;
        while let Some(r) = records.next().await? {
            if boundary.is_some_and(|at| r.at_ms < at) {
                break;
            }
            match newest.get_mut(&r.notification_id) {
                Some((old, _)) => {
                    // An older (or same-time) record of a notification already placed.
                    if (r.at_ms, r.attempts, rank(r.status)) > (old.at_ms, old.attempts, rank(old.status)) {
                        *old = r;
                    }
                }
                None => {
                    let shown = before.is_none_or(|c| c.precedes(&r));
                    if shown {
                        on_page += 1;
                        if on_page > limit && boundary.is_none() {
                            boundary = Some(r.at_ms);
                        }
                    }
                    newest.insert(r.notification_id.clone(), (r, shown));
                }
            }
        }
        let mut out: Vec<Record> = newest
            .into_values()
            .filter(|(_, shown)| *shown)
            .map(|(r, _)| r)
            .collect();
        out.sort_by(|a, b| {
            b.at_ms
                .cmp(&a.at_ms)
                .then_with(|| a.notification_id.cmp(&b.notification_id))
        });
        Ok(page_of(out, None, limit))
    }

    /// Every record made at or after `since_ms` (of every project), at most `scan` of them, newest first;
    /// only the notification, project, status, attempts and times are read.
    pub async fn since(&self, since_ms: i64, scan: usize) -> Result<Vec<Record>, RulesError> {
        // Newest first and in big batches: the read ends at the first older record, and the recent records
        // come in the first reply (PoloDB has been seen losing cursors between replies under load).
        let cursor = self
            .coll
            .find(doc! {"at": {"$gte": DateTime::from_millis(since_ms)}})
            // only what counting needs (the rest of a record is left at its default)
            .projection(
                doc! {"notificationId": 1, "projectId": 1, "status": 1, "attempts": 1, "firedAt": 1, "at": 1},
            )
            .sort(doc! {"at": -1})
            .batch_size(SINCE_BATCH)
            .await
            .map_err(|e| RulesError::from_driver("find deliveries", e))?;
        let mut records = Records { cursor, left: scan };
        let mut out = Vec::new();
        // Checked here too: a server that ignores the operator still gets a correct answer.
        while let Some(r) = records.next().await? {
            if r.at_ms < since_ms {
                break;
            }
            out.push(r);
        }
        Ok(out)
    }

    /// The newest record of each notification, newest first (ties by notification id).
    async fn newest(&self, project: Option<&str>, scan: usize) -> Result<Vec<Record>, RulesError> {
        // Newest first, so that `scan` bounds the read to the most recent records (a server that ignores the
        // sort still gets a correct, if older, answer: the newest record per notification is picked below).
        let mut records = self.newest_first(project, scan).await?;
        let mut newest: HashMap<String, Record> = HashMap::new();
        while let Some(r) = records.next().await? {
            let newer = newest.get(&r.notification_id).is_none_or(|old| {
                (r.at_ms, r.attempts, rank(r.status)) >= (old.at_ms, old.attempts, rank(old.status))
            });
            if newer {
                newest.insert(r.notification_id.clone(), r);
            }
        }
        let mut out: Vec<Record> = newest.into_values().collect();
        out.sort_by(|a, b| {
            b.at_ms
                .cmp(&a.at_ms)
                .then_with(|| a.notification_id.cmp(&b.notification_id))
        });
        Ok(out)
    }
}

impl TrailReader {
    /// The records (of `project`, if given), newest first, at most `scan` of them.
    async fn newest_first(&self, project: Option<&str>, scan: usize) -> Result<Records, RulesError> {
        let filter = match project {
            Some(p) => doc! {"projectId": p},
            None => doc! {},
        };
        let cursor = self
            .coll
            .find(filter)
            .sort(doc! {"at": -1})
            .batch_size(READ_BATCH)
            .await
            .map_err(|e| RulesError::from_driver("find deliveries", e))?;
        Ok(Records { cursor, left: scan })
    }
}

/// A read of the trail bounded to `left` more documents; documents that are not records are skipped (and
/// counted against the bound).
struct Records {
    cursor: mongodb::Cursor<Document>,
    left: usize,
}

impl Records {
    async fn next(&mut self) -> Result<Option<Record>, RulesError> {
        while self.left > 0 {
            self.left -= 1;
            let Some(d) = self
                .cursor
                .try_next()
                .await
                .map_err(|e| RulesError::from_driver("find deliveries", e))?
            else {
                return Ok(None);
            };
            if let Some(r) = Record::from_document(&d) {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }
}

/// A position in the newest-first listing: a page `before` it starts with the next notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The `at` of the last record shown, unix ms.
    pub at_ms: i64,
    /// Its notification (ties on `at` are ordered by notification id).
    pub notification_id: String,
}

impl Cursor {
    /// The cursor after `r`.
    pub fn after(r: &Record) -> Self {
        Cursor {
            at_ms: r.at_ms,
            notification_id: r.notification_id.clone(),
        }
    }

    /// True when `r` comes after this position in the newest-first order.
    fn precedes(&self, r: &Record) -> bool {
        r.at_ms < self.at_ms || (r.at_ms == self.at_ms && r.notification_id > self.notification_id)
    }
}

/// The page of `sorted` (newest first) after `before`: at most `limit` records, and whether more follow.
fn page_of(sorted: Vec<Record>, before: Option<&Cursor>, limit: usize) -> (Vec<Record>, bool) {
    let mut rest = sorted
        .into_iter()
        .filter(|r| before.is_none_or(|c| c.precedes(r)));
    let page: Vec<Record> = rest.by_ref().take(limit).collect();
    let more = rest.next().is_some();
    (page, more)
}

/// Final states win ties over `retrying`.
fn rank(s: Status) -> u8 {
    match s {
        // never in the trail; below every recorded state
        Status::Held => 0,
        Status::Retrying => 0,
        Status::Dead => 1,
        Status::Shadow => 2,
        Status::Dropped => 3,
        Status::Sent => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_through_bson() {
        let r = Record {
            notification_id: "n".into(),
            project_id: "p".into(),
            rule_id: "r".into(),
            channel: "slack".into(),
            destination: "https://hooks.slack.com/…".into(),
            attempts: 3,
            status: Status::Retrying,
            last_error: Some("HTTP 500".into()),
            fired_at_ms: 1_700_000_000_000,
            at_ms: 1_700_000_001_000,
        };
        assert_eq!(Record::from_document(&r.to_document()), Some(r.clone()));
        let sent = Record {
            last_error: None,
            status: Status::Sent,
            ..r
        };
        assert_eq!(Record::from_document(&sent.to_document()), Some(sent));
        for s in ["sent", "retrying", "dead", "shadow", "dropped"] {
            assert_eq!(s.parse::<Status>().map(|s| s.as_str()), Ok(s));
        }
        assert!("lost".parse::<Status>().is_err());
    }

    #[test]
    fn pages_follow_the_cursor_without_gaps_or_repeats() {
        let rec = |id: &str, at: i64| Record {
            notification_id: id.into(),
            project_id: "p".into(),
            rule_id: "r".into(),
            channel: "webhook".into(),
            destination: "-".into(),
            attempts: 1,
            status: Status::Sent,
            last_error: None,
            fired_at_ms: at,
            at_ms: at,
        };
        // Newest first, ties by id: the order `newest` returns.
        let all = vec![
            rec("a", 30),
            rec("b", 20),
            rec("c", 20),
            rec("d", 20),
            rec("e", 10),
        ];
        let mut seen = Vec::new();
        let mut before: Option<Cursor> = None;
        for _ in 0..10 {
            let (page, more) = page_of(all.clone(), before.as_ref(), 2);
            seen.extend(page.iter().map(|r| r.notification_id.clone()));
            if !more {
                break;
            }
            before = page.last().map(Cursor::after);
        }
        assert_eq!(seen, ["a", "b", "c", "d", "e"]);
        let (page, more) = page_of(all.clone(), None, 5);
        assert_eq!((page.len(), more), (5, false));
        let (page, more) = page_of(all, Some(&Cursor::after(&rec("e", 10))), 5);
        assert_eq!((page.len(), more), (0, false));
    }
}
