//! The backfill of `<ns>:al:projects`, the registry the cross-project alert list reads ([`Alerts::list_all`]).
//!
//! Opening an alert registers its project there, but a namespace whose alerts opened before the registry existed
//! has alerts the list cannot find. [`Alerts::backfill_projects`] finds them once per namespace, at the start of
//! a worker (`klaxon run`, `klaxon worker`):
//!
//! * **Once.** A record `<ns>:al:projects:backfilled` (JSON: when, how many projects, whether the cap was met)
//!   says it ran; every later start reads it and does nothing (one `GET`).
//! * **One process of a fleet.** A lease `<ns>:al:projects:backfill-lease` (`SET NX PX`): the others skip it.
//! * **Bounded.** `SCAN … MATCH <ns>:al:{*}:idx COUNT 1000` on the server or every master of a cluster
//!   ([`RedisHandle::scan_keys`]), stopping after [`BACKFILL_CAP`] projects (the most the list reads anyway);
//!   each found project is added with `SADD` in chunks. A key whose braces do not hold exactly one project id is
//!   not one (a group name can hold `}`), and is skipped.

use std::time::Duration;

use crate::alerts::MAX_LISTED_PROJECTS;
use crate::namespace::key_pattern;
use crate::script_io::ms;
use crate::{Alerts, CounterError};

/// The most projects one backfill registers (the cross-project list reads at most as many).
pub const BACKFILL_CAP: usize = MAX_LISTED_PROJECTS;
/// How long a backfill may run before another process may take it over.
const LEASE: Duration = Duration::from_secs(10 * 60);
/// Members per `SADD`.
const CHUNK: usize = 500;

/// What [`Alerts::backfill_projects`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backfilled {
    /// It ran now: `projects` registered (already registered ones included); `capped` when it stopped at
    /// [`BACKFILL_CAP`].
    Done {
        /// Projects with alerts found and registered.
        projects: usize,
        /// Stopped at the cap: projects past it are not registered.
        capped: bool,
    },
    /// It ran before (the record it left).
    Already(String),
    /// Another process is running it.
    Busy,
}

impl Alerts {
    fn backfill_record_key(&self) -> String {
        format!("{}:al:projects:backfilled", self.namespace())
    }

    fn backfill_lease_key(&self) -> String {
        format!("{}:al:projects:backfill-lease", self.namespace())
    }

    /// The project of an alert index key `<ns>:al:{<project>}:idx`, if `key` is exactly one.
    fn project_of_index(&self, key: &str) -> Option<String> {
        let rest = key.strip_prefix(&format!("{}:al:{{", self.namespace()))?;
        let project = rest.strip_suffix("}:idx")?;
        (!project.is_empty() && !project.contains(['{', '}'])).then(|| project.to_ascii_lowercase())
    }

    /// The record of this namespace's backfill, if it ran (JSON text).
    pub async fn backfill_record(&self) -> Result<Option<String>, CounterError> {
        Ok(redis::cmd("GET")
            .arg(self.backfill_record_key())
            .query_async(&mut self.redis().clone())
            .await?)
    }

    /// Registers, once per namespace, the projects whose alerts opened before `<ns>:al:projects` existed (see
    /// the module docs). `now_ms` is only written into the record.
    pub async fn backfill_projects(&self, now_ms: i64) -> Result<Backfilled, CounterError> {
        if let Some(record) = self.backfill_record().await? {
            return Ok(Backfilled::Already(record));
        }
        let lease: Option<String> = redis::cmd("SET")
            .arg(self.backfill_lease_key())
            .arg(now_ms)
            .arg("NX")
            .arg("PX")
            .arg(ms(LEASE))
            .query_async(&mut self.redis().clone())
            .await?;
        if lease.is_none() {
            return Ok(Backfilled::Busy);
        }
        let result = self.backfill_now(now_ms).await;
        // given back whatever happened: a failed run is tried again by the next start
        let _: i64 = redis::cmd("DEL")
            .arg(self.backfill_lease_key())
            .query_async(&mut self.redis().clone())
            .await?;
        result
    }

    async fn backfill_now(&self, now_ms: i64) -> Result<Backfilled, CounterError> {
        // `{`/`}` are not glob characters: the namespace is escaped, the rest is literal
        let pattern = format!(
            "{}al:{{*}}:idx",
            key_pattern(self.namespace()).trim_end_matches('*')
        );
        let keys = self.redis().scan_keys(&pattern, BACKFILL_CAP).await?;
        let capped = keys.len() >= BACKFILL_CAP;
        let mut projects: Vec<String> = keys.iter().filter_map(|k| self.project_of_index(k)).collect();
        projects.sort();
        projects.dedup();
        for chunk in projects.chunks(CHUNK) {
            let _: i64 = redis::cmd("SADD")
                .arg(self.projects_key())
                .arg(chunk)
                .query_async(&mut self.redis().clone())
                .await?;
        }
        let record =
            serde_json::json!({"at": now_ms, "projects": projects.len(), "capped": capped}).to_string();
        let _: () = redis::cmd("SET")
            .arg(self.backfill_record_key())
            .arg(record)
            .query_async(&mut self.redis().clone())
            .await?;
        Ok(Backfilled::Done {
            projects: projects.len(),
            capped,
        })
    }
}
