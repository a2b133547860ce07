//! The one secret-shape detector: where a text holds something that looks like a credential.
//!
//! Pure text analysis (no IO), shared by everything that must keep credentials out of what it
//! stores, logs or shows: the memory screen, server and CLI redaction, telemetry. The shapes were
//! learned from public rule sets (gitleaks, detect-secrets) and written anew here:
//!
//! - [`SecretKind::ProviderKey`]: model-provider keys — OpenAI `sk-…`/`sk-proj-…`, Anthropic
//!   `sk-ant-…`, Google `AIza…`, Hugging Face `hf_…`, Groq `gsk_…`, xAI `xai-…`, Stripe
//!   `sk_live_…`/`rk_live_…`, SendGrid `SG.….…`.
//! - [`SecretKind::PlatformToken`]: platform and cloud tokens — GitHub `ghp_/gho_/ghu_/ghs_/ghr_`
//!   and `github_pat_`, GitLab `glpat-`, Slack `xox[abprse]-` and webhook URLs, AWS access key ids
//!   `AKIA…`/`ASIA…`, npm `npm_`, PyPI `pypi-…`, DigitalOcean `dop_v1_`, Shopify `shpat_`,
//!   Telegram bot tokens, Twilio `SK…`/`AC…`, Mailgun `key-…`, Vault `hvs.…`, Databricks
//!   `dapi…`, Linear `lin_api_…`, Notion `ntn_…`/`secret_…`, Discord bot tokens.
//! - [`SecretKind::Jwt`]: three base64url segments whose first one is a JSON header (`eyJ…`).
//! - [`SecretKind::PemBlock`]: a `-----BEGIN … PRIVATE KEY-----` block to its END line (or to the
//!   end of the text when the END line is missing).
//! - [`SecretKind::UrlUserinfo`]: the password in `scheme://user:password@host`.
//! - [`SecretKind::PasswordPhrase`]: the value after a label — `password is …`, `pwd: …`,
//!   `secret = …`, `api_key: …`, `AWS_SECRET_ACCESS_KEY=…`, `密码是…`, `口令：…`, and after a
//!   bare `key is` / `AccountKey=` a value of 16+ characters with letters and digits.
//! - [`SecretKind::HighEntropy`]: an unlabelled token of at least 24 characters from the
//!   base64/base64url alphabet that has letters and digits, upper and lower case, frequent
//!   changes of character class and a high Shannon entropy.
//!
//! **Decided:** pure hexadecimal strings (git SHAs, SHA-256 digests, UUIDs) are *not* reported
//! as high-entropy: they are identifiers people write in prose, and hex keys almost always come
//! with a label (`token = 3f…`) or a prefix, which are reported. Numbers, words and identifiers
//! in ordinary prose are not reported.
//!
//! ```
//! use harness_core::secret::{SecretKind, find_secrets, redact_secrets};
//! let text = "deploy with GITLAB_TOKEN=glpat-Xb3kR9mQ2vL7nT4wZ8cY1 tomorrow";
//! assert_eq!(find_secrets(text)[0].kind, SecretKind::PlatformToken);
//! assert_eq!(redact_secrets(text), "deploy with GITLAB_TOKEN=*** tomorrow");
//! ```

use std::borrow::Cow;
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

/// What kind of credential a [`SecretMatch`] looks like.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    /// A model-provider API key (OpenAI, Anthropic, Google, Hugging Face, Stripe, …).
    ProviderKey,
    /// A code-hosting, chat or cloud platform token (GitHub, GitLab, Slack, AWS, npm, …).
    PlatformToken,
    /// A JSON Web Token.
    Jwt,
    /// A PEM private-key block.
    PemBlock,
    /// The password part of `scheme://user:password@host`.
    UrlUserinfo,
    /// An unlabelled random-looking token.
    HighEntropy,
    /// The value after a `password is` / `token:` / `密码是` style label.
    PasswordPhrase,
}

/// One credential-shaped span of a text: byte `range` (on character boundaries) and its `kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMatch {
    /// Byte range of the secret in the scanned text.
    pub range: Range<usize>,
    /// The shape that matched.
    pub kind: SecretKind,
}

