//! Identifier newtypes. Ids become path and key segments further up the stack, so each one
//! can say whether it is safe to use as a single path segment.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The id was empty.
    #[error("{kind} id is empty")]
    Empty {
        /// Which id (`user`, `session`, `agent`).
        kind: &'static str,
    },
    /// The id was longer than [`MAX_ID_LEN`] bytes.
    #[error("{kind} id is longer than {max} bytes", max = MAX_ID_LEN)]
    TooLong {
        /// Which id.
        kind: &'static str,
    },
    /// The id contains a character that is not allowed in a path segment.
    #[error(
        "{kind} id {id:?} contains {found:?}; use letters, digits, '-', '_', '.', '@' or ':' (not '.' or '..' alone)"
    )]
    BadChar {
        /// Which id.
        kind: &'static str,
        /// The refused id.
        id: String,
        /// The first refused character.
        found: char,
    },
}

/// The longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

fn check(kind: &'static str, id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if id.len() > MAX_ID_LEN {
        return Err(IdError::TooLong { kind });
    }
    if id == "." || id == ".." {
        return Err(IdError::BadChar {
            kind,
            id: id.to_owned(),
            found: '.',
        });
    }
    if let Some(found) = id
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | ':')))
    {
        return Err(IdError::BadChar {
            kind,
            id: id.to_owned(),
            found,
        });
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps `id` without checking it. Call [`validate`](Self::validate) before using
            /// the id as a path or key segment.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// Wraps `id` after checking that it is a safe path segment.
            ///
            /// # Errors
            /// [`IdError`] when the id is empty, too long or has a character outside
            /// letters, digits and `-_.@:`.
            pub fn parse(id: impl Into<String>) -> Result<Self, IdError> {
                let id = Self(id.into());
                id.validate()?;
                Ok(id)
            }

            /// Checks that the id is a safe path segment.
            ///
            /// # Errors
            /// See [`parse`](Self::parse).
            pub fn validate(&self) -> Result<(), IdError> {
                check($kind, &self.0)
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self::new(id)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self::new(id)
            }
        }
    };
}

id_type!(
    /// Who is calling. Selects the user's namespace of runtime data.
    UserId,
    "user"
);
id_type!(
    /// One conversation of one user with one agent.
    SessionId,
    "session"
);
id_type!(
    /// The agent's name; used as a path segment under `agents/`.
    AgentId,
    "agent"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_ids_pass_and_path_tricks_fail() {
        assert!(SessionId::parse("w1-session").is_ok());
        assert!(UserId::parse("alice@example.com").is_ok());
        assert!(UserId::parse("用户一").is_ok());
        for bad in ["", "..", ".", "a/b", "a\\b", "a\0b", "a b"] {
            assert!(UserId::parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(
            SessionId::parse("x".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong { kind: "session" })
        );
    }
}
