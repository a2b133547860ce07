//! Who is calling: `Authorization: Bearer KEY` checked against the SHA-256 hashes of
//! `[[serve.keys]]`, or, with no keys configured, the `X-Harness-User` header.

use crate::ServeError;
use crate::error::ApiError;
use axum::http::{HeaderMap, header};
use harness_core::UserId;
use harness_protocol::header::USER_HEADER;
use sha2::{Digest, Sha256};

/// The configured keys (hashes only; a key itself is never stored).
#[derive(Clone, Default)]
pub(crate) struct Auth {
    keys: Vec<([u8; 32], UserId)>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("keys", &self.keys.len()).finish()
    }
}

impl Auth {
    /// Parses `[[serve.keys]]`.
    ///
    /// # Errors
    /// [`ServeError::Key`] naming the entry whose hash is not 64 hex digits or whose user is
    /// not a valid id.
    pub(crate) fn new(keys: &[crate::ServeKey]) -> Result<Self, ServeError> {
        let mut parsed = Vec::with_capacity(keys.len());
        for (index, key) in keys.iter().enumerate() {
            let invalid = |message: String| ServeError::Key { index, message };
            let user = UserId::parse(key.user.as_str()).map_err(|err| invalid(format!("user: {err}")))?;
            let mut hash = [0u8; 32];
            hex::decode_to_slice(key.sha256.trim(), &mut hash)
                .map_err(|_| invalid("sha256 must be 64 hex digits (e.g. `printf %s KEY | sha256sum`)".to_owned()))?;
            parsed.push((hash, user));
        }
        Ok(Self { keys: parsed })
    }

    /// Whether any key is configured.
    pub(crate) fn enabled(&self) -> bool {
        !self.keys.is_empty()
    }

    /// The user a request runs as.
    ///
    /// # Errors
    /// 401 for a missing or unknown key; 400 for an `X-Harness-User` that is not a valid id.
    pub(crate) fn user(&self, headers: &HeaderMap) -> Result<UserId, ApiError> {
        if !self.enabled() {
            return match headers.get(USER_HEADER) {
                None => Ok(harness_core::DEFAULT_USER_ID),
                Some(value) => {
                    let raw = value
                        .to_str()
                        .map_err(|_| ApiError::bad_request("X-Harness-User must be ASCII"))?;
                    UserId::parse(raw).map_err(|err| ApiError::bad_request(format!("X-Harness-User: {err}")))
                }
            };
        }
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| ApiError::unauthorized("missing API key: send `Authorization: Bearer KEY`"))?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        // Every key is compared in full, so the time taken does not tell which bytes matched.
        let mut found = None;
        for (hash, user) in &self.keys {
            if constant_time_eq(hash, &digest) && found.is_none() {
                found = Some(user.clone());
            }
        }
        found.ok_or_else(|| ApiError::unauthorized("invalid API key"))
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(user: &str, secret: &str) -> crate::ServeKey {
        hashed(user, &hex::encode(Sha256::digest(secret.as_bytes())))
    }

    fn hashed(user: &str, sha256: &str) -> crate::ServeKey {
        crate::ServeKey {
            user: user.to_owned(),
            sha256: sha256.to_owned(),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn a_key_decides_the_user_and_anything_else_is_401() {
        let auth = Auth::new(&[key("alice", "k-alice"), key("bob", "k-bob")]).unwrap();
        let user = |pairs: &[(&'static str, &str)]| auth.user(&headers(pairs)).map(|u| u.to_string());
        assert_eq!(user(&[("authorization", "Bearer k-bob")]), Ok("bob".to_owned()));
        assert_eq!(user(&[("authorization", "Bearer k-alice")]), Ok("alice".to_owned()));
        // The user header is ignored once keys exist.
        assert_eq!(
            user(&[("authorization", "Bearer k-bob"), ("x-harness-user", "alice")]),
            Ok("bob".to_owned())
        );
        for bad in [
            vec![],
            vec![("authorization", "Bearer nope")],
            vec![("authorization", "k-bob")],
        ] {
            let err = auth.user(&headers(&bad)).err().map(|e| e.status.as_u16());
            assert_eq!(err, Some(401), "{bad:?}");
        }
    }

    #[test]
    fn without_keys_the_user_header_names_the_user() {
        let auth = Auth::default();
        assert_eq!(
            auth.user(&HeaderMap::new()).map(|u| u.to_string()),
            Ok("default".to_owned())
        );
        assert_eq!(
            auth.user(&headers(&[("x-harness-user", "carol")]))
                .map(|u| u.to_string()),
            Ok("carol".to_owned())
        );
        let err = auth.user(&headers(&[("x-harness-user", "../etc")])).err();
        assert_eq!(err.map(|e| e.status.as_u16()), Some(400));
    }

    #[test]
    fn a_malformed_hash_is_refused_naming_the_entry() {
        let bad = hashed("alice", "abc");
        let err = Auth::new(&[key("bob", "x"), bad]).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("[[serve.keys]] entry 2: sha256 must be 64 hex digits (e.g. `printf %s KEY | sha256sum`)")
        );
    }
}
