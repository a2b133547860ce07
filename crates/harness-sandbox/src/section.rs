//! [`SandboxSection`]: `[sandbox]` in `harness.toml`, as plain serde data (the harness's
//! sandbox capability owns the section; this crate says what it means), and the paths it
//! resolves to: the provider's configuration and each scope key's work tree.
//!
//! ```toml
//! [sandbox]
//! kind = "namespace"            # the only backend so far ("docker", "remote" later)
//! scope = "user"                # session | user | agent | global (default: the agent's isolation scope)
//! network = "offline"           # offline | proxy | full
//! # allow_hosts = ["pypi.org", "*.pythonhosted.org:443"]  # with network = "proxy": all it reaches
//! uid_range = [200000, 200999]  # required when the harness runs as root: unused host uids
//! read_only = ["/opt/toolchain"] # host directories offered read-only (never /root, /home)
//! # work_root = "/srv/harness-work"  # default <workspace>/.harness/work
//! # state_dir = "/var/lib/harness/sandboxes"
//! # bwrap = "/usr/bin/bwrap"
//! # allow_unsandboxed = false   # let `execute` ask (through approval) to run one command on the host
//! # projection_roots = ["AGENTS.md", "skills"]  # workspace files written into every new instance
//! [sandbox.limits]
//! max_processes = 512
//! [sandbox.snapshots]           # work trees saved and restored across processes and replicas
//! dir = "/srv/harness-snapshots" # a directory every replica shares (default <workspace>/.harness/snapshots)
//! # url = "s3://bucket/prefix"  # instead of dir: an S3-compatible bucket (credentials from AWS_ACCESS_KEY_ID,
//! #                             # AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; never passed into a sandbox)
//! # endpoint = "http://127.0.0.1:9000"  # a non-AWS server (MinIO, moto...); region = "us-east-1"
//! on_release = true             # persist when a call lets go of its sandbox
//! on_evict = true               # persist (under the key's lease) before an idle sandbox stops
//! # on_idle = "10m"             # persist a sandbox released unsaved and unused this long
//! keep = 3                      # heads kept, with every snapshot they reach
//! ```

use crate::manager::{SandboxScope, ScopeKey};
use crate::namespace::{Limits, NamespaceConfig};
use crate::provider::Network;
use serde::Deserialize;
use sha2::Digest;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The sandbox backends `kind` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxKind {
    /// [`NamespaceProvider`](crate::NamespaceProvider): a dedicated uid, bubblewrap, Landlock
    /// and seccomp.
    Namespace,
}

/// `[sandbox.limits]`: each key overrides one of [`Limits`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Processes at once.
    pub max_processes: Option<u64>,
    /// Address space per process, in MiB.
    pub max_process_memory_mb: Option<u64>,
    /// Largest file a process may write, in MiB.
    pub max_file_mb: Option<u64>,
    /// Open descriptors per process.
    pub max_open_files: Option<u64>,
    /// Size of the private `/tmp`, in MiB.
    pub tmp_mb: Option<u64>,
}

/// `[sandbox]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// The backend (required).
    pub kind: SandboxKind,
    /// Which calls share one sandbox; `None`: the agent's isolation scope.
    #[serde(default)]
    pub scope: Option<SandboxScope>,
    /// What the sandbox's network reaches.
    #[serde(default)]
    pub network: Network,
    /// With `network = "proxy"`: the hosts the sandbox's proxy lets through (see
    /// [`ProxyPolicy`](crate::ProxyPolicy) for the entries' form); everything else is refused.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Host directories offered read-only at the same path.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// First and last host uid for sandboxes (required as root).
    #[serde(default)]
    pub uid_range: Option<[u32; 2]>,
    /// The bubblewrap binary (default `/usr/bin/bwrap`).
    #[serde(default)]
    pub bwrap: Option<PathBuf>,
    /// The sandbox init binary (default: the one the embedding program names, e.g. the
    /// `harness` binary itself).
    #[serde(default)]
    pub init: Option<PathBuf>,
    /// Bookkeeping directory, shared by every sandbox of the host (uid locks).
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
    /// Where the work trees live (default `<workspace>/.harness/work`).
    #[serde(default)]
    pub work_root: Option<PathBuf>,
    /// Whether `execute` may ask, through the approval flow, to run one command unsandboxed.
    #[serde(default)]
    pub allow_unsandboxed: bool,
    /// Limits of every sandbox.
    #[serde(default)]
    pub limits: LimitsSection,
    /// Snapshots of the work trees; `None`: a work tree lives only on this host.
    #[serde(default)]
    pub snapshots: Option<SnapshotsSection>,
    /// Workspace files and directories (relative to the workspace) projected into every new
    /// instance's work tree (see [`Projection`](crate::Projection)).
    #[serde(default)]
    pub projection_roots: Vec<String>,
}

