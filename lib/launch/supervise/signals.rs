//! The launcher's signals and what each means: which are handed on to the ranks and which stop the
//! run ([`SignalSet`], torchrun's `--signals-to-handle`), their delivery to the supervisor as events
//! ([`Signals`], caught before the run by a launcher that joins other nodes first). What a signal
//! means while ranks run is the attempt's decision ([`super::attempt`]); while none runs, the
//! attempts loop's ([`super::stopped_between_attempts`]).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};

use signal_hook::iterator::exfiltrator::WithOrigin;

use super::error::SuperviseError;
use crate::env_vars::{self, Environment};
use crate::error::Result;

/// Signals forwarded to every rank's group.
pub const FORWARDED: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Of the forwarded signals, those that also stop the run (torchrun's `SignalException` set).
pub const STOPPING: &[i32] = &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Which signals the launcher hands on to the ranks and which of them stop the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalSet {
    /// Sent on to every rank's group.
    pub forwarded: Vec<i32>,
    /// Stop the run: the signal itself to the ranks when it is forwarded, else SIGTERM; the grace
    /// period; SIGKILL.
    pub stopping: Vec<i32>,
}

impl Default for SignalSet {
    fn default() -> Self {
        SignalSet {
            forwarded: FORWARDED.to_vec(),
            stopping: STOPPING.to_vec(),
        }
    }
}

impl SignalSet {
    /// torchrun's `--signals-to-handle`: each named signal is forwarded and stops the run, as its
    /// agent's `SignalException` does (`elastic/agent/server/api.py::run`). The stop signals it does
    /// not name still stop the run, with SIGTERM to the ranks (torchrun would die of them and leave
    /// its workers running).
    pub fn handle_only(named: &[i32]) -> SignalSet {
        let mut stopping = named.to_vec();
        stopping.extend(STOPPING.iter().filter(|s| !named.contains(s)));
        SignalSet {
            forwarded: named.to_vec(),
            stopping,
        }
    }
    /// Every signal the launcher catches: these, and the default forwarded ones (caught so that a
    /// signal not handed on does not end the launcher).
    pub fn caught(&self) -> Vec<i32> {
        let mut all = self.forwarded.clone();
        for s in self.stopping.iter().chain(FORWARDED) {
            if !all.contains(s) {
                all.push(*s);
            }
        }
        all
    }
    pub fn forwards(&self, sig: i32) -> bool {
        self.forwarded.contains(&sig)
    }
    pub fn stops(&self, sig: i32) -> bool {
        self.stopping.contains(&sig)
    }
    /// What the ranks get when `sig` stops the run.
    pub fn stop_signal(&self, sig: i32) -> i32 {
        if self.forwards(sig) {
            sig
        } else {
            libc::SIGTERM
        }
    }
}

/// Job control: SIGTSTP stops the ranks (as SIGSTOP) and then the launcher, SIGCONT resumes them, as
/// if they were in the terminal's group (torchrun's workers share it).
pub const JOB_CONTROL: &[i32] = &[libc::SIGTSTP, libc::SIGCONT];

pub(super) enum Event {
    /// A signal to the launcher; `delivered`: its sender also signals every process of the run (the
    /// SLURM step daemon, for `scancel --signal`, `srun --signal` and its own SIGTERM), so the ranks
    /// already have it and forwarding it would deliver it twice.
    Signal { sig: i32, delivered: bool },
}

/// The launcher's signals, as [`Event`]s on a channel: installed by [`run`](super::run), or before
/// it by a launcher that must act on them while it joins the other nodes ([`Options::signals`]).
/// Dropping it stops the delivery.
pub struct Signals {
    pub(super) rx: Mutex<Receiver<Event>>,
    handle: signal_hook::iterator::Handle,
    /// The first stopping signal received (0: none yet), for the spawning loop: the monitor that
    /// handles the signal runs only once every rank is started.
    pub(super) stopping: Arc<AtomicI32>,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals").finish()
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
    }
}

impl Signals {
    /// Catches the set's signals (the forwarded and stopping ones), the job-control signals,
    /// SIGCHLD and the requeue warning.
    pub fn install(
        set: &SignalSet,
        requeue_signal: Option<i32>,
        env: &Environment,
    ) -> Result<Signals> {
        let (tx, rx) = mpsc::channel();
        let stops = set.stopping.clone();
        let mut sigs = set.caught();
        sigs.extend_from_slice(JOB_CONTROL);
        sigs.push(libc::SIGCHLD);
        if let Some(s) = requeue_signal.filter(|s| !sigs.contains(s)) {
            sigs.push(s);
        }
        let mut signals =
            signal_hook::iterator::SignalsInfo::<WithOrigin>::new(&sigs).map_err(|e| {
                SuperviseError::Launcher {
                    what: "install signal handlers".into(),
                    source: e,
                }
            })?;
        let handle = signals.handle();
        // In a SLURM step the launcher's parent is slurmstepd, which signals every process of the
        // step (proctrack walks the ranks too): what it sends, the ranks already received.
        let in_step = env.non_empty(env_vars::SLURM_STEP_ID).is_some();
        let parent = nix::unistd::getppid().as_raw();
        let stopping = Arc::new(AtomicI32::new(0));
        let stopping_ = Arc::clone(&stopping);
        std::thread::spawn(move || {
            for info in signals.forever() {
                if stops.contains(&info.signal) {
                    let _ = stopping_.compare_exchange(
                        0,
                        info.signal,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                let delivered = in_step && info.process.is_some_and(|p| p.pid == parent);
                if tx
                    .send(Event::Signal {
                        sig: info.signal,
                        delivered,
                    })
                    .is_err()
                {
                    break;
                }
            }
        });
        Ok(Signals {
            rx: Mutex::new(rx),
            handle,
            stopping,
        })
    }

    /// The next signal received, if any (SIGCHLD left out). Does not block.
    pub fn next(&self) -> Option<i32> {
        let rx = self.rx.lock().ok()?;
        loop {
            match rx.try_recv() {
                Ok(Event::Signal { sig, .. }) if sig == libc::SIGCHLD => {}
                Ok(Event::Signal { sig, .. }) => return Some(sig),
                Err(_) => return None,
            }
        }
    }
}
