//! The API's state: the configuration, the process's Redis and MongoDB clients (each connected on first use, so
//! the API answers, with 503, even while one is down) and the API's own RabbitMQ session, shared by the REST
//! handlers and the console.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use klaxon_broker::{Broker, Outgoing, Session, Topology};
use klaxon_counter::mutes::ReadMutes;
use klaxon_counter::{Mutes, RedisHandle, WindowCounter};
use klaxon_store::{RuleStore, RulesError, TrailReader};
use tokio::sync::{Mutex, OnceCell};

use crate::rest::check_project_id;
use crate::{throttle, ApiConfig, ApiError};

/// How long each attempt to connect the API's RabbitMQ session may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

struct Inner {
    config: ApiConfig,
    /// The API's one RabbitMQ session, for every request and console page (reopened when it broke).
    amqp: Mutex<Option<Session>>,
    trail: OnceCell<TrailReader>,
    /// Wrong tokens per client, for the API and the console alike.
    throttle: throttle::AuthThrottle,
}

/// The handle every handler gets (cheap to clone).
#[derive(Clone)]
pub(crate) struct Api(Arc<Inner>);

impl Api {
    /// The state of a router over `config`: nothing is connected yet.
    pub(crate) fn new(config: ApiConfig) -> Self {
        Api(Arc::new(Inner {
            config,
            amqp: Mutex::new(None),
            trail: OnceCell::new(),
            throttle: throttle::AuthThrottle::default(),
        }))
    }

    /// The configuration the API was built with.
    pub(crate) fn config(&self) -> &ApiConfig {
        &self.0.config
    }

    /// Wrong tokens per client, for the API and the console alike.
    pub(crate) fn throttle(&self) -> &throttle::AuthThrottle {
        &self.0.throttle
    }

    /// The rule store, its failure as an answer.
    pub(crate) async fn store(&self) -> Result<&RuleStore, ApiError> {
        self.rule_store().await.map_err(ApiError::rules)
    }

    /// The rule store (connected on first use): the process's one MongoDB client, for rules and the trail.
    pub(crate) async fn rule_store(&self) -> Result<&RuleStore, RulesError> {
        self.0.config.clients.store().await
    }

    /// The Redis handle (connected on first use).
    pub(crate) async fn redis(&self) -> Result<RedisHandle, ApiError> {
        self.0
            .config
            .clients
            .redis()
            .await
            .cloned()
            .map_err(|e| ApiError::unavailable("Redis", e))
    }

    /// The API's RabbitMQ session (connected on first use, and again once it broke), locked for the caller.
    async fn session(&self) -> Result<tokio::sync::MutexGuard<'_, Option<Session>>, ApiError> {
        let c = &self.0.config;
        let mut slot = self.0.amqp.lock().await;
        if slot.as_ref().is_some_and(|s| !s.broker.is_connected()) {
            *slot = None;
        }
        if slot.is_none() {
            let session = Session::open(&c.amqp_url, CONNECT_TIMEOUT, "api", &self.topology())
                .await
                .map_err(|e| ApiError::unavailable("RabbitMQ", e))?;
            *slot = Some(session);
        }
        Ok(slot)
    }

    /// The API's RabbitMQ connection, for operations on channels of their own (queue depths, the dead-letter
    /// queue): the console's pages never open a connection each.
    pub(crate) async fn broker(&self) -> Result<Broker, ApiError> {
        match self.session().await?.as_ref() {
            Some(s) => Ok(s.broker.clone()),
            None => Err(ApiError::unavailable("RabbitMQ", "not connected")),
        }
    }

    /// The namespace's queues.
    pub(crate) fn topology(&self) -> Topology {
        let c = &self.0.config;
        Topology::new(&c.namespace, &c.events_queue, c.queue_type).with_shards(c.events_shards)
    }

    /// Publishes with confirms on the shared channel, (re)connecting when it is gone: each message straight
    /// to its queue, or through the delay engine when it has a delay.
    pub(crate) async fn publish(&self, messages: &[(Outgoing, Duration)]) -> Result<(), ApiError> {
        let topology = self.topology();
        let mut slot = self.session().await?;
        let Some(session) = slot.as_ref() else {
            return Err(ApiError::unavailable("RabbitMQ", "not connected"));
        };
        let publisher = &session.publisher;
        let (now, later): (Vec<_>, Vec<_>) = messages.iter().cloned().partition(|(_, d)| d.is_zero());
        let now: Vec<Outgoing> = now.into_iter().map(|(m, _)| m).collect();
        let mut result = Ok(());
        if !now.is_empty() {
            result = publisher.publish_all(&now).await;
        }
        if result.is_ok() && !later.is_empty() {
            result = publisher.publish_delayed(&topology.delay(), &later).await;
        }
        if let Err(e) = result {
            // The channel may be broken; the next request opens a fresh session.
            if let Some(broken) = slot.take() {
                tokio::spawn(async move { broken.close().await });
            }
            return Err(ApiError::unavailable("RabbitMQ", e));
        }
        Ok(())
    }

    /// Tells every process that `project_id`'s rules changed; a failure only means they refresh on their TTL.
    pub(crate) async fn publish_invalidation(&self, project_id: &str) {
        match self.redis().await {
            Ok(mut redis) => {
                if let Err(e) =
                    klaxon_store::invalidation::publish(&mut redis, &self.0.config.namespace, project_id)
                        .await
                {
                    tracing::warn!(error = %e, project_id, "rules stored, but the invalidation was not published; processes refresh on their TTL");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e.message, project_id, "rules stored, but Redis is unreachable; processes refresh on their TTL")
            }
        }
    }

    /// The delivery trail's reader (through the rule store's client, connected on first use).
    pub(crate) async fn trail(&self) -> Result<&TrailReader, ApiError> {
        self.0
            .trail
            .get_or_try_init(|| async {
                let store = self
                    .rule_store()
                    .await
                    .map_err(|e| ApiError::unavailable("MongoDB", e))?;
                Ok(TrailReader::new(store))
            })
            .await
    }

    /// The Redis clock (ms), the one mutes and windows use.
    pub(crate) async fn redis_now(&self) -> Result<(WindowCounter, i64), ApiError> {
        let counter = WindowCounter::new(self.redis().await?, &self.0.config.namespace);
        let now = counter
            .server_time_ms()
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?;
        Ok((counter, now))
    }

    /// The project mutes' store, on `counter`'s Redis, read under the limit.
    pub(crate) fn mutes(&self, counter: &WindowCounter) -> Mutes {
        Mutes::new(counter.redis().clone(), &self.0.config.namespace)
            .with_limit(self.0.config.limits.max_mutes)
    }

    /// The project's mutes active now on the Redis clock (at most the limit of them), with the counter they
    /// were read through.
    pub(crate) async fn active_mutes(
        &self,
        project_id: &str,
    ) -> Result<(WindowCounter, ReadMutes), ApiError> {
        let (counter, now) = self.redis_now().await?;
        let list = self
            .mutes(&counter)
            .list(project_id, now)
            .await
            .map_err(|e| ApiError::unavailable("Redis", e))?;
        Ok((counter, list))
    }

    /// 404 unless the project exists.
    pub(crate) async fn known_project(&self, project_id: &str) -> Result<(), ApiError> {
        check_project_id(project_id)?;
        match self
            .store()
            .await?
            .project(project_id)
            .await
            .map_err(ApiError::rules)?
        {
            Some(_) => Ok(()),
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown project {project_id}"),
            )),
        }
    }
}
