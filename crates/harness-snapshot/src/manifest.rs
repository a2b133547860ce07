//! The versioned JSON manifest of one snapshot (full or delta) and the merged view of a chain.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The manifest format this crate writes and reads.
pub const FORMAT: &str = "harness-snapshot/1";

/// What one archive entry is. Device nodes, FIFOs and sockets are never archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory (kept even when empty).
    Dir,
    /// A symbolic link (its target is kept verbatim, never followed).
    Symlink,
    /// A second name of a file archived earlier in the same archive.
    Hardlink,
}

/// One entry of the work tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Path relative to the work tree root, `/`-separated, never `..` or absolute.
    pub path: String,
    /// The kind.
    pub kind: EntryKind,
    /// Permission bits, masked: `0o1777` (never setuid or setgid).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mode: u32,
    /// Size in bytes (files).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub size: u64,
    /// Modification time, seconds since the Unix epoch.
    #[serde(default)]
    pub mtime: i64,
    /// Modification time, nanoseconds part (change detection only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtime_nsec: u32,
    /// SHA-256 of the content (files and hardlinks), lowercase hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The link target (symlinks: verbatim; hardlinks: the archived path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

/// The archive a manifest describes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveInfo {
    /// SHA-256 of the compressed archive (`.tar.zst`), lowercase hex.
    pub sha256: String,
    /// Compressed size.
    pub bytes: u64,
    /// Uncompressed size of the file contents.
    pub uncompressed: u64,
    /// Entries in the archive.
    pub entries: u64,
}

/// The manifest of one snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// The snapshot id (a UUIDv7: sortable by creation).
    pub id: String,
    /// The snapshot this one is a delta against, `None` for a full snapshot.
    pub base: Option<String>,
    /// Creation time, RFC 3339-like UTC seconds since the epoch.
    pub created_ms: i64,
    /// The sandbox backend that produced it.
    #[serde(default)]
    pub backend: String,
    /// Hash of the policy the sandbox ran under.
    #[serde(default)]
    pub policy_hash: String,
    /// Hash of the workspace files projected into the instance.
    #[serde(default)]
    pub projection_hash: String,
    /// The archive.
    pub archive: ArchiveInfo,
    /// Every entry of the tree (full) or every changed entry (delta), in archive order.
    pub entries: Vec<Entry>,
    /// Paths removed since the base (whiteouts; deltas only).
    #[serde(default)]
    pub deleted: Vec<String>,
}

impl Manifest {
    /// Parses and checks the format.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let manifest: Self = serde_json::from_slice(bytes).map_err(|err| format!("bad snapshot manifest: {err}"))?;
        if manifest.format != FORMAT {
            return Err(format!(
                "snapshot manifest format {:?} is not {FORMAT:?}: written by a newer harness?",
                manifest.format
            ));
        }
        Ok(manifest)
    }
}

/// The tree a chain of manifests (a full snapshot, then deltas in order) describes: path →
/// entry. Restoring the chain produces exactly this tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeView {
    /// Entries by path.
    pub entries: BTreeMap<String, Entry>,
}

impl TreeView {
    /// The view of one full manifest.
    pub fn of(manifest: &Manifest) -> Self {
        let mut view = Self::default();
        view.apply(manifest);
        view
    }

    /// Applies a manifest on top: whiteouts first, then its entries.
    pub fn apply(&mut self, manifest: &Manifest) {
        if manifest.base.is_none() {
            self.entries.clear();
        }
        for deleted in &manifest.deleted {
            let prefix = format!("{deleted}/");
            self.entries
                .retain(|path, _| path != deleted && !path.starts_with(&prefix));
        }
        for entry in &manifest.entries {
            if entry.kind != EntryKind::Dir {
                // A file replacing a directory replaces everything below it.
                let prefix = format!("{}/", entry.path);
                self.entries.retain(|path, _| !path.starts_with(&prefix));
            }
            let mut entry = entry.clone();
            if entry.kind == EntryKind::Hardlink {
                // Seen as the file it names.
                if let Some(original) = entry.target.as_ref().and_then(|target| self.entries.get(target)) {
                    entry.sha256.clone_from(&original.sha256);
                    entry.size = original.size;
                }
                entry.kind = EntryKind::File;
                entry.target = None;
            }
            self.entries.insert(entry.path.clone(), entry);
        }
    }

    /// The view with what restore cannot reproduce exactly removed (sub-second mtimes,
    /// directory and symlink times), for comparing two trees: path → (kind, mode, size,
    /// sha256, target, file mtime).
    pub fn comparable(&self) -> BTreeMap<String, Comparable> {
        self.entries
            .iter()
            .map(|(path, entry)| {
                let mtime = if entry.kind == EntryKind::File { entry.mtime } else { 0 };
                (
                    path.clone(),
                    (
                        entry.kind,
                        entry.mode,
                        entry.size,
                        entry.sha256.clone(),
                        entry.target.clone(),
                        mtime,
                    ),
                )
            })
            .collect()
    }
}

/// What [`TreeView::comparable`] keeps of an entry.
pub type Comparable = (EntryKind, u32, u64, Option<String>, Option<String>, i64);
