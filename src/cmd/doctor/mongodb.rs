//! The **mongodb** line: reachable, the database and collection rules are read from, what the server supports;
//! and the rules read for the rules line.

use std::time::Duration;

use klaxon_store::RuleStore;

use super::rules::RulesRead;
use super::{check, endpoint, Check, Status};
use crate::cli::GlobalOpts;

pub(super) async fn mongo_checks(
    global: &GlobalOpts,
    t: Duration,
    limits: &klaxon_core::Limits,
) -> (Vec<Check>, Option<RulesRead>) {
    let at = endpoint(&global.mongo_url);
    let db = global.mongo_db();
    let store = match tokio::time::timeout(t, RuleStore::connect(&global.mongo_url, &db)).await {
        Err(_) => Err(format!(
            "{at}: no answer within {}",
            humantime::format_duration(t)
        )),
        Ok(Err(e)) => Err(format!("{at}: {e}")),
        Ok(Ok(s)) => Ok(s),
    };
    let store = match store {
        Ok(s) => s,
        Err(detail) => {
            return (
                vec![
                    check(Status::Fail, "mongodb", detail),
                    check(Status::Warn, "rules", "not checked: MongoDB is unreachable"),
                ],
                None,
            )
        }
    };
    let capabilities = if store.has_rule_index() {
        "createIndexes supported: rule-id index ready, delivery trail expires by TTL index"
    } else {
        "no createIndexes (e.g. PoloDB): rule-id lookups scan projects, the delivery trail keeps old records"
    };
    let out = vec![check(
        Status::Ok,
        "mongodb",
        format!(
            "{at}, database `{db}`, collection `{}`: {capabilities}",
            klaxon_store::store::PROJECTS
        ),
    )];
    // One retry of a failed read: a MongoDB-wire server under load may drop a cursor ("cursor not found").
    let survey = async {
        match crate::cmd::rules::survey(&store, None, limits).await {
            Err(_) => crate::cmd::rules::survey(&store, None, limits).await,
            ok => ok,
        }
    };
    let read = match tokio::time::timeout(t, survey).await {
        Err(_) => RulesRead::Slow,
        Ok(Err(e)) => RulesRead::Failed(format!("{e:#}")),
        Ok(Ok(s)) => RulesRead::Read(s),
    };
    store.close().await;
    (out, Some(read))
}