/// `[sandbox.snapshots]`: where work-tree snapshots go and when they are taken. The heads
/// live in the shared state store (`[state]`), the objects in `dir`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotsSection {
    /// The object directory (default `<workspace>/.harness/snapshots`); replicas that
    /// continue each other's sessions must share it.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Instead of `dir`: an S3-compatible bucket, `s3://<bucket>[/<prefix>]`.
    #[serde(default)]
    pub url: Option<String>,
    /// With `url`: the server of a non-AWS store (`http://` allowed for a local one).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// With `url`: the region (default `AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`).
    #[serde(default)]
    pub region: Option<String>,
    /// Persist a sandbox released without a persist and unused this long (`"10m"`, `"30s"`,
    /// `"500ms"`); unset: never.
    #[serde(default)]
    pub on_idle: Option<String>,
    /// Persist when a call releases its sandbox.
    #[serde(default = "yes")]
    pub on_release: bool,
    /// Persist an idle sandbox before it is shut down (eviction, shutdown).
    #[serde(default = "yes")]
    pub on_evict: bool,
    /// Heads kept per scope (the current one included).
    #[serde(default)]
    pub keep: Option<usize>,
    /// Paths never snapshotted (default: [`harness_snapshot::DEFAULT_EXCLUDES`]).
    #[serde(default)]
    pub excludes: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

/// Parses `"90s"`, `"10m"`, `"1h"`, `"500ms"` (one number and one unit) or plain seconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let number: u64 = text[..digits].parse().map_err(|_| "not a duration".to_owned())?;
    let duration = match text[digits..].trim() {
        "" | "s" => std::time::Duration::from_secs(number),
        "ms" => std::time::Duration::from_millis(number),
        "m" => std::time::Duration::from_secs(number.saturating_mul(60)),
        "h" => std::time::Duration::from_secs(number.saturating_mul(3600)),
        unit => return Err(format!("unknown unit {unit:?}")),
    };
    if duration.is_zero() {
        return Err("a zero idle time would persist after every call: use on_release".to_owned());
    }
    Ok(duration)
}

