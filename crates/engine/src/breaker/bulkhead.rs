//! Bulkheads: a concurrency budget per host, and a share of it per endpoint and per project (see the
//! [parent module](super)).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{lock, MAX_ENDPOINTS, MAX_HOSTS};

/// A concurrency budget per host, and a share of it per endpoint and per (host, project).
#[derive(Debug)]
pub struct Bulkheads {
    per_host: usize,
    per_endpoint: usize,
    hosts: Mutex<HashMap<String, Arc<Semaphore>>>,
    endpoints: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// `<host>\0<project>`: one project's share of a host, so that its endpoints together (two slow webhooks of
    /// one tenant on one host) hold at most half of the host's slots and another project always finds the rest.
    projects: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Gets (or makes) the semaphore of `key` with `permits`, forgetting idle ones when the map is full.
fn semaphore(
    map: &Mutex<HashMap<String, Arc<Semaphore>>>,
    key: &str,
    permits: usize,
    max: usize,
) -> Arc<Semaphore> {
    let mut map = lock(map);
    if map.len() >= max && !map.contains_key(key) {
        // Idle: nobody holds or waits for their semaphore. The busy ones are bounded by the tasks in flight.
        map.retain(|_, s| Arc::strong_count(s) > 1);
    }
    map.entry(key.to_owned())
        .or_insert_with(|| Arc::new(Semaphore::new(permits)))
        .clone()
}

impl Bulkheads {
    /// `per_host` concurrent deliveries per host (at least 1), of which one endpoint may hold half (at least 1).
    pub fn new(per_host: usize) -> Self {
        let per_host = per_host.max(1);
        Bulkheads {
            per_host,
            per_endpoint: (per_host / 2).max(1),
            hosts: Mutex::new(HashMap::new()),
            endpoints: Mutex::new(HashMap::new()),
            projects: Mutex::new(HashMap::new()),
        }
    }

    /// How many concurrent deliveries one project may have on one host: half of the host's (at least 1), as
    /// one endpoint.
    pub fn per_project(&self) -> usize {
        self.per_endpoint
    }

    /// A slot of `project`'s share of `host` if one is free now (None: the project's endpoints on this host
    /// are busy; park, do not wait). Taken before the host's slot and held as long as it, so a project's slow
    /// endpoints never hold more than [`Bulkheads::per_project`] of the host's slots.
    pub fn try_project(&self, host: &str, project: &str) -> Option<OwnedSemaphorePermit> {
        // a project id is tenant input: bounded in the key (an ObjectId is 24 characters)
        let project = klaxon_core::text::one_line(project, 64);
        let key = format!("{host}\0{project}");
        semaphore(&self.projects, &key, self.per_endpoint, MAX_ENDPOINTS)
            .try_acquire_owned()
            .ok()
    }

    /// How many concurrent deliveries one endpoint may have.
    pub fn per_endpoint(&self) -> usize {
        self.per_endpoint
    }

    /// A slot of `endpoint`'s share if one is free now (None: the endpoint is busy; park, do not wait).
    pub fn try_endpoint(&self, endpoint: &str) -> Option<OwnedSemaphorePermit> {
        semaphore(&self.endpoints, endpoint, self.per_endpoint, MAX_ENDPOINTS)
            .try_acquire_owned()
            .ok()
    }

    /// Waits for a slot on `host`; the slot is held until the permit is dropped.
    pub async fn acquire(&self, host: &str) -> OwnedSemaphorePermit {
        let sem = semaphore(&self.hosts, host, self.per_host, MAX_HOSTS);
        loop {
            // The semaphore is never closed, so this only loops in theory; bounded by that.
            if let Ok(p) = sem.clone().acquire_owned().await {
                return p;
            }
            tokio::task::yield_now().await;
        }
    }
}
