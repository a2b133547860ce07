//! [`WsPath`]: a checked workspace path.

use crate::error::FsError;
use std::fmt;

/// The longest path accepted, in bytes.
pub const MAX_PATH_LEN: usize = 4096;

/// A path inside a filesystem's root: `/`-separated, relative, normalised (no `.`, no empty
/// segments), with no `..` segment, no NUL and at most [`MAX_PATH_LEN`] bytes. The empty
/// path is the root.
///
/// There is deliberately no `Deref<Target = Path>`: IO goes through a
/// [`Filesystem`](crate::Filesystem), which maps a `WsPath` to a real location after resolving symlinks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct WsPath(String);

impl WsPath {
    /// The root.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// Parses a user- or model-supplied path. A leading `/` is accepted and means the root
    /// of the filesystem (never the host's root); `.` segments and repeated slashes are
    /// dropped; backslashes are refused rather than guessed at.
    ///
    /// # Errors
    /// [`FsError::InvalidPath`] for `..` segments, NUL bytes, backslashes, `~` prefixes and
    /// paths over [`MAX_PATH_LEN`] bytes.
    pub fn parse(raw: &str) -> Result<Self, FsError> {
        let invalid = |reason: &str| FsError::InvalidPath {
            path: raw.chars().take(200).collect(),
            reason: reason.to_owned(),
        };
        if raw.len() > MAX_PATH_LEN {
            return Err(invalid("the path is longer than 4096 bytes"));
        }
        if raw.contains('\0') {
            return Err(invalid("the path contains a NUL byte"));
        }
        if raw.contains('\\') {
            return Err(invalid("use '/' as the separator"));
        }
        if raw.starts_with('~') {
            return Err(invalid("'~' is not expanded; use a path relative to the workspace"));
        }
        let mut segments = Vec::new();
        for segment in raw.split('/') {
            match segment {
                "" | "." => {}
                ".." => return Err(invalid("'..' is not allowed; use a path inside the workspace")),
                other => segments.push(other),
            }
        }
        Ok(Self(segments.join("/")))
    }

    /// The path as text (empty for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// `self/child`, where `child` is parsed like [`parse`](Self::parse).
    ///
    /// # Errors
    /// As [`parse`](Self::parse).
    pub fn join(&self, child: &str) -> Result<Self, FsError> {
        let child = Self::parse(child)?;
        Ok(self.join_path(&child))
    }

    /// `self/child` for an already checked path.
    pub fn join_path(&self, child: &WsPath) -> Self {
        match (self.is_root(), child.is_root()) {
            (true, _) => child.clone(),
            (false, true) => self.clone(),
            (false, false) => Self(format!("{}/{}", self.0, child.0)),
        }
    }

    /// The parent, or `None` for the root.
    pub fn parent(&self) -> Option<Self> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(at) => Self(self.0[..at].to_owned()),
            None => Self::root(),
        })
    }

    /// The last segment (empty for the root).
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// The segments, in order.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|segment| !segment.is_empty())
    }

    /// Whether `self` is `prefix` or lies below it.
    pub fn starts_with(&self, prefix: &WsPath) -> bool {
        prefix.is_root()
            || self.0 == prefix.0
            || (self.0.starts_with(&prefix.0) && self.0.as_bytes().get(prefix.0.len()) == Some(&b'/'))
    }

    /// `self` with `prefix` removed, when `self` lies at or below it.
    pub fn strip_prefix(&self, prefix: &WsPath) -> Option<Self> {
        if !self.starts_with(prefix) {
            return None;
        }
        if prefix.is_root() {
            return Some(self.clone());
        }
        Some(Self(self.0[prefix.0.len()..].trim_start_matches('/').to_owned()))
    }
}

impl fmt::Display for WsPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("/")
        } else {
            f.write_str(&self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_and_refuses_escapes() {
        let ok = |raw: &str| {
            WsPath::parse(raw)
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|e| panic!("{raw}: {e}"))
        };
        assert_eq!(ok("/a//b/./c"), "a/b/c");
        assert_eq!(ok("/"), "");
        assert_eq!(ok("a..b/c"), "a..b/c");
        for bad in ["../x", "a/../../b", "a/..", "a\0b", "a\\b", "~/x", &"a/".repeat(3000)] {
            assert!(WsPath::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prefixes_respect_segment_boundaries() {
        let p = |raw: &str| WsPath::parse(raw).unwrap_or_default();
        assert!(p("memory/x.md").starts_with(&p("memory")));
        assert!(!p("memoryx/y").starts_with(&p("memory")));
        assert_eq!(p("a/b/c").strip_prefix(&p("a")), Some(p("b/c")));
        assert_eq!(p("a/b").parent(), Some(p("a")));
        assert_eq!(p("a").parent(), Some(WsPath::root()));
    }
}
