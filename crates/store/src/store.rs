//! [`RuleStore`]: reads and writes the `notifications` of Hawk's `projects` documents.
//!
//! Only the operations every MongoDB-wire server we target supports are on the core path: `find`/`findOne`
//! by `_id`, `insertOne`, `updateOne` with `$set`/`$push` of whole fields. Upserts, `$pull` and the positional
//! `$` operator are not used (PoloDB lacks them), so "create or update" is find-then-write and rule edits are
//! read-modify-write of the `notifications` array. Index creation is attempted once at connect and skipped,
//! with one log line, where the server lacks `createIndexes`.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::TryStreamExt;
use klaxon_core::{Limits, ProjectRules, RuleDefaults};
use mongodb::bson::{doc, oid::ObjectId, Bson, Document};
use mongodb::{Collection, Database, IndexModel};
use serde_json::Value;

use crate::format::{document_to_json, parse_object_id, rule_to_document, ProjectNotifications};
use crate::internal_events::{RuleProblemReported, RulesQueried, RulesSkipped};
use crate::mongo::{close_client, connect_database, SERVER_SELECTION_TIMEOUT};
use crate::RulesError;

/// The collection Hawk keeps projects (and their rules) in.
pub const PROJECTS: &str = "projects";
/// The field of a project document where Klaxon keeps the project's name (`PUT /api/v1/projects/{id}`,
/// `klaxon projects name`, `rules import`'s `name`). Klaxon's own field, so setting a name never renames the
/// project in Hawk; where it is unset, Hawk's `name` is shown.
pub const NAME_FIELD: &str = "klaxonName";
/// How long one rule lookup may take before it fails as a transient error.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on the remembered "already reported" rule problems; the set is cleared when it grows past this.
const MAX_REPORTED: usize = 10_000;
/// Name of the index on rule ids (used by `rules rm|enable|disable` without a project).
const RULE_ID_INDEX: &str = "klaxon_notifications_id";

/// MongoDB rule store. Cheap to clone (one driver client and counters behind an `Arc`).
#[derive(Clone)]
pub struct RuleStore {
    inner: Arc<Inner>,
    /// What [`RuleStore::load`] assumes for what a rule leaves unset (the process's flags).
    defaults: RuleDefaults,
}

struct Inner {
    database: String,
    projects: Collection<Document>,
    queries: AtomicU64,
    problems_reported: AtomicU64,
    has_rule_index: AtomicBool,
    no_array_filters: AtomicBool,
    reported: Mutex<HashSet<u64>>,
}

impl std::fmt::Debug for RuleStore {
    // The URL can carry credentials: show the database only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleStore")
            .field("database", &self.inner.database)
            .field("queries", &self.queries())
            .finish_non_exhaustive()
    }
}

/// The stored rules of one project, each in its JSON form (relaxed extended JSON, ObjectIds as `{"$oid"}`),
/// as `klaxon rules list|check` show them.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredProject {
    /// Project id, 24-hex.
    pub project_id: String,
    /// Every stored rule, valid or not.
    pub notifications: Vec<Value>,
    /// The project's names.
    pub name: ProjectName,
}

/// A project's names: the one Klaxon keeps and Hawk's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectName {
    /// Set through Klaxon ([`NAME_FIELD`]).
    pub klaxon: Option<String>,
    /// Hawk's `name` (cleaned: one line, bounded).
    pub hawk: Option<String>,
}

impl ProjectName {
    /// Of a project document.
    pub fn of(doc: &Document) -> ProjectName {
        let clean = |field: &str| {
            let v = doc.get(field).cloned().map(Bson::into_relaxed_extjson);
            ProjectRules::default().with_name(v.as_ref()).name
        };
        ProjectName {
            klaxon: clean(NAME_FIELD),
            hawk: clean("name"),
        }
    }

    /// The name shown: Klaxon's, else Hawk's.
    pub fn shown(&self) -> Option<&str> {
        self.klaxon.as_deref().or(self.hawk.as_deref())
    }
}

impl StoredProject {
    /// Validates the rules as the engine will.
    pub fn rules(&self) -> ProjectRules {
        ProjectRules::from_notifications(Some(&Value::Array(self.notifications.clone())))
    }
}

