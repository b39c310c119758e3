//! `--drain_lost_nodes`: under SLURM, node 0 drains each node lost (or replaced for its failing
//! ranks) during the run, so that neither this job's requeue nor the next job lands on it
//! (`scontrol update NodeName=H State=DRAIN Reason=...`). Draining is an operator's action: SLURM
//! allows it to root, SlurmUser and its administrators only, so a refusal is a note and the run
//! goes on; `--exclude_file` is the user's own way.

use std::path::PathBuf;

use crate::env_vars::{self, Environment};
use crate::launch::requeue::{run_bounded, SCONTROL_TIMEOUT};

/// How node 0 drains a host: `scontrol`, and the job named in the reason.
#[derive(Debug, Clone)]
pub struct Drain {
    scontrol: PathBuf,
    job: String,
}

impl Drain {
    /// The drain of this SLURM job: `Err` says why there is none (not in a job, no `scontrol`).
    pub fn for_job(env: &Environment) -> Result<Drain, String> {
        let job = env
            .non_empty(env_vars::SLURM_JOB_ID)
            .ok_or("not in a SLURM job (SLURM_JOB_ID is unset)")?
            .to_string();
        let scontrol = env
            .get(env_vars::PATH)
            .and_then(|p| which::which_in("scontrol", Some(p), "/").ok())
            .ok_or("`scontrol` was not found on PATH")?;
        Ok(Drain { scontrol, job })
    }

    /// Drains `host`, off the caller's thread (slurmctld may take seconds to answer), saying on
    /// stderr what came of it.
    pub fn start(&self, host: &str, why: &str) {
        let (d, host, why) = (self.clone(), host.to_string(), why.to_string());
        std::thread::spawn(move || {
            let reason = format!("accel-launch: lost in job {}: {why}", d.job);
            let args = [
                "update".to_string(),
                format!("NodeName={host}"),
                "State=DRAIN".to_string(),
                format!("Reason={reason}"),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            match run_bounded(&d.scontrol, &args, SCONTROL_TIMEOUT) {
                Ok(_) => eprintln!("accel-launch: note: node {host} drained (scontrol update NodeName={host} State=DRAIN)"),
                Err(e) => eprintln!(
                    "accel-launch: note: --drain_lost_nodes: node {host} was not drained ({e}); draining takes root, SlurmUser or a SLURM administrator: ask one to run `scontrol update NodeName={host} State=DRAIN Reason=\"...\"`, or submit with --exclude_file's hosts"
                ),
            }
        });
    }
}
