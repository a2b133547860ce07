//! Without the `git` feature: a repository cannot be synced ([`Skills::new`](crate::Skills::new)
//! already refuses configured ones, so this is reached only through
//! [`GitSkillRepository::sync`](crate::GitSkillRepository::sync) called directly).

use crate::repository::{GitSyncError, SyncJob, SyncOutcome};

/// Whether this build can sync repositories.
pub(crate) const AVAILABLE: bool = false;

pub(crate) fn sync_blocking(job: &SyncJob) -> Result<SyncOutcome, GitSyncError> {
    Err(GitSyncError::GitFeatureOff { url: job.url.clone() })
}