/// Every credential-shaped span in `text`, sorted by position and non-overlapping (overlapping
/// findings are merged into one span that keeps the kind of the earliest).
pub fn find_secrets(text: &str) -> Vec<SecretMatch> {
    let mut found: Vec<SecretMatch> = Vec::new();
    for shape in SHAPES.iter() {
        for captures in shape.regex.captures_iter(text) {
            // Every shape names its `secret` group; a shape's `accept` may veto it.
            let Some(secret) = captures.name("secret") else {
                continue;
            };
            let label = captures.name("label").map(|m| m.as_str());
            let stands_alone = !shape.bounded
                || (!text[..secret.start()].chars().next_back().is_some_and(is_token_char)
                    && !text[secret.end()..].chars().next().is_some_and(is_token_char));
            if stands_alone && (shape.accept)(secret.as_str(), label) {
                found.push(SecretMatch {
                    range: secret.range(),
                    kind: shape.kind,
                });
            }
        }
    }
    found.extend(high_entropy(text));
    merge(found)
}

/// Whether `text` holds anything [`find_secrets`] reports.
pub fn contains_secret(text: &str) -> bool {
    !find_secrets(text).is_empty()
}

/// `text` with every [`find_secrets`] span replaced by `***`; borrowed when nothing matched.
pub fn redact_secrets(text: &str) -> Cow<'_, str> {
    let found = find_secrets(text);
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for secret in found {
        out.push_str(&text[at..secret.range.start]);
        out.push_str("***");
        at = secret.range.end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// Sorts by start (longest first on ties) and merges overlapping spans.
fn merge(mut found: Vec<SecretMatch>) -> Vec<SecretMatch> {
    found.sort_by(|a, b| a.range.start.cmp(&b.range.start).then(b.range.end.cmp(&a.range.end)));
    let mut merged: Vec<SecretMatch> = Vec::with_capacity(found.len());
    for next in found {
        match merged.last_mut() {
            Some(last) if next.range.start < last.range.end => last.range.end = last.range.end.max(next.range.end),
            _ => merged.push(next),
        }
    }
    merged
}

/// A regex with a `secret` group (and, for labelled values, a `label` group), with a veto.
struct Shape {
    regex: Regex,
    kind: SecretKind,
    accept: fn(&str, Option<&str>) -> bool,
    bounded: bool,
}

/// Whether `c` can be part of a key: a key must not start or end inside a longer token.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn always(_: &str, _: Option<&str>) -> bool {
    true
}

fn shape(pattern: &str, kind: SecretKind, accept: fn(&str, Option<&str>) -> bool) -> Shape {
    // `{B}` marks a shape that must stand alone: not preceded or followed by a token character
    // (checked in `find_secrets`, since the regex crate has no look-around). A non-ASCII letter
    // is a boundary: Chinese text often runs straight into a key.
    let bounded = pattern.contains("{B}");
    let pattern = pattern.replace("{B}", "");
    // The patterns are constants of this module and `every_shape_compiles` builds all of them.
    #[allow(clippy::expect_used)]
    let regex = Regex::new(&pattern).expect("the secret shapes are valid regexes (tested)");
    Shape {
        regex,
        kind,
        accept,
        bounded,
    }
}

