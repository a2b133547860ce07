//! [`CompositeFs`]: routes paths to backends by longest prefix.

use crate::error::FsError;
use crate::filesystem::{FileInfo, FileVersion, Filesystem, GrepMatch, GrepOptions, WriteMode};
use crate::path::WsPath;
use crate::search::{FileFilter, compile_glob, finish_matches, union_by_path};
use crate::shell::Shell;
use crate::text::TextPage;
use async_trait::async_trait;
use std::sync::Arc;

/// Most files a mounted backend enumerates for a glob whose pattern cannot be narrowed to it.
const MAX_ROUTE_SCAN: usize = 100_000;

/// One mount.
#[derive(Clone)]
struct Route {
    /// Paths at or below this are routed.
    prefix: WsPath,
    /// What is stripped from a routed path: the prefix itself for a directory mount, its parent
    /// for a file mount (so `AGENTS.md` is `AGENTS.md` inside the backend too).
    base: WsPath,
    is_file: bool,
    fs: Arc<dyn Filesystem>,
}

impl Route {
    fn inner(&self, path: &WsPath) -> WsPath {
        path.strip_prefix(&self.base).unwrap_or_default()
    }

    fn outer(&self, inner: &WsPath) -> WsPath {
        self.base.join_path(inner)
    }

    fn error(&self, err: FsError) -> FsError {
        err.map_path(|inner| self.outer(inner))
    }

    fn infos(&self, infos: Vec<FileInfo>) -> Vec<FileInfo> {
        infos
            .into_iter()
            .map(|info| FileInfo {
                path: self.outer(&info.path),
                ..info
            })
            .collect()
    }
}

/// Routes each path to the backend mounted at its longest matching prefix (matching whole
/// segments: `memory` routes `memory/x.md` but not `memoryx`), and everything else to a default
/// backend.
///
/// Listing, globbing and grepping a directory above mount points merge the default backend
/// (minus what the mounts shadow) with the mounted backends, and every result path is a path of
/// the composite. Deleting a directory above a mount point does not reach into the mount. The
/// shell, if any, is the default backend's: mounted paths are not visible to it.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use harness_fs::{CompositeFs, Filesystem, KvFs, WriteMode, WsPath};
/// use harness_store::InMemoryKv;
/// use std::sync::Arc;
/// let local: Arc<dyn Filesystem> = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), WsPath::root()));
/// let shared = Arc::new(KvFs::new(Arc::new(InMemoryKv::default()), WsPath::parse("shared")?));
/// let fs = CompositeFs::new(local).mount(WsPath::parse("memory")?, shared.clone());
/// fs.write(&WsPath::parse("memory/today.md")?, b"fact", WriteMode::Overwrite).await?;
/// assert_eq!(shared.read(&WsPath::parse("today.md")?).await?, b"fact");
/// # Ok::<_, harness_fs::FsError>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct CompositeFs {
    default: Arc<dyn Filesystem>,
    /// Longest prefix first.
    routes: Vec<Route>,
    /// The store every replica shares, where [`Filesystem::replicated`] keeps a call's
    /// runtime data (keyed by the whole path, so its mounts never collide).
    replica: Option<Arc<dyn Filesystem>>,
}

impl std::fmt::Debug for CompositeFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let routes: Vec<String> = self
            .routes
            .iter()
            .map(|route| format!("{} -> {}", route.prefix, route.fs.describe()))
            .collect();
        f.debug_struct("CompositeFs")
            .field("default", &self.default.describe())
            .field("routes", &routes)
            .finish()
    }
}

impl CompositeFs {
    /// Everything goes to `default` until something is mounted.
    pub fn new(default: Arc<dyn Filesystem>) -> Self {
        Self {
            default,
            routes: Vec::new(),
            replica: None,
        }
    }

    /// Keeps what [`Filesystem::replicated`] asks for in `fs`, the store every replica of
    /// the deployment shares: a directory `d` asked for is mounted so that `d/x` is `d/x` in
    /// `fs` (the whole path, unlike [`mount`](Self::mount)); asking for the root gives `fs`
    /// itself.
    #[must_use]
    pub fn replicate_to(mut self, fs: Arc<dyn Filesystem>) -> Self {
        self.replica = Some(fs);
        self
    }

