//! SLURM's compressed host lists (`node[01-04,07],gpu-a[1-2]`) expanded in-process, so that `srun
//! accel-launch train.py` needs no `scontrol show hostnames` and no shell escaping; and the job topology
//! (nodes, this node's index, GPUs, tasks) read from a step's environment.

use crate::env_vars::{self, Environment};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("invalid SLURM host list `{list}`: {why}")]
    Invalid { list: String, why: String },
}

/// Expands a SLURM host list: comma-separated names, each with zero or more bracket groups of ranges
/// and single numbers (`a[1-3,5]b[01-02]`); zero padding follows the width of the range's start.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, HostlistError> {
    let err = |why: &str| HostlistError::Invalid {
        list: list.to_string(),
        why: why.to_string(),
    };
    let mut hosts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    let bytes = list.as_bytes();
    let mut items = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth = depth.checked_sub(1).ok_or_else(|| err("unbalanced `]`"))?,
            b',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(err("unbalanced `[`"));
    }
    items.push(&list[start..]);
    for item in items {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut partial = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    partial.iter_mut().for_each(|p| p.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let prefix = &rest[..open];
                    let close = rest[open..]
                        .find(']')
                        .map(|c| open + c)
                        .ok_or_else(|| err("unbalanced `[`"))?;
                    let inner = &rest[open + 1..close];
                    let mut suffixes = Vec::new();
                    for range in inner.split(',') {
                        let range = range.trim();
                        let (lo, hi) = match range.split_once('-') {
                            Some((lo, hi)) => (lo, hi),
                            None => (range, range),
                        };
                        let width = lo.len();
                        let parse = |s: &str| {
                            if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
                                Err(err(&format!("`{range}` is not a number or a range")))
                            } else {
                                s.parse::<u64>().map_err(|_| err("number too large"))
                            }
                        };
                        let (lo_n, hi_n) = (parse(lo)?, parse(hi)?);
                        if hi_n < lo_n {
                            return Err(err(&format!("range `{range}` goes backwards")));
                        }
                        if hi_n - lo_n > 1_000_000 {
                            return Err(err(&format!("range `{range}` is too large")));
                        }
                        for n in lo_n..=hi_n {
                            suffixes.push(format!("{n:0width$}"));
                        }
                    }
                    partial = partial
                        .iter()
                        .flat_map(|p| suffixes.iter().map(move |s| format!("{p}{prefix}{s}")))
                        .collect();
                    rest = &rest[close + 1..];
                }
            }
        }
        hosts.extend(partial);
    }
    if hosts.is_empty() {
        return Err(err("no hosts"));
    }
    Ok(hosts)
}

/// What a SLURM step says about the job, when run inside one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmJob {
    pub job_id: Option<u64>,
    pub nodes: Vec<String>,
    pub node_id: Option<u32>,
    pub nnodes: Option<u32>,
    pub gpus_on_node: Option<u32>,
    pub procid: Option<u32>,
    pub localid: Option<u32>,
    pub ntasks: Option<u32>,
    pub ntasks_per_node: Option<u32>,
    /// `SLURM_STEP_TASKS_PER_NODE` (srun steps only; a batch script has none) or else
    /// `SLURM_NTASKS_PER_NODE`, in SLURM's compressed form (`2(x3),1`).
    pub tasks_per_node: Option<String>,
    /// Set inside an srun step (`SLURM_STEP_ID`), not in the batch script itself.
    pub in_step: bool,
}

fn num<T: std::str::FromStr>(env: &Environment, name: &str) -> Option<T> {
    // SLURM_NTASKS_PER_NODE may read `4(x2)`; the leading count is what this node runs.
    let v = env.non_empty(name)?;
    let head: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
    head.parse().ok()
}

impl SlurmJob {
    /// The job this process runs in, if `SLURM_JOB_ID` (or a node list) is set.
    pub fn detect(env: &Environment) -> Result<Option<SlurmJob>, HostlistError> {
        let list = env
            .non_empty(env_vars::SLURM_JOB_NODELIST)
            .or_else(|| env.non_empty(env_vars::SLURM_NODELIST));
        let job_id = num(env, env_vars::SLURM_JOB_ID);
        if list.is_none() && job_id.is_none() {
            return Ok(None);
        }
        let nodes = match list {
            Some(l) => expand_hostlist(l)?,
            None => Vec::new(),
        };
        Ok(Some(SlurmJob {
            job_id,
            nodes,
            node_id: num(env, env_vars::SLURM_NODEID),
            nnodes: num(env, env_vars::SLURM_NNODES),
            gpus_on_node: num(env, env_vars::SLURM_GPUS_ON_NODE),
            procid: num(env, env_vars::SLURM_PROCID),
            localid: num(env, env_vars::SLURM_LOCALID),
            ntasks: num(env, env_vars::SLURM_NTASKS)
                .or_else(|| num(env, env_vars::SLURM_STEP_NUM_TASKS)),
            ntasks_per_node: num(env, env_vars::SLURM_NTASKS_PER_NODE),
            tasks_per_node: env
                .non_empty(env_vars::SLURM_STEP_TASKS_PER_NODE)
                .or_else(|| env.non_empty(env_vars::SLURM_NTASKS_PER_NODE))
                .map(str::to_string),
            in_step: env.non_empty(env_vars::SLURM_STEP_ID).is_some()
                || env.non_empty(env_vars::SLURM_STEP_TASKS_PER_NODE).is_some(),
        }))
    }