static SHAPES: LazyLock<Vec<Shape>> = LazyLock::new(|| {
    use SecretKind::*;
    vec![
        // Model providers. Anthropic before OpenAI only for readability: overlaps merge anyway.
        shape(
            r"{B}(?P<secret>sk-ant-(?:api|admin)?[0-9]{0,2}-?[A-Za-z0-9_\-]{32,})",
            ProviderKey,
            always,
        ),
        shape(
            r"{B}(?P<secret>sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,})",
            ProviderKey,
            has_digit_and_letter,
        ),
        shape(r"{B}(?P<secret>AIza[0-9A-Za-z_\-]{35})", ProviderKey, always),
        shape(r"{B}(?P<secret>hf_[A-Za-z0-9]{30,})", ProviderKey, always),
        shape(r"{B}(?P<secret>gsk_[A-Za-z0-9]{40,})", ProviderKey, always),
        shape(r"{B}(?P<secret>xai-[A-Za-z0-9]{40,})", ProviderKey, always),
        shape(
            r"{B}(?P<secret>(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,})",
            ProviderKey,
            always,
        ),
        shape(r"{B}(?P<secret>whsec_[A-Za-z0-9+/=]{24,})", ProviderKey, always),
        shape(
            r"{B}(?P<secret>SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,64})",
            ProviderKey,
            always,
        ),
        // Platforms.
        shape(r"{B}(?P<secret>gh[pousr]_[A-Za-z0-9]{30,})", PlatformToken, always),
        shape(r"{B}(?P<secret>github_pat_[A-Za-z0-9_]{40,})", PlatformToken, always),
        shape(r"{B}(?P<secret>glpat-[A-Za-z0-9_\-]{20,})", PlatformToken, always),
        shape(
            r"{B}(?P<secret>gl(?:ptt|dt|rt|cbt|imt)-[A-Za-z0-9_\-]{20,})",
            PlatformToken,
            always,
        ),
        shape(
            r"{B}(?P<secret>xox[abprse]-[A-Za-z0-9\-]{10,})",
            PlatformToken,
            has_digit_and_letter,
        ),
        shape(
            r"(?P<secret>hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_\-]{16,})",
            PlatformToken,
            always,
        ),
        shape(
            r"{B}(?P<secret>(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16})",
            PlatformToken,
            always,
        ),
        shape(r"{B}(?P<secret>npm_[A-Za-z0-9]{36})", PlatformToken, always),
        shape(r"{B}(?P<secret>pypi-[A-Za-z0-9_\-]{50,})", PlatformToken, always),
        shape(r"{B}(?P<secret>do[opr]_v1_[a-f0-9]{64})", PlatformToken, always),
        shape(
            r"{B}(?P<secret>shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32})",
            PlatformToken,
            always,
        ),
        shape(
            r"{B}(?P<secret>[0-9]{8,10}:AA[A-Za-z0-9_\-]{33})",
            PlatformToken,
            always,
        ),
        // Twilio API keys and account ids, Mailgun, Vault, Databricks, Linear, Notion, Discord.
        shape(r"{B}(?P<secret>(?:SK|AC)[0-9a-f]{32})", PlatformToken, always),
        shape(r"{B}(?P<secret>key-[0-9a-z]{32})", PlatformToken, has_digit_and_letter),
        shape(
            r"{B}(?P<secret>hv[sbr]\.[A-Za-z0-9_\-]{24,})",
            PlatformToken,
            has_digit_and_letter,
        ),
        shape(r"{B}(?P<secret>dapi[0-9a-f]{32}(?:-[0-9])?)", PlatformToken, always),
        shape(r"{B}(?P<secret>lin_api_[A-Za-z0-9]{40})", PlatformToken, always),
        shape(
            r"{B}(?P<secret>(?:secret_|ntn_)[A-Za-z0-9]{40,})",
            PlatformToken,
            has_digit_and_letter,
        ),
        shape(
            r"{B}(?P<secret>[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40})",
            PlatformToken,
            has_digit_and_letter,
        ),
        // A JWT: header.payload.signature, the header a base64url JSON object.
        shape(
            r"{B}(?P<secret>eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})",
            Jwt,
            always,
        ),
        // A PEM private key, to its END line or, if cut, to the end of the text.
        shape(
            r"(?s)(?P<secret>-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z))",
            PemBlock,
            always,
        ),
        // scheme://user:password@host — only the password.
        shape(
            r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@]+:(?P<secret>[^\s/?#@]+)@",
            UrlUserinfo,
            always,
        ),
        // Labelled values. Group 2 is the label, so the veto can be stricter for weak labels.
        shape(
            r#"(?i)(?:^|[^\p{L}\p{N}_])(?P<label>(?:password|passwd|pwd|passphrase|pass\s?code|pin\s?code)|(?:[a-z0-9_.\-]*(?:secret|token|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|client[_\-]?secret|credential|auth)[a-z0-9_.\-]*))\s*(?:is|was|=|:|：|=>|->)\s*["'`“‘]?(?P<secret>[^\s"'`”’,;，。；、)）]+)"#,
            PasswordPhrase,
            labelled_value,
        ),
        shape(
            r#"(?P<label>密码|口令|密钥|令牌|秘钥|passcode)\s*(?:是|为|：|:|=|就是)\s*["'“‘「]?(?P<secret>[\x21\x23-\x26\x28-\x7E]+)"#,
            PasswordPhrase,
            labelled_value,
        ),
        // A bare `key` label (`the key is …`, `AccountKey=…`): only a long value with letters
        // and digits, since "the key is important" is prose.
        shape(
            r#"(?i)(?:^|[^\p{L}\p{N}_])(?P<label>key|accountkey|sharedaccesskey|license key)\s*(?:is|=|:)\s*["'`]?(?P<secret>[A-Za-z0-9+/_\-]{16,}={0,2})"#,
            PasswordPhrase,
            key_value,
        ),
    ]
});

/// A value after a bare `key` label: hexadecimal, or mixed case with digits (`2024-release-plan`
/// is a name). A random-looking value is left to [`high_entropy`], which reports it anyway.
fn key_value(value: &str, _: Option<&str>) -> bool {
    let hex = value.len() >= 16 && value.bytes().all(|b| b.is_ascii_hexdigit());
    let mixed = value.bytes().any(|b| b.is_ascii_uppercase())
        && value.bytes().any(|b| b.is_ascii_lowercase())
        && value.bytes().any(|b| b.is_ascii_digit());
    (hex || mixed) && !looks_random(value)
}

fn has_digit_and_letter(secret: &str, _: Option<&str>) -> bool {
    secret.chars().any(|c| c.is_ascii_digit()) && secret.chars().any(|c| c.is_ascii_alphabetic())
}

/// Words that follow `password is` / `token:` in prose without being a value.
const NOT_A_VALUE: &[&str] = &[
    "a",
    "an",
    "the",
    "that",
    "this",
    "it",
    "its",
    "my",
    "your",
    "his",
    "her",
    "their",
    "our",
    "not",
    "no",
    "yes",
    "to",
    "in",
    "on",
    "of",
    "for",
    "and",
    "or",
    "but",
    "by",
    "as",
    "at",
    "with",
    "from",
    "set",
    "unset",
    "stored",
    "saved",
    "kept",
    "required",
    "optional",
    "needed",
    "expired",
    "invalid",
    "valid",
    "wrong",
    "correct",
    "missing",
    "empty",
    "blank",
    "null",
    "none",
    "strong",
    "weak",
    "long",
    "short",
    "secure",
    "safe",
    "changed",
    "reset",
    "hidden",
    "same",
    "different",
    "also",
    "still",
    "now",
    "being",
    "used",
    "rotated",
    "revoked",
    "leaked",
    "unknown",
    "redacted",
    "***",
    "xxx",
    "...",
    "…",
    "true",
    "false",
    "here",
    "there",
    "below",
    "above",
    "very",
    "too",
    "so",
    "only",
    "just",
    "never",
    "always",
    "usually",
    "generated",
    "provided",
    "given",
    "configured",
];

/// Whether the value after a label is a value, not the next word of a sentence.
fn labelled_value(value: &str, label: Option<&str>) -> bool {
    let value = value.trim_end_matches(['.', '!', '?']);
    if value.is_empty() || NOT_A_VALUE.iter().any(|word| value.eq_ignore_ascii_case(word)) {
        return false;
    }
    let strong_label = label.is_some_and(|label| {
        let label = label.to_ascii_lowercase();
        [
            "password",
            "passwd",
            "pwd",
            "passphrase",
            "pass",
            "pin",
            "密码",
            "口令",
            "密钥",
            "秘钥",
            "令牌",
        ]
        .iter()
        .any(|strong| label.contains(strong))
    });
    // `max_tokens: 4096` and `token budget is 8k` are settings, not secrets: a weak label needs
    // a value of some length that is not a plain number.
    strong_label || (value.chars().count() >= 8 && !value.chars().all(|c| c.is_ascii_digit() || c == '_'))
}

/// Unlabelled random-looking tokens (see the module docs for what counts).
fn high_entropy(text: &str) -> Vec<SecretMatch> {
    static CANDIDATE: LazyLock<Regex> = LazyLock::new(|| {
        #[allow(clippy::expect_used)]
        Regex::new(r"[A-Za-z0-9+/_\-]{24,}={0,2}").expect("the candidate pattern is a valid regex (tested)")
    });
    CANDIDATE
        .find_iter(text)
        .filter(|found| looks_random(found.as_str()))
        .map(|found| SecretMatch {
            range: found.range(),
            kind: SecretKind::HighEntropy,
        })
        .collect()
}

/// Whether a token of the base64 alphabet looks random rather than like a word, path or name.
fn looks_random(token: &str) -> bool {
    let core = token.trim_end_matches('=');
    let length = core.chars().count();
    if length < 24 {
        return false;
    }
    if core.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return false; // hashes, SHAs and UUIDs: see the module docs
    }
    let upper = core.chars().any(|c| c.is_ascii_uppercase());
    let lower = core.chars().any(|c| c.is_ascii_lowercase());
    let digit = core.chars().any(|c| c.is_ascii_digit());
    if !(upper && lower && digit) {
        return false;
    }
    // Paths and dashed names are built of words: a random token switches class often.
    let class = |c: char| match c {
        'A'..='Z' => 0,
        'a'..='z' => 1,
        '0'..='9' => 2,
        _ => 3,
    };
    let chars: Vec<char> = core.chars().collect();
    let switches = chars.windows(2).filter(|pair| class(pair[0]) != class(pair[1])).count();
    if switches * 10 < (length - 1) * 3 {
        return false;
    }
    shannon_entropy(&chars) >= 0.75 * (length.min(64) as f64).log2()
}

