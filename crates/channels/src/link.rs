//! Links to the event in the error tracker: `--event-url-template` (`KLAXON_EVENT_URL_TEMPLATE`).
//!
//! A template is an http(s) URL with placeholders `{projectId}`, `{groupHash}` and `{repetitionId}`, e.g.
//! Hawk's garage: `https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview`.
//! Values are percent-encoded (everything but `A–Z a–z 0–9 - . _ ~`), so an event field can never change the
//! URL's shape. An event without a repetition id drops the path segment `/{repetitionId}` (Hawk's URL then
//! opens the group's latest occurrence), and any other `{repetitionId}` becomes empty.

use url::Url;

use crate::ChannelError;

/// The placeholders a template may use.
pub const PLACEHOLDERS: [&str; 3] = ["{projectId}", "{groupHash}", "{repetitionId}"];
/// Longest template, and longest link produced from it (a longer link is left out of the message).
pub const MAX_URL_LEN: usize = 2000;

/// A validated `--event-url-template`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlTemplate {
    template: String,
}

fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl UrlTemplate {
    /// Validates a template: an http(s) URL with a host once the placeholders are filled, no other `{…}`,
    /// at most [`MAX_URL_LEN`] characters.
    pub fn parse(template: &str) -> Result<Self, ChannelError> {
        let invalid = |reason: String| ChannelError::InvalidConfig {
            setting: "event_url_template",
            reason,
        };
        let template = template.trim();
        if template.len() > MAX_URL_LEN {
            return Err(invalid(format!("longer than {MAX_URL_LEN} characters")));
        }
        let mut rest = template.to_owned();
        for p in PLACEHOLDERS {
            rest = rest.replace(p, "");
        }
        if let Some(at) = rest.find(['{', '}']) {
            let near: String = rest[at..].chars().take(20).collect();
            return Err(invalid(format!(
                "unknown placeholder near `{near}`; use {}",
                PLACEHOLDERS.join(", ")
            )));
        }
        let t = UrlTemplate {
            template: template.to_owned(),
        };
        let sample = t.fill(
            "5e3eef0679fa3700a0198a49",
            "11da",
            Some("5e3eef0679fa3700a0198a4a"),
        );
        let url = Url::parse(&sample).map_err(|e| invalid(format!("not a URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(invalid("must be an http(s) URL with a host".into()));
        }
        Ok(t)
    }

    fn fill(&self, project_id: &str, group_hash: &str, repetition_id: Option<&str>) -> String {
        let mut s = self.template.clone();
        let repetition = repetition_id.filter(|r| !r.is_empty());
        if repetition.is_none() {
            s = s.replace("/{repetitionId}", "");
        }
        s.replace("{projectId}", &encode(project_id))
            .replace("{groupHash}", &encode(group_hash))
            .replace("{repetitionId}", &encode(repetition.unwrap_or("")))
    }

    /// The link to one event, or `None` when there is no event (an empty group: a `NO_EVENTS` alert) or the link
    /// would be longer than [`MAX_URL_LEN`].
    pub fn link(&self, project_id: &str, group_hash: &str, repetition_id: Option<&str>) -> Option<String> {
        if group_hash.is_empty() {
            return None;
        }
        Some(self.fill(project_id, group_hash, repetition_id)).filter(|l| l.len() <= MAX_URL_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HAWK: &str = "https://garage.hawk.so/project/{projectId}/event/{groupHash}/{repetitionId}/overview";

    #[test]
    fn hawk_garage_links() {
        let t = UrlTemplate::parse(HAWK).expect("valid");
        assert_eq!(
            t.link("5e3eef0679fa3700a0198a49", "11da", Some("6a1b"))
                .as_deref(),
            Some("https://garage.hawk.so/project/5e3eef0679fa3700a0198a49/event/11da/6a1b/overview")
        );
        assert_eq!(
            t.link("p", "g", None).as_deref(),
            Some("https://garage.hawk.so/project/p/event/g/overview"),
            "no repetition: the segment is dropped"
        );
        assert_eq!(t.link("p", "g", Some("")), t.link("p", "g", None));
        assert_eq!(t.link("p", "", Some("r")), None, "no group, no event to link to");
    }

    #[test]
    fn values_are_encoded_and_cannot_change_the_url_shape() {
        let t = UrlTemplate::parse("https://x.test/e?g={groupHash}&r={repetitionId}").expect("valid");
        assert_eq!(
            t.link("p", "a/b?c=d&e f", Some("<x>|\"")).as_deref(),
            Some("https://x.test/e?g=a%2Fb%3Fc%3Dd%26e%20f&r=%3Cx%3E%7C%22")
        );
        let long = "g".repeat(MAX_URL_LEN);
        assert_eq!(t.link("p", &long, None), None, "too long: no link");
    }

    #[test]
    fn bad_templates_are_refused_with_a_reason() {
        for (bad, why) in [
            ("garage.hawk.so/{groupHash}", "not a URL"),
            ("ftp://x.test/{groupHash}", "http(s)"),
            ("https://x.test/{eventId}", "unknown placeholder"),
            ("https://x.test/{groupHash", "unknown placeholder"),
        ] {
            let err = UrlTemplate::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(UrlTemplate::parse(&format!("https://x.test/{}", "a".repeat(MAX_URL_LEN))).is_err());
    }
}
