//! Identifier newtypes. Ids become path and key segments further up the stack, so every id
//! is checked when it is made: the field is private, and the only ways in ([`parse`],
//! [`TryFrom`], [`FromStr`](std::str::FromStr), serde and the const [`from_static`]) all apply
//! the one rule in this module.
//!
//! [`parse`]: UserId::parse
//! [`from_static`]: UserId::from_static

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// What an id may be, said once for every error message.
pub const ID_RULE: &str = "use 1 to 128 bytes of letters, digits, '-', '_', '.', '@' or ':', not starting with '.'";

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The id was empty.
    #[error("{kind} id is empty; {rule}", rule = ID_RULE)]
    Empty {
        /// Which id (`user`, `session`, `agent`).
        kind: &'static str,
    },
    /// The id was longer than [`MAX_ID_LEN`] bytes.
    #[error("{kind} id is longer than {max} bytes; {rule}", max = MAX_ID_LEN, rule = ID_RULE)]
    TooLong {
        /// Which id.
        kind: &'static str,
    },
    /// The id contains a character that is not allowed in a path segment.
    #[error("{kind} id {id:?} contains {found:?}; {rule}", rule = ID_RULE)]
    BadChar {
        /// Which id.
        kind: &'static str,
        /// The refused id.
        id: String,
        /// The first refused character.
        found: char,
    },
    /// The id starts with `.` (`.`, `..` and hidden names such as `..hidden` would name the
    /// current or parent directory, or a hidden file, once the id is a path segment).
    #[error("{kind} id {id:?} starts with '.'; {rule}", rule = ID_RULE)]
    LeadingDot {
        /// Which id.
        kind: &'static str,
        /// The refused id.
        id: String,
    },
}

/// The longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// The id rule: 1 to [`MAX_ID_LEN`] bytes of letters, digits and `-_.@:`, not starting with
/// `.`. Every id type and every caller that needs to know whether a string is a safe id
/// segment uses this function.
///
/// # Errors
/// [`IdError`] naming `kind` and what is allowed.
pub fn check_id(kind: &'static str, id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if id.len() > MAX_ID_LEN {
        return Err(IdError::TooLong { kind });
    }
    if let Some(found) = id.chars().find(|c| !allowed(*c)) {
        return Err(IdError::BadChar {
            kind,
            id: id.to_owned(),
            found,
        });
    }
    if id.starts_with('.') {
        return Err(IdError::LeadingDot {
            kind,
            id: id.to_owned(),
        });
    }
    Ok(())
}

fn allowed(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | ':')
}

/// The id rule for a literal, in a `const` context: ASCII letters, digits and `-_.@:` only
/// (a subset of [`check_id`]'s rule, so a literal accepted here is accepted there).
const fn static_id_is_valid(id: &str) -> bool {
    let bytes = id.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_ID_LEN || bytes[0] == b'.' {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@' | b':')) {
            return false;
        }
        i += 1;
    }
    true
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        ///
        /// Always a valid id: the field is private and every constructor checks it
        /// (see [`check_id`]).
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(Cow<'static, str>);

        impl $name {
            /// Checks `id` and wraps it.
            ///
            /// # Errors
            /// [`IdError`] when the id is empty, longer than [`MAX_ID_LEN`] bytes, has a
            /// character outside letters, digits and `-_.@:`, or starts with `.`.
            pub fn parse(id: impl Into<String>) -> Result<Self, IdError> {
                let id = id.into();
                check_id($kind, &id)?;
                Ok(Self(Cow::Owned(id)))
            }

            /// An id from a literal (constants, defaults, tests). The literal must be ASCII
            /// letters, digits and `-_.@:`, not starting with `.`.
            ///
            /// # Panics
            /// When the literal breaks that rule. Used in a `const` item (for example
            #[doc = concat!("`const X: ", stringify!($name), " = ", stringify!($name), "::from_static(\"x\");`)")]
            /// the check runs at compile time, so a bad literal does not build.
            pub const fn from_static(id: &'static str) -> Self {
                assert!(static_id_is_valid(id), "invalid id literal; use ASCII letters, digits, '-', '_', '.', '@' or ':', not starting with '.'");
                Self(Cow::Borrowed(id))
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

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(id: &str) -> Result<Self, IdError> {
                Self::parse(id)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(id: String) -> Result<Self, IdError> {
                Self::parse(id)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(id: &str) -> Result<Self, IdError> {
                Self::parse(id)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0.into_owned()
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

    const BAD: [&str; 10] = ["", ".", "..", "..hidden", ".x", "a/b", "a\\b", "a\0b", "a\nb", "a b"];

    #[test]
    fn safe_ids_pass_and_path_tricks_fail() {
        assert!(SessionId::parse("w1-session").is_ok());
        assert!(SessionId::parse("v1.2").is_ok());
        assert!(UserId::parse("alice@example.com").is_ok());
        assert!(UserId::parse("用户一").is_ok());
        for bad in BAD {
            assert!(UserId::parse(bad).is_err(), "{bad:?} should be refused");
            assert!(SessionId::try_from(bad).is_err(), "{bad:?} should be refused");
            assert!(bad.parse::<AgentId>().is_err(), "{bad:?} should be refused");
        }
        assert_eq!(
            SessionId::parse("x".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong { kind: "session" })
        );
        assert!(SessionId::parse("x".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn the_error_says_what_is_allowed() {
        for bad in BAD {
            let Err(err) = UserId::parse(bad) else {
                panic!("{bad:?} accepted");
            };
            let text = err.to_string();
            assert!(text.starts_with("user id"), "{text}");
            assert!(text.contains(ID_RULE), "{text}");
        }
    }

    #[test]
    fn serde_checks_and_round_trips() {
        let ok: SessionId = serde_json::from_str("\"v1.2\"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.as_str(), "v1.2");
        assert_eq!(serde_json::to_string(&ok).ok().as_deref(), Some("\"v1.2\""));
        for bad in BAD {
            let json = serde_json::to_string(bad).unwrap_or_else(|e| panic!("{e}"));
            let err = serde_json::from_str::<UserId>(&json).err();
            assert!(
                err.as_ref().is_some_and(|e| e.to_string().contains("user id")),
                "{bad:?}: {err:?}"
            );
        }
        let long = serde_json::to_string(&"x".repeat(MAX_ID_LEN + 1)).unwrap_or_default();
        assert!(serde_json::from_str::<AgentId>(&long).is_err());
    }

    #[test]
    fn static_ids_follow_the_same_rule() {
        const MAIN: AgentId = AgentId::from_static("main");
        assert_eq!(MAIN.as_str(), "main");
        assert_eq!(MAIN, AgentId::parse("main").unwrap_or_else(|e| panic!("{e}")));
        for bad in BAD {
            assert!(!static_id_is_valid(bad), "{bad:?}");
        }
        assert!(std::panic::catch_unwind(|| UserId::from_static("../x")).is_err());
    }
}
