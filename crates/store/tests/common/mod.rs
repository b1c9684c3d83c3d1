//! Shared helpers: a store in a fresh database of the shared server, and a private PoloDB instance that a
//! test may kill.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command};
use std::time::Duration;

use klaxon_store::RuleStore;

/// A store on the shared MongoDB-wire server, in a database of its own.
pub async fn fresh_store() -> RuleStore {
    let db = klaxon_testkit::unique_namespace();
    RuleStore::connect(&klaxon_testkit::mongo_url(), &db)
        .await
        .expect("the MongoDB-wire server of scripts/services must be running")
}

/// A raw driver handle on the same database, to write documents the way Hawk does.
pub async fn raw_projects(store: &RuleStore) -> mongodb::Collection<mongodb::bson::Document> {
    let client = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url())
        .await
        .expect("client");
    client.database(store.database()).collection("projects")
}

/// A PoloDB server of our own, killed on drop.
pub struct OwnPolo {
    child: Option<Child>,
    /// `mongodb://127.0.0.1:<port>/?serverSelectionTimeoutMS=…`
    pub url: String,
    _dir: tempfile::TempDir,
}

impl OwnPolo {
    /// Starts `polodb serve` on a free loopback port with its own data directory and waits (≤ 30 s) until it
    /// accepts connections.
    pub fn start() -> OwnPolo {
        let bin = klaxon_testkit::polodb_bin()
            .unwrap_or_else(|| "/root/.local/share/klaxon/polodb/bin/polodb".into());
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("temp dir");
        let child = klaxon_testkit::polodb_serve(&bin, port, &dir.path().join("db")).unwrap_or_else(|e| {
            panic!(
                "cannot start PoloDB at {} (set KLAXON_POLODB_BIN): {e}",
                bin.display()
            )
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "PoloDB did not listen on {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        OwnPolo {
            child: Some(child),
            url: format!("mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=500&connectTimeoutMS=500"),
            _dir: dir,
        }
    }

    /// Sends the server a signal (`STOP` freezes it: connections stay open, nothing answers; `CONT` resumes).
    pub fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let ok = Command::new("kill")
                .args([&format!("-{sig}"), &c.id().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill -{sig} PoloDB");
        }
    }

    /// Kills the server and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnPolo {
    fn drop(&mut self) {
        self.kill();
    }
}
