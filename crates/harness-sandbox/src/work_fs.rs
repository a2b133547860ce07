//! [`WorkTreeFs`]: the file tools' view of a sandbox's work tree (host-side [`LocalFs`]), which
//! hands every file and directory it creates to the sandbox uid, so commands inside the
//! sandbox can change what the file tools wrote.

use async_trait::async_trait;
use harness_fs::{
    FileInfo, FileVersion, Filesystem, FsError, GrepMatch, GrepOptions, LocalFs, TextPage, WriteMode, WsPath,
};
use rustix::fs::{AtFlags, Mode, OFlags};
use std::path::PathBuf;

/// A work tree seen from the host, writing as the sandbox's uid would.
pub(crate) struct WorkTreeFs {
    inner: LocalFs,
    root: PathBuf,
    uid: u32,
    hand_over: bool,
}

impl WorkTreeFs {
    pub(crate) fn new(inner: LocalFs, root: PathBuf, uid: u32) -> Self {
        Self {
            inner,
            root,
            uid,
            hand_over: rustix::process::geteuid().is_root(),
        }
    }

    /// Chowns every component of `path` not yet owned by the uid, walking with `O_NOFOLLOW`
    /// from the root, so a symlink planted inside the work tree can never redirect the chown
    /// to a host file.
    async fn hand_over(&self, path: &WsPath) -> Result<(), FsError> {
        if !self.hand_over || path.is_root() {
            return Ok(());
        }
        let root = self.root.clone();
        let uid = self.uid;
        let segments: Vec<String> = path.segments().map(str::to_owned).collect();
        let failed = |err: rustix::io::Errno| FsError::Io {
            path: path.clone(),
            operation: "hand over to the sandbox uid",
            source: Box::new(std::io::Error::from(err)),
        };
        tokio::task::spawn_blocking(move || -> Result<(), rustix::io::Errno> {
            let owner = Some(rustix::fs::Uid::from_raw(uid));
            let group = Some(rustix::fs::Gid::from_raw(uid));
            let mut dir = rustix::fs::open(&root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
            for (index, segment) in segments.iter().enumerate() {
                let stat = rustix::fs::statat(&dir, segment.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
                if stat.st_uid != uid {
                    rustix::fs::chownat(&dir, segment.as_str(), owner, group, AtFlags::SYMLINK_NOFOLLOW)?;
                }
                if index + 1 < segments.len() {
                    dir = rustix::fs::openat(
                        &dir,
                        segment.as_str(),
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )?;
                }
            }
            Ok(())
        })
        .await
        .map_err(|err| FsError::Io {
            path: path.clone(),
            operation: "hand over to the sandbox uid",
            source: Box::new(err),
        })?
        .map_err(failed)
    }
}

#[async_trait]
impl Filesystem for WorkTreeFs {
    fn describe(&self) -> String {
        format!("sandbox-work-tree:{}", self.root.display())
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        self.inner.read(path).await
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        self.inner.read_versioned(path).await
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        self.inner.write(path, bytes, mode).await?;
        self.hand_over(path).await
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        self.inner.append(path, bytes).await?;
        self.hand_over(path).await
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        self.inner.stat(path).await
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        self.inner.list(path).await
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        self.inner.glob(base, pattern, limit).await
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        self.inner.grep(base, options).await
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        self.inner.delete(path).await
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        self.inner.mkdir(path).await?;
        self.hand_over(path).await
    }

    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        self.inner.read_text(path, offset, limit).await
    }
}