impl SnapshotsSection {
    /// The object directory for the workspace at `workspace`.
    pub fn dir(&self, workspace: &Path) -> PathBuf {
        let dir = self
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(".harness").join("snapshots"));
        if dir.is_absolute() { dir } else { workspace.join(dir) }
    }

    /// The idle time of `on_idle`.
    ///
    /// # Errors
    /// A message naming the key and the forms it takes.
    pub fn on_idle(&self) -> Result<Option<std::time::Duration>, String> {
        self.on_idle
            .as_deref()
            .map(|text| {
                parse_duration(text).map_err(|reason| {
                    format!(
                        "[sandbox.snapshots] on_idle = {text:?}: {reason}; write e.g. \"10m\", \"30s\" or \"500ms\""
                    )
                })
            })
            .transpose()
    }

    /// The snapshot objects' store: the directory, or the bucket and prefix of `url`.
    fn blobs(&self, workspace: &Path) -> Result<harness_snapshot::BlobStore, String> {
        let Some(url) = &self.url else {
            if self.endpoint.is_some() || self.region.is_some() {
                return Err("[sandbox.snapshots] endpoint and region apply to an S3 bucket: set url = \"s3://<bucket>\" too, or remove them".to_owned());
            }
            let dir = self.dir(workspace);
            let objects = harness_snapshot::StoreConfig::Local { dir: dir.clone() }
                .open()
                .map_err(|err| format!("[sandbox.snapshots] dir = {:?}: {err}", dir.display().to_string()))?;
            return Ok(harness_snapshot::BlobStore::new(objects, "snapshots"));
        };
        if self.dir.is_some() {
            return Err(
                "[sandbox.snapshots] sets both dir and url: keep one (dir for a shared directory, url for a bucket)"
                    .to_owned(),
            );
        }
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(format!(
                "[sandbox.snapshots] url = {url:?}: only S3-compatible buckets are supported, as \"s3://<bucket>[/<prefix>]\""
            ));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!(
                "[sandbox.snapshots] url = {url:?} names no bucket: write \"s3://<bucket>[/<prefix>]\""
            ));
        }
        let prefix = prefix.trim_matches('/');
        let prefix = if prefix.is_empty() { "snapshots" } else { prefix };
        self.s3(url, bucket)
            .map(|objects| harness_snapshot::BlobStore::new(objects, prefix))
    }

    #[cfg(feature = "s3")]
    fn s3(&self, url: &str, bucket: &str) -> Result<harness_snapshot::ObjectStoreHandle, String> {
        let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let region = self
            .region
            .clone()
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let config = harness_snapshot::S3Config {
            bucket: bucket.to_owned(),
            region,
            endpoint: self.endpoint.clone(),
            access_key_id: env("AWS_ACCESS_KEY_ID"),
            secret_access_key: env("AWS_SECRET_ACCESS_KEY"),
            session_token: env("AWS_SESSION_TOKEN"),
            allow_http: self
                .endpoint
                .as_deref()
                .is_some_and(|endpoint| endpoint.starts_with("http://")),
        };
        harness_snapshot::StoreConfig::S3(config)
            .open()
            .map_err(|err| format!("[sandbox.snapshots] url = {url:?}: {err}"))
    }

    #[cfg(not(feature = "s3"))]
    fn s3(&self, url: &str, _bucket: &str) -> Result<harness_snapshot::ObjectStoreHandle, String> {
        Err(format!(
            "[sandbox.snapshots] url = {url:?}: this harness was built without S3 snapshot support; \
             build it with the `s3` feature (cargo build -p harness-cli --features s3), or use dir = \"<shared directory>\""
        ))
    }

    /// The snapshots this section describes, with heads in `heads` (the shared state
    /// store), and when to persist.
    ///
    /// # Errors
    /// A message naming the key when the store cannot be used, `keep` is 0 or `on_idle` is
    /// not a duration.
    pub fn open(
        &self,
        workspace: &Path,
        heads: std::sync::Arc<dyn harness_store::KvStore>,
    ) -> Result<(harness_snapshot::Snapshots, crate::PersistPolicy), String> {
        if self.keep == Some(0) {
            return Err("[sandbox.snapshots] keep = 0 would drop the current head: keep at least 1".to_owned());
        }
        let on_idle = self.on_idle()?;
        let blobs = self.blobs(workspace)?;
        let mut options = harness_snapshot::SnapshotOptions::default();
        if let Some(keep) = self.keep {
            options.keep = keep;
        }
        if let Some(excludes) = &self.excludes {
            options.pack.excludes.clone_from(excludes);
        }
        let snapshots = harness_snapshot::Snapshots::new(
            blobs,
            harness_snapshot::Heads::new(heads),
            workspace.join(".harness").join("snapshot-spool"),
            options,
        );
        let policy = crate::PersistPolicy {
            on_release: self.on_release,
            on_evict: self.on_evict,
            on_idle,
        };
        Ok((snapshots, policy))
    }
}

/// The default state directory: one per host, so uid locks are seen by every harness.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/harness/sandboxes";

impl SandboxSection {
    /// The key of the section in `harness.toml`.
    pub const KEY: &'static str = "sandbox";

    /// The scope, `default` (the agent's isolation scope) when not set.
    pub fn scope_or(&self, default: SandboxScope) -> SandboxScope {
        self.scope.unwrap_or(default)
    }

