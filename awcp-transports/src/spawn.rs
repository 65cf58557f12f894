//! Starting a task's command inside its jail ([`crate::contain::Jail::spawn`]).
//!
//! With a cgroup per task, the command is started directly in its cgroup: `clone3(2)` with
//! `CLONE_INTO_CGROUP` (Linux 5.7+), then `execve(2)`. Joining a cgroup after the fork instead
//! (a write to `cgroup.procs`, what [`crate::contain::Jail::confine`] does) takes the kernel's
//! cgroup-wide write lock, which waits for an RCU grace period unless another migration
//! happened within the last one: 4–20 ms per task on an idle 2-core machine, paid by every
//! tiny delegation that came more than ~20 ms after the previous one (the second mode of
//! `BENCHMARKS.md`'s `user-` rows; issue 54). Starting in the cgroup takes the read side only.
//!
//! Why by hand: the standard library's `Command` cannot start a process in a cgroup, and no
//! well-kept crate does (glibc's `posix_spawnattr_setcgroup_np` needs glibc 2.39). The child
//! side is kept to the minimum `std` itself does between fork and exec: async-signal-safe
//! system calls on memory prepared before the fork (stdio, process group, working directory,
//! signal mask and `SIGPIPE` reset, `execve`), an exec failure reported through a close-on-exec
//! pipe. Where `clone3` or `CLONE_INTO_CGROUP` is refused (older kernels, seccomp filters)
//! the command is started by `std` and joins its cgroup after the fork, as before.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// A command started in a jail: its pid, its standard streams (all three piped) and how to
/// wait for it. Like [`std::process::Child`], it is not killed when dropped.
#[derive(Debug)]
pub struct JailedChild {
    pid: u32,
    how: How,
    /// The write end of its standard input.
    pub stdin: Option<File>,
    /// The read end of its standard output.
    pub stdout: Option<File>,
    /// The read end of its standard error.
    pub stderr: Option<File>,
}

#[derive(Debug)]
enum How {
    /// Started by `std` (no cgroup, or `clone3` refused).
    Std(std::process::Child),
    /// Started by `clone3`; its status once reaped.
    Raw(Option<ExitStatus>),
}

impl JailedChild {
    /// Its process id (also its process group id).
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Whether it was started directly in its cgroup (`clone3`), not joined it after the fork.
    pub fn started_in_cgroup(&self) -> bool {
        matches!(self.how, How::Raw(_))
    }

    /// Waits for it to exit and reaps it (again: the status it exited with).
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.how {
            How::Std(c) => c.wait(),
            How::Raw(Some(s)) => Ok(*s),
            How::Raw(done) => {
                let s = waitpid(self.pid, 0)?.expect("a blocking wait returns a status");
                *done = Some(s);
                Ok(s)
            }
        }
    }

    /// Its status if it exited (reaping it), else `None`.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match &mut self.how {
            How::Std(c) => c.try_wait(),
            How::Raw(Some(s)) => Ok(Some(*s)),
            How::Raw(done) => {
                let s = waitpid(self.pid, libc::WNOHANG)?;
                *done = s;
                Ok(s)
            }
        }
    }

    /// Sends it `SIGKILL` (nothing if it was reaped already).
    pub fn kill(&mut self) -> io::Result<()> {
        match &mut self.how {
            How::Std(c) => c.kill(),
            How::Raw(Some(_)) => Ok(()),
            // Not reaped: the pid is still ours.
            How::Raw(None) => {
                // SAFETY: kill(2) with a pid we own and a valid signal.
                if unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) } == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            }
        }
    }
}

