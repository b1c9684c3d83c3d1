//! Title filters: words (case-insensitive substrings) and regexes, compiled once per rule version.

use aho_corasick::AhoCorasick;
use regex::RegexSet;

/// Compiled regexes may use at most this much memory each; a user-supplied pattern must not be able to
/// exhaust a worker.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A title as the filters see it: the original and its lowercase form, computed once per event and shared
/// by every rule of the project.
#[derive(Debug, Clone)]
pub struct Title<'a> {
    /// The title as received.
    pub original: &'a str,
    /// `original.to_lowercase()` (Unicode-aware).
    pub lower: String,
}

impl<'a> Title<'a> {
    /// Prepares a title for matching.
    pub fn new(original: &'a str) -> Self {
        Title {
            original,
            lower: original.to_lowercase(),
        }
    }
}

/// The compiled `including`/`excluding` words and `includingPatterns`/`excludingPatterns` regexes of a rule.
///
/// Semantics (Hawk's, extended): the title must contain at least one `including` word when the list is
/// non-empty, none of the `excluding` words, match at least one `includingPatterns` regex when that list is
/// non-empty and none of the `excludingPatterns`.
#[derive(Debug, Clone, Default)]
pub struct TitleFilter {
    including: Option<AhoCorasick>,
    excluding: Option<AhoCorasick>,
    /// The `excluding` words as matched (trimmed, lowercase), to name the one that decided.
    excluding_words: Vec<String>,
    including_patterns: Option<RegexSet>,
    excluding_patterns: Option<RegexSet>,
}

/// Why a title did not pass a [`TitleFilter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterMiss {
    /// `including` is not empty and the title contains none of its words.
    NoIncludingWord,
    /// The title contains this `excluding` word (index among the non-blank words).
    ExcludedWord(usize),
    /// `includingPatterns` is not empty and the title matches none.
    NoIncludingPattern,
    /// The title matches this `excludingPatterns` regex (index).
    ExcludedPattern(usize),
}

/// A filter that could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// A regex did not compile (syntax or size limit).
    #[error("invalid regex in `{field}`: {message}")]
    Regex {
        /// Which list holds the pattern.
        field: &'static str,
        /// The compiler's message.
        message: String,
    },
    /// The word automaton could not be built.
    #[error("cannot compile `{field}` words: {message}")]
    Words {
        /// Which list holds the words.
        field: &'static str,
        /// The builder's message.
        message: String,
    },
}

