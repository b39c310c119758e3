//! Starting one rank, as torchrun starts a worker (`torch/distributed/elastic/multiprocessing/`): its
//! argv and variables with torchelastic's restart count and error file, its own session and process
//! group (a terminal's Ctrl-C reaches only the launcher, which forwards it once), `PR_SET_PDEATHSIG`,
//! its CPUs and OOM score, where its two streams go (the console, a pty, log files, a capturing
//! caller) and the guard that takes its group down if the launcher is SIGKILLed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::unistd::Pid;

use super::error::{spawn_error, SuperviseError};
use super::guard::{self, Strays};
use super::options::Options;
use super::output::{self, render_template, LogFiles, Sink, Terminal};
use super::processes::Running;
use crate::env_vars;
use crate::error::Result;
use crate::launch::plan::{Plan, RankSpec};
use crate::launch::torchrun::logs::{AttemptLogs, Route, RunLogs};

/// What starting the ranks needs, attempt after attempt.
pub(super) struct Spawner<'a> {
    opts: &'a Options,
    /// Where torchelastic error files go without `--log_dir`.
    pub(super) tmp_root: Option<PathBuf>,
    logs: Option<LogFiles>,
    /// torchrun's layout, in place of `logs`, and the current attempt's part of it.
    pub(super) torchrun_logs: Option<RunLogs>,
    attempt_logs: Option<AttemptLogs>,
    /// The run's processes outside the ranks' groups, for the guards.
    pub(super) strays: Option<Strays>,
    /// The launcher's terminal, which ranks writing to the console see as theirs.
    terminal: Terminal,
}

