//! Preparing a work tree for a sandbox uid: created when missing, handed to the uid (every
//! entry, symlinks themselves rather than their targets, never crossing into another mount),
//! with the sandbox's `TMPDIR` and cache directories inside.

use crate::provider::SandboxError;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

fn failed(path: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    let path = path.to_owned();
    move |source| SandboxError::WorkTree {
        path,
        operation,
        source,
    }
}

/// Creates and hands over the work tree; returns its canonical path.
pub(crate) fn prepare(work_tree: &Path, uid: u32) -> Result<PathBuf, SandboxError> {
    std::fs::create_dir_all(work_tree).map_err(failed(work_tree, "create"))?;
    let root = std::fs::canonicalize(work_tree).map_err(failed(work_tree, "resolve"))?;
    if root == Path::new("/") {
        return Err(SandboxError::WorkTree {
            path: root,
            operation: "use `/` as a work tree",
            source: std::io::Error::other("refused"),
        });
    }
    for dir in [".tmp", ".cache"] {
        let path = root.join(dir);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => {}
            // A symlink or file planted there by an earlier instance is replaced.
            Ok(_) => {
                std::fs::remove_file(&path).map_err(failed(&path, "replace"))?;
                std::fs::create_dir(&path).map_err(failed(&path, "create"))?;
            }
            Err(_) => std::fs::create_dir(&path).map_err(failed(&path, "create"))?,
        }
    }
    if rustix::process::geteuid().is_root() {
        let device = std::fs::metadata(&root).map_err(failed(&root, "inspect"))?.dev();
        hand_over(&root, uid, device)?;
    }
    Ok(root)
}

/// `lchown`s `path` and everything below it (not following symlinks, staying on `device`).
pub(crate) fn hand_over(path: &Path, uid: u32, device: u64) -> Result<(), SandboxError> {
    let mut stack = vec![path.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(failed(&path, "inspect"))?;
        if meta.dev() != device {
            continue;
        }
        if meta.uid() != uid || meta.gid() != uid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).map_err(failed(&path, "chown"))?;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(failed(&path, "list"))? {
                stack.push(entry.map_err(failed(&path, "list"))?.path());
            }
        }
    }
    Ok(())
}