    /// Mounts `fs` at directory `prefix`: `prefix/x` is `x` in `fs`. Mounting the root is
    /// ignored (use the default backend); mounting a prefix again replaces the earlier mount.
    #[must_use]
    pub fn mount(self, prefix: WsPath, fs: Arc<dyn Filesystem>) -> Self {
        let base = prefix.clone();
        self.add(Route {
            prefix,
            base,
            is_file: false,
            fs,
        })
    }

    /// Mounts `fs` for the single file `path`: it is `path.file_name()` in `fs` (e.g.
    /// `MEMORY.md` kept in a shared store).
    #[must_use]
    pub fn mount_file(self, path: WsPath, fs: Arc<dyn Filesystem>) -> Self {
        let base = path.parent().unwrap_or_default();
        self.add(Route {
            prefix: path,
            base,
            is_file: true,
            fs,
        })
    }

    /// Mounts `fs` at directory `prefix` keeping whole paths: `prefix/x` is `prefix/x` in
    /// `fs`, as on the local disk. Any number of prefixes can share one store this way
    /// without their files meeting (with [`mount`](Self::mount), `a/x` and `b/x` of one store
    /// would be the same `x`).
    #[must_use]
    pub fn mount_shared(self, prefix: WsPath, fs: Arc<dyn Filesystem>) -> Self {
        self.add(Route {
            prefix,
            base: WsPath::root(),
            is_file: false,
            fs,
        })
    }

    /// Mounts `fs` for the single file `path`, keeping its whole path (see
    /// [`mount_shared`](Self::mount_shared)).
    #[must_use]
    pub fn mount_shared_file(self, path: WsPath, fs: Arc<dyn Filesystem>) -> Self {
        self.add(Route {
            prefix: path,
            base: WsPath::root(),
            is_file: true,
            fs,
        })
    }

    fn add(mut self, route: Route) -> Self {
        if route.prefix.is_root() {
            return self;
        }
        self.routes.retain(|existing| existing.prefix != route.prefix);
        self.routes.push(route);
        self.routes
            .sort_by_key(|route| std::cmp::Reverse(route.prefix.segments().count()));
        self
    }

    /// The index of the mount owning `path` (`None`: the default backend).
    fn owner(&self, path: &WsPath) -> Option<usize> {
        self.routes.iter().position(|route| path.starts_with(&route.prefix))
    }

    fn backend(&self, owner: Option<usize>) -> &Arc<dyn Filesystem> {
        owner.map_or(&self.default, |index| &self.routes[index].fs)
    }

    fn inner(&self, owner: Option<usize>, path: &WsPath) -> WsPath {
        owner.map_or_else(|| path.clone(), |index| self.routes[index].inner(path))
    }

    fn outer(&self, owner: Option<usize>, path: &WsPath) -> WsPath {
        owner.map_or_else(|| path.clone(), |index| self.routes[index].outer(path))
    }

    fn error(&self, owner: Option<usize>, err: FsError) -> FsError {
        match owner {
            Some(index) => self.routes[index].error(err),
            None => err,
        }
    }

    /// Mounts strictly below `path`, with their indices.
    fn routes_below<'a>(&'a self, path: &'a WsPath) -> impl Iterator<Item = (usize, &'a Route)> + 'a {
        self.routes
            .iter()
            .enumerate()
            .filter(move |(_, route)| route.prefix != *path && route.prefix.starts_with(path))
    }

    /// The direct child of `dir` on the way to `below` (which lies strictly below `dir`).
    fn child_towards(dir: &WsPath, below: &WsPath) -> Option<WsPath> {
        let rest = below.strip_prefix(dir)?;
        let first = rest.segments().next()?;
        dir.join(first).ok()
    }

    /// Every file of a mounted backend whose composite path, relative to `base`, satisfies
    /// `accept`.
    async fn route_files(
        route: &Route,
        base: &WsPath,
        accept: impl Fn(&WsPath) -> bool + Send + Sync,
    ) -> Result<Vec<FileInfo>, FsError> {
        let files = if route.is_file {
            match route.fs.stat(&route.inner(&route.prefix)).await {
                Ok(info) if !info.is_dir => vec![info],
                Ok(_) | Err(FsError::NotFound { .. }) => Vec::new(),
                Err(err) => return Err(route.error(err)),
            }
        } else {
            // The mount's own directory in its backend: the root for a mount that strips its
            // prefix, the prefix itself for one that keeps whole paths.
            match route.fs.glob(&route.inner(&route.prefix), "**", MAX_ROUTE_SCAN).await {
                Ok(files) => files,
                Err(FsError::NotFound { .. }) => Vec::new(),
                Err(err) => return Err(route.error(err)),
            }
        };
        Ok(route
            .infos(files)
            .into_iter()
            .filter(|info| info.path.strip_prefix(base).is_some_and(|relative| accept(&relative)))
            .collect())
    }
}

