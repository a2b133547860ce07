//! The workspace projection: host files (`[sandbox] projection_roots`, relative to the
//! workspace) written into a sandbox's work tree whenever its instance is new, and the hash
//! that tells whether a restored tree already holds the current projection.
//!
//! The hash is SHA-256 over the files sorted by path: for each, its `/`-separated path, a
//! NUL byte, its length as 8 little-endian bytes, and its bytes.

use crate::provider::SandboxError;
use harness_fs::WsPath;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Where a projection's files come from.
#[derive(Debug, Clone, Default)]
pub enum Projection {
    /// Nothing is projected.
    #[default]
    None,
    /// Fixed files (path in the work tree, bytes).
    Files(Vec<(WsPath, Vec<u8>)>),
    /// The files under `roots` (files or directories relative to `workspace`), read again
    /// for every new instance so host edits reach the next one.
    Roots {
        /// The host workspace.
        workspace: PathBuf,
        /// Relative paths of files or directories.
        roots: Vec<String>,
    },
}

/// The files of a projection at one moment, and their hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectedFiles {
    /// Path in the work tree and bytes, sorted by path.
    pub files: Vec<(WsPath, Vec<u8>)>,
    /// The hash (see the module docs); `""` when there are no files.
    pub hash: String,
}

impl ProjectedFiles {
    fn of(mut files: Vec<(WsPath, Vec<u8>)>) -> Self {
        files.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        files.dedup_by(|a, b| a.0 == b.0);
        if files.is_empty() {
            return Self::default();
        }
        let mut hasher = Sha256::new();
        for (path, bytes) in &files {
            hasher.update(path.as_str().as_bytes());
            hasher.update([0u8]);
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(bytes);
        }
        let hash = hex::encode(hasher.finalize());
        Self { files, hash }
    }
}

fn io(operation: &'static str) -> impl Fn(std::io::Error) -> SandboxError {
    move |source| SandboxError::Io { operation, source }
}

/// Checks a `projection_roots` entry: relative, no `..`, not empty.
///
/// # Errors
/// A message naming the entry and what to write instead.
pub fn check_root(root: &str) -> Result<(), String> {
    let path = Path::new(root);
    let bad = root.trim().is_empty()
        || path.is_absolute()
        || path
            .components()
            .any(|part| !matches!(part, std::path::Component::Normal(_) | std::path::Component::CurDir));
    if bad {
        return Err(format!(
            "[sandbox] projection_roots: {root:?} is not a path inside the workspace: give a relative path without `..` (e.g. \"AGENTS.md\" or \"skills\")"
        ));
    }
    Ok(())
}

fn walk(workspace: &Path, relative: &Path, files: &mut Vec<(WsPath, Vec<u8>)>) -> Result<(), SandboxError> {
    let host = workspace.join(relative);
    let meta = match std::fs::symlink_metadata(&host) {
        Ok(meta) => meta,
        // A root that does not exist projects nothing.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(io("read projection root")(err)),
    };
    // Symlinks are not followed: a projection never reaches outside the workspace.
    if meta.is_file() {
        let text = relative.to_string_lossy().replace('\\', "/");
        let path = WsPath::parse(&text)
            .map_err(|err| io("name projected file")(std::io::Error::other(format!("{}: {err}", host.display()))))?;
        let bytes = std::fs::read(&host).map_err(io("read projected file"))?;
        files.push((path, bytes));
    } else if meta.is_dir() {
        for entry in std::fs::read_dir(&host).map_err(io("list projection root"))? {
            let entry = entry.map_err(io("list projection root"))?;
            walk(workspace, &relative.join(entry.file_name()), files)?;
        }
    }
    Ok(())
}

impl Projection {
    /// Whether nothing is projected.
    pub fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }

    /// The files now, and their hash.
    ///
    /// # Errors
    /// [`SandboxError::Io`] when a projected host file cannot be read.
    pub async fn collect(&self) -> Result<ProjectedFiles, SandboxError> {
        match self {
            Self::None => Ok(ProjectedFiles::default()),
            Self::Files(files) => Ok(ProjectedFiles::of(files.clone())),
            Self::Roots { workspace, roots } => {
                let workspace = workspace.clone();
                let roots = roots.clone();
                tokio::task::spawn_blocking(move || {
                    let mut files = Vec::new();
                    for root in &roots {
                        check_root(root)
                            .map_err(|message| io("read projection root")(std::io::Error::other(message)))?;
                        let relative: PathBuf = Path::new(root)
                            .components()
                            .filter(|part| matches!(part, std::path::Component::Normal(_)))
                            .collect();
                        walk(&workspace, &relative, &mut files)?;
                    }
                    Ok(ProjectedFiles::of(files))
                })
                .await
                .map_err(|err| io("read projection")(std::io::Error::other(err)))?
            }
        }
    }
}

/// Writes `files` into `sandbox`'s work tree (through its filesystem, never the host's).
///
/// # Errors
/// [`SandboxError::Io`] when a write fails.
pub async fn apply(sandbox: &dyn crate::provider::Sandbox, files: &ProjectedFiles) -> Result<(), SandboxError> {
    let filesystem = sandbox.filesystem();
    for (path, bytes) in &files.files {
        filesystem
            .write(path, bytes, harness_fs::WriteMode::Overwrite)
            .await
            .map_err(|err| io("project workspace file")(std::io::Error::other(err)))?;
    }
    Ok(())
}
