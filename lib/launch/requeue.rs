//! SLURM requeue on preemption (`accel-launch --slurm_requeue`). SLURM warns a job before its time
//! limit or a preemption with a signal (`sbatch --signal=USR1@300`); the launcher forwards it, gives the
//! ranks `--grace_period` to save, and then puts the job back in the queue with `scontrol requeue`, so
//! that the next run resumes from the checkpoint (with `SLURM_RESTART_COUNT` one higher).
//!
//! Exactly one launcher of a job asks for the requeue: node 0's, after every node's ranks are gone
//! (a warning that reaches only another node travels to node 0 over the control plane). What can be
//! known before the run starts is checked then — `scontrol` found, the job requeueable, slurmctld
//! reachable — because a requeue that fails at the end of the time limit loses the job.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::env_vars::{self, Environment};
use crate::error::Diagnostic;
use crate::exit_status::ExitStatus;

/// How long one `scontrol` call may take: its own retries to an unreachable slurmctld last about
/// MessageTimeout (10 s by default) several times over.
pub(crate) const SCONTROL_TIMEOUT: Duration = Duration::from_secs(45);

#[derive(Debug, thiserror::Error)]
pub enum RequeueError {
    #[error("--requeue_signal `{given}` is not a signal name or number")]
    BadSignal { given: String },
    #[error("--requeue_signal {name} cannot be the requeue warning: {why}")]
    UnfitSignal {
        name: &'static str,
        why: &'static str,
    },
    #[error("--slurm_requeue needs a SLURM job: SLURM_JOB_ID is not set")]
    NotInJob,
    #[error("--slurm_requeue: `scontrol` was not found on PATH")]
    NoScontrol,
    #[error("--slurm_requeue: job {job} is not requeueable (scontrol show job: Requeue=0)")]
    NotRequeueable { job: String },
    #[error("--slurm_requeue: `scontrol {action} {job}` failed: {message}")]
    Scontrol {
        action: &'static str,
        job: String,
        message: String,
    },
}

impl Diagnostic for RequeueError {
    fn hints(&self) -> Vec<String> {
        match self {
            RequeueError::BadSignal { .. } => {
                vec!["e.g. --requeue_signal USR1 (SLURM's sbatch --signal=USR1@300)".into()]
            }
            RequeueError::UnfitSignal { .. } => vec![
                "use USR1 or USR2, and the same in sbatch --signal=USR1@SECONDS (without B:, so that it reaches the step)".into(),
            ],
            RequeueError::NotInJob => vec![
                "run accel-launch inside sbatch/srun, or drop --slurm_requeue (ACCEL_LAUNCH_SLURM_REQUEUE)".into(),
            ],
            RequeueError::NoScontrol => vec![
                "scontrol comes with SLURM's client tools (Debian: slurm-client); put it on PATH on every node".into(),
            ],
            RequeueError::NotRequeueable { .. } => vec![
                "submit with `sbatch --requeue` (or #SBATCH --requeue); the cluster's JobRequeue=0 makes it the default".into(),
            ],
            RequeueError::Scontrol { action: "requeue", job, .. } => vec![format!(
                "the job was not requeued; the ranks were given the grace period to save. Requeue it by hand: scontrol requeue {job}"
            )],
            RequeueError::Scontrol { .. } => vec![
                "slurmctld must be reachable from the nodes (scontrol ping); nothing was started".into(),
            ],
        }
    }
    fn exit_status(&self) -> ExitStatus {
        match self {
            RequeueError::BadSignal { .. }
            | RequeueError::UnfitSignal { .. }
            | RequeueError::NotInJob => ExitStatus::Usage,
            _ => ExitStatus::LauncherFailed,
        }
    }
}

/// `USR1`, `SIGUSR1`, `usr1` or `10`. Signals that stop the run (SLURM's own SIGTERM at the time limit
/// and on scancel), that cannot be caught, or that are job control cannot be the warning.
pub fn parse_signal(s: &str) -> Result<i32, RequeueError> {
    let t = s.trim();
    let sig = match t.parse::<i32>() {
        Ok(n) => Signal::try_from(n).ok(),
        Err(_) => {
            let up = t.to_ascii_uppercase();
            let name = if up.starts_with("SIG") {
                up
            } else {
                format!("SIG{up}")
            };
            Signal::from_str(&name).ok()
        }
    }
    .ok_or_else(|| RequeueError::BadSignal { given: s.into() })?;
    let why = match sig {
        Signal::SIGKILL | Signal::SIGSTOP => Some("it cannot be caught"),
        Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP | Signal::SIGQUIT => {
            Some("it stops the run (SLURM sends SIGTERM at the time limit and on scancel)")
        }
        Signal::SIGCHLD
        | Signal::SIGTSTP
        | Signal::SIGCONT
        | Signal::SIGTTIN
        | Signal::SIGTTOU
        | Signal::SIGSEGV
        | Signal::SIGBUS
        | Signal::SIGFPE
        | Signal::SIGILL
        | Signal::SIGPIPE => Some("the launcher needs it for itself"),
        _ => None,
    };
    match why {
        Some(why) => Err(RequeueError::UnfitSignal {
            name: sig.as_str(),
            why,
        }),
        None => Ok(sig as i32),
    }
}