    /// The provider's configuration; `default_init` is the init binary when `init` is unset.
    pub fn namespace_config(&self, default_init: &Path) -> NamespaceConfig {
        let init = self.init.clone().unwrap_or_else(|| default_init.to_owned());
        let state_dir = self
            .state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR));
        let mut config = NamespaceConfig::new(init, state_dir);
        if let Some(bwrap) = &self.bwrap {
            config.bwrap.clone_from(bwrap);
        }
        if let Some([first, last]) = self.uid_range {
            config = config.uid_range(first, last);
        }
        config.read_only.clone_from(&self.read_only);
        // An entry that does not parse is refused by `validate`; unvalidated, it allows nothing.
        config.proxy = self.proxy_policy().unwrap_or_default();
        let mib = |value: u64| value.saturating_mul(1 << 20);
        let limits = &self.limits;
        config.limits = Limits {
            max_processes: limits.max_processes.unwrap_or(config.limits.max_processes),
            max_process_memory: limits
                .max_process_memory_mb
                .map(mib)
                .or(config.limits.max_process_memory),
            max_file_bytes: limits.max_file_mb.map(mib).or(config.limits.max_file_bytes),
            max_open_files: limits.max_open_files.unwrap_or(config.limits.max_open_files),
            tmp_bytes: limits.tmp_mb.map_or(config.limits.tmp_bytes, mib),
            ..config.limits
        };
        config
    }

    /// The proxy's allow-list, from `allow_hosts`.
    ///
    /// # Errors
    /// A message naming the entry that is not a host, wildcard or address.
    pub fn proxy_policy(&self) -> Result<crate::ProxyPolicy, String> {
        crate::ProxyPolicy::new(&self.allow_hosts).map_err(|err| format!("[sandbox] allow_hosts: {err}"))
    }

    /// The projection of `workspace` that `projection_roots` names.
    pub fn projection(&self, workspace: &Path) -> crate::Projection {
        if self.projection_roots.is_empty() {
            crate::Projection::None
        } else {
            crate::Projection::Roots {
                workspace: workspace.to_owned(),
                roots: self.projection_roots.clone(),
            }
        }
    }

    /// Where the work trees of `workspace` live.
    pub fn work_root(&self, workspace: &Path) -> PathBuf {
        self.work_root
            .clone()
            .unwrap_or_else(|| workspace.join(".harness").join("work"))
    }

    /// Checks what the section asks for before anything runs: `uid_range` ordered,
    /// `allow_hosts` readable and only with `network = "proxy"`, and the work root reachable
    /// by a sandbox uid (every existing ancestor searchable by others).
    ///
    /// # Errors
    /// A message naming the key and what to do.
    pub fn validate(&self, workspace: &Path) -> Result<(), String> {
        self.proxy_policy()?;
        for root in &self.projection_roots {
            crate::check_projection_root(root)?;
        }
        if let Some(snapshots) = &self.snapshots {
            snapshots.on_idle()?;
        }
        if !self.allow_hosts.is_empty() && self.network != Network::Proxy {
            return Err(format!(
                "[sandbox] allow_hosts is set but network = \"{}\": the allow-list applies only with network = \"proxy\"; set it, or remove allow_hosts",
                self.network.as_str()
            ));
        }
        if let Some([first, last]) = self.uid_range
            && (first > last || first == 0)
        {
            return Err(format!(
                "[sandbox] uid_range = [{first}, {last}]: give [first, last] with 0 < first <= last (unused host uids)"
            ));
        }
        if rustix::process::geteuid().is_root() {
            let root = self.work_root(workspace);
            for dir in root.ancestors().skip(1) {
                let Ok(meta) = std::fs::metadata(dir) else { continue };
                if meta.permissions().mode() & 0o001 == 0 {
                    return Err(format!(
                        "[sandbox] the work trees under {} are not reachable by a sandbox uid: {} is mode {:o}; \
                         make it searchable by others (chmod o+x) or set [sandbox] work_root to a directory outside it",
                        root.display(),
                        dir.display(),
                        meta.permissions().mode() & 0o777
                    ));
                }
            }
        }
        Ok(())
    }
}

