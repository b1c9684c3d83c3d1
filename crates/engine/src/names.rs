//! Project names for messages, read from the rule cache: the `name` of a project comes from the same
//! `projects` document as its rules, so it is loaded and cached with them (no second query, no second
//! client). A sender-only process connects the cache in the background; until then, and whenever a lookup
//! fails, messages show the project id.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use klaxon_channels::ProjectNames;
use klaxon_rules::RuleCache;

/// [`ProjectNames`] over a [`RuleCache`] that may be connected later.
#[derive(Clone, Default)]
pub struct CachedNames {
    cache: Arc<OnceLock<RuleCache>>,
}

impl CachedNames {
    /// Names from `cache`.
    pub fn new(cache: RuleCache) -> Self {
        let names = CachedNames::default();
        names.connect(cache);
        names
    }

    /// Sets the cache once it is connected (later calls change nothing).
    pub fn connect(&self, cache: RuleCache) {
        let _ = self.cache.set(cache);
    }

    /// True once a cache is connected.
    pub fn is_connected(&self) -> bool {
        self.cache.get().is_some()
    }
}

impl ProjectNames for CachedNames {
    fn project_name<'a>(
        &'a self,
        project_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>> {
        Box::pin(async move {
            let cache = self.cache.get()?;
            match cache.get(project_id).await {
                Ok(rules) => rules.name.clone(),
                Err(e) => {
                    tracing::debug!(project_id, error = %e, "project name unavailable; showing the id");
                    None
                }
            }
        })
    }
}
