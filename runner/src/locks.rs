//! Stale locks of our own making (pure). A DIY backend's lock error lists each lock as
//! `<url>: created by <user>@<host> (pid <n>) at <time>`. A lock whose host carries this
//! Stack's prefix (`LockHolder::stack_prefix`) and is not this operation was taken by an
//! earlier operation of the same Stack, and the operator never runs two at once: its pod is
//! gone (SIGKILL after the grace period, OOM, a lost node), so the lock is stale. A lock held
//! by any other host (a person's laptop, CI, another cluster) is never touched.

use pulumi_operator_api::plan::LockHolder;

/// The locks the error lists: (`user@host (pid n) at time`, host).
pub fn holders(error_text: &str) -> Vec<(String, String)> {
    error_text
        .lines()
        .filter_map(|line| {
            let (_, who) = line.split_once(": created by ")?;
            let who = who.trim();
            let (user_host, _) = who.split_once(" (pid ")?;
            let host = user_host.rsplit_once('@').map_or(user_host, |(_, h)| h);
            Some((who.to_string(), host.to_string()))
        })
        .collect()
}

/// The locks to clear, if every lock in a "currently locked" error is a stale one of this
/// Stack; `None` when there is none or any lock is someone else's.
pub fn stale(error_text: &str, me: &LockHolder) -> Option<Vec<String>> {
    if !error_text.contains("the stack is currently locked by") || me.stack_prefix.is_empty() {
        return None;
    }
    let locks = holders(error_text);
    let all_ours = !locks.is_empty()
        && locks
            .iter()
            .all(|(_, host)| host.starts_with(&me.stack_prefix) && *host != me.hostname);
    all_ours.then(|| locks.into_iter().map(|(who, _)| who).collect())
}

/// How old a `.tmp` file in a lock directory must be to be taken as a partial lock file: a lock
/// is a few hundred bytes, written in milliseconds.
pub const PARTIAL_LOCK_AGE: std::time::Duration = std::time::Duration::from_secs(15);

/// The partial lock files among a stack's lock directory entries (name, size, age). A DIY
/// backend on a local disk writes each lock to `<id>.json.<n>.tmp` and renames it into place; a
/// write cut short (a full disk, seen with Pulumi 3.259) leaves the empty `.tmp` behind, and the
/// CLI then fails every operation of the stack with "unexpected end of JSON input" (`pulumi
/// cancel` removes it; so does this). A complete lock, ours or anyone's, is never one of them.
pub fn partial(entries: &[(String, u64, std::time::Duration)]) -> Vec<String> {
    entries
        .iter()
        .filter(|(name, _, age)| name.ends_with(".tmp") && *age >= PARTIAL_LOCK_AGE)
        .map(|(name, _, _)| name.clone())
        .collect()
}

/// The remains of a checkpoint write cut short, among the entries (name, size, age) of the
/// directory that holds `stack`'s checkpoint. A DIY backend on a local disk (gocloud's fileblob)
/// writes `<stack>.json` to `<stack>.json.<n>.tmp`, then truncates and rewrites the attributes
/// file `<stack>.json.attrs`, then renames the `.tmp` into place. A Pulumi killed in between
/// (SIGKILL past the grace period, an OOM kill, a lost node) leaves the old checkpoint in place
/// with an empty attributes file, and the CLI then fails every operation of the stack with
/// "failed to load checkpoint: EOF" (seen in CI with Pulumi 3.259). An empty attributes file is
/// one the blob reads the same without, and an old `.tmp` is a write nobody finishes; both go,
/// so the stack reads as its last whole checkpoint (as after a kill between two writes). The
/// same for the backup (`<stack>.json.bak`) and compressed (`.json.gz`) checkpoints. Another
/// stack's files, a whole attributes file, or anything written in the last
/// [`PARTIAL_LOCK_AGE`] are never among them.
pub fn cut_short_checkpoint_writes(
    stack: &str,
    entries: &[(String, u64, std::time::Duration)],
) -> Vec<String> {
    let stack = stack.rsplit('/').next().unwrap_or(stack);
    let checkpoint = format!("{stack}.json");
    entries
        .iter()
        .filter(|(name, size, age)| {
            let ours = name
                .strip_prefix(&checkpoint)
                .is_some_and(|rest| rest.starts_with('.'));
            let left = name.ends_with(".tmp") || (name.ends_with(".attrs") && *size == 0);
            ours && left && *age >= PARTIAL_LOCK_AGE
        })
        .map(|(name, _, _)| name.clone())
        .collect()
}

/// The directories that may hold `project`'s stack checkpoints under a local DIY backend's
/// root: `.pulumi/stacks` (a legacy backend) and `.pulumi/stacks/<project>` (project-scoped).
pub fn checkpoint_dirs(backend_root: &std::path::Path, project: &str) -> Vec<std::path::PathBuf> {
    let stacks = backend_root.join(".pulumi").join("stacks");
    let mut dirs = vec![stacks.join(project), stacks];
    dirs.retain(|d| d.is_dir());
    dirs
}

