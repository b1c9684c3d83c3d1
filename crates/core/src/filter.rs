//! Title filters: words (substrings, case-insensitive unless a rule or the process asks for case-sensitive
//! `including`) and regexes, compiled once per rule version.

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

/// How `including` words compare with the title (`includingCaseSensitive` on a rule, `--including-case` for the
/// process). `excluding` words are always case-insensitive, as in Hawk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Case {
    /// `TypeError` matches `typeerror` (Klaxon's default).
    #[default]
    Insensitive,
    /// `TypeError` does not match `typeerror` (Hawk's notifier: `title.includes(word)`).
    Sensitive,
}

impl Case {
    /// `insensitive` or `sensitive`.
    pub fn as_str(self) -> &'static str {
        match self {
            Case::Insensitive => "insensitive",
            Case::Sensitive => "sensitive",
        }
    }
}

impl std::str::FromStr for Case {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "insensitive" => Ok(Case::Insensitive),
            "sensitive" => Ok(Case::Sensitive),
            other => Err(format!(
                "unknown case `{other}`: use insensitive (Klaxon's default) or sensitive (Hawk's `including`)"
            )),
        }
    }
}

/// The compiled `including`/`excluding` words and `includingPatterns`/`excludingPatterns` regexes of a rule.
///
/// Semantics (Hawk's, extended): the title must contain at least one `including` word when the list is
/// non-empty, none of the `excluding` words, match at least one `includingPatterns` regex when that list is
/// non-empty and none of the `excludingPatterns`. Words are case-insensitive, except `including` words of a
/// filter built with [`Case::Sensitive`].
#[derive(Debug, Clone, Default)]
pub struct TitleFilter {
    including: Option<AhoCorasick>,
    including_case: Case,
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

/// The words as matched: trimmed, blank ones dropped, lowercased unless `case` is sensitive.
fn prepared(list: &[String], case: Case) -> Vec<String> {
    match case {
        Case::Insensitive => lowered(list),
        Case::Sensitive => list
            .iter()
            .map(|w| w.trim().to_owned())
            .filter(|w| !w.is_empty())
            .collect(),
    }
}

fn words(field: &'static str, list: &[String], case: Case) -> Result<Option<AhoCorasick>, FilterError> {
    let prepared = prepared(list, case);
    if prepared.is_empty() {
        return Ok(None);
    }
    AhoCorasick::new(&prepared)
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
    /// Compiles the four lists, `including` compared with `including_case`. Empty (or blank) words are ignored,
    /// as Hawk's UI never stores them on purpose.
    pub fn new(
        including: &[String],
        including_case: Case,
        excluding: &[String],
        including_patterns: &[String],
        excluding_patterns: &[String],
    ) -> Result<Self, FilterError> {
        Ok(TitleFilter {
            including: words("including", including, including_case)?,
            including_case,
            excluding: words("excluding", excluding, Case::Insensitive)?,
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
            let haystack = match self.including_case {
                Case::Insensitive => title.lower.as_str(),
                Case::Sensitive => title.original,
            };
            if !inc.is_match(haystack) {
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
            FilterMiss::NoIncludingWord => match self.including_case {
                Case::Insensitive => "the title contains none of the `including` words".into(),
                Case::Sensitive => {
                    "the title contains none of the `including` words (compared case-sensitively)".into()
                }
            },
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
        // (including, excluding, incl patterns, excl patterns, title, expected), `including` case-insensitive
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
            let f = TitleFilter::new(&v(inc), Case::Insensitive, &v(exc), &v(ip), &v(ep)).expect("compiles");
            assert_eq!(
                f.matches(&Title::new(title)),
                *want,
                "{inc:?} {exc:?} {ip:?} {ep:?} {title:?}"
            );
        }
    }

    /// The same lists under both cases: Hawk's notifier compares `including` case-sensitively
    /// (`title.includes(word)`) and `excluding` case-insensitively; `Case::Sensitive` does exactly that.
    #[test]
    fn including_case_table() {
        // (including, excluding, title, insensitive, sensitive)
        #[allow(clippy::type_complexity)]
        let cases: &[(&[&str], &[&str], &str, bool, bool)] = &[
            (&["TypeError"], &[], "TypeError: x is undefined", true, true),
            (&["TypeError"], &[], "typeerror: x is undefined", true, false),
            (&["typeerror"], &[], "TypeError: x is undefined", true, false),
            (&["DB"], &[], "db timeout", true, false),
            (&["db", "Cache"], &[], "Cache miss", true, true),
            (&["db", "cache"], &[], "Cache miss", true, false),
            // Hawk's validator test: `['included', 'excluded']` matches "Included word is included"
            (
                &["included", "excluded"],
                &[],
                "Included word is included",
                true,
                true,
            ),
            (&["Included"], &[], "an included word", true, false),
            (&["ОШИБКА"], &[], "Критическая ОШИБКА базы", true, true),
            (&["ошибка"], &[], "Критическая ОШИБКА базы", true, false),
            (&["  Timeout  "], &[], "Timeout after 30ms", true, true),
            (&["", " "], &[], "blank words are ignored either way", true, true),
            // `excluding` stays case-insensitive under both
            (&["Timeout"], &["auth"], "AUTH Timeout", false, false),
            (&[], &["AUTH"], "auth failed", false, false),
            (&[], &[], "anything", true, true),
        ];
        for (inc, exc, title, insensitive, sensitive) in cases {
            for (case, want) in [(Case::Insensitive, insensitive), (Case::Sensitive, sensitive)] {
                let f = TitleFilter::new(&v(inc), case, &v(exc), &[], &[]).expect("compiles");
                assert_eq!(
                    f.matches(&Title::new(title)),
                    *want,
                    "{case:?} {inc:?} {exc:?} {title:?}"
                );
            }
        }
        let f = TitleFilter::new(&v(&["Db"]), Case::Sensitive, &[], &[], &[]).expect("compiles");
        let miss = f.check(&Title::new("db down")).expect_err("no match");
        assert!(
            f.describe(miss).contains("case-sensitively"),
            "{}",
            f.describe(miss)
        );
        for c in [Case::Insensitive, Case::Sensitive] {
            assert_eq!(c.as_str().parse(), Ok(c));
        }
        assert!("Sensitive".parse::<Case>().is_err());
    }

    #[test]
    fn bad_regex_is_an_error() {
        let err = TitleFilter::new(&[], Case::Insensitive, &[], &v(&["(unclosed"]), &[]).expect_err("bad");
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
        let err = TitleFilter::new(&[], Case::Insensitive, &[], &[], &v(&["\\w{1000}{1000}"]))
            .expect_err("too big");
        assert!(err.to_string().contains("excludingPatterns"));
    }
}