fn lowered(list: &[String]) -> Vec<String> {
    list.iter()
        .map(|w| w.trim().to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

fn words(field: &'static str, list: &[String]) -> Result<Option<AhoCorasick>, FilterError> {
    let lowered = lowered(list);
    if lowered.is_empty() {
        return Ok(None);
    }
    AhoCorasick::new(&lowered)
        .map(Some)
        .map_err(|e| FilterError::Words {
            field,
            message: e.to_string(),
        })
}

fn patterns(field: &'static str, list: &[String]) -> Result<Option<RegexSet>, FilterError> {
    if list.is_empty() {
        return Ok(None);
    }
    regex::RegexSetBuilder::new(list)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map(Some)
        .map_err(|e| FilterError::Regex {
            field,
            message: e.to_string(),
        })
}

impl TitleFilter {
    /// Compiles the four lists. Empty (or blank) words are ignored, as Hawk's UI never stores them on purpose.
    pub fn new(
        including: &[String],
        excluding: &[String],
        including_patterns: &[String],
        excluding_patterns: &[String],
    ) -> Result<Self, FilterError> {
        Ok(TitleFilter {
            including: words("including", including)?,
            excluding: words("excluding", excluding)?,
            excluding_words: lowered(excluding),
            including_patterns: patterns("includingPatterns", including_patterns)?,
            excluding_patterns: patterns("excludingPatterns", excluding_patterns)?,
        })
    }

    /// True when the title passes every list.
    pub fn matches(&self, title: &Title<'_>) -> bool {
        self.check(title).is_ok()
    }

    /// Passes, or says which list rejected the title (and, for an exclusion, which word or pattern). The
    /// worker and `explain` both decide with this; it allocates nothing.
    pub fn check(&self, title: &Title<'_>) -> Result<(), FilterMiss> {
        if let Some(inc) = &self.including {
            if !inc.is_match(&title.lower) {
                return Err(FilterMiss::NoIncludingWord);
            }
        }
        if let Some(exc) = &self.excluding {
            if let Some(m) = exc.find(&title.lower) {
                return Err(FilterMiss::ExcludedWord(m.pattern().as_usize()));
            }
        }
        if let Some(inc) = &self.including_patterns {
            if !inc.is_match(title.original) {
                return Err(FilterMiss::NoIncludingPattern);
            }
        }
        if let Some(exc) = &self.excluding_patterns {
            if let Some(i) = exc.matches(title.original).iter().next() {
                return Err(FilterMiss::ExcludedPattern(i));
            }
        }
        Ok(())
    }

    /// Words it to a person: which list decided and, for an exclusion, the word or pattern.
    pub fn describe(&self, miss: FilterMiss) -> String {
        match miss {
            FilterMiss::NoIncludingWord => "the title contains none of the `including` words".into(),
            FilterMiss::ExcludedWord(i) => format!(
                "the title contains the `excluding` word {:?}",
                self.excluding_words.get(i).map(String::as_str).unwrap_or("?")
            ),
            FilterMiss::NoIncludingPattern => "the title matches none of the `includingPatterns`".into(),
            FilterMiss::ExcludedPattern(i) => format!(
                "the title matches the `excludingPatterns` regex {:?}",
                self.excluding_patterns
                    .as_ref()
                    .and_then(|p| p.patterns().get(i))
                    .map(String::as_str)
                    .unwrap_or("?")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn table() {
        // (including, excluding, incl patterns, excl patterns, title, expected)
        #[allow(clippy::type_complexity)]
        let cases: &[(&[&str], &[&str], &[&str], &[&str], &str, bool)] = &[
            (&[], &[], &[], &[], "anything", true),
            (&["db"], &[], &[], &[], "DB timeout", true),
            (&["db", "cache"], &[], &[], &[], "Cache miss", true),
            (&["db", "cache"], &[], &[], &[], "TypeError", false),
            (&[], &["auth"], &[], &[], "Auth failed", false),
            (&[], &["auth"], &[], &[], "Timeout", true),
            (&["timeout"], &["auth"], &[], &[], "AUTH timeout", false),
            (&["", "  "], &[], &[], &[], "blank words are ignored", true),
            (&["ошибка"], &[], &[], &[], "Критическая ОШИБКА базы", true),
            (&["ÉCHEC"], &[], &[], &[], "échec de connexion", true),
            (&[], &[], &["^Timeout.*ms$"], &[], "Timeout after 30ms", true),
            (&[], &[], &["^Timeout.*ms$"], &[], "timeout after 30ms", false),
            (&[], &[], &["(?i)^timeout"], &[], "TIMEOUT", true),
            (&[], &[], &[], &[r"\bhealth\b"], "GET /health failed", false),
            (&["get"], &[], &[], &[r"\bhealth\b"], "GET /users failed", true),
        ];
        for (inc, exc, ip, ep, title, want) in cases {
            let f = TitleFilter::new(&v(inc), &v(exc), &v(ip), &v(ep)).expect("compiles");
            assert_eq!(
                f.matches(&Title::new(title)),
                *want,
                "{inc:?} {exc:?} {ip:?} {ep:?} {title:?}"
            );
        }
    }

    #[test]
    fn bad_regex_is_an_error() {
        let err = TitleFilter::new(&[], &[], &v(&["(unclosed"]), &[]).expect_err("bad");
        assert!(matches!(
            err,
            FilterError::Regex {
                field: "includingPatterns",
                ..
            }
        ));
    }

    #[test]
    fn huge_regex_hits_the_size_limit() {
        let err = TitleFilter::new(&[], &[], &[], &v(&["\\w{1000}{1000}"])).expect_err("too big");
        assert!(err.to_string().contains("excludingPatterns"));
    }
}
