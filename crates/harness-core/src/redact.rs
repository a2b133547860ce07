//! The one redaction path: text that leaves the process (errors, logs, `harness tools`,
//! events, tool results) passes through [`Redactor::redact`], which shows as `***`
//!
//! - every **known secret value**: provider keys and other credentials the process holds in
//!   its environment ([`Redactor::learn_env`]), the values of variables a configuration
//!   expanded (`${VAR}`) and configured header values ([`remember`]),
//! - the password of **URL userinfo** (`scheme://user:password@host`) and the values of a
//!   URL's **query** (`?key=value`),
//! - anything the secret-shape detector ([`crate::secret`]) finds.
//!
//! A process has one [`Redactor`] ([`global`]); [`redact`] applies it.
//!
//! ```
//! use harness_core::redact::Redactor;
//! let mut redactor = Redactor::default();
//! redactor.learn("hunter2-very-secret");
//! assert_eq!(
//!     redactor.redact("login hunter2-very-secret at https://bob:pw1@h.example/x?q=abc&page=2"),
//!     "login *** at https://bob:***@h.example/x?q=***&page=***"
//! );
//! ```

use std::borrow::Cow;
use std::sync::{LazyLock, PoisonError, RwLock};

/// What replaces a secret.
pub const MASK: &str = "***";

/// Known values shorter than this are not masked (they would mask ordinary words).
pub const MIN_KNOWN_LEN: usize = 6;

/// Environment variable names whose values are credentials (matched case-insensitively
/// against the parts of the name between underscores, or the whole name's end).
const SECRET_NAME_PARTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "CREDENTIAL",
    "CREDENTIALS",
    "APIKEY",
    "COOKIE",
    "PRIVATE",
];

/// Masks known secret values, URL credentials and secret-shaped text.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so a value containing another is masked whole.
    known: Vec<String>,
}

impl Redactor {
    /// Remembers `value` as a secret (ignored when shorter than [`MIN_KNOWN_LEN`]). The
    /// password and query values of a URL `value` are remembered too.
    pub fn learn(&mut self, value: &str) {
        let value = value.trim();
        for part in url_secrets(value) {
            self.insert(part);
        }
        self.insert(value);
    }

    fn insert(&mut self, value: &str) {
        if value.chars().count() < MIN_KNOWN_LEN || self.known.iter().any(|known| known == value) {
            return;
        }
        self.known.push(value.to_owned());
        self.known.sort_by_key(|known| std::cmp::Reverse(known.len()));
    }

    /// Learns the credentials of an environment: the values of variables whose name says
    /// they are one (`OPENAI_API_KEY`, `GITHUB_TOKEN`, `DB_PASSWORD`, …), the password and
    /// query values of every URL-valued variable (`OPENAI_BASE_URL=https://u:p@h`), and any
    /// value the shape detector calls a secret.
    pub fn learn_env(&mut self, vars: impl IntoIterator<Item = (String, String)>) {
        for (name, value) in vars {
            let upper = name.to_ascii_uppercase();
            let secret_name = upper
                .split(['_', '-', '.'])
                .any(|part| SECRET_NAME_PARTS.contains(&part))
                || upper.ends_with("KEY")
                || upper.ends_with("TOKEN");
            if value.contains("://") {
                // A URL: its password and query values, so the rest stays readable.
                for part in url_secrets(&value) {
                    self.insert(part);
                }
            } else if secret_name || crate::secret::contains_secret(&value) {
                self.learn(&value);
            }
        }
    }

    /// How many values are known.
    pub fn known(&self) -> usize {
        self.known.len()
    }

    /// `text` with every secret shown as [`MASK`].
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = self.redact_known(text);
        if let Cow::Owned(masked) = crate::secret::redact_secrets(&out) {
            out = Cow::Owned(masked);
        }
        out
    }

    /// `text` with the known values and URL credentials masked, without the shape
    /// detector (for content the model reads, such as tool results, where a random-looking
    /// identifier must stay intact).
    pub fn redact_known<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out: Cow<'a, str> = Cow::Borrowed(text);
        for known in &self.known {
            if out.contains(known.as_str()) {
                out = Cow::Owned(out.replace(known.as_str(), MASK));
            }
        }
        if let Cow::Owned(masked) = mask_urls(&out) {
            out = Cow::Owned(masked);
        }
        out
    }
}

/// The password and query values of the URLs in `text`.
fn url_secrets(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    for url in urls(text) {
        let (password, query) = url_parts(url);
        found.extend(password);
        found.extend(query);
    }
    found
}

/// The URLs (`scheme://...` up to whitespace or a quote) in `text`.
fn urls(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        loop {
            let at = rest.find("://")?;
            let scheme_start = rest[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '-' || c == '.'))
                .map_or(0, |i| i + 1);
            let end = rest[at..]
                .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | ')' | ']' | ','))
                .map_or(rest.len(), |i| at + i);
            let url = &rest[scheme_start..end];
            rest = &rest[end..];
            if scheme_start < at {
                return Some(url);
            }
        }
    })
}

/// The userinfo password and the query values of `url`.
fn url_parts(url: &str) -> (Option<&str>, Vec<&str>) {
    let Some((_, after)) = url.split_once("://") else {
        return (None, Vec::new());
    };
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let authority = &after[..authority_end];
    let password = authority
        .rsplit_once('@')
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, password)| password)
        .filter(|password| !password.is_empty() && *password != MASK);
    let mut values = Vec::new();
    if let Some(query_start) = after.find('?') {
        let query = &after[query_start + 1..];
        let query = query.split('#').next().unwrap_or("");
        for pair in query.split('&') {
            if let Some((_, value)) = pair.split_once('=')
                && !value.is_empty()
                && value != MASK
            {
                values.push(value);
            }
        }
    }
    (password, values)
}

