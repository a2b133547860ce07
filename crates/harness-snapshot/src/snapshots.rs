//! [`Snapshots`]: persist a work tree (full or delta), fetch a verified restore, retention.

use crate::SnapshotError;
use crate::head::{Head, Heads, WriterFence};
use crate::manifest::{Manifest, TreeView};
use crate::pack::{PackOptions, PackRequest, pack};
use crate::store::BlobStore;
use crate::unpack::{UnpackLimits, UnpackPlan};
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;

/// How snapshots are taken and kept.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotOptions {
    /// What to pack and how.
    pub pack: PackOptions,
    /// Limits of every restore.
    pub limits: UnpackLimits,
    /// A chain longer than this (deltas on a full snapshot) is closed by a full snapshot.
    pub max_chain: usize,
    /// Deltas adding up to more than this fraction of the base's bytes trigger a full one.
    pub max_delta_fraction: f64,
    /// Heads kept (the current one included); everything they reach is kept too.
    pub keep: usize,
    /// Unreferenced objects younger than this are left alone by [`Snapshots::collect`] (an
    /// upload may be in flight).
    pub gc_grace: std::time::Duration,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        Self {
            pack: PackOptions::default(),
            limits: UnpackLimits::default(),
            max_chain: 8,
            max_delta_fraction: 0.5,
            keep: 3,
            gc_grace: std::time::Duration::from_secs(3600),
        }
    }
}

/// What [`Snapshots::persist`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Persisted {
    /// A new snapshot is the head.
    Written {
        /// Its manifest.
        manifest: Box<Manifest>,
        /// The head now.
        head: Head,
    },
    /// Nothing changed since the head: no new snapshot.
    Unchanged,
}

/// What a retention run under the store's lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Another process holds the retention lease: it does the work.
    Busy,
    /// This run held the lease.
    Done {
        /// Scopes looked at.
        scopes: usize,
        /// Objects deleted.
        deleted: usize,
    },
}

/// One layer of a restore: its manifest, the plan for the unpacker, and the archive, fetched
/// to a local spool file and verified against the manifest's hash while it was read.
#[derive(Debug)]
pub struct Layer {
    /// The manifest.
    pub manifest: Manifest,
    /// What the unpacker is told.
    pub plan: UnpackPlan,
    /// The verified archive (deleted when dropped).
    pub archive: tempfile::TempPath,
}

/// A restore: layers to unpack in order (a full snapshot, then its deltas).
#[derive(Debug)]
pub struct Restore {
    /// The layers.
    pub layers: Vec<Layer>,
    /// The head it restores.
    pub head: Head,
}

impl Restore {
    /// The tree the layers produce.
    pub fn view(&self) -> TreeView {
        let mut view = TreeView::default();
        for layer in &self.layers {
            view.apply(&layer.manifest);
        }
        view
    }
}

/// Snapshots of work trees: blobs in a [`BlobStore`], heads in [`Heads`].
#[derive(Debug, Clone)]
pub struct Snapshots {
    blobs: BlobStore,
    heads: Heads,
    options: SnapshotOptions,
    spool: PathBuf,
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX))
}

/// The scope name used in object paths and head keys for a sandbox scope key: a hash, so any
/// key is a safe path.
pub fn scope_name(scope_key: &str) -> String {
    hex::encode(&Sha256::digest(scope_key.as_bytes())[..16])
}

impl Snapshots {
    /// Snapshots in `blobs` with heads in `heads`; archives are spooled in `spool` (a host
    /// directory outside every work tree).
    pub fn new(blobs: BlobStore, heads: Heads, spool: impl Into<PathBuf>, options: SnapshotOptions) -> Self {
        Self {
            blobs,
            heads,
            options,
            spool: spool.into(),
        }
    }

    /// The blob store.
    pub fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// The heads.
    pub fn heads(&self) -> &Heads {
        &self.heads
    }

    /// The options.
    pub fn options(&self) -> &SnapshotOptions {
        &self.options
    }

