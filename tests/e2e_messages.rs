//! Messages people can act on, end to end: the project's name from Hawk's `projects` document instead of its
//! id, a link to the event from `--event-url-template` on every channel, and what happened in words.

mod common;

use std::time::Duration;

use common::{object_id, Env};
use klaxon_testkit::HttpSink;
use mongodb::bson::{doc, oid::ObjectId};
use serde_json::json;

const TOKEN: &str = "123456:messages-test-token";
const GARAGE: &str = "https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview";

/// Sets the project's `name` the way Hawk stores it, beside the imported `notifications`.
async fn name_project(env: &Env, project: &str, name: &str) {
    let client = mongodb::Client::with_uri_str(klaxon_testkit::mongo_url())
        .await
        .expect("mongo client");
    let oid = ObjectId::parse_str(project).expect("object id");
    let projects = client
        .database(&env.namespace)
        .collection::<mongodb::bson::Document>("projects");
    projects
        .update_one(doc! {"_id": oid}, doc! {"$set": {"name": name}})
        .await
        .expect("set name");
    // PoloDB does not report matched counts: read the document back instead.
    let stored = projects.find_one(doc! {"_id": oid}).await.expect("read back");
    assert_eq!(
        stored.as_ref().and_then(|d| d.get_str("name").ok()),
        Some(name),
        "{stored:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_channel_shows_the_project_name_a_link_and_the_window_in_words() {
    let hooks = HttpSink::start().await.expect("sink");
    let telegram = HttpSink::start().await.expect("sink");
    let env = Env::new()
        .set("KLAXON_TELEGRAM_API", &telegram.url(""))
        .set("KLAXON_TELEGRAM_BOT_TOKEN", TOKEN)
        .set("KLAXON_EVENT_URL_TEMPLATE", GARAGE);
    let project = object_id();
    let name = format!("Acme storefront {}", env.namespace);
    let email = format!("{}@example.test", env.namespace);
    env.import(&json!([{"_id": project, "notifications": [{
    "isEnabled": true, "whatToReceive": "SEEN_MORE", "threshold": 5, "thresholdPeriod": 3_600_000,
    "including": [], "excluding": [],
    "channels": {
        "slack": {"isEnabled": true, "endpoint": hooks.url("/slack"), "minPeriod": 0},
        "webhook": {"isEnabled": true, "endpoint": hooks.url("/webhook"), "minPeriod": 0},
        "telegram": {"isEnabled": true, "endpoint": "-100777", "minPeriod": 0},
        "email": {"isEnabled": true, "endpoint": email, "minPeriod": 0}
    }}]}]));
    name_project(&env, &project, &name).await;

    let mut k = env.spawn("run", &[]);
    let title = format!("TypeError: x is undefined ({})", env.namespace);
    env.publish(&project, &title, "11da").count(5).ok();

    let link = format!("https://garage.hawk.so/project/{project}/event/11da/overview");
    let got = hooks.wait_for_count(2, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 2, "slack + webhook; log:\n{}", k.logs());
    let slack = got.iter().find(|r| r.uri == "/slack").expect("slack").json();
    let text = slack["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("in project {name}")), "{text}");
    assert!(
        !text.contains(&format!("in project {project}")),
        "the name replaces the id: {text}"
    );
    assert!(text.contains("Seen 5 times in the last hour"), "{text}");
    assert!(text.contains(&format!("<{link}|Open event>")), "{text}");
    let webhook = got.iter().find(|r| r.uri == "/webhook").expect("webhook").json();
    assert_eq!(webhook["projectId"], project.as_str());
    assert_eq!(webhook["projectName"], name.as_str());
    assert_eq!(webhook["events"][0]["url"], link.as_str());

    let tg = telegram.wait_for_count(1, Duration::from_secs(15)).await;
    assert_eq!(tg.len(), 1, "telegram; log:\n{}", k.logs());
    let tg_text = tg[0].json()["text"].as_str().unwrap_or_default().to_owned();
    assert!(tg_text.contains(&format!("in project {name}")), "{tg_text}");
    assert!(
        tg_text.contains(&format!("<a href=\"{link}\">Open event</a>")),
        "{tg_text}"
    );

    let mail = klaxon_testkit::wait_for(Duration::from_secs(15), || {
        let found = klaxon_testkit::smtp::messages_containing(&email);
        async move { (!found.is_empty()).then_some(found) }
    })
    .await
    .unwrap_or_default();
    assert_eq!(mail.len(), 1, "email; log:\n{}", k.logs());
    // Headers are folded and the parts quoted-printable: unfold and decode before looking.
    let raw = common::qp_decode(&mail[0].replace("\r\n ", " "));
    assert!(
        raw.contains(&format!("5 times in the last hour in {name}")),
        "{raw}"
    );
    assert!(raw.contains(&format!("Open event: {link}")), "{raw}");

    assert_eq!(k.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_event_url_template_is_refused_before_connecting() {
    let env = Env::new().set("KLAXON_EVENT_URL_TEMPLATE", "https://garage.hawk.so/{eventId}");
    let (code, _, err) = env.run(&["run", "--http-addr", "127.0.0.1:0"]);
    assert_ne!(code, 0);
    assert!(err.contains("unknown placeholder"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_only_process_shows_the_project_name_too() {
    let hooks = HttpSink::start().await.expect("sink");
    let env = Env::new();
    let project = object_id();
    let name = format!("Billing {}", env.namespace);
    env.import(&json!([{"_id": project, "notifications": [{
        "isEnabled": true, "whatToReceive": "ONLY_NEW", "including": [], "excluding": [],
        "channels": {"slack": {"isEnabled": true, "endpoint": hooks.url("/slack"), "minPeriod": 0}}}]}]));
    name_project(&env, &project, &name).await;
    // The sender has no worker beside it and reads no rules: the name comes in the task the worker published.
    let mut sender = env.spawn("sender", &[]);
    let mut worker = env.spawn("worker", &[]);
    let title = format!("New failure ({})", env.namespace);
    env.publish(&project, &title, "g1").new_first().ok();
    let got = hooks.wait_for_count(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "log:\n{}\n{}", worker.logs(), sender.logs());
    let text = got[0].json()["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains(&format!("*New error in project {name}*")), "{text}");
    assert!(text.contains("First seen"), "{text}");
    assert!(!text.contains("Open event"), "no template, no link: {text}");
    assert_eq!(worker.terminate(Duration::from_secs(10)), Some(0));
    assert_eq!(sender.terminate(Duration::from_secs(10)), Some(0));
    common::delete_queues(&env).await;
}
