//! Immutable snapshot objects on an [`ObjectStore`]: `<prefix>/<scope>/<id>.tar.zst` and
//! `<prefix>/<scope>/<id>.manifest.json`.
//!
//! The manifest is written with [`PutMode::Create`] and is the commit point of a snapshot:
//! it names the archive's SHA-256, which every restore verifies while reading. The archive is
//! streamed (multipart) under a fresh UUIDv7 name; it is never referenced before its manifest
//! exists, and a manifest is never referenced before the head moves to it.

use crate::SnapshotError;
use crate::manifest::Manifest;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use std::sync::Arc;
use tokio::io::AsyncReadExt;

/// Where a store's objects live and how to reach them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreConfig {
    /// A local directory (the default).
    Local {
        /// The directory (created when missing).
        dir: std::path::PathBuf,
    },
    /// An S3-compatible bucket (AWS, MinIO, moto...). Conditional create is switched on.
    #[cfg(feature = "s3")]
    S3(S3Config),
}

/// An S3-compatible bucket.
#[cfg(feature = "s3")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// The bucket (it must exist).
    pub bucket: String,
    /// The region.
    pub region: String,
    /// A custom endpoint (`http://127.0.0.1:5055` for a local server); `None` for AWS.
    pub endpoint: Option<String>,
    /// Access key id (`None`: instance metadata or another provider the store finds).
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Session token (temporary credentials).
    pub session_token: Option<String>,
    /// Allow plain HTTP (local servers only).
    pub allow_http: bool,
}

impl StoreConfig {
    /// Opens the object store.
    ///
    /// # Errors
    /// [`SnapshotError::Config`] naming what is wrong.
    pub fn open(&self) -> Result<Arc<dyn ObjectStore>, SnapshotError> {
        match self {
            Self::Local { dir } => {
                std::fs::create_dir_all(dir).map_err(|source| SnapshotError::Io {
                    operation: "create snapshot directory",
                    path: dir.display().to_string(),
                    source,
                })?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|err| SnapshotError::Config(format!("snapshot directory {}: {err}", dir.display())))?;
                Ok(Arc::new(store.with_automatic_cleanup(true)))
            }
            #[cfg(feature = "s3")]
            Self::S3(s3) => {
                use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
                let mut builder = AmazonS3Builder::new()
                    .with_bucket_name(&s3.bucket)
                    .with_region(&s3.region)
                    .with_allow_http(s3.allow_http)
                    .with_conditional_put(S3ConditionalPut::ETagMatch);
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder.with_endpoint(endpoint).with_virtual_hosted_style_request(false);
                }
                if let Some(key) = &s3.access_key_id {
                    builder = builder.with_access_key_id(key);
                }
                if let Some(secret) = &s3.secret_access_key {
                    builder = builder.with_secret_access_key(secret);
                }
                if let Some(token) = &s3.session_token {
                    builder = builder.with_token(token);
                }
                let store = builder
                    .build()
                    .map_err(|err| SnapshotError::Config(format!("S3 bucket {}: {err}", s3.bucket)))?;
                Ok(Arc::new(store))
            }
        }
    }
}

/// Snapshot objects of every scope, under one prefix of an object store.
#[derive(Clone)]
pub struct BlobStore {
    objects: Arc<dyn ObjectStore>,
    prefix: String,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore")
            .field("objects", &self.objects.to_string())
            .field("prefix", &self.prefix)
            .finish()
    }
}

fn backend(operation: &'static str) -> impl FnOnce(object_store::Error) -> SnapshotError {
    move |source| SnapshotError::Objects { operation, source }
}

impl BlobStore {
    /// Objects under `prefix` (e.g. `snapshots`) of `objects`.
    pub fn new(objects: Arc<dyn ObjectStore>, prefix: impl Into<String>) -> Self {
        Self {
            objects,
            prefix: prefix.into().trim_matches('/').to_owned(),
        }
    }

    /// The underlying object store.
    pub fn objects(&self) -> &Arc<dyn ObjectStore> {
        &self.objects
    }

