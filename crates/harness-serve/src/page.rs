//! The web chat page (`GET /`): one file, `chat.html`, embedded in the binary with no build
//! step. It is served with a Content-Security-Policy that lets only its own inline script and
//! style run (by their SHA-256 hashes, computed from the embedded file), lets it talk only to
//! this server, and loads nothing else: no remote script, style, image, frame or font. The page
//! never turns model or tool text into HTML (its Markdown renderer builds DOM nodes); the
//! policy is the second wall should a bug let some through.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// The page.
const PAGE: &str = include_str!("chat.html");

/// The policy the page is served with.
static POLICY: LazyLock<String> = LazyLock::new(|| policy(PAGE));

/// The page (it holds no data, so it is served without a key).
pub(crate) async fn chat_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, POLICY.as_str()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
        .into_response()
}

/// The Content-Security-Policy for `page`: its inline `<script>` and `<style>` elements
/// allowed by hash, requests only to this origin, nothing else loaded.
fn policy(page: &str) -> String {
    let hashes = |tag: &str| {
        inline_elements(page, tag)
            .iter()
            .map(|body| format!(" 'sha256-{}'", base64(&Sha256::digest(body.as_bytes()))))
            .collect::<String>()
    };
    format!(
        "default-src 'none'; script-src{}; style-src{}; connect-src 'self'; img-src 'none'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hashes("script"),
        hashes("style"),
    )
}

/// The text of every `<tag>…</tag>` element of `page` (the page's own markup, written
/// without attributes on these two tags).
fn inline_elements<'a>(page: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut found = Vec::new();
    let mut rest = page;
    while let Some(start) = rest.find(&open) {
        let body = &rest[start + open.len()..];
        let Some(end) = body.find(&close) else { break };
        found.push(&body[..end]);
        rest = &body[end + close.len()..];
    }
    found
}

/// Standard base64 with padding (what CSP hash sources use).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected, "{input}");
        }
    }

    #[test]
    fn the_policy_allows_exactly_the_pages_own_script_and_style() {
        let page = "<style>a{}</style><script>one()</script><p><script>two()</script>";
        let policy = policy(page);
        let hash = |text: &str| format!("'sha256-{}'", base64(&Sha256::digest(text.as_bytes())));
        assert!(
            policy.contains(&format!("script-src {} {};", hash("one()"), hash("two()"))),
            "{policy}"
        );
        assert!(policy.contains(&format!("style-src {};", hash("a{}"))), "{policy}");
        assert!(policy.starts_with("default-src 'none';"), "{policy}");
        assert!(!policy.contains("unsafe"), "{policy}");
    }

    #[test]
    fn the_embedded_page_has_one_script_and_one_style_and_no_inline_handlers() {
        assert_eq!(inline_elements(PAGE, "script").len(), 1);
        assert_eq!(inline_elements(PAGE, "style").len(), 1);
        // Inline event handler attributes and `style=` attributes would be refused by the
        // policy: the markup has none (the script sets handlers and styles itself).
        let markup = PAGE.split("<script>").next().unwrap_or_default();
        assert!(
            !markup.contains(" onclick=") && !markup.contains(" style="),
            "inline handlers or styles"
        );
    }
}