    /// Number of nodes: SLURM_NNODES, else the length of the node list.
    pub fn num_nodes(&self) -> u32 {
        self.nnodes.unwrap_or(self.nodes.len().max(1) as u32)
    }

    /// Tasks SLURM runs on this node, from the per-node list (`2(x3),1`: nodes 0–2 run 2, node 3 runs 1).
    pub fn tasks_on_this_node(&self) -> Option<u32> {
        let counts = expand_counts(self.tasks_per_node.as_deref()?)?;
        let node = self.node_id.unwrap_or(0) as usize;
        counts.get(node).or(counts.last()).copied()
    }

    /// The rendezvous port for a job that names none: stable for the job, different between jobs, and
    /// below the Linux ephemeral range (32768+) so it does not collide with outgoing connections. Ports
    /// go in steps of two: the next one is the job's control plane (`launch::control::control_port`),
    /// so jobs with consecutive ids sharing a node never take each other's.
    pub fn derived_port(&self) -> Option<u16> {
        self.job_id.map(|id| 15000 + 2 * (id % 8500) as u16)
    }
}

/// SLURM's compressed count list (`SLURM_TASKS_PER_NODE`, `SLURM_JOB_CPUS_PER_NODE`): `2(x3),1` is
/// `[2, 2, 2, 1]`. `None` when malformed.
pub fn expand_counts(list: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        let (count, times) = match item.split_once("(x") {
            Some((c, rest)) => (c, rest.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (item, 1),
        };
        let count: u32 = count.parse().ok()?;
        // A node list never has more entries than a job has nodes; bound it anyway.
        if out.len() + times > 1_000_000 {
            return None;
        }
        out.extend(std::iter::repeat_n(count, times));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(s: &str) -> Vec<String> {
        expand_hostlist(s).unwrap()
    }

    #[test]
    fn expands_ranges_groups_and_padding() {
        assert_eq!(ex("node1"), ["node1"]);
        assert_eq!(
            ex("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(
            ex("a[1-2],b3,c[09-11]"),
            ["a1", "a2", "b3", "c09", "c10", "c11"]
        );
        assert_eq!(ex("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(
            ex("gpu-[008-010].cluster"),
            ["gpu-008.cluster", "gpu-009.cluster", "gpu-010.cluster"]
        );
        assert_eq!(ex("n[7]"), ["n7"]);
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in [
            "node[1-",
            "node]1",
            "node[a-b]",
            "node[3-1]",
            "",
            "node[1-2",
        ] {
            assert!(expand_hostlist(bad).is_err(), "{bad}");
        }
        let e = expand_hostlist("n[3-1]").unwrap_err().to_string();
        assert!(e.contains("goes backwards") && e.contains("n[3-1]"), "{e}");
    }

    #[test]
    fn detects_job_and_port() {
        let env = Environment::from_pairs([
            ("SLURM_JOB_ID", "123456"),
            ("SLURM_JOB_NODELIST", "node[01-02]"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
        ]);
        let job = SlurmJob::detect(&env).unwrap().unwrap();
        assert_eq!(job.nodes, ["node01", "node02"]);
        assert_eq!(job.num_nodes(), 2);
        assert_eq!(job.node_id, Some(1));
        assert_eq!(job.ntasks_per_node, Some(4));
        // 15000 + 2 × (123456 mod 8500) = 23912: even, below the ephemeral range, and job 123457's port
        // is two higher, clear of this job's control plane at port + 1.
        assert_eq!(job.derived_port(), Some(23912));
        assert!(SlurmJob::detect(&Environment::default()).unwrap().is_none());
    }

    #[test]
    fn per_node_task_counts() {
        assert_eq!(expand_counts("2(x3),1"), Some(vec![2, 2, 2, 1]));
        assert_eq!(expand_counts("4"), Some(vec![4]));
        assert_eq!(expand_counts("2(x"), None);
        assert_eq!(expand_counts("a"), None);
        let env = |node: &'static str| {
            Environment::from_pairs([
                ("SLURM_JOB_ID", "7"),
                ("SLURM_JOB_NODELIST", "n[1-4]"),
                ("SLURM_NODEID", node),
                ("SLURM_NTASKS_PER_NODE", "2(x3),1"),
            ])
        };
        let on = |n| {
            SlurmJob::detect(&env(n))
                .unwrap()
                .unwrap()
                .tasks_on_this_node()
        };
        assert_eq!((on("0"), on("2"), on("3")), (Some(2), Some(2), Some(1)));
    }
}