impl<'a> Spawner<'a> {
    /// Must be made before the first guard is forked (the guards inherit the strays' table).
    pub(super) fn new(
        opts: &'a Options,
        tmp_root: Option<PathBuf>,
        logs: Option<LogFiles>,
        torchrun_logs: Option<RunLogs>,
    ) -> Spawner<'a> {
        Spawner {
            opts,
            tmp_root,
            logs,
            torchrun_logs,
            attempt_logs: None,
            strays: Strays::new(),
            terminal: Terminal::new(opts.tool),
        }
    }

    /// A new attempt: torchrun's layout gets its directories.
    pub(super) fn begin(&mut self, plan: &Plan, attempt: u32) -> Result<()> {
        if let Some(t) = &self.torchrun_logs {
            let local: Vec<u32> = plan.ranks.iter().map(|r| r.local_rank).collect();
            self.attempt_logs = Some(t.attempt(attempt, &local)?);
        }
        Ok(())
    }

    /// Starts one rank in its own session, with its guard and the readers of its pipes.
    pub(super) fn spawn(&mut self, plan: &Plan, spec: &RankSpec, attempt: u32) -> Result<Running> {
        let Some(program) = spec.argv.first() else {
            return Err(SuperviseError::NotFound {
                program: String::new(),
            }
            .into());
        };
        let (mut cmd, error_file) = self.command(plan, spec, attempt);
        // Log files first: a rank that could not log is not started.
        let mut files = [None, None];
        if let Some(logs) = self.logs.as_mut() {
            for (file, stream) in files.iter_mut().zip(["stdout", "stderr"]) {
                let path = logs.path(spec.rank, spec.local_rank, attempt, stream);
                *file = Some(logs.create(&path)?);
            }
        }
        let (stdout, stderr) = self.sinks(plan, spec, attempt);
        let (mut sinks, mut dups) = (None, [None, None]);
        if let Some(a) = &self.attempt_logs {
            let routes = [
                a.route(spec.rank, spec.local_rank, false)?,
                a.route(spec.rank, spec.local_rank, true)?,
            ];
            sinks = Some(self.torchrun_sinks(plan, spec, attempt, &routes));
            for (i, r) in routes.into_iter().enumerate() {
                files[i] = r.file;
                dups[i] = r.duplicate;
            }
        }
        let (stdout, stderr) = sinks.unwrap_or((stdout, stderr));
        let mut masters = [None, None];
        for (stream, pty) in self
            .terminal
            .ptys([&stdout, &stderr])
            .into_iter()
            .enumerate()
        {
            if let Some(pty) = pty {
                match stream {
                    0 => cmd.stdout(pty.slave),
                    _ => cmd.stderr(pty.slave),
                };
                masters[stream] = Some(pty.master);
            }
        }
        let spawned = cmd.spawn();
        // The launcher's copies of the ptys' slaves close here: a master reads EOF once the rank's do.
        drop(cmd);
        let mut child = spawned.map_err(|e| spawn_error(program, e))?;
        let pid = Pid::from_raw(child.id() as i32);
        let guard = guard::spawn_guard(pid, self.opts.grace, self.strays.as_ref());
        self.terminal.watch(&masters, pid);
        let (tail, readers) = output::relay(&mut child, [stdout, stderr], files, masters, dups);
        Ok(Running {
            rank: spec.rank,
            local_rank: spec.local_rank,
            child,
            pgid: pid,
            guard,
            status: None,
            ended_at: None,
            stopped: false,
            tail,
            readers,
            error_file,
        })
    }

    /// A rank's command: its argv and variables, torchelastic's restart count and error file, pipes
    /// for its output (a stream that gets a pty is given it in [`Spawner::spawn`]), and its own session.
    fn command(&self, plan: &Plan, spec: &RankSpec, attempt: u32) -> (Command, Option<PathBuf>) {
        let mut cmd = Command::new(&spec.argv[0]);
        cmd.args(&spec.argv[1..]);
        cmd.envs(&spec.env);
        for var in &plan.withheld {
            cmd.env_remove(var);
        }
        let torchrun_error_file = self
            .attempt_logs
            .as_ref()
            .map(|a| a.error_file(spec.local_rank));
        let error_file = plan.topology.as_ref().map(|_| {
            if let Some(f) = &torchrun_error_file {
                return f.clone();
            }
            let root = self
                .opts
                .log_dir
                .as_deref()
                .or(self.tmp_root.as_deref())
                .unwrap_or(Path::new("."));
            let root = match (&self.opts.log_dir, plan.topology.as_ref()) {
                // Nodes may share --log_dir (NFS, Lustre): each writes under its own directory.
                (Some(_), Some(t)) if t.num_nodes > 1 => root.join(format!("node_{}", t.node_rank)),
                _ => root.to_path_buf(),
            };
            root.join(format!("attempt_{attempt}"))
                .join(spec.local_rank.to_string())
                .join("error.json")
        });
        if plan.topology.is_some() {
            cmd.env(env_vars::TORCHELASTIC_RESTART_COUNT, attempt.to_string());
            if let Some(ef) = &error_file {
                if let Some(dir) = ef.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = std::fs::remove_file(ef);
                cmd.env(env_vars::TORCHELASTIC_ERROR_FILE, ef);
            }
        }
        cmd.stdin(Stdio::inherit())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let parent = nix::unistd::getpid().as_raw();
        // Formatted here: between fork and exec nothing may allocate.
        let oom_score_adj = self.opts.oom_score_adj.map(|a| a.to_string().into_bytes());
        // --numa_binding: the CPUs set before exec, as torch's `numactl --physcpubind` does.
        let cpus = spec.numa_cpus.as_ref().map(|c| c.to_cpu_set());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Its own session and group, as torchrun's workers: the terminal's signals reach only
                // the launcher, and a rank reading stdin is not stopped as a background job.
                libc::setsid();
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGTERM as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                if libc::getppid() != parent {
                    libc::_exit(128 + libc::SIGTERM);
                }
                // Under kernel.yama.ptrace_scope=1 only the launcher and its children (py-spy, for
                // --hang_timeout's stacks) may read the rank; a kernel without Yama says EINVAL.
                libc::prctl(libc::PR_SET_PTRACER, parent as libc::c_ulong, 0, 0, 0);
                if let Some(adj) = &oom_score_adj {
                    let fd = libc::open(
                        c"/proc/self/oom_score_adj".as_ptr(),
                        libc::O_WRONLY | libc::O_CLOEXEC,
                    );
                    if fd >= 0 {
                        libc::write(fd, adj.as_ptr().cast(), adj.len());
                        libc::close(fd);
                    }
                }
                if let Some(set) = &cpus {
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        (cmd, error_file)
    }

    /// Where a rank's stdout and stderr go: the capturing caller takes stdout; the console gets what
    /// the local-rank filter lets through, prefixed as asked.
    fn sinks(&self, plan: &Plan, spec: &RankSpec, attempt: u32) -> (Sink, Sink) {
        let opts = self.opts;
        let show = opts
            .console
            .local_ranks
            .as_ref()
            .is_none_or(|l| l.contains(&spec.local_rank));
        let node = plan.topology.as_ref().map_or(0, |t| t.node_rank);
        let role = plan
            .topology
            .as_ref()
            .map_or("default", |t| t.role.as_str());
        let prefix = opts.console.prefix.as_ref().map(|p| {
            render_template(
                p,
                spec.rank,
                spec.local_rank,
                node,
                attempt,
                &[("role", role)],
            )
        });
        let console = |is_err| {
            if show {
                Sink::Console {
                    is_err,
                    prefix: prefix.clone(),
                }
            } else {
                Sink::Nowhere
            }
        };
        let stdout = match &opts.capture {
            Some(c) => Sink::Capture(spec.rank, c.sink.clone()),
            None => console(false),
        };
        (stdout, console(true))
    }

    /// torchrun's console rules for a rank's two streams; accel's `--rank_prefix`, when given, heads
    /// every line shown.
    fn torchrun_sinks(
        &self,
        plan: &Plan,
        spec: &RankSpec,
        attempt: u32,
        routes: &[Route; 2],
    ) -> (Sink, Sink) {
        let (own, _) = self.sinks(plan, spec, attempt);
        let own_prefix = match own {
            Sink::Console { prefix, .. } => prefix,
            _ => None,
        };
        let sink = |r: &Route, is_err: bool| match &r.console {
            None => Sink::Nowhere,
            Some(header) => Sink::Console {
                is_err,
                prefix: own_prefix.clone().or_else(|| header.clone()),
            },
        };
        let stdout = match &self.opts.capture {
            Some(c) => Sink::Capture(spec.rank, c.sink.clone()),
            None => sink(&routes[0], false),
        };
        (stdout, sink(&routes[1], true))
    }
}