fn waitpid(pid: u32, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; `pid` is our unreaped child.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, flags) };
        if r == pid as libc::pid_t {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Starts `cmd` as [`JailedChild`] by `std` (the fallback; `cmd` was made to join its jail by
/// [`crate::contain::Jail::confine`]).
pub(crate) fn spawn_std(cmd: &mut Command) -> io::Result<JailedChild> {
    use std::process::Stdio;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut c = cmd.spawn()?;
    let file = |fd: Option<OwnedFd>| fd.map(File::from);
    Ok(JailedChild {
        pid: c.id(),
        stdin: file(c.stdin.take().map(OwnedFd::from)),
        stdout: file(c.stdout.take().map(OwnedFd::from)),
        stderr: file(c.stderr.take().map(OwnedFd::from)),
        how: How::Std(c),
    })
}

/// Why [`spawn_into_cgroup`] did not start the command.
#[cfg(target_os = "linux")]
pub(crate) enum NotSpawned {
    /// `clone3` or `CLONE_INTO_CGROUP` is not available here: start it another way.
    Unsupported,
    /// The command cannot be started (not found, not executable, …).
    Failed(io::Error),
}

#[cfg(target_os = "linux")]
impl From<io::Error> for NotSpawned {
    fn from(e: io::Error) -> Self {
        NotSpawned::Failed(e)
    }
}

/// Whether `clone3` with `CLONE_INTO_CGROUP` was refused once (then it is not tried again).
#[cfg(target_os = "linux")]
static UNSUPPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The `struct clone_args` of `clone3(2)` (as of Linux 5.7, with `cgroup`).
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

#[cfg(target_os = "linux")]
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Starts `cmd` in the cgroup `cgroup` with `clone3` (see the [module docs](self)): its
/// program, arguments, working directory and environment variables are taken from `cmd`,
/// whose environment is exactly the variables set on it (as after `env_clear`); all three
/// standard streams are piped; it leads a process group of its own.
#[cfg(target_os = "linux")]
pub(crate) fn spawn_into_cgroup(cmd: &Command, cgroup: &Path) -> Result<JailedChild, NotSpawned> {
    if UNSUPPORTED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(NotSpawned::Unsupported);
    }
    // Everything the child touches is made before the fork.
    let env: Vec<CString> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v?.as_bytes());
            CString::new(kv).ok()
        })
        .collect();
    let path_var = cmd
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v.map(OsStr::to_os_string));
    let cwd = cmd.get_current_dir().map(Path::to_path_buf);
    let program = resolve(cmd.get_program(), path_var.as_deref(), cwd.as_deref())?;
    let c = |s: &OsStr| {
        CString::new(s.as_bytes()).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "an argument holds a NUL byte")
        })
    };
    let program = c(program.as_os_str())?;
    let mut argv = vec![c(cmd.get_program())?];
    for a in cmd.get_args() {
        argv.push(c(a)?);
    }
    let cwd = cwd.map(|d| c(d.as_os_str())).transpose()?;
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let env_ptrs: Vec<*const libc::c_char> = env
        .iter()
        .map(|a| a.as_ptr())
        .chain([std::ptr::null()])
        .collect();
    let dir = File::open(cgroup)?;
    let (stdin_r, stdin_w) = pipe()?;
    let (stdout_r, stdout_w) = pipe()?;
    let (stderr_r, stderr_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let mut args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir.as_raw_fd() as u64,
        ..Default::default()
    };
    let (fds, cwd_ptr) = (
        [
            stdin_r.as_raw_fd(),
            stdout_w.as_raw_fd(),
            stderr_w.as_raw_fd(),
        ],
        cwd.as_ref().map_or(std::ptr::null(), |d| d.as_ptr()),
    );
    let err_fd = err_w.as_raw_fd();
    // SAFETY: clone3 without CLONE_VM forks this process; `args` is a valid clone_args of the
    // size given. In the child (r == 0) only async-signal-safe system calls run, on memory
    // prepared above (no allocation, no lock), and it ends in execve or _exit.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if r == 0 {
        // SAFETY: see above; every pointer was made before the fork and is still valid in the
        // child's copy of the memory.
        unsafe {
            child(
                fds,
                cwd_ptr,
                program.as_ptr(),
                &argv_ptrs,
                &env_ptrs,
                err_fd,
            )
        }
    }
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EPERM | libc::EOPNOTSUPP) => {
                UNSUPPORTED.store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!("clone3 into a cgroup refused ({e}): joining after the fork");
                Err(NotSpawned::Unsupported)
            }
            _ => Err(NotSpawned::Failed(e)),
        };
    }
    let pid = r as u32;
    drop((stdin_r, stdout_w, stderr_w, err_w, dir));
    // The child's exec closes `err_w`: nothing read means it executes the program.
    let mut errno = [0u8; 4];
    let mut got = 0;
    let mut err_file = File::from(err_r);
    loop {
        use std::io::Read;
        match err_file.read(&mut errno[got..]) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                if got == errno.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(NotSpawned::Failed(e)),
        }
    }
    if got > 0 {
        let _ = waitpid(pid, 0);
        return Err(NotSpawned::Failed(io::Error::from_raw_os_error(
            i32::from_ne_bytes(errno),
        )));
    }
    Ok(JailedChild {
        pid,
        how: How::Raw(None),
        stdin: Some(File::from(stdin_w)),
        stdout: Some(File::from(stdout_r)),
        stderr: Some(File::from(stderr_r)),
    })
}

/// The child of [`spawn_into_cgroup`], between `clone3` and `execve`.
///
/// # Safety
/// Called only in the child of a fork of this process, with pointers valid in its memory.
#[cfg(target_os = "linux")]
unsafe fn child(
    fds: [libc::c_int; 3],
    cwd: *const libc::c_char,
    program: *const libc::c_char,
    argv: &[*const libc::c_char],
    env: &[*const libc::c_char],
    err_fd: libc::c_int,
) -> ! {
    let fail = || -> ! {
        // SAFETY: errno location and write(2)/_exit(2) are async-signal-safe.
        unsafe {
            let e = *libc::__errno_location();
            let b = e.to_ne_bytes();
            libc::write(err_fd, b.as_ptr().cast(), b.len());
            libc::_exit(127)
        }
    };
    // SAFETY: async-signal-safe system calls on valid descriptors and pointers.
    unsafe {
        for (i, fd) in fds.iter().enumerate() {
            // dup2 clears close-on-exec on the copy.
            if libc::dup2(*fd, i as libc::c_int) < 0 {
                fail();
            }
        }
        if libc::setpgid(0, 0) < 0 {
            fail();
        }
        if !cwd.is_null() && libc::chdir(cwd) < 0 {
            fail();
        }
        // What std resets too: an empty signal mask, SIGPIPE back to its default (the Rust
        // runtime ignores it, and an ignored disposition survives exec).
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGPIPE, &dfl, std::ptr::null_mut());
        libc::execve(program, argv.as_ptr(), env.as_ptr());
        fail()
    }
}

#[cfg(target_os = "linux")]
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid out-array of two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Where `program` is: itself if it names a path (relative ones are taken from `cwd`, as the
/// child changes there before it executes), else the first executable file of that name in
/// `path` (the child's `PATH`, else this process's).
#[cfg(target_os = "linux")]
fn resolve(program: &OsStr, path: Option<&OsStr>, cwd: Option<&Path>) -> io::Result<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(program));
    }
    let inherited = std::env::var_os("PATH");
    let path = path
        .or(inherited.as_deref())
        .unwrap_or(OsStr::new("/usr/bin:/bin"));
    for dir in std::env::split_paths(path) {
        let dir = match cwd {
            Some(cwd) if dir.is_relative() => cwd.join(dir),
            _ => dir,
        };
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found in PATH", program.to_string_lossy()),
    ))
}

#[cfg(target_os = "linux")]
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