/// The requeue of this job: where `scontrol` is and which job.
#[derive(Debug, Clone)]
pub struct Requeue {
    pub signal: i32,
    pub job: String,
    scontrol: PathBuf,
    /// This launcher is the one that asks for the requeue (node 0, or the only node).
    pub requeuer: bool,
}

impl Requeue {
    /// Checks what can be checked before the run: in a job, `scontrol` on PATH, and on the requeuer
    /// also that slurmctld answers and the job is requeueable.
    pub fn prepare(
        env: &Environment,
        signal: i32,
        requeuer: bool,
    ) -> Result<Requeue, RequeueError> {
        let job = env
            .non_empty(env_vars::SLURM_JOB_ID)
            .ok_or(RequeueError::NotInJob)?
            .to_string();
        let scontrol = env
            .get(env_vars::PATH)
            .and_then(|p| which::which_in("scontrol", Some(p), "/").ok())
            .ok_or(RequeueError::NoScontrol)?;
        let r = Requeue {
            signal,
            job,
            scontrol,
            requeuer,
        };
        if requeuer {
            let out = r.scontrol("show job", &["show", "job", "--oneliner", &r.job])?;
            if !requeueable(&out) {
                return Err(RequeueError::NotRequeueable { job: r.job.clone() });
            }
        }
        Ok(r)
    }

    /// `scontrol requeue JOB`: slurmctld ends the job's steps (this launcher too) and queues it again.
    pub fn request(&self) -> Result<(), RequeueError> {
        self.scontrol("requeue", &["requeue", &self.job])
            .map(|_| ())
    }

    fn scontrol(&self, action: &'static str, args: &[&str]) -> Result<String, RequeueError> {
        run_bounded(&self.scontrol, args, SCONTROL_TIMEOUT).map_err(|message| {
            RequeueError::Scontrol {
                action,
                job: self.job.clone(),
                message,
            }
        })
    }
}

/// `Requeue=1` in `scontrol show job --oneliner`.
fn requeueable(show: &str) -> bool {
    show.split_whitespace().any(|kv| kv == "Requeue=1")
}

/// Runs a command with a time limit; its stdout, or its stderr's last line (or the reason) as the error.
pub(crate) fn run_bounded(
    program: &Path,
    args: &[&str],
    limit: Duration,
) -> Result<String, String> {
    let mut cmd = Command::new(program);
    // SAFETY: only async-signal-safe calls (signal(2)) between fork and exec.
    unsafe {
        // The step's SIGTERM (srun --kill-on-bad-exit once another node's launcher has exited, or
        // the requeue ending the job) must not cut the RPC short; it takes milliseconds, well
        // within the KillWait before SIGKILL. Ignored dispositions survive exec.
        cmd.pre_exec(|| {
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let mut child = cmd
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() >= limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within {} s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("cannot read its output: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string();
    Err(if last.is_empty() {
        format!("exit status {:?}", out.status.code())
    } else {
        last
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(parse_signal("USR1").unwrap(), libc::SIGUSR1);
        assert_eq!(parse_signal("sigusr2").unwrap(), libc::SIGUSR2);
        assert_eq!(parse_signal("10").unwrap(), 10);
        assert_eq!(parse_signal(" URG ").unwrap(), libc::SIGURG);
        assert!(matches!(
            parse_signal("USR3"),
            Err(RequeueError::BadSignal { .. })
        ));
        assert!(matches!(
            parse_signal("99"),
            Err(RequeueError::BadSignal { .. })
        ));
        for s in ["TERM", "INT", "KILL", "STOP", "CHLD", "CONT", "15"] {
            assert!(
                matches!(parse_signal(s), Err(RequeueError::UnfitSignal { .. })),
                "{s}"
            );
        }
    }

    #[test]
    fn requeue_flag_of_scontrol_show_job() {
        let line = "JobId=12 JobName=x UserId=root(0) Priority=1 Requeue=1 Restarts=0 BatchFlag=1";
        assert!(requeueable(line));
        assert!(!requeueable(&line.replace("Requeue=1", "Requeue=0")));
        assert!(!requeueable(""));
    }

    #[test]
    fn a_command_past_its_limit_is_killed_and_named() {
        let e = run_bounded(Path::new("sleep"), &["5"], Duration::from_millis(200)).unwrap_err();
        assert!(e.contains("no answer within"), "{e}");
        let e =
            run_bounded(Path::new("sh"), &["-c", "echo boom >&2; exit 3"], limit()).unwrap_err();
        assert_eq!(e, "boom");
        assert_eq!(
            run_bounded(Path::new("sh"), &["-c", "echo ok"], limit()).unwrap(),
            "ok\n"
        );
    }

    #[test]
    fn the_steps_sigterm_does_not_cut_scontrol_short() {
        // The child signals itself as the step daemon would, then finishes its work.
        let out = run_bounded(
            Path::new("sh"),
            &["-c", "kill -TERM $$; kill -INT $$; echo done"],
            limit(),
        );
        assert_eq!(out.unwrap(), "done\n");
    }

    fn limit() -> Duration {
        Duration::from_secs(10)
    }
}
