//! The MongoDB client the rule store and the delivery trail share: how one is opened (Klaxon's options, a
//! `ping`), how a URL is checked without connecting, and how one is closed. [`crate::store`] and
//! [`crate::trail`] both build on it; the trail borrows a [`crate::RuleStore`]'s client, and the store knows
//! nothing of the trail.

use std::time::Duration;

use mongodb::bson::doc;
use mongodb::options::ClientOptions;
use mongodb::{Client, Database};

use crate::error::short;
use crate::RulesError;

/// How long [`crate::RuleStore::connect`] and every later operation wait for a usable server.
pub const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a client for `mongo_url` with Klaxon's options (the URL's own settings win; otherwise
/// [`SERVER_SELECTION_TIMEOUT`] to select a server and to connect, app name `klaxon`) and checks `database`
/// answers a `ping`. The one place a MongoDB client is made: the rule store and the delivery trail share it.
pub(crate) async fn connect_database(mongo_url: &str, database: &str) -> Result<Database, RulesError> {
    let mut opts = ClientOptions::parse(mongo_url).await.map_err(|e| {
        // The driver's message may quote parts of the URL, which can carry a password: quote it only
        // when it cannot.
        let detail = e.to_string();
        RulesError::Config(if detail.contains('@') {
            "cannot parse the MongoDB URL".to_owned()
        } else {
            format!("cannot parse the MongoDB URL: {detail}")
        })
    })?;
    opts.server_selection_timeout
        .get_or_insert(SERVER_SELECTION_TIMEOUT);
    opts.connect_timeout.get_or_insert(SERVER_SELECTION_TIMEOUT);
    opts.app_name.get_or_insert_with(|| "klaxon".to_owned());
    let client = Client::with_options(opts).map_err(|e| RulesError::from_driver("connect", e))?;
    let db = client.database(database);
    db.run_command(doc! {"ping": 1})
        .await
        .map_err(|e| RulesError::from_driver("ping", e))?;
    Ok(db)
}

/// Checks a `--mongo-url` value without connecting (and without the DNS lookups a `mongodb+srv://` URL makes when
/// connecting): [`RulesError::Config`] says what is wrong, quoting the driver only where its message cannot hold
/// the URL's password.
pub fn check_url(mongo_url: &str) -> Result<(), RulesError> {
    if !mongo_url.contains("://") {
        return Err(RulesError::Config(
            "not a MongoDB URL: expected mongodb://[user:password@]host:27017[,host2…][/?options] (or mongodb+srv://)"
                .into(),
        ));
    }
    mongodb::options::ConnectionString::parse(mongo_url)
        .map(|_| ())
        .map_err(|e| {
            let detail = match &*e.kind {
                mongodb::error::ErrorKind::InvalidArgument { message, .. } => message.clone(),
                _ => e.to_string(),
            };
            RulesError::Config(if detail.contains('@') || detail.contains(mongo_url) {
                "cannot parse the MongoDB URL".to_owned()
            } else {
                format!("cannot parse the MongoDB URL: {}", short(&detail))
            })
        })
}

/// Longest [`crate::RuleStore::close`] waits for the server.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Ends the client's server sessions and closes its connections, waiting at most [`CLOSE_TIMEOUT`].
///
/// A `mongodb::Client` that is only dropped ends its sessions from a background task, which can race the
/// driver's own pool shutdown when the process is about to exit (mongodb 3.9 then panics in a worker thread
/// and prints a backtrace: seen once in ~300 `klaxon doctor` runs). Short-lived commands call this before
/// they return.
pub async fn close_client(client: &mongodb::Client) {
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, client.clone().shutdown().immediate(true)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_without_connecting_and_passwords_never_quoted() {
        for ok in [
            "mongodb://127.0.0.1:27017",
            "mongodb://u:p@a:27017,b:27017/?replicaSet=rs0",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("x", "not a MongoDB URL"),
            ("mongodb://u:hunter2@h:notaport", "cannot parse the MongoDB URL"),
            ("http://h:27017", "cannot parse the MongoDB URL"),
        ] {
            let e = check_url(bad).expect_err(bad).to_string();
            assert!(e.contains(says) && !e.contains("hunter2"), "{bad}: {e}");
        }
    }
}
