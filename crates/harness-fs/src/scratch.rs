//! TEMPORARY scratch backends (to be replaced by the fs branch).
#![allow(missing_docs, clippy::unwrap_used)]
use crate::*;
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;

pub struct LocalFs {
    root: PathBuf,
}
impl LocalFs {
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, FsError> {
        Ok(Self { root: root.into() })
    }
    fn real(&self, p: &WsPath) -> Result<PathBuf, FsError> {
        let path = self.root.join(p.as_str());
        if let Ok(c) = std::fs::canonicalize(&path) {
            let root = std::fs::canonicalize(&self.root).unwrap_or(self.root.clone());
            if !c.starts_with(&root) {
                return Err(FsError::PermissionDenied {
                    path: p.clone(),
                    reason: "symlink outside".into(),
                });
            }
        }
        Ok(path)
    }
}
fn io(p: &WsPath, e: std::io::Error) -> FsError {
    if e.kind() == std::io::ErrorKind::NotFound {
        FsError::NotFound { path: p.clone() }
    } else {
        FsError::Io {
            path: p.clone(),
            operation: "io",
            source: Box::new(e),
        }
    }
}
#[async_trait]
impl Filesystem for LocalFs {
    fn describe(&self) -> String {
        format!("local:{}", self.root.display())
    }
    async fn read(&self, p: &WsPath) -> Result<Vec<u8>, FsError> {
        std::fs::read(self.real(p)?).map_err(|e| io(p, e))
    }
    async fn read_versioned(&self, p: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        let b = self.read(p).await?;
        let v = FileVersion(format!(
            "{}",
            b.len() as u64 ^ b.iter().fold(0u64, |a, x| a.wrapping_mul(31).wrapping_add(*x as u64))
        ));
        Ok((b, v))
    }
    async fn write(&self, p: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        let path = self.real(p)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(p, e))?;
        }
        match mode {
            WriteMode::CreateNew if path.exists() => return Err(FsError::AlreadyExists { path: p.clone() }),
            WriteMode::IfMatch(v) => {
                let (_, cur) = self.read_versioned(p).await?;
                if cur != v {
                    return Err(FsError::Conflict { path: p.clone() });
                }
            }
            _ => {}
        }
        std::fs::write(path, bytes).map_err(|e| io(p, e))
    }
    async fn append(&self, p: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        use std::io::Write;
        let path = self.real(p)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(p, e))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| io(p, e))?;
        f.write_all(bytes).map_err(|e| io(p, e))
    }
    async fn stat(&self, p: &WsPath) -> Result<FileInfo, FsError> {
        let m = std::fs::metadata(self.real(p)?).map_err(|e| io(p, e))?;
        Ok(FileInfo {
            path: p.clone(),
            is_dir: m.is_dir(),
            size: m.len(),
            modified: m.modified().ok().and_then(|t| jiff::Timestamp::try_from(t).ok()),
        })
    }
    async fn list(&self, p: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let mut out = vec![];
        let Ok(rd) = std::fs::read_dir(self.real(p)?) else {
            return Ok(out);
        };
        for e in rd.flatten() {
            let c = p.join(&e.file_name().to_string_lossy())?;
            out.push(self.stat(&c).await?);
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
    async fn glob(&self, base: &WsPath, _pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        let mut out = vec![];
        let mut stack = vec![base.clone()];
        while let Some(d) = stack.pop() {
            if self.real(&d).is_err() {
                continue;
            }
            for e in self.list(&d).await? {
                if e.is_dir {
                    stack.push(e.path.clone())
                } else {
                    out.push(e)
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.truncate(limit);
        Ok(out)
    }
    async fn grep(&self, _base: &WsPath, _o: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        Ok(vec![])
    }
    async fn delete(&self, p: &WsPath) -> Result<(), FsError> {
        let _ = std::fs::remove_file(self.real(p)?);
        Ok(())
    }
    async fn mkdir(&self, p: &WsPath) -> Result<(), FsError> {
        std::fs::create_dir_all(self.real(p)?).map_err(|e| io(p, e))
    }
}
pub struct Namespaced {
    inner: Arc<dyn Filesystem>,
    prefix: WsPath,
}
impl Namespaced {
    pub fn new(inner: Arc<dyn Filesystem>, prefix: WsPath) -> Self {
        Self { inner, prefix }
    }
}
#[async_trait]
impl Filesystem for Namespaced {
    fn describe(&self) -> String {
        format!("{}/{}", self.inner.describe(), self.prefix)
    }
    async fn read(&self, p: &WsPath) -> Result<Vec<u8>, FsError> {
        self.inner.read(&self.prefix.join_path(p)).await
    }
    async fn read_versioned(&self, p: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        self.inner.read_versioned(&self.prefix.join_path(p)).await
    }
    async fn write(&self, p: &WsPath, b: &[u8], m: WriteMode) -> Result<(), FsError> {
        self.inner.write(&self.prefix.join_path(p), b, m).await
    }
    async fn append(&self, p: &WsPath, b: &[u8]) -> Result<(), FsError> {
        self.inner.append(&self.prefix.join_path(p), b).await
    }
    async fn stat(&self, p: &WsPath) -> Result<FileInfo, FsError> {
        self.inner.stat(&self.prefix.join_path(p)).await
    }
    async fn list(&self, p: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        self.inner.list(&self.prefix.join_path(p)).await
    }
    async fn glob(&self, b: &WsPath, pat: &str, l: usize) -> Result<Vec<FileInfo>, FsError> {
        self.inner.glob(&self.prefix.join_path(b), pat, l).await
    }
    async fn grep(&self, b: &WsPath, o: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        self.inner.grep(&self.prefix.join_path(b), o).await
    }
    async fn delete(&self, p: &WsPath) -> Result<(), FsError> {
        self.inner.delete(&self.prefix.join_path(p)).await
    }
    async fn mkdir(&self, p: &WsPath) -> Result<(), FsError> {
        self.inner.mkdir(&self.prefix.join_path(p)).await
    }
}
