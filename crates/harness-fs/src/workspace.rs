//! [`CallWorkspace`]: the filesystems of one call, built from the workspace root and the
//! call's [`CallScope`] (the harness's **data**: sessions, memory, task records, persona), and
//! [`CallWorkTree`]: the **work tree** a sandboxed call's file tools and shell share, which
//! holds none of that data.

use crate::filesystem::Filesystem;
use crate::namespace::Namespaced;
use crate::overlay::OverlayFs;
use crate::scope::CallScope;
use crate::shared::SharedLayer;
use std::sync::Arc;

/// The filesystems of one call, put into the call's
/// [`RuntimeContext`](harness_core::RuntimeContext) by the harness when the call is bound,
/// next to its [`CallScope`]. Tools and middlewares read it with
/// `ctx.get::<CallWorkspace>()`; build it only with [`CallWorkspace::new`].
#[derive(Clone)]
pub struct CallWorkspace {
    /// The caller's own layer (its namespace): runtime data (sessions, memory, large tool
    /// results, the caller's files) is written here and only here.
    pub user: Arc<dyn Filesystem>,
    /// What the model reads and writes through: under scopes `user` and `session` the
    /// caller's layer over the read-only shared layer (a shared file shows through unless
    /// the caller has its own copy; a write creates the caller's copy, the shared file is
    /// never changed); under `agent` and `global` the workspace root with its shared files
    /// read-only. Every read path the model has (file tools, memory tools, the prompt) uses it.
    pub layered: Arc<dyn Filesystem>,
    /// The shared layer: only the shared entries of the workspace root
    /// ([`SHARED_ENTRIES`](crate::SHARED_ENTRIES)), read-only.
    pub shared: Arc<dyn Filesystem>,
    /// The caller's layer without the turn's fence, for writes that may happen after the
    /// turn's lease is released. The same `Arc` as [`user`](Self::user) when the call is
    /// not fenced, so `Arc::ptr_eq(&user, &unfenced)` says whether it is. (The harness
    /// writes a fenced call's session index under the lease, through `user`.)
    pub unfenced: Arc<dyn Filesystem>,
}

impl CallWorkspace {
    /// The view of `root` (the whole workspace) for the call `scope`. `template`, when the
    /// workspace filesystem is not the local disk, is the local workspace directory: its
    /// shared files show through under the workspace's own. When `root` is shared by several
    /// replicas, the scope's [`replicated_dirs`](CallScope::replicated_dirs) of the caller's
    /// layer are kept in the shared store ([`Filesystem::replicated`]).
    pub fn new(root: &Arc<dyn Filesystem>, scope: &CallScope, template: Option<&Arc<dyn Filesystem>>) -> Self {
        let mut shared: Arc<dyn Filesystem> = Arc::new(SharedLayer::read_only(Arc::clone(root)));
        if let Some(template) = template {
            let below: Arc<dyn Filesystem> = Arc::new(SharedLayer::read_only(Arc::clone(template)));
            shared = Arc::new(OverlayFs::new(shared, below));
        }
        let dirs = scope.replicated_dirs();
        if scope.is_shared_namespace() {
            let root = root.replicated(&dirs).unwrap_or_else(|| Arc::clone(root));
            let root = &root;
            let own: Arc<dyn Filesystem> = Arc::new(SharedLayer::protected(Arc::clone(root)));
            let layered: Arc<dyn Filesystem> = match template {
                Some(_) => Arc::new(OverlayFs::new(own, Arc::clone(&shared))),
                None => own,
            };
            return Self {
                user: Arc::clone(root),
                unfenced: Arc::clone(root),
                layered,
                shared,
            };
        }
        let user: Arc<dyn Filesystem> = Arc::new(Namespaced::new(Arc::clone(root), scope.namespace().clone()));
        let user = user.replicated(&dirs).unwrap_or(user);
        Self {
            layered: Arc::new(OverlayFs::new(Arc::clone(&user), Arc::clone(&shared))),
            unfenced: Arc::clone(&user),
            user,
            shared,
        }
    }

    /// [`new`](Self::new) with every write of the caller's layer (and of the model's view of
    /// it) carrying `fence`, when `root` can check fences ([`Filesystem::fenced`]); else the
    /// same as `new`. [`unfenced`](Self::unfenced) stays without the fence.
    pub fn fenced(
        root: &Arc<dyn Filesystem>,
        scope: &CallScope,
        template: Option<&Arc<dyn Filesystem>>,
        fence: &harness_store::KvFence,
    ) -> Self {
        let Some(fenced_root) = root.fenced(fence) else {
            return Self::new(root, scope, template);
        };
        let plain = Self::new(root, scope, template);
        Self {
            unfenced: plain.user,
            ..Self::new(&fenced_root, scope, template)
        }
    }
}

/// The work tree of one call, when it is not the caller's data layer: put into the call's
/// [`RuntimeContext`](harness_core::RuntimeContext) next to the [`CallWorkspace`] (e.g. by a
/// sandbox, whose shell sees the same directory). The file tools prefer it to
/// [`CallWorkspace::layered`]; the harness's own data (sessions, transcripts, task records,
/// memory, persona, tool configuration) stays in the `CallWorkspace` and is never in it.
#[derive(Clone)]
pub struct CallWorkTree(pub Arc<dyn Filesystem>);

impl std::fmt::Debug for CallWorkTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CallWorkTree").field(&self.0.describe()).finish()
    }
}

impl std::fmt::Debug for CallWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallWorkspace")
            .field("user", &self.user.describe())
            .field("layered", &self.layered.describe())
            .field("shared", &self.shared.describe())
            .field("unfenced", &self.unfenced.describe())
            .finish()
    }
}