/// Bits per character of `chars`.
fn shannon_entropy(chars: &[char]) -> f64 {
    let mut counts = std::collections::HashMap::new();
    for c in chars {
        *counts.entry(*c).or_insert(0usize) += 1;
    }
    let total = chars.len() as f64;
    counts
        .values()
        .map(|&count| {
            let p = count as f64 / total;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fake credentials. Each prefix is split from its body with `concat!` so that secret
    // scanners reading this source do not take the fixtures for leaked keys.
    const SHAPES_THAT_LEAK: &[(&str, &str, SecretKind)] = &[
        (
            "twilio",
            concat!("SK", "0f3a9c2e5b8d1f4a6c9e2b5d8f1a4c7e"),
            SecretKind::PlatformToken,
        ),
        (
            "mailgun",
            concat!("key", "-", "3ax6xnjp29jd6fds4gc373sgvjxteol0"),
            SecretKind::PlatformToken,
        ),
        (
            "vault",
            concat!("hvs", ".", "CAESIJ3kR9mQ2vL7nT4wZ8cY1Xb3kR9mQ2"),
            SecretKind::PlatformToken,
        ),
        (
            "databricks",
            concat!("dapi", "0f3a9c2e5b8d1f4a6c9e2b5d8f1a4c7e"),
            SecretKind::PlatformToken,
        ),
        (
            "linear",
            concat!("lin_api_", "Xb3kR9mQ2vL7nT4wZ8cY1Xb3kR9mQ2vL7nT4wZ8c"),
            SecretKind::PlatformToken,
        ),
        (
            "notion",
            concat!("ntn_", "Xb3kR9mQ2vL7nT4wZ8cY1Xb3kR9mQ2vL7nT4wZ8cY1"),
            SecretKind::PlatformToken,
        ),
        (
            "discord",
            concat!(
                "MTA5ODc2NTQzMjEwOTg3NjU0Mw",
                ".",
                "GaBcDe",
                ".",
                "Xy9Zw8Vu7Ts6Rq5Po4Nm3LkJiHgFeDcBa"
            ),
            SecretKind::PlatformToken,
        ),
        (
            "openai",
            concat!("sk", "-", "u8jzPde0IgxLd6GncfBAepfJBd0Kh8oOOL8dKLzdocJ2isAj"),
            SecretKind::ProviderKey,
        ),
        (
            "openai project",
            concat!(
                "sk-",
                "proj-",
                "IhKtJ0RlgLKOmxgJTeKdNnFRIBXuDL7DxtpYlSXp_fKtHF4vUCsMehGAkWvj7"
            ),
            SecretKind::ProviderKey,
        ),
        (
            "anthropic",
            concat!(
                "sk-",
                "ant-api03-",
                "FAc9QeWJKY40uvSwMFLZDe1f8rESQedUStPKR0CsTy4Qwb8DwkNhFdnXsiVp-zz63FfkCzJr4i0B3JrTAAA"
            ),
            SecretKind::ProviderKey,
        ),
        (
            "google",
            concat!("AI", "za", "wR4y9ojfljoQoaF1LlqsajAIxNKu8iS2G8N"),
            SecretKind::ProviderKey,
        ),
        (
            "huggingface",
            concat!("hf", "_", "xbvJDCTbyvHNsG9eh6Yo4gfqrc5XlrWi0B"),
            SecretKind::ProviderKey,
        ),
        (
            "groq",
            concat!("gsk", "_", "TR9SPofbciOx9gy1CJdObOIRpFqaDZeV7G5IfQHeVVEqZe2qpUWn"),
            SecretKind::ProviderKey,
        ),
        (
            "stripe secret",
            concat!("sk", "_live_", "ueQpBenQtYh5Xj8TPQxjq4i9"),
            SecretKind::ProviderKey,
        ),
        (
            "stripe restricted",
            concat!("rk", "_live_", "DoV8gz4FkQ1okTBGzvAmwufU"),
            SecretKind::ProviderKey,
        ),
        (
            "sendgrid",
            concat!(
                "SG",
                ".",
                "q3hDavJA76rNicHTp8hkqd.lm7tOtHWnsCGRlrwZbqcabUGJmGEp7CgQ0PBQFI14zG"
            ),
            SecretKind::ProviderKey,
        ),
        (
            "github classic",
            concat!("gh", "p_", "PRVdD53X83RZJzzzzgEOzdmenCkhvMdgaKjI"),
            SecretKind::PlatformToken,
        ),
        (
            "github oauth",
            concat!("gh", "o_", "g8xNbe3nNyjOq9wMxEhh2FDEEtfjgVvVqE1S"),
            SecretKind::PlatformToken,
        ),
        (
            "github fine-grained",
            concat!(
                "github",
                "_pat_",
                "11kHbn88HxjSI6bWHtP3fS_2qHx6kwXoIIXGvOoNZYW2mZp0zVZomHFwUbbYrEqmSM9wCZ7Uw9xfogoEmv"
            ),
            SecretKind::PlatformToken,
        ),
        (
            "gitlab",
            concat!("gl", "pat-", "nEN5N1aE6PwZPf1Qh6yY"),
            SecretKind::PlatformToken,
        ),
        (
            "slack bot",
            concat!("xo", "xb-", "123456789012-1234567890123-TWmE4lBYOvfZ8UzDzV8fUkki"),
            SecretKind::PlatformToken,
        ),
        (
            "aws access key id",
            concat!("AK", "IA", "BJ3J4WJ99IBAG7I1"),
            SecretKind::PlatformToken,
        ),
        (
            "aws session key id",
            concat!("AS", "IA", "MNBQNS6PUQ80IDW3"),
            SecretKind::PlatformToken,
        ),
        (
            "npm",
            concat!("np", "m_", "26R08qzjI6GKFSufrdZSlB5er8bOfZqfM2oe"),
            SecretKind::PlatformToken,
        ),
        (
            "digitalocean",
            concat!(
                "dop",
                "_v1_",
                "967a64cb14028d512c9791e558e08baa7196b50ac2f86702824c1c099724caf4"
            ),
            SecretKind::PlatformToken,
        ),
        (
            "telegram bot",
            concat!("123456789", ":AA", "oVPDF2yeE6RsXcNOPmeMjvqPVStNKiaEd"),
            SecretKind::PlatformToken,
        ),
        (
            "jwt",
            concat!(
                "ey",
                "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkFsaWNlIn0.",
                "Qm9ndXNTaWduYXR1cmVGb3JUZXN0c09ubHk"
            ),
            SecretKind::Jwt,
        ),
        (
            "unlabelled random token",
            "sUNPjc01T5GOBUSZGi6HWGK10Zb0RLZ5",
            SecretKind::HighEntropy,
        ),
    ];

    /// Asserts that exactly `secret` (as a substring of `text`) is found, with `kind`.
    fn check(text: &str, secret: &str, kind: SecretKind) {
        let start = text
            .find(secret)
            .unwrap_or_else(|| panic!("{secret:?} is not in {text:?}"));
        assert_eq!(
            find_secrets(text),
            vec![SecretMatch {
                range: start..start + secret.len(),
                kind
            }],
            "in {text:?}"
        );
    }

    #[test]
    fn every_shape_compiles() {
        assert!(SHAPES.len() > 20);
        assert!(!contains_secret(""));
    }

    #[test]
    fn provider_and_platform_keys_are_found_alone_in_prose_and_after_chinese() {
        for (name, key, kind) in SHAPES_THAT_LEAK {
            check(key, key, *kind);
            check(&format!("my {name} key: {key}."), key, *kind);
            check(&format!("我的密钥{key}，别告诉别人"), key, *kind);
            // Behind a label a key may be reported as the labelled value instead: same span.
            let labelled = format!("export TOKEN_VALUE=\"{key}\"");
            let found = find_secrets(&labelled);
            assert_eq!(found.len(), 1, "{labelled:?}");
            assert_eq!(&labelled[found[0].range.clone()], *key);
            assert!([*kind, SecretKind::PasswordPhrase].contains(&found[0].kind));
        }
    }

    #[test]
    fn a_key_inside_a_longer_token_is_not_a_key_shape() {
        let embedded = concat!("xAK", "IA", "BJ3J4WJ99IBAG7I1Z");
        assert!(
            find_secrets(embedded)
                .iter()
                .all(|found| found.kind != SecretKind::PlatformToken)
        );
    }

    #[test]
    fn two_keys_one_space_apart_are_both_found() {
        let first = concat!("gh", "p_", "PRVdD53X83RZJzzzzgEOzdmenCkhvMdgaKjI");
        let second = concat!("gl", "pat-", "nEN5N1aE6PwZPf1Qh6yY");
        let text = format!("{first} {second}");
        assert_eq!(find_secrets(&text).len(), 2);
        assert_eq!(redact_secrets(&text), "*** ***");
    }

    #[test]
    fn pem_blocks_are_found_whole_and_to_the_end_when_cut() {
        let body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7Vb9kQ2c1Jm3n\n";
        let block = format!("-----BEGIN {0}-----\n{body}-----END {0}-----", "PRIVATE KEY");
        check(&format!("key:\n{block}\nthanks"), &block, SecretKind::PemBlock);
        let openssh = format!("-----BEGIN {0}-----\n{body}-----END {0}-----", "OPENSSH PRIVATE KEY");
        check(&openssh, &openssh, SecretKind::PemBlock);
        let cut = format!("-----BEGIN {}-----\n{body}", "RSA PRIVATE KEY");
        check(&format!("here: {cut}"), &cut, SecretKind::PemBlock);
        // A certificate is public.
        assert!(!contains_secret(
            "-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----"
        ));
    }

    #[test]
    fn url_userinfo_reports_only_the_password() {
        check(
            "db at postgres://app:S3cr3t-pa55@db.internal:5432/prod",
            "S3cr3t-pa55",
            SecretKind::UrlUserinfo,
        );
        check(
            "redis://default:hunter2@10.0.0.5:6379",
            "hunter2",
            SecretKind::UrlUserinfo,
        );
        assert!(!contains_secret(
            "see https://user@example.com/page and https://example.com:8443/x"
        ));
    }

    #[test]
    fn labelled_values_are_found_in_english_and_chinese() {
        check(
            "the wifi password is hunter2, ok",
            "hunter2",
            SecretKind::PasswordPhrase,
        );
        check(
            "Password: correct-horse-battery",
            "correct-horse-battery",
            SecretKind::PasswordPhrase,
        );
        check("pwd=swordfish", "swordfish", SecretKind::PasswordPhrase);
        check("passwd = \"Tr0ub4dor&3\"", "Tr0ub4dor&3", SecretKind::PasswordPhrase);
        check(
            "AWS_SECRET_ACCESS_KEY=1qtc4xatws8phP9nhFyJfm5di4PzJ59FHz5r1pY4",
            "1qtc4xatws8phP9nhFyJfm5di4PzJ59FHz5r1pY4",
            SecretKind::PasswordPhrase,
        );
        check(
            "client_secret: 7fa9c0d2e4b61a3f",
            "7fa9c0d2e4b61a3f",
            SecretKind::PasswordPhrase,
        );
        check(
            "the API token is 4f1c9e2ab77d0c35",
            "4f1c9e2ab77d0c35",
            SecretKind::PasswordPhrase,
        );
        check("我的密码是 abc12345，记住", "abc12345", SecretKind::PasswordPhrase);
        check("服务器口令：Zx9!qq77", "Zx9!qq77", SecretKind::PasswordPhrase);
        check("密钥为\"k-9981-aa\"", "k-9981-aa", SecretKind::PasswordPhrase);
        check(
            "The Azure OpenAI key is 0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdef",
            SecretKind::PasswordPhrase,
        );
        let azure = "AccountName=x;AccountKey=Zm9vYmFy9mF6cXV4cXV1eGNv;";
        let found = find_secrets(azure);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(&azure[found[0].range.clone()], "Zm9vYmFy9mF6cXV4cXV1eGNv");
    }

    #[test]
    fn hard_negatives_are_not_secrets() {
        let prose = [
            "The user's password policy is strict: twelve characters and a symbol.",
            "Her password is not stored anywhere; she resets it monthly.",
            "The token is expired, so the user logs in again each Monday.",
            "max_tokens: 4096 works best for the user's summaries.",
            "The release commit is 4d795d4c3e2a1b0f9e8d7c6b5a4f3e2d1c0b9a8f in the main branch.",
            "The sha256 digest was 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.",
            "The order id is 123e4567-e89b-12d3-a456-426614174000.",
            "Her phone number is +86 138 0013 8000 and her tracking number is 1Z999AA10123456784.",
            "The user works at Acme Corp on the HarnessAgentBuilder configuration.",
            "The project lives in crates/harness-memory/src/consolidation.rs for now.",
            "Pneumonoultramicroscopicsilicovolcanoconiosis is the user's favourite long word.",
            "用户的密码策略很严格，每三个月更换一次。",
            "用户喜欢喝乌龙茶，住在杭州，养了两只猫。",
            "The user's website is https://alice-example.dev and she blogs weekly.",
            "The secret ingredient is cardamom.",
            "My secret is that I love cats.",
            "kebab-case-identifiers-are-used-for-all-crate-names",
            "The user's employee number is 2024000117 and the invoice is INV-2024-000117.",
            "The key is important: caching helps the user's build times.",
            "The key insight is that the user prefers short meetings.",
            "The key is 2024-release-plan-v3 in the wiki, named by the user.",
        ];
        for text in prose {
            assert_eq!(find_secrets(text), vec![], "{text:?}");
            assert!(matches!(redact_secrets(text), Cow::Borrowed(_)));
        }
    }

    #[test]
    fn redaction_replaces_each_match_and_keeps_the_rest() {
        let key = concat!("AI", "za", "wR4y9ojfljoQoaF1LlqsajAIxNKu8iS2G8N");
        let text = format!("use {key} and password: hunter2 — 完成");
        assert_eq!(redact_secrets(&text), "use *** and password: *** — 完成");
    }

    #[test]
    fn overlapping_findings_merge_into_one_sorted_span() {
        let merged = merge(vec![
            SecretMatch {
                range: 10..20,
                kind: SecretKind::HighEntropy,
            },
            SecretMatch {
                range: 2..12,
                kind: SecretKind::Jwt,
            },
            SecretMatch {
                range: 30..31,
                kind: SecretKind::PasswordPhrase,
            },
            SecretMatch {
                range: 2..5,
                kind: SecretKind::HighEntropy,
            },
        ]);
        assert_eq!(
            merged,
            vec![
                SecretMatch {
                    range: 2..20,
                    kind: SecretKind::Jwt
                },
                SecretMatch {
                    range: 30..31,
                    kind: SecretKind::PasswordPhrase
                },
            ]
        );
    }
}