    /// The prefix under which the objects live.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Every scope with at least one object.
    ///
    /// # Errors
    /// [`SnapshotError::Objects`].
    pub async fn scopes(&self) -> Result<Vec<String>, SnapshotError> {
        let prefix = ObjectPath::from(self.prefix.as_str());
        let listing = self
            .objects
            .list_with_delimiter(Some(&prefix))
            .await
            .map_err(backend("list snapshot scopes"))?;
        let mut scopes: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|path| path.filename().map(str::to_owned))
            .collect();
        scopes.sort();
        Ok(scopes)
    }

    fn path(&self, scope: &str, name: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{scope}/{name}", self.prefix))
    }

    /// The object name of an archive.
    pub fn archive_path(&self, scope: &str, id: &str) -> ObjectPath {
        self.path(scope, &format!("{id}.tar.zst"))
    }

    /// The object name of a manifest.
    pub fn manifest_path(&self, scope: &str, id: &str) -> ObjectPath {
        self.path(scope, &format!("{id}.manifest.json"))
    }

    /// Streams the archive in `file` to its object (multipart, so it is never held in memory).
    ///
    /// # Errors
    /// [`SnapshotError::Exists`] when an object of that name exists already,
    /// [`SnapshotError::Objects`].
    pub async fn put_archive(&self, scope: &str, id: &str, file: tokio::fs::File) -> Result<(), SnapshotError> {
        let path = self.archive_path(scope, id);
        match self.objects.head(&path).await {
            Ok(_) => return Err(SnapshotError::Exists { path: path.to_string() }),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(err) => return Err(backend("inspect archive")(err)),
        }
        let upload = self
            .objects
            .put_multipart(&path)
            .await
            .map_err(backend("start upload"))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, 8 << 20);
        let mut file = tokio::io::BufReader::with_capacity(1 << 20, file);
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let read = match file.read(&mut buffer).await {
                Ok(0) => break,
                Ok(read) => read,
                Err(source) => {
                    writer.abort().await.ok();
                    return Err(SnapshotError::Io {
                        operation: "read archive spool",
                        path: path.to_string(),
                        source,
                    });
                }
            };
            writer.wait_for_capacity(4).await.map_err(backend("upload archive"))?;
            writer.write(&buffer[..read]);
        }
        writer.finish().await.map_err(backend("finish upload"))?;
        Ok(())
    }

    /// Writes a manifest, only if no object of that name exists (conditional create).
    ///
    /// # Errors
    /// [`SnapshotError::Exists`], [`SnapshotError::Objects`].
    pub async fn put_manifest(&self, scope: &str, manifest: &Manifest) -> Result<(), SnapshotError> {
        let path = self.manifest_path(scope, &manifest.id);
        let json = serde_json::to_vec(manifest).map_err(|err| SnapshotError::Config(err.to_string()))?;
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self.objects.put_opts(&path, PutPayload::from(json), options).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                Err(SnapshotError::Exists { path: path.to_string() })
            }
            Err(err) => Err(backend("write manifest")(err)),
        }
    }

    /// Reads a manifest.
    ///
    /// # Errors
    /// [`SnapshotError::Missing`], [`SnapshotError::Objects`], [`SnapshotError::Corrupt`].
    pub async fn manifest(&self, scope: &str, id: &str) -> Result<Manifest, SnapshotError> {
        let path = self.manifest_path(scope, id);
        let bytes = match self.objects.get(&path).await {
            Ok(result) => result.bytes().await.map_err(backend("read manifest"))?,
            Err(object_store::Error::NotFound { .. }) => return Err(SnapshotError::Missing { path: path.to_string() }),
            Err(err) => return Err(backend("read manifest")(err)),
        };
        let manifest = Manifest::from_json(&bytes).map_err(|reason| SnapshotError::Corrupt {
            path: path.to_string(),
            reason,
        })?;
        if manifest.id != id {
            return Err(SnapshotError::Corrupt {
                path: path.to_string(),
                reason: format!("it names snapshot {}", manifest.id),
            });
        }
        Ok(manifest)
    }

    /// The archive's byte stream.
    ///
    /// # Errors
    /// [`SnapshotError::Missing`], [`SnapshotError::Objects`].
    pub async fn archive(
        &self,
        scope: &str,
        id: &str,
    ) -> Result<futures::stream::BoxStream<'static, Result<bytes::Bytes, SnapshotError>>, SnapshotError> {
        let path = self.archive_path(scope, id);
        match self.objects.get(&path).await {
            Ok(result) => Ok(result
                .into_stream()
                .map(|chunk| chunk.map_err(backend("read archive")))
                .boxed()),
            Err(object_store::Error::NotFound { .. }) => Err(SnapshotError::Missing { path: path.to_string() }),
            Err(err) => Err(backend("read archive")(err)),
        }
    }

    /// Every object under `scope`: the snapshot id it belongs to, its path, and when it was
    /// written (milliseconds since the epoch).
    ///
    /// # Errors
    /// [`SnapshotError::Objects`].
    pub async fn objects_of(&self, scope: &str) -> Result<Vec<(String, ObjectPath, i64)>, SnapshotError> {
        let prefix = ObjectPath::from(format!("{}/{scope}", self.prefix));
        let mut listing = self.objects.list(Some(&prefix));
        let mut found = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(backend("list snapshots"))?;
            let Some(name) = meta.location.filename() else { continue };
            let id = name
                .strip_suffix(".tar.zst")
                .or_else(|| name.strip_suffix(".manifest.json"))
                .unwrap_or(name)
                .to_owned();
            found.push((id, meta.location.clone(), meta.last_modified.timestamp_millis()));
        }
        Ok(found)
    }

    /// Deletes one object (idempotent).
    ///
    /// # Errors
    /// [`SnapshotError::Objects`].
    pub async fn delete(&self, path: &ObjectPath) -> Result<(), SnapshotError> {
        match self.objects.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(backend("delete snapshot object")(err)),
        }
    }
}