/// `text` with URL passwords and query values masked.
fn mask_urls(text: &str) -> Cow<'_, str> {
    let mut secrets: Vec<&str> = Vec::new();
    let mut ranges: Vec<std::ops::Range<usize>> = Vec::new();
    for url in urls(text) {
        let base = url.as_ptr() as usize - text.as_ptr() as usize;
        let (password, query) = url_parts(url);
        for part in password.into_iter().chain(query) {
            let start = part.as_ptr() as usize - text.as_ptr() as usize;
            debug_assert!(start >= base);
            ranges.push(start..start + part.len());
            secrets.push(part);
        }
    }
    if ranges.is_empty() {
        return Cow::Borrowed(text);
    }
    ranges.sort_by_key(|range| range.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for range in ranges {
        if range.start < at {
            continue;
        }
        out.push_str(&text[at..range.start]);
        out.push_str(MASK);
        at = range.end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

static GLOBAL: LazyLock<RwLock<Redactor>> = LazyLock::new(|| RwLock::new(Redactor::default()));

/// The process's redactor.
pub fn global() -> &'static RwLock<Redactor> {
    &GLOBAL
}

/// Remembers `value` as a secret in the process's redactor (a `${VAR}` value a configuration
/// expanded, a configured header value).
pub fn remember(value: &str) {
    GLOBAL.write().unwrap_or_else(PoisonError::into_inner).learn(value);
}

/// Learns the process environment's credentials ([`Redactor::learn_env`]) into the
/// process's redactor.
pub fn learn_process_env() {
    GLOBAL.write().unwrap_or_else(PoisonError::into_inner).learn_env(
        std::env::vars_os().filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?))),
    );
}

/// `text` through the process's redactor, known values and URL credentials only
/// ([`Redactor::redact_known`]).
pub fn redact_known(text: &str) -> String {
    GLOBAL
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .redact_known(text)
        .into_owned()
}

/// `text` through the process's redactor.
pub fn redact(text: &str) -> String {
    GLOBAL
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .redact(text)
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Redactor {
        let mut redactor = Redactor::default();
        redactor.learn_env(pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())));
        redactor
    }

    #[test]
    fn provider_keys_and_secret_named_variables_are_masked() {
        let redactor = env(&[
            ("OPENAI_API_KEY", "plain-looking-value-1"),
            ("MY_DB_PASSWORD", "correcthorse"),
            ("HOME", "/root/home-dir"),
            // The working directory (`PWD`) and session ids are not credentials.
            ("PWD", "/work/some-dir"),
            ("HARNESS_SESSION", "session-one"),
            ("PATH", "/usr/bin:/bin"),
        ]);
        let text = "key plain-looking-value-1 pw correcthorse in /root/home-dir /work/some-dir session-one";
        assert_eq!(
            redactor.redact(text),
            "key *** pw *** in /root/home-dir /work/some-dir session-one"
        );
    }

    #[test]
    fn url_credentials_of_variables_are_masked_anywhere_in_text() {
        let redactor = env(&[(
            "OPENAI_BASE_URL",
            "https://user:s3cr3tpass@proxy.example/v1?api-key=qwertyuiop",
        )]);
        // Even when the text shows the password out of its URL.
        assert_eq!(
            redactor.redact("failed with s3cr3tpass and qwertyuiop"),
            "failed with *** and ***"
        );
        // The URL itself stays readable.
        assert_eq!(
            redactor.redact("could not reach https://user:s3cr3tpass@proxy.example/v1"),
            "could not reach https://user:***@proxy.example/v1"
        );
        assert_eq!(
            redactor.redact("error sending request for url (https://user:s3cr3tpass@proxy.example/v1/chat)"),
            "error sending request for url (https://user:***@proxy.example/v1/chat)"
        );
    }

    #[test]
    fn urls_in_any_text_lose_passwords_and_query_values() {
        let redactor = Redactor::default();
        assert_eq!(
            redactor.redact("GET http://a:b@h/x?k=v&empty=&z=1#frag done"),
            "GET http://a:***@h/x?k=***&empty=&z=***#frag done"
        );
        assert_eq!(redactor.redact("no url here"), "no url here");
        assert_eq!(redactor.redact("http://host/path"), "http://host/path");
        assert_eq!(redactor.redact("ssh://git@host/repo"), "ssh://git@host/repo");
    }

    #[test]
    fn short_values_are_not_learned_and_longer_ones_mask_whole() {
        let mut redactor = Redactor::default();
        redactor.learn("abc");
        redactor.learn("token-123");
        redactor.learn("token-123-and-more");
        assert_eq!(redactor.known(), 2);
        assert_eq!(redactor.redact("abc token-123-and-more token-123"), "abc *** ***");
    }

    #[test]
    fn secret_shapes_are_masked_without_being_known() {
        let redactor = Redactor::default();
        let text = "use GITLAB_TOKEN=glpat-Xb3kR9mQ2vL7nT4wZ8cY1 now";
        assert_eq!(redactor.redact(text), "use GITLAB_TOKEN=*** now");
    }
}