/// Forwards a single-path operation to the backend that owns the path.
macro_rules! forward {
    ($self:ident, $path:expr, $method:ident ( $($arg:expr),* )) => {{
        let owner = $self.owner($path);
        $self
            .backend(owner)
            .$method(&$self.inner(owner, $path) $(, $arg)*)
            .await
            .map_err(|err| $self.error(owner, err))
    }};
}

#[async_trait]
impl Filesystem for CompositeFs {
    fn describe(&self) -> String {
        let mut text = format!("composite({}", self.default.describe());
        for route in self.routes.iter().rev() {
            text.push_str(&format!(", {} -> {}", route.prefix, route.fs.describe()));
        }
        text.push(')');
        text
    }

    async fn read(&self, path: &WsPath) -> Result<Vec<u8>, FsError> {
        forward!(self, path, read())
    }

    async fn read_versioned(&self, path: &WsPath) -> Result<(Vec<u8>, FileVersion), FsError> {
        forward!(self, path, read_versioned())
    }

    async fn write(&self, path: &WsPath, bytes: &[u8], mode: WriteMode) -> Result<(), FsError> {
        forward!(self, path, write(bytes, mode))
    }

    async fn append(&self, path: &WsPath, bytes: &[u8]) -> Result<(), FsError> {
        forward!(self, path, append(bytes))
    }

    async fn stat(&self, path: &WsPath) -> Result<FileInfo, FsError> {
        match forward!(self, path, stat()) {
            Ok(info) => Ok(FileInfo {
                path: path.clone(),
                ..info
            }),
            Err(FsError::NotFound { .. }) if self.routes_below(path).next().is_some() => Ok(FileInfo {
                path: path.clone(),
                is_dir: true,
                size: 0,
                modified: None,
            }),
            Err(err) => Err(err),
        }
    }

    async fn list(&self, path: &WsPath) -> Result<Vec<FileInfo>, FsError> {
        let owner = self.owner(path);
        let mut entries: Vec<FileInfo> = forward!(self, path, list())?
            .into_iter()
            .map(|info| FileInfo {
                path: self.outer(owner, &info.path),
                ..info
            })
            .filter(|info| self.owner(&info.path) == owner)
            .collect();
        let mut mounted = Vec::new();
        for (_, route) in self.routes_below(path) {
            let Some(child) = Self::child_towards(path, &route.prefix) else {
                continue;
            };
            if child == route.prefix && route.is_file {
                match route.fs.stat(&route.inner(&child)).await {
                    Ok(info) => mounted.push(FileInfo { path: child, ..info }),
                    Err(FsError::NotFound { .. }) => {}
                    Err(err) => return Err(route.error(err)),
                }
            } else {
                mounted.push(FileInfo {
                    path: child,
                    is_dir: true,
                    size: 0,
                    modified: None,
                });
            }
        }
        entries.retain(|info| !mounted.iter().any(|other| other.path == info.path));
        Ok(union_by_path([mounted, entries]))
    }

    async fn glob(&self, base: &WsPath, pattern: &str, limit: usize) -> Result<Vec<FileInfo>, FsError> {
        let owner = self.owner(base);
        let own: Vec<FileInfo> = forward!(self, base, glob(pattern, limit))?
            .into_iter()
            .map(|info| FileInfo {
                path: self.outer(owner, &info.path),
                ..info
            })
            .filter(|info| self.owner(&info.path) == owner)
            .collect();
        let mut layers = vec![own];
        if self.routes_below(base).next().is_some() {
            let matcher = compile_glob(pattern)?;
            for (index, route) in self.routes_below(base) {
                let files = Self::route_files(route, base, |relative| matcher.is_match(relative.as_str())).await?;
                layers.push(
                    files
                        .into_iter()
                        .filter(|info| self.owner(&info.path) == Some(index))
                        .collect(),
                );
            }
        }
        let mut merged = union_by_path(layers);
        merged.truncate(limit);
        Ok(merged)
    }

