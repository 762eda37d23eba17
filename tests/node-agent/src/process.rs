//! One container = one local process tree: its own session, its own private mount namespace
//! with every volume bind-mounted at its real path, its own PID namespace (the command is PID 1
//! there, with its own /proc, so that killing it ends every process of the container, as a
//! container runtime does) and UTS namespace (the pod's hostname), the pod's uid/gid, stdout
//! and stderr captured into a CRI-style log file (`<RFC3339Nano> <stream> F <line>`).
//!
//! The process the agent sees (and signals) is a small supervisor left by a second fork: it
//! forwards every catchable signal to the container's PID 1 and ends with the same exit status
//! or signal; when it is SIGKILLed, the kernel kills PID 1 (parent-death signal) and with it
//! the whole PID namespace.

use crate::volumes::Mount;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

pub struct ProcessSpec {
    pub argv: Vec<String>,
    /// The pod's hostname (its name), set in the container's UTS namespace.
    pub hostname: String,
    /// The `cgroup.procs` file of the container's memory cgroup (its memory limit), if any.
    pub cgroup_procs: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    pub uid: u32,
    pub gid: u32,
    pub mounts: Vec<Mount>,
    pub log_path: PathBuf,
}

pub struct Running {
    pub child: Child,
    pub pid: i32,
    pub log_tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Creates the mount targets on the host file system (inside a private namespace they are then
/// covered by the bind mounts, outside they stay empty).
fn ensure_targets(mounts: &[Mount]) -> std::io::Result<()> {
    for m in mounts {
        if m.target.exists() {
            continue;
        }
        if m.source.is_dir() {
            std::fs::create_dir_all(&m.target)?;
        } else {
            if let Some(parent) = m.target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&m.target, b"")?;
        }
    }
    Ok(())
}

fn cstr(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn spawn(spec: ProcessSpec) -> std::io::Result<Running> {
    ensure_targets(&spec.mounts)?;
    // Sources are opened before any mount and bound through /proc/self/fd: a volume mounted
    // over an ancestor of a later source (e.g. an emptyDir at /tmp while the state directory
    // lives under /tmp) would otherwise hide that source. They are opened in the child, after
    // `unshare`: a descriptor opened in the agent's mount namespace cannot be bind-mounted in
    // the new one (mount(2) fails with EINVAL).
    let binds: Vec<(CString, CString, bool)> = spec
        .mounts
        .iter()
        .map(|m| Ok((cstr(&m.source)?, cstr(&m.target)?, m.read_only)))
        .collect::<std::io::Result<_>>()?;
    // Mount points inside earlier mounts (e.g. a volume at /share/.pulumi inside the emptyDir
    // at /share) are created in the namespace, after those mounts, as a container runtime
    // does: the ancestors of each target, then the target (a directory, or an empty file for
    // a file source).
    let targets: Vec<(Vec<CString>, bool)> = spec
        .mounts
        .iter()
        .map(|m| {
            let ancestors = m
                .target
                .ancestors()
                .skip(1)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .map(cstr)
                .collect::<std::io::Result<Vec<_>>>()?;
            Ok((ancestors, m.source.is_dir()))
        })
        .collect::<std::io::Result<_>>()?;
    // Filled in the child (no allocation after fork): the descriptor of each source and the
    // NUL-terminated `/proc/self/fd/<n>` path that names it.
    let mut source_fds: Vec<libc::c_int> = vec![-1; binds.len()];
    let mut via_fd: Vec<[u8; 32]> = vec![[0u8; 32]; binds.len()];
    // Every ancestor of the working directory, so that it can be created after the mounts
    // (it often lies inside a volume).
    let workdir: Vec<CString> = match &spec.working_dir {
        Some(w) => Path::new(w)
            .ancestors()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .map(cstr)
            .collect::<std::io::Result<_>>()?,
        None => vec![cstr(Path::new("/"))?],
    };
    let root = cstr(Path::new("/"))?;
    let proc_dir = cstr(Path::new("/proc"))?;
    let cgroup_procs = spec.cgroup_procs.as_deref().map(cstr).transpose()?;
    let proc_fs = cstr(Path::new("proc"))?;
    // As the kubelet does: a hostname is at most 63 characters, without a trailing `-`/`.`.
    let mut hostname = spec.hostname.clone().into_bytes();
    hostname.truncate(63);
    while hostname.last().is_some_and(|b| *b == b'-' || *b == b'.') {
        hostname.pop();
    }
    let (uid, gid) = (spec.uid, spec.gid);

    let Some(program) = spec.argv.first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty command",
        ));
    };
    let mut cmd = Command::new(program);
    cmd.args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    // SAFETY: only async-signal-safe system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            check(libc::setsid())?;
            check(libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWUTS))?;
            check(libc::sethostname(hostname.as_ptr().cast(), hostname.len()))?;
            check(libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for (i, (src, _, _)) in binds.iter().enumerate() {
                let fd = libc::open(src.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                check(fd)?;
                source_fds[i] = fd;
                fd_path(&mut via_fd[i], fd);
            }
            for (i, (_, dst, ro)) in binds.iter().enumerate() {
                let (ancestors, is_dir) = &targets[i];
                for dir in ancestors {
                    libc::mkdir(dir.as_ptr(), 0o755);
                }
                if *is_dir {
                    libc::mkdir(dst.as_ptr(), 0o755);
                } else {
                    let fd = libc::open(
                        dst.as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                        0o644,
                    );
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
                check(libc::mount(
                    via_fd[i].as_ptr().cast(),
                    dst.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                if *ro {
                    check(libc::mount(
                        std::ptr::null(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                }
            }
            for fd in &source_fds {
                libc::close(*fd);
            }
            for dir in &workdir {
                libc::mkdir(dir.as_ptr(), 0o755);
            }
            // Into the memory cgroup first, so that the container's every process is in it.
            if let Some(procs) = &cgroup_procs {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                check(fd)?;
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                check(written as libc::c_int)?;
            }
            // The container's own PID namespace: this process stays outside as the supervisor;
            // its child is PID 1 inside and goes on to exec the command.
            check(libc::unshare(libc::CLONE_NEWPID))?;
            let child = libc::fork();
            check(child)?;
            if child > 0 {
                supervise(child);
            }
            // A /proc that shows only the container's processes.
            libc::mount(
                proc_fs.as_ptr(),
                proc_dir.as_ptr(),
                proc_fs.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            );
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setgid(gid))?;
            check(libc::setuid(uid))?;
            // After the change of user, which clears a parent-death signal set before it: the
            // container dies with its supervisor.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
            if let Some(dir) = workdir.last() {
                check(libc::chdir(dir.as_ptr()))?;
            }
            Ok(())
        });
    }
    if let Some(parent) = spec.log_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log_path)?,
    ));
    let mut child = cmd.spawn()?;
    let pid = child.id().map(|p| p as i32).unwrap_or(-1);
    let mut log_tasks = Vec::new();
    if let Some(out) = child.stdout.take() {
        log_tasks.push(tokio::spawn(copy_lines(out, "stdout", log.clone())));
    }
    if let Some(err) = child.stderr.take() {
        log_tasks.push(tokio::spawn(copy_lines(err, "stderr", log)));
    }
    Ok(Running {
        child,
        pid,
        log_tasks,
    })
}