impl ScopeKey {
    /// A directory name for the key's work tree: the scope and a hash of the key (ids never
    /// become path components).
    pub fn dir_name(&self) -> String {
        let key = self.as_str();
        let kind = key.split(['/', ':']).nth(1).unwrap_or("scope");
        let digest = sha2::Sha256::digest(key.as_bytes());
        format!("{kind}-{}", &hex::encode(digest)[..24])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::SandboxSection;

    fn section(json: serde_json::Value) -> SandboxSection {
        serde_json::from_value(json).unwrap()
    }

    /// `allow_hosts` becomes the proxy's policy; an entry it cannot read, or an allow-list
    /// without `network = "proxy"`, is refused naming the key.
    #[test]
    fn allow_hosts_is_the_proxy_policy() {
        let workspace = std::path::Path::new("/nonexistent-ws");
        let proxy = section(serde_json::json!({
            "kind": "namespace", "network": "proxy", "allow_hosts": ["pypi.org", "127.0.0.1:8080"]
        }));
        proxy.validate(workspace).unwrap();
        let policy = proxy.namespace_config(std::path::Path::new("/init")).proxy;
        assert!(policy.allows_name("pypi.org", 443));
        assert!(policy.allows_name("127.0.0.1", 8080));
        assert!(!policy.allows_name("127.0.0.1", 8081));
        assert!(!policy.allows_name("example.com", 443));

        let bad = section(serde_json::json!({"kind": "namespace", "network": "proxy", "allow_hosts": ["http://x"]}));
        let err = bad.validate(workspace).unwrap_err();
        assert!(
            err.contains("[sandbox] allow_hosts") && err.contains("http://x"),
            "{err}"
        );
        assert!(bad.namespace_config(std::path::Path::new("/init")).proxy.is_empty());

        let offline = section(serde_json::json!({"kind": "namespace", "allow_hosts": ["pypi.org"]}));
        let err = offline.validate(workspace).unwrap_err();
        assert!(err.contains("network = \"offline\"") && err.contains("proxy"), "{err}");
    }

    fn snapshots(json: serde_json::Value) -> super::SnapshotsSection {
        serde_json::from_value(json).unwrap()
    }

    fn heads() -> std::sync::Arc<dyn harness_store::KvStore> {
        std::sync::Arc::new(harness_store::InMemoryKv::default())
    }

    /// `on_idle` takes one number and a unit (or seconds); anything else, or zero, is
    /// refused naming the key, at validation and at open.
    #[test]
    fn on_idle_is_a_duration_named_when_wrong() {
        let ok = |text: &str| snapshots(serde_json::json!({ "on_idle": text })).on_idle().unwrap();
        assert_eq!(ok("10m"), Some(std::time::Duration::from_secs(600)));
        assert_eq!(ok("30s"), Some(std::time::Duration::from_secs(30)));
        assert_eq!(ok("45"), Some(std::time::Duration::from_secs(45)));
        assert_eq!(ok("500ms"), Some(std::time::Duration::from_millis(500)));
        assert_eq!(ok("2h"), Some(std::time::Duration::from_secs(7200)));
        assert_eq!(snapshots(serde_json::json!({})).on_idle().unwrap(), None);
        for bad in ["soon", "10 minutes", "0s", ""] {
            let err = snapshots(serde_json::json!({ "on_idle": bad })).on_idle().unwrap_err();
            assert!(err.contains("[sandbox.snapshots] on_idle"), "{bad}: {err}");
        }
        let sandbox = section(serde_json::json!({"kind": "namespace", "snapshots": {"on_idle": "later"}}));
        let err = sandbox.validate(std::path::Path::new("/nonexistent-ws")).unwrap_err();
        assert!(err.contains("on_idle = \"later\""), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let err = snapshots(serde_json::json!({ "on_idle": "later" }))
            .open(dir.path(), heads())
            .unwrap_err();
        assert!(err.contains("on_idle"), "{err}");
    }

    /// `url` must be an S3 bucket and excludes `dir`; `endpoint` and `region` need `url`.
    #[test]
    fn a_snapshot_url_is_an_s3_bucket_or_refused_naming_the_form() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |json: serde_json::Value| snapshots(json).open(dir.path(), heads()).unwrap_err();
        let err = refused(serde_json::json!({"url": "gs://bucket"}));
        assert!(
            err.contains("url = \"gs://bucket\"") && err.contains("s3://<bucket>"),
            "{err}"
        );
        let err = refused(serde_json::json!({"url": "s3://"}));
        assert!(err.contains("names no bucket"), "{err}");
        let err = refused(serde_json::json!({"url": "s3://b", "dir": "/srv/x"}));
        assert!(err.contains("both dir and url"), "{err}");
        let err = refused(serde_json::json!({"endpoint": "http://127.0.0.1:9000"}));
        assert!(err.contains("set url"), "{err}");
    }

    /// Without the `s3` feature, a bucket url stops the start with how to get one.
    #[cfg(not(feature = "s3"))]
    #[test]
    fn a_bucket_url_without_the_s3_feature_says_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = snapshots(serde_json::json!({"url": "s3://bucket"}))
            .open(dir.path(), heads())
            .unwrap_err();
        assert!(
            err.contains("without S3 snapshot support") && err.contains("--features s3"),
            "{err}"
        );
    }

    /// With the `s3` feature a bucket url opens (no request is made until a snapshot).
    #[cfg(feature = "s3")]
    #[test]
    fn a_bucket_url_opens_the_bucket_with_its_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let (snapshots, _) = snapshots(serde_json::json!({
            "url": "s3://bucket/team/a/", "endpoint": "http://127.0.0.1:9", "region": "eu-west-1"
        }))
        .open(dir.path(), heads())
        .unwrap();
        assert_eq!(snapshots.blobs().prefix(), "team/a");
    }

    /// `projection_roots` entries stay inside the workspace.
    #[test]
    fn projection_roots_outside_the_workspace_are_refused() {
        let workspace = std::path::Path::new("/nonexistent-ws");
        for bad in ["../secrets", "/etc/passwd", "a/../../b", ""] {
            let sandbox = section(serde_json::json!({"kind": "namespace", "projection_roots": [bad]}));
            let err = sandbox.validate(workspace).unwrap_err();
            assert!(err.contains("[sandbox] projection_roots"), "{bad}: {err}");
        }
        let fine = section(serde_json::json!({"kind": "namespace", "projection_roots": ["AGENTS.md", "./skills"]}));
        fine.validate(workspace).unwrap();
    }
}