    async fn grep(&self, base: &WsPath, options: &GrepOptions) -> Result<Vec<GrepMatch>, FsError> {
        let owner = self.owner(base);
        let mut matches: Vec<GrepMatch> = forward!(self, base, grep(options))?
            .into_iter()
            .map(|found| GrepMatch {
                path: self.outer(owner, &found.path),
                ..found
            })
            .filter(|found| self.owner(&found.path) == owner)
            .collect();
        if self.routes_below(base).next().is_some() {
            let filter = FileFilter::new(options.glob.as_deref())?;
            // Mounts are grepped whole, without the glob, and filtered here, where paths are
            // the composite's (a path glob is relative to `base`, not to the mount).
            let unfiltered = GrepOptions {
                glob: None,
                ..options.clone()
            };
            for (index, route) in self.routes_below(base) {
                let search_base = route.inner(&route.prefix);
                let found = match route.fs.grep(&search_base, &unfiltered).await {
                    Ok(found) => found,
                    Err(FsError::NotFound { .. }) => Vec::new(),
                    Err(err) => return Err(route.error(err)),
                };
                matches.extend(found.into_iter().filter_map(|found| {
                    let path = route.outer(&found.path);
                    let accepted = self.owner(&path) == Some(index)
                        && path
                            .strip_prefix(base)
                            .is_some_and(|relative| filter.accepts(&relative));
                    accepted.then_some(GrepMatch { path, ..found })
                }));
            }
        }
        Ok(finish_matches(matches, options.max_matches.max(1)))
    }

    async fn delete(&self, path: &WsPath) -> Result<(), FsError> {
        forward!(self, path, delete())
    }

    async fn mkdir(&self, path: &WsPath) -> Result<(), FsError> {
        forward!(self, path, mkdir())
    }

    async fn exists(&self, path: &WsPath) -> Result<bool, FsError> {
        Ok(self.routes_below(path).next().is_some() || forward!(self, path, exists())?)
    }

    async fn read_text(&self, path: &WsPath, offset: usize, limit: usize) -> Result<TextPage, FsError> {
        forward!(self, path, read_text(offset, limit))
    }

    fn spans_replicas(&self) -> bool {
        self.default.spans_replicas() || self.routes.iter().any(|route| route.fs.spans_replicas())
    }

    fn shell(&self) -> Option<Arc<dyn Shell>> {
        self.default.shell()
    }

    fn fenced(&self, fence: &harness_store::KvFence) -> Option<Arc<dyn Filesystem>> {
        let mut any = false;
        let mut fence_one = |fs: &Arc<dyn Filesystem>| -> Arc<dyn Filesystem> {
            match fs.fenced(fence) {
                Some(fenced) => {
                    any = true;
                    fenced
                }
                None => Arc::clone(fs),
            }
        };
        let default = fence_one(&self.default);
        let routes = self
            .routes
            .iter()
            .map(|route| Route {
                fs: fence_one(&route.fs),
                ..route.clone()
            })
            .collect();
        let replica = self.replica.as_ref().map(&mut fence_one);
        any.then(|| {
            Arc::new(Self {
                default,
                routes,
                replica,
            }) as Arc<dyn Filesystem>
        })
    }

    fn scoped(&self, prefix: &WsPath) -> Option<Arc<dyn Filesystem>> {
        let scope = |fs: &Arc<dyn Filesystem>| -> Arc<dyn Filesystem> {
            Arc::new(crate::Namespaced::new(Arc::clone(fs), prefix.clone()))
        };
        Some(Arc::new(Self {
            default: scope(&self.default),
            routes: self
                .routes
                .iter()
                .map(|route| Route {
                    fs: scope(&route.fs),
                    ..route.clone()
                })
                .collect(),
            replica: self.replica.as_ref().map(scope),
        }))
    }

    fn replicated(&self, dirs: &[WsPath]) -> Option<Arc<dyn Filesystem>> {
        let replica = self.replica.as_ref()?;
        if dirs.iter().any(WsPath::is_root) {
            return Some(Arc::clone(replica));
        }
        let mut routed = self.clone();
        for dir in dirs {
            // A directory a mount serves already keeps it (the configured shared prefixes).
            if self.owner(dir).is_some() {
                continue;
            }
            routed = routed.mount_shared(dir.clone(), Arc::clone(replica));
        }
        Some(Arc::new(routed))
    }
}