/// The container's PID 1, as seen from the supervisor (written once, after fork).
static CONTAINER_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int) {
    let pid = CONTAINER_PID.load(std::sync::atomic::Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// The supervisor (runs after fork, so only async-signal-safe calls): forwards signals to the
/// container's PID 1, waits for it, and ends the same way it ended. Never returns.
///
/// # Safety
/// Must only be called in a forked child, with `child` its own child.
unsafe fn supervise(child: libc::pid_t) -> ! {
    CONTAINER_PID.store(child, std::sync::atomic::Ordering::Relaxed);
    for sig in [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGWINCH,
        libc::SIGCONT,
    ] {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = forward_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(sig, &action, std::ptr::null_mut());
    }
    // Only the child writes to the pipes; keep the supervisor's copies from holding them open.
    // That includes std's exec-error pipe (close-on-exec, but the supervisor never execs):
    // `spawn` waits for it to close.
    let mut fd = 3;
    while fd < 4096 {
        libc::close(fd);
        fd += 1;
    }
    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    if null >= 0 {
        libc::dup2(null, 0);
        libc::dup2(null, 1);
        libc::dup2(null, 2);
    }
    let mut status: libc::c_int = 0;
    loop {
        let r = libc::waitpid(child, &mut status, 0);
        if r == child {
            break;
        }
        if r == -1 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(127);
        }
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}

/// Writes `/proc/self/fd/<fd>` and a NUL into `buf` without allocating (runs after fork).
fn fd_path(buf: &mut [u8; 32], fd: libc::c_int) {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 12];
    let mut n = fd.max(0) as u32;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
}

async fn copy_lines(
    stream: impl AsyncRead + Unpin,
    name: &'static str,
    log: Arc<Mutex<std::fs::File>>,
) {
    use std::io::Write;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                }
                let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
                let mut record = Vec::with_capacity(line.len() + 48);
                record.extend_from_slice(ts.as_bytes());
                record.extend_from_slice(format!(" {name} F ").as_bytes());
                record.extend_from_slice(&line);
                record.push(b'\n');
                if let Ok(mut f) = log.lock() {
                    let _ = f.write_all(&record);
                }
            }
        }
    }
}

/// Signals a container's main process (`group = false`) or its whole process group.
pub fn signal(pid: i32, sig: libc::c_int, group: bool) {
    if pid <= 0 {
        return;
    }
    // SAFETY: kill(2) with a pid we spawned; a stale pid at worst yields ESRCH.
    unsafe {
        libc::kill(if group { -pid } else { pid }, sig);
    }
}

/// A parsed log record.
pub struct LogRecord<'a> {
    pub timestamp: &'a str,
    pub content: &'a [u8],
}

pub fn parse_record(line: &[u8]) -> Option<LogRecord<'_>> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let ts = std::str::from_utf8(parts.next()?).ok()?;
    let _stream = parts.next()?;
    let _tag = parts.next()?;
    let content = parts.next().unwrap_or(b"");
    Some(LogRecord {
        timestamp: ts,
        content,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_paths_are_nul_terminated() {
        let mut buf = [0xffu8; 32];
        fd_path(&mut buf, 1234);
        assert_eq!(&buf[..19], b"/proc/self/fd/1234\0");
        fd_path(&mut buf, 0);
        assert_eq!(&buf[..16], b"/proc/self/fd/0\0");
    }

    #[test]
    fn parses_cri_records() {
        let r = parse_record(b"2026-01-01T00:00:00.000000001Z stdout F hello world").unwrap();
        assert_eq!(r.timestamp, "2026-01-01T00:00:00.000000001Z");
        assert_eq!(r.content, b"hello world");
        let r = parse_record(b"2026-01-01T00:00:00Z stderr F ").unwrap();
        assert_eq!(r.content, b"");
    }
}