    async fn chain(&self, scope: &str, head: &Head) -> Result<Vec<Manifest>, SnapshotError> {
        let mut manifests = Vec::with_capacity(head.chain.len());
        for id in &head.chain {
            manifests.push(self.blobs.manifest(scope, id).await?);
        }
        Ok(manifests)
    }

    /// Snapshots the tree under `root` for `scope` and moves the head to it: a delta against
    /// the head when the chain is short and its deltas small, else a full snapshot. The head
    /// moves only after both objects are stored; a stale `fence` keeps the old head and
    /// discards the upload.
    ///
    /// # Errors
    /// [`SnapshotError::Store`] with `Fenced` for a stale writer, IO and object-store errors.
    pub async fn persist(&self, scope: &str, root: &Path, fence: &WriterFence) -> Result<Persisted, SnapshotError> {
        self.persist_with_projection(scope, root, fence, "").await
    }

    /// [`persist`](Self::persist), recording in the manifest the hash of the workspace
    /// projection the tree holds (`""`: none known), so a restore can tell whether the
    /// projection changed since ([`Snapshots::head_projection`]).
    ///
    /// # Errors
    /// As [`persist`](Self::persist).
    pub async fn persist_with_projection(
        &self,
        scope: &str,
        root: &Path,
        fence: &WriterFence,
        projection_hash: &str,
    ) -> Result<Persisted, SnapshotError> {
        let (head, _) = self.heads.get(scope).await?;
        Heads::check(scope, head.as_ref(), fence)?;
        let manifests = match &head {
            Some(head) => self.chain(scope, head).await?,
            None => Vec::new(),
        };
        let delta = manifests.first().is_some_and(|base| {
            let added: u64 = manifests[1..].iter().map(|delta| delta.archive.uncompressed).sum();
            manifests.len() <= self.options.max_chain
                && (added as f64) <= self.options.max_delta_fraction * (base.archive.uncompressed.max(1) as f64)
        });
        let view = delta.then(|| {
            let mut view = TreeView::default();
            for manifest in &manifests {
                view.apply(manifest);
            }
            view
        });
        let base_id = manifests.last().map(|manifest| manifest.id.clone());
        let id = uuid::Uuid::now_v7().to_string();
        std::fs::create_dir_all(&self.spool).map_err(|source| SnapshotError::Io {
            operation: "create spool directory",
            path: self.spool.display().to_string(),
            source,
        })?;
        let spool = tempfile::NamedTempFile::new_in(&self.spool).map_err(|source| SnapshotError::Io {
            operation: "create spool file",
            path: self.spool.display().to_string(),
            source,
        })?;
        let (file, spool_path) = spool.into_parts();
        let root = root.to_owned();
        let options = self.options.pack.clone();
        let pack_id = id.clone();
        let (manifest, file) = tokio::task::spawn_blocking(move || {
            let base = match (&base_id, &view) {
                (Some(base_id), Some(view)) => Some((base_id.as_str(), view)),
                _ => None,
            };
            let request = PackRequest {
                id: &pack_id,
                base,
                created_ms: now_ms(),
            };
            let writer = std::io::BufWriter::with_capacity(1 << 20, file);
            let (manifest, writer) = pack(&root, request, &options, writer)?;
            let file = writer.into_inner().map_err(|err| SnapshotError::Io {
                operation: "flush spool file",
                path: root.display().to_string(),
                source: err.into_error(),
            })?;
            Ok::<_, SnapshotError>((manifest, file))
        })
        .await
        .map_err(|err| SnapshotError::Io {
            operation: "pack snapshot",
            path: scope.to_owned(),
            source: std::io::Error::other(err),
        })??;
        let mut manifest = manifest;
        projection_hash.clone_into(&mut manifest.projection_hash);
        if manifest.base.is_some() && manifest.entries.is_empty() && manifest.deleted.is_empty() {
            return Ok(Persisted::Unchanged);
        }
        let mut chain = if manifest.base.is_some() {
            head.as_ref().map(|head| head.chain.clone()).unwrap_or_default()
        } else {
            Vec::new()
        };
        chain.push(id.clone());
        let mut file = tokio::fs::File::from_std(file);
        tokio::io::AsyncSeekExt::rewind(&mut file)
            .await
            .map_err(|source| SnapshotError::Io {
                operation: "rewind spool file",
                path: spool_path.display().to_string(),
                source,
            })?;
        self.blobs.put_archive(scope, &id, file).await?;
        self.blobs.put_manifest(scope, &manifest).await?;
        drop(spool_path);
        match self
            .heads
            .advance(scope, chain, fence, self.options.keep, now_ms())
            .await
        {
            Ok(head) => Ok(Persisted::Written {
                manifest: Box::new(manifest),
                head,
            }),
            Err(err) => {
                // A stale writer's upload is never referenced: remove it.
                let _ = self.blobs.delete(&self.blobs.manifest_path(scope, &id)).await;
                let _ = self.blobs.delete(&self.blobs.archive_path(scope, &id)).await;
                Err(err)
            }
        }
    }

