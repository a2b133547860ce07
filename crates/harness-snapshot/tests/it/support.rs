//! Helpers: trees, packing to memory, unpacking, views.

use harness_snapshot::{
    BlobStore, Heads, Manifest, PackOptions, PackRequest, SnapshotOptions, Snapshots, StoreConfig, TreeView,
    UnpackLimits, UnpackPlan, UnpackReport, pack, unpack,
};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

pub(crate) fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(&path, content).unwrap_or_else(|e| panic!("{e}"));
}

pub(crate) fn chmod(root: &Path, rel: &str, mode: u32) {
    std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("{e}"));
}

pub(crate) fn options() -> PackOptions {
    PackOptions {
        threads: 0,
        ..PackOptions::default()
    }
}

/// Packs `root` (a full snapshot, or a delta on `base`) into memory.
pub(crate) fn pack_full(root: &Path, id: &str) -> (Manifest, Vec<u8>) {
    pack(
        root,
        PackRequest {
            id,
            base: None,
            created_ms: 0,
        },
        &options(),
        Vec::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn pack_delta(root: &Path, id: &str, base: &Manifest, view: &TreeView) -> (Manifest, Vec<u8>) {
    pack(
        root,
        PackRequest {
            id,
            base: Some((base.id.as_str(), view)),
            created_ms: 0,
        },
        &options(),
        Vec::new(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn plan_for(manifest: &Manifest) -> UnpackPlan {
    UnpackPlan {
        sha256: manifest.archive.sha256.clone(),
        deleted: manifest.deleted.clone(),
        limits: UnpackLimits::default(),
    }
}

pub(crate) fn unpack_ok(archive: &[u8], root: &Path, plan: &UnpackPlan) -> UnpackReport {
    let report = unpack(archive, root, plan);
    assert_eq!(report.error, None, "{report:?}");
    report
}

/// The view of a tree on disk (a fresh full pack).
pub(crate) fn view_of(root: &Path) -> TreeView {
    TreeView::of(&pack_full(root, "view").0)
}

pub(crate) fn local_snapshots(dir: &Path, kv: Arc<dyn harness_store::KvStore>, options: SnapshotOptions) -> Snapshots {
    let objects = StoreConfig::Local {
        dir: dir.join("objects"),
    }
    .open()
    .unwrap_or_else(|e| panic!("{e}"));
    Snapshots::new(
        BlobStore::new(objects, "snapshots"),
        Heads::new(kv),
        dir.join("spool"),
        options,
    )
}
