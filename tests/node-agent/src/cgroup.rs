//! Memory limits, as a container runtime enforces them: a container with
//! `resources.limits.memory` runs in a memory cgroup of its own with that limit, so that the
//! kernel's OOM killer ends it (SIGKILL) when it goes over, and the agent reports the container
//! `OOMKilled` as the kubelet does. These machines offer the memory controller only on the cgroup
//! v1 hierarchy (`/sys/fs/cgroup/memory`); where it is missing, limits are not enforced and the
//! agent says so in its log once.

use std::path::{Path, PathBuf};

const V1_MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
const AGENT_GROUP: &str = "node-agent";

/// A container's memory cgroup; removed when dropped.
pub struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    /// Creates `<root>/node-agent/<name>` limited to `limit_bytes`; `None` when the machine has
    /// no usable memory controller.
    pub fn create(name: &str, limit_bytes: u64) -> std::io::Result<Option<MemoryCgroup>> {
        let root = Path::new(V1_MEMORY_ROOT);
        if !root.join("memory.limit_in_bytes").exists() {
            return Ok(None);
        }
        let dir = root.join(AGENT_GROUP).join(name);
        std::fs::create_dir_all(&dir)?;
        let cg = MemoryCgroup { dir };
        std::fs::write(
            cg.dir.join("memory.limit_in_bytes"),
            limit_bytes.to_string(),
        )?;
        Ok(Some(cg))
    }

    /// The file a process writes `0` into to move itself into this cgroup.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Whether the kernel's OOM killer killed a process of this cgroup.
    pub fn oom_killed(&self) -> bool {
        std::fs::read_to_string(self.dir.join("memory.oom_control"))
            .ok()
            .and_then(|text| oom_kills(&text))
            .is_some_and(|n| n > 0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The group is empty once its processes are reaped; a few tries cover the last exits.
        for _ in 0..20 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// The `oom_kill N` counter of a v1 `memory.oom_control` file.
fn oom_kills(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// A Kubernetes memory quantity in bytes (`64Mi`, `1G`, `128974848`, `129e6`, `0.5Gi`).
pub fn quantity_bytes(q: &str) -> Option<u64> {
    let q = q.trim();
    let split = q
        .find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E')
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "m" => 1e-3,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then(|| (value * multiplier).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(quantity_bytes("64Mi"), Some(64 * 1024 * 1024));
        assert_eq!(quantity_bytes("1G"), Some(1_000_000_000));
        assert_eq!(quantity_bytes("128974848"), Some(128_974_848));
        assert_eq!(quantity_bytes("129e6"), Some(129_000_000));
        assert_eq!(quantity_bytes("0.5Gi"), Some(512 * 1024 * 1024));
        assert_eq!(quantity_bytes("12Q"), None);
        assert_eq!(quantity_bytes(""), None);
    }

    #[test]
    fn oom_kill_counter() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(oom_kills(text), Some(2));
        assert_eq!(oom_kills("oom_kill_disable 0\n"), None);
    }
}