    /// Fetches the head chain of `scope` for restore: every archive streamed to a spool file
    /// and verified against its manifest's hash and size while read. `None` when the scope
    /// has no snapshot.
    ///
    /// # Errors
    /// [`SnapshotError::Corrupt`] when an archive does not match its manifest, missing
    /// objects, IO.
    pub async fn fetch(&self, scope: &str) -> Result<Option<Restore>, SnapshotError> {
        let (Some(head), _) = self.heads.get(scope).await? else {
            return Ok(None);
        };
        let manifests = self.chain(scope, &head).await?;
        std::fs::create_dir_all(&self.spool).map_err(|source| SnapshotError::Io {
            operation: "create spool directory",
            path: self.spool.display().to_string(),
            source,
        })?;
        let mut layers = Vec::with_capacity(manifests.len());
        for manifest in manifests {
            let spool = tempfile::NamedTempFile::new_in(&self.spool).map_err(|source| SnapshotError::Io {
                operation: "create spool file",
                path: self.spool.display().to_string(),
                source,
            })?;
            let (file, path) = spool.into_parts();
            let mut file = tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::from_std(file));
            let mut stream = self.blobs.archive(scope, &manifest.id).await?;
            let mut hasher = Sha256::new();
            let mut bytes = 0u64;
            let object = self.blobs.archive_path(scope, &manifest.id).to_string();
            let spool_io = |source| SnapshotError::Io {
                operation: "write spool file",
                path: object.clone(),
                source,
            };
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                bytes += chunk.len() as u64;
                if bytes > manifest.archive.bytes {
                    return Err(SnapshotError::Corrupt {
                        path: object.clone(),
                        reason: format!("longer than the {} bytes its manifest names", manifest.archive.bytes),
                    });
                }
                hasher.update(&chunk);
                file.write_all(&chunk).await.map_err(spool_io)?;
            }
            file.flush().await.map_err(spool_io)?;
            let sha256 = hex::encode(hasher.finalize());
            if sha256 != manifest.archive.sha256 {
                return Err(SnapshotError::Corrupt {
                    path: object,
                    reason: format!("its hash {sha256} is not the manifest's {}", manifest.archive.sha256),
                });
            }
            let plan = UnpackPlan {
                sha256,
                deleted: manifest.deleted.clone(),
                limits: self.options.limits,
            };
            layers.push(Layer {
                manifest,
                plan,
                archive: path,
            });
        }
        Ok(Some(Restore { layers, head }))
    }

    /// The projection hash the head's tree holds (its last manifest's), `None` when the scope
    /// has no head. `Some("")`: the head was written without a projection hash.
    ///
    /// # Errors
    /// Store and object-store errors.
    pub async fn head_projection(&self, scope: &str) -> Result<Option<(Head, String)>, SnapshotError> {
        let (Some(head), _) = self.heads.get(scope).await? else {
            return Ok(None);
        };
        let Some(last) = head.chain.last() else {
            return Ok(Some((head, String::new())));
        };
        let manifest = self.blobs.manifest(scope, last).await?;
        Ok(Some((head, manifest.projection_hash)))
    }

    /// Retention of every scope in the store, by one process at a time: the store's
    /// retention lease (`snapshot-retention/<prefix>` in `lease`) is taken first, waiting at
    /// most `wait`; when another process holds it, this run does nothing and says
    /// [`Retention::Busy`] (that holder does the work). Each scope keeps its kept heads and
    /// everything they reach ([`collect`](Self::collect)).
    ///
    /// # Errors
    /// The lease backend, store and object-store errors (the lease is released either way).
    pub async fn collect_all(
        &self,
        lease: &dyn harness_core::SessionLease,
        wait: std::time::Duration,
    ) -> Result<Retention, SnapshotError> {
        let Some(guard) = self.retention_lease(lease, wait).await? else {
            return Ok(Retention::Busy);
        };
        let result = async {
            let mut deleted = 0;
            let scopes = self.blobs.scopes().await?;
            for scope in &scopes {
                deleted += self.collect(scope).await?;
            }
            Ok(Retention::Done {
                scopes: scopes.len(),
                deleted,
            })
        }
        .await;
        guard.release().await;
        result
    }

    /// [`collect`](Self::collect) of one scope under the store's retention lease (see
    /// [`collect_all`](Self::collect_all)): [`Retention::Busy`] when another process holds it.
    ///
    /// # Errors
    /// As [`collect_all`](Self::collect_all).
    pub async fn collect_exclusive(
        &self,
        scope: &str,
        lease: &dyn harness_core::SessionLease,
        wait: std::time::Duration,
    ) -> Result<Retention, SnapshotError> {
        let Some(guard) = self.retention_lease(lease, wait).await? else {
            return Ok(Retention::Busy);
        };
        let result = self.collect(scope).await;
        guard.release().await;
        result.map(|deleted| Retention::Done { scopes: 1, deleted })
    }

    /// The lease key of this store's retention.
    pub fn retention_key(&self) -> harness_core::LeaseKey {
        harness_core::LeaseKey::new(&["snapshot-retention", self.blobs.prefix()])
    }

    async fn retention_lease(
        &self,
        lease: &dyn harness_core::SessionLease,
        wait: std::time::Duration,
    ) -> Result<Option<harness_core::LeaseGuard>, SnapshotError> {
        let cancel = harness_core::CancellationToken::new();
        let key = self.retention_key();
        let acquire = lease.acquire(&key, &cancel);
        let outcome = tokio::select! {
            outcome = acquire => outcome,
            () = tokio::time::sleep(wait) => {
                cancel.cancel();
                return Ok(None);
            }
        };
        match outcome {
            Ok(guard) => Ok(Some(guard)),
            Err(harness_core::LeaseError::Cancelled) => Ok(None),
            Err(err) => Err(SnapshotError::Lease(err)),
        }
    }

    /// Retention: deletes the objects of `scope` that no kept head reaches and that are older
    /// than the grace period (partial uploads of a killed or stale writer included). Returns
    /// how many objects were deleted.
    ///
    /// # Errors
    /// Store and object-store errors.
    pub async fn collect(&self, scope: &str) -> Result<usize, SnapshotError> {
        let (head, _) = self.heads.get(scope).await?;
        let reachable = head.as_ref().map(Head::reachable).unwrap_or_default();
        let cutoff = chrono_cutoff(self.options.gc_grace);
        let mut deleted = 0;
        for (id, path, modified_ms) in self.blobs.objects_of(scope).await? {
            if reachable.contains(&id) || modified_ms > cutoff {
                continue;
            }
            self.blobs.delete(&path).await?;
            deleted += 1;
        }
        Ok(deleted)
    }
}

fn chrono_cutoff(grace: std::time::Duration) -> i64 {
    now_ms().saturating_sub(i64::try_from(grace.as_millis()).unwrap_or(i64::MAX))
}