/// The lock directories of `project`'s `stack` under a local DIY backend's root:
/// `.pulumi/locks/<stack>` (a legacy backend) or `.pulumi/locks/<org>/<project>/<stack>`
/// (project-scoped). Another project's stack of the same name is not among them.
pub fn lock_dirs(
    backend_root: &std::path::Path,
    project: &str,
    stack: &str,
) -> Vec<std::path::PathBuf> {
    let stack = stack.rsplit('/').next().unwrap_or(stack);
    let locks = backend_root.join(".pulumi").join("locks");
    let mut dirs = vec![locks.join(stack)];
    let orgs = std::fs::read_dir(&locks)
        .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    dirs.extend(orgs.iter().map(|org| org.join(project).join(stack)));
    dirs.retain(|d| d.is_dir());
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> LockHolder {
        LockHolder {
            hostname: "pulumi-aaaaaaaaaaaa-2222222222".into(),
            stack_prefix: "pulumi-aaaaaaaaaaaa-".into(),
        }
    }

    fn error(hosts: &[&str]) -> String {
        let mut text = format!(
            "error: the stack is currently locked by {} lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`.",
            hosts.len()
        );
        for (i, h) in hosts.iter().enumerate() {
            text.push_str(&format!(
                "\n  file:///state/.pulumi/locks/organization/p/dev/{i}.json: created by pulumi@{h} (pid 12) at 2026-01-01T00:00:00Z"
            ));
        }
        text
    }

    #[test]
    fn only_old_tmp_files_are_partial_locks() {
        let secs = std::time::Duration::from_secs;
        let entries = vec![
            ("a.json.18ec.tmp".to_string(), 0, secs(3600)),
            ("b.json.18ed.tmp".to_string(), 0, secs(2)),
            ("c.json".to_string(), 121, secs(3600)),
        ];
        assert_eq!(partial(&entries), vec!["a.json.18ec.tmp".to_string()]);
    }

    #[test]
    fn only_the_remains_of_this_stacks_cut_short_checkpoint_writes_go() {
        let secs = std::time::Duration::from_secs;
        let entry = |name: &str, size: u64, age: u64| (name.to_string(), size, secs(age));
        let entries = vec![
            // What a SIGKILLed `pulumi up` left in CI.
            entry("dev.json", 1955, 3600),
            entry("dev.json.18ec4f8ba3587483.tmp", 2122, 3600),
            entry("dev.json.attrs", 0, 3600),
            entry("dev.json.bak", 1955, 3600),
            entry("dev.json.bak.attrs", 212, 3600),
            // Being written right now.
            entry("dev.json.bak.18ec4f8ba3587484.tmp", 10, 2),
            // Another stack's (legacy layout: every stack in one directory).
            entry("dev2.json.attrs", 0, 3600),
            entry("prod.json.18ec.tmp", 10, 3600),
            entry("dev.yaml.attrs", 0, 3600),
        ];
        assert_eq!(
            cut_short_checkpoint_writes("org/proj/dev", &entries),
            vec![
                "dev.json.18ec4f8ba3587483.tmp".to_string(),
                "dev.json.attrs".to_string()
            ]
        );
    }

    #[test]
    fn checkpoint_directories_of_both_layouts_are_found() {
        let root = std::env::temp_dir().join(format!("checkpoints-test-{}", std::process::id()));
        let scoped = root.join(".pulumi/stacks/proj");
        std::fs::create_dir_all(&scoped).unwrap();
        assert_eq!(
            checkpoint_dirs(&root, "proj"),
            vec![scoped, root.join(".pulumi/stacks")]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn lock_directories_of_both_layouts_are_found() {
        let root = std::env::temp_dir().join(format!("locks-test-{}", std::process::id()));
        let scoped = root.join(".pulumi/locks/organization/proj/dev");
        let legacy = root.join(".pulumi/locks/dev");
        let other = root.join(".pulumi/locks/organization/proj/prod");
        let other_project = root.join(".pulumi/locks/organization/other/dev");
        for d in [&scoped, &legacy, &other, &other_project] {
            std::fs::create_dir_all(d).unwrap();
        }
        let mut found = lock_dirs(&root, "proj", "org/proj/dev");
        found.sort();
        assert_eq!(found, vec![legacy, scoped]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_lock_of_an_earlier_operation_of_this_stack_is_stale() {
        assert_eq!(
            stale(&error(&["pulumi-aaaaaaaaaaaa-1111111111"]), &me()),
            Some(vec![
                "pulumi@pulumi-aaaaaaaaaaaa-1111111111 (pid 12) at 2026-01-01T00:00:00Z".into()
            ])
        );
    }

    #[test]
    fn anyone_elses_lock_is_never_touched() {
        // Another Stack (same name elsewhere: another UID), a laptop, this very operation.
        assert_eq!(
            stale(&error(&["pulumi-bbbbbbbbbbbb-1111111111"]), &me()),
            None
        );
        assert_eq!(stale(&error(&["alice-laptop"]), &me()), None);
        assert_eq!(
            stale(&error(&["pulumi-aaaaaaaaaaaa-2222222222"]), &me()),
            None
        );
        assert_eq!(
            stale(
                &error(&["pulumi-aaaaaaaaaaaa-1111111111", "ci-runner-7"]),
                &me()
            ),
            None,
            "one foreign lock among stale ones: hands off"
        );
        assert_eq!(
            stale(
                "error: [409] Conflict: Another update is currently in progress.",
                &me()
            ),
            None
        );
        let no_prefix = LockHolder::default();
        assert_eq!(
            stale(&error(&["pulumi-aaaaaaaaaaaa-1111111111"]), &no_prefix),
            None
        );
    }
}
