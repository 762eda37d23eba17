//! `pulumi-runner bootstrap [DEST]`: copies the runner's own (static) executable into the
//! share volume, mode 0755, for the `pulumi` container to run.

use crate::error::Failure;
use crate::report::succeeded;
use pulumi_operator_api::plan::{FailureReason, RunResult};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub fn bootstrap(dest: &Path) -> Result<RunResult, Failure> {
    let fail = |what: String| Failure::new(FailureReason::UpdateFailed, what);
    let me = std::env::current_exe()
        .map_err(|e| fail(format!("cannot locate the runner executable: {e}")))?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| fail(format!("cannot create {}: {e}", parent.display())))?;
    }
    // Copy next to the destination, then rename: a reader never sees half a binary.
    let tmp = dest.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::copy(&me, &tmp).map_err(|e| {
        fail(format!(
            "cannot copy {} to {}: {e}",
            me.display(),
            tmp.display()
        ))
    })?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| fail(format!("cannot make {} executable: {e}", tmp.display())))?;
    std::fs::rename(&tmp, dest).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(format!("cannot move the runner to {}: {e}", dest.display()))
    })?;
    Ok(succeeded(format!(
        "installed the runner at {}",
        dest.display()
    )))
}