fn notifications_of(doc: &Document) -> Vec<Document> {
    match doc.get("notifications") {
        Some(Bson::Array(items)) => items
            .iter()
            .filter_map(|b| match b {
                Bson::Document(d) => Some(d.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn as_bson(rules: &[Document]) -> Vec<Bson> {
    rules.iter().cloned().map(Bson::Document).collect()
}

fn fingerprint(parts: &[&str]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

impl RuleStore {
    /// Ends the sessions and closes the connections of this store (and of its clones); see [`close_client`].
    pub async fn close(&self) {
        close_client(self.inner.projects.client()).await;
    }

    /// Connects and checks the server answers (`ping`) within [`SERVER_SELECTION_TIMEOUT`] unless the URL
    /// sets its own `serverSelectionTimeoutMS`. Then tries to create the indexes the CLI uses.
    pub async fn connect(mongo_url: &str, database: &str) -> Result<Self, RulesError> {
        let db = connect_database(mongo_url, database).await?;
        let store = RuleStore {
            defaults: RuleDefaults::default(),
            inner: Arc::new(Inner {
                database: database.to_owned(),
                projects: db.collection(PROJECTS),
                queries: AtomicU64::new(0),
                problems_reported: AtomicU64::new(0),
                has_rule_index: AtomicBool::new(false),
                no_array_filters: AtomicBool::new(false),
                reported: Mutex::new(HashSet::new()),
            }),
        };
        store.ensure_indexes().await;
        Ok(store)
    }

    /// Creates the index on `notifications._id` where the server supports it; logs once and carries on
    /// where it does not (lookups by project use `_id`, which is always indexed).
    async fn ensure_indexes(&self) {
        let model = IndexModel::builder()
            .keys(doc! {"notifications._id": 1})
            .options(
                mongodb::options::IndexOptions::builder()
                    .name(RULE_ID_INDEX.to_owned())
                    .build(),
            )
            .build();
        match tokio::time::timeout(SERVER_SELECTION_TIMEOUT, self.inner.projects.create_index(model)).await {
            Ok(Ok(_)) => {
                self.inner.has_rule_index.store(true, Ordering::Relaxed);
                tracing::debug!(index = RULE_ID_INDEX, "index ready");
            }
            // Said once, in words: the driver's error carries the server's raw reply (a BSON hex dump on PoloDB),
            // and a CLI command must print its result and nothing else at the default level.
            Ok(Err(_)) => tracing::debug!(
                index = RULE_ID_INDEX,
                "the MongoDB-wire server does not support createIndexes (PoloDB does not); rule-id lookups scan projects"
            ),
            Err(_) => tracing::debug!(
                index = RULE_ID_INDEX,
                "index creation timed out; carrying on without it"
            ),
        }
    }

    /// This store with `defaults` for what rules leave unset when [`RuleStore::load`] compiles them
    /// (`--including-case`); clones made after this carry them too.
    pub fn with_rule_defaults(mut self, defaults: RuleDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// The defaults [`RuleStore::load`] compiles rules with.
    pub fn rule_defaults(&self) -> RuleDefaults {
        self.defaults
    }

    /// Whether the `notifications._id` index was created (false on servers without `createIndexes`).
    pub fn has_rule_index(&self) -> bool {
        self.inner.has_rule_index.load(Ordering::Relaxed)
    }

    /// Drops the whole database in use (rules, delivery trail, everything in it): `klaxon namespace delete
    /// --drop-database`. The caller decides whether Klaxon owns the database.
    pub async fn drop_database(&self) -> Result<(), RulesError> {
        self.client_database()
            .drop()
            .await
            .map_err(|e| RulesError::from_driver("drop database", e))
    }

    /// The database in use.
    pub fn database(&self) -> &str {
        &self.inner.database
    }

    /// The database in use, through this store's client: the delivery trail's collections live beside the
    /// rules and share the client.
    pub(crate) fn client_database(&self) -> Database {
        self.inner.projects.client().database(&self.inner.database)
    }

    /// The `projects` collection (for change streams).
    pub(crate) fn collection(&self) -> &Collection<Document> {
        &self.inner.projects
    }

    /// How many project reads went to MongoDB through [`RuleStore::load`].
    pub fn queries(&self) -> u64 {
        self.inner.queries.load(Ordering::Relaxed)
    }

    /// How many distinct rule problems (per rule version) were logged.
    pub fn problems_reported(&self) -> u64 {
        self.inner.problems_reported.load(Ordering::Relaxed)
    }

    /// Loads and validates one project's rules with the default [`Limits`]; see [`RuleStore::load_with`].
    pub async fn load(&self, project_id: &str) -> Result<Option<ProjectRules>, RulesError> {
        self.load_with(project_id, &Limits::default()).await
    }

    /// Loads and validates one project's rules under `limits`. `None` means no such project (also for an id
    /// that is not a 24-hex ObjectId: Hawk's project ids always are, so no query is made). Rule problems are
    /// logged, once per rule version. A document over [`Limits::max_rules`] (written by someone else: Hawk,
    /// an older Klaxon) gives its first `max_rules` rules; the others are counted in
    /// `klaxon_rules_skipped_total` on every load and reported once, never a failed load.
    pub async fn load_with(
        &self,
        project_id: &str,
        limits: &Limits,
    ) -> Result<Option<ProjectRules>, RulesError> {
        let Ok(oid) = parse_object_id("project id", project_id) else {
            tracing::debug!(project_id, "project id is not an ObjectId; no rules");
            return Ok(None);
        };
        self.inner.queries.fetch_add(1, Ordering::Relaxed);
        RulesQueried.emit();
        let Some(doc) = self.find_project(oid).await? else {
            return Ok(None);
        };
        let notifications = doc.get("notifications").cloned().map(Bson::into_relaxed_extjson);
        let mut rules = ProjectRules::from_notifications_with(notifications.as_ref(), limits, &self.defaults);
        rules.name = ProjectName::of(&doc).shown().map(str::to_owned);
        RulesSkipped { rules: rules.skipped }.emit();
        if !rules.problems.is_empty() {
            self.report_problems(project_id, notifications.as_ref(), &rules, limits);
        }
        Ok(Some(rules))
    }

    fn report_problems(
        &self,
        project_id: &str,
        notifications: Option<&Value>,
        rules: &ProjectRules,
        limits: &Limits,
    ) {
        // A rule's version is its stored content: the same broken rule is reported once, an edited one again.
        // Only the rules that were read have problems.
        let mut versions: HashMap<String, String> = HashMap::new();
        if let Some(Value::Array(items)) = notifications {
            for item in items.iter().take(limits.max_rules) {
                if let Some(id) = item
                    .get("_id")
                    .and_then(|v| v.get("$oid").or(Some(v)))
                    .and_then(Value::as_str)
                {
                    versions.insert(id.to_owned(), item.to_string());
                }
            }
        }
        let Ok(mut reported) = self.inner.reported.lock() else {
            return;
        };
        if reported.len() > MAX_REPORTED {
            reported.clear();
        }
        for p in &rules.problems {
            let rule_id = p.rule_id.as_deref().unwrap_or("");
            let version = versions.get(rule_id).map(String::as_str).unwrap_or("");
            if reported.insert(fingerprint(&[project_id, rule_id, version, &p.message])) {
                self.inner.problems_reported.fetch_add(1, Ordering::Relaxed);
                RuleProblemReported {
                    project_id,
                    problem: p,
                }
                .emit();
            }
        }
    }

    async fn find_project(&self, oid: ObjectId) -> Result<Option<Document>, RulesError> {
        // A server that answers heartbeats but stalls queries must not hang a batch (the driver has no
        // per-operation deadline by default): a bounded wait, then a transient error the worker retries.
        let find = self
            .inner
            .projects
            .find_one(doc! {"_id": oid})
            .projection(doc! {"notifications": 1, "name": 1, NAME_FIELD: 1});
        match tokio::time::timeout(QUERY_TIMEOUT, find).await {
            Ok(r) => r.map_err(|e| RulesError::from_driver("find project", e)),
            Err(_) => Err(RulesError::Query {
                op: "find project",
                message: format!("no answer within {} s", QUERY_TIMEOUT.as_secs()),
            }),
        }
    }

    /// The stored rules of one project (`None`: no such project).
    pub async fn project(&self, project_id: &str) -> Result<Option<StoredProject>, RulesError> {
        let oid = parse_object_id("project id", project_id)?;
        Ok(self.find_project(oid).await?.map(|d| StoredProject {
            project_id: oid.to_hex(),
            notifications: notifications_of(&d).iter().map(document_to_json).collect(),
            name: ProjectName::of(&d),
        }))
    }

    /// The names of each of `project_ids` that has a document (the others are left out); bad ids are skipped.
    pub async fn names(&self, project_ids: &[String]) -> Result<HashMap<String, ProjectName>, RulesError> {
        use futures_util::{StreamExt, TryStreamExt};
        let oids: Vec<ObjectId> = project_ids
            .iter()
            .filter_map(|id| parse_object_id("project id", id).ok())
            .collect();
        // Owned values in each future (a clone of the store is an `Arc`): the stream stays `Send` for any caller.
        let found: Vec<Option<(String, ProjectName)>> = futures_util::stream::iter(oids)
            .map(|oid| {
                let store = self.clone();
                async move {
                    let doc = store.find_project(oid).await?;
                    Ok::<_, RulesError>(doc.map(|d| (oid.to_hex(), ProjectName::of(&d))))
                }
            })
            .buffer_unordered(8)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Sets the name Klaxon keeps for a project (checked by the caller: [`klaxon_core::rule::check_project_name`]),
    /// creating the project document when there is none. Find-then-write, as [`RuleStore::replace`].
    pub async fn set_name(&self, project_id: &str, name: &str) -> Result<(), RulesError> {
        let oid = parse_object_id("project id", project_id)?;
        let set = doc! {"$set": {NAME_FIELD: name}};
        if self.find_project(oid).await?.is_some() {
            return self.update(oid, set).await;
        }
        match self
            .inner
            .projects
            .insert_one(doc! {"_id": oid, NAME_FIELD: name})
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_duplicate_key(&e) => self.update(oid, set).await,
            Err(e) => Err(RulesError::from_driver("insert project", e)),
        }
    }

    async fn scan(&self, filter: Document) -> Result<Vec<Document>, RulesError> {
        self.inner
            .projects
            .find(filter)
            .projection(doc! {"notifications": 1, "name": 1, NAME_FIELD: 1})
            .sort(doc! {"_id": 1})
            // Few round trips (the default batch is 101): each getMore is a chance for a MongoDB-wire server
            // under concurrent load to have lost the cursor (PoloDB: "cursor not found").
            .batch_size(2000)
            .await
            .map_err(|e| RulesError::from_driver("find projects", e))?
            .try_collect()
            .await
            .map_err(|e| RulesError::from_driver("find projects", e))
    }

    /// Every project that has a `notifications` array, in `_id` order (filtered here: not every server we
    /// target supports `$exists`).
    pub async fn projects(&self) -> Result<Vec<ProjectNotifications>, RulesError> {
        let mut out: Vec<ProjectNotifications> = self
            .scan(Document::new())
            .await?
            .into_iter()
            .filter(|d| matches!(d.get("notifications"), Some(Bson::Array(_))))
            .filter_map(|d| {
                let names = ProjectName::of(&d);
                Some(ProjectNotifications {
                    project_id: d.get_object_id("_id").ok()?,
                    notifications: notifications_of(&d),
                    shown_name: names.shown().map(str::to_owned),
                    name: names.klaxon,
                })
            })
            .collect();
        out.sort_by_key(|p| p.project_id);
        Ok(out)
    }

    /// The stored rules of the given projects (all projects with rules when `project_ids` is empty), in the
    /// export shape. An unknown listed project is exported with no rules.
    pub async fn export(&self, project_ids: &[String]) -> Result<Vec<ProjectNotifications>, RulesError> {
        if project_ids.is_empty() {
            return self.projects().await;
        }
        let mut out = Vec::with_capacity(project_ids.len());
        for id in project_ids {
            let oid = parse_object_id("project id", id)?;
            let doc = self.find_project(oid).await?;
            let names = doc.as_ref().map(ProjectName::of).unwrap_or_default();
            out.push(ProjectNotifications {
                project_id: oid,
                notifications: doc.as_ref().map(notifications_of).unwrap_or_default(),
                shown_name: names.shown().map(str::to_owned),
                name: names.klaxon,
            });
        }
        Ok(out)
    }

    /// Sets the `notifications` of an existing project, or creates the project document. Upserts are not
    /// used (PoloDB ignores them): find, then update or insert; a concurrent insert is retried as an update.
    async fn put_notifications(&self, project: &ProjectNotifications) -> Result<(), RulesError> {
        let rules = as_bson(&project.notifications);
        let name = project.name.as_deref();
        let set = |rules: Vec<Bson>| {
            let mut fields = doc! {"notifications": rules};
            if let Some(name) = name {
                fields.insert(NAME_FIELD, name);
            }
            doc! {"$set": fields}
        };
        if self.find_project(project.project_id).await?.is_some() {
            self.update(project.project_id, set(rules)).await?;
            return Ok(());
        }
        let mut new = doc! {"_id": project.project_id, "notifications": rules.clone()};
        if let Some(name) = name {
            new.insert(NAME_FIELD, name);
        }
        let insert = self.inner.projects.insert_one(new).await;
        match insert {
            Ok(_) => Ok(()),
            Err(e) if is_duplicate_key(&e) => self.update(project.project_id, set(rules)).await,
            Err(e) => Err(RulesError::from_driver("insert project", e)),
        }
    }

    async fn update(&self, oid: ObjectId, update: Document) -> Result<(), RulesError> {
        self.inner
            .projects
            .update_one(doc! {"_id": oid}, update)
            .await
            .map_err(|e| RulesError::from_driver("update project", e))?;
        Ok(())
    }

    /// Replaces the `notifications` of each listed project (import). The input was validated as a whole
    /// before this is called; projects are written one by one, in order.
    pub async fn replace(&self, projects: &[ProjectNotifications]) -> Result<(), RulesError> {
        for p in projects {
            self.put_notifications(p).await?;
            tracing::debug!(project_id = %p.project_id, rules = p.notifications.len(), "notifications replaced");
        }
        Ok(())
    }

    /// Appends a rule (JSON form; `_id` assigned when absent) to a project, creating the project document
    /// when needed. Returns the rule id. A project that already holds `max_rules` rules is refused
    /// ([`RulesError::OverLimit`]); the check and the append are two steps, so two concurrent appends can
    /// pass it together — readers still evaluate only the first `max_rules`.
    pub async fn add_rule(
        &self,
        project_id: &str,
        rule: &Value,
        max_rules: usize,
    ) -> Result<String, RulesError> {
        let oid = parse_object_id("project id", project_id)?;
        let doc = rule_to_document(rule)?;
        let rule_id = doc.get_object_id("_id").map(|o| o.to_hex()).unwrap_or_default();
        let existing = self.find_project(oid).await?;
        let held = existing.as_ref().map_or(0, |d| notifications_of(d).len());
        if held >= max_rules {
            return Err(RulesError::OverLimit(format!(
                "project {oid} already holds {held} rules, the limit is {max_rules} per project; remove a rule \
                 first (`klaxon rules rm`), or raise --max-rules-per-project (KLAXON_MAX_RULES_PER_PROJECT)"
            )));
        }
        match existing {
            Some(existing) if matches!(existing.get("notifications"), Some(Bson::Array(_)) | None) => {
                self.update(oid, doc! {"$push": {"notifications": doc}}).await?;
            }
            Some(_) => {
                // `notifications` is there but not an array (null, …): `$push` would fail, replace it.
                self.update(oid, doc! {"$set": {"notifications": [doc]}}).await?;
            }
            None => {
                self.put_notifications(&ProjectNotifications {
                    project_id: oid,
                    notifications: vec![doc],
                    name: None,
                    shown_name: None,
                })
                .await?;
            }
        }
        Ok(rule_id)
    }

    /// Finds the project holding a rule: the given one, or by searching (`notifications._id` query, then a
    /// scan for servers that cannot match inside arrays).
    async fn locate(
        &self,
        project_id: Option<&str>,
        rule: ObjectId,
    ) -> Result<(ObjectId, Vec<Document>), RulesError> {
        let holds = |d: &Document| {
            notifications_of(d)
                .iter()
                .any(|r| r.get_object_id("_id").ok() == Some(rule))
        };
        let candidates = match project_id {
            Some(p) => {
                let oid = parse_object_id("project id", p)?;
                self.find_project(oid).await?.into_iter().collect()
            }
            None => {
                let hits: Vec<Document> = self.scan(doc! {"notifications._id": rule}).await?;
                if hits.iter().any(holds) {
                    hits
                } else {
                    self.scan(Document::new()).await?
                }
            }
        };
        let mut found = candidates.into_iter().filter(holds);
        let first = found
            .next()
            .ok_or_else(|| RulesError::RuleNotFound(rule.to_hex()))?;
        if found.next().is_some() {
            return Err(RulesError::AmbiguousRule(rule.to_hex()));
        }
        let oid = first
            .get_object_id("_id")
            .map_err(|_| RulesError::InvalidInput("project document without an ObjectId `_id`".into()))?;
        Ok((oid, notifications_of(&first)))
    }

    /// Applies `edit` to the rule and writes the project's `notifications` back. Returns the project id.
    ///
    /// The write is a compare-and-set (`{_id, notifications: <as read>}`), retried on a concurrent change, so
    /// an edit made meanwhile by Hawk or another `klaxon rules` is not lost. A server that cannot compare
    /// arrays in a filter (detected: nothing matched although the array is unchanged) gets a plain write.
    async fn edit_rule(
        &self,
        project_id: Option<&str>,
        rule_id: &str,
        edit: impl Fn(&mut Vec<Document>, usize),
    ) -> Result<String, RulesError> {
        const ATTEMPTS: usize = 5;
        let rule = parse_object_id("rule id", rule_id)?;
        for _ in 0..ATTEMPTS {
            let (project, before) = self.locate(project_id, rule).await?;
            let idx = before
                .iter()
                .position(|r| r.get_object_id("_id").ok() == Some(rule))
                .ok_or_else(|| RulesError::RuleNotFound(rule_id.to_owned()))?;
            let mut after = before.clone();
            edit(&mut after, idx);
            let set = doc! {"$set": {"notifications": as_bson(&after)}};
            if self.inner.no_array_filters.load(Ordering::Relaxed) {
                self.update(project, set).await?;
                return Ok(project.to_hex());
            }
            let filter = doc! {"_id": project, "notifications": as_bson(&before)};
            let cas = match self.inner.projects.update_one(filter, set.clone()).await {
                Ok(r) => r,
                Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(_)) => {
                    // PoloDB refuses array values in filters: remember, and write without the comparison.
                    tracing::debug!(
                        "the MongoDB-wire server cannot compare arrays in filters (PoloDB cannot); \
                         rule edits are not compare-and-set"
                    );
                    self.inner.no_array_filters.store(true, Ordering::Relaxed);
                    self.update(project, set).await?;
                    return Ok(project.to_hex());
                }
                Err(e) => return Err(RulesError::from_driver("update project", e)),
            };
            if cas.matched_count == 1 {
                return Ok(project.to_hex());
            }
            let now = self.find_project(project).await?.map(|d| notifications_of(&d));
            if now.as_deref() == Some(before.as_slice()) {
                tracing::debug!(project_id = %project, "server cannot match arrays in filters; plain update");
                self.update(project, set).await?;
                return Ok(project.to_hex());
            }
            tracing::debug!(project_id = %project, "notifications changed concurrently; retrying the edit");
        }
        Err(RulesError::Query {
            op: "update rule",
            message: format!("the project kept changing during {ATTEMPTS} attempts; try again"),
        })
    }

    /// Removes a rule. Without `project_id` the rule is searched in every project. Returns the project id.
    pub async fn remove_rule(&self, project_id: Option<&str>, rule_id: &str) -> Result<String, RulesError> {
        self.edit_rule(project_id, rule_id, |rules, i| {
            rules.remove(i);
        })
        .await
    }

    /// Enables or disables a rule. Returns the project id.
    pub async fn set_enabled(
        &self,
        project_id: Option<&str>,
        rule_id: &str,
        enabled: bool,
    ) -> Result<String, RulesError> {
        self.edit_rule(project_id, rule_id, |rules, i| {
            rules[i].insert("isEnabled", enabled);
        })
        .await
    }
}

fn is_duplicate_key(e: &mongodb::error::Error) -> bool {
    use mongodb::error::{ErrorKind, WriteFailure};
    match e.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code == 11000,
        ErrorKind::InsertMany(m) => m
            .write_errors
            .as_ref()
            .is_some_and(|ws| ws.iter().any(|w| w.code == 11000)),
        _ => {
            let message = e.to_string();
            message.contains("E11000") || message.to_lowercase().contains("duplicate")
        }
    }
}
