//! torchrun's node and rank counts (torch 2.13's `torch/distributed/run.py`): `--nnodes N|MIN:MAX`
//! and `--nproc_per_node N|auto|cpu|gpu`, as the values the run's resolution and the join take.

/// `--nnodes`: torchrun's `parse_min_max_nnodes`, with its `0 < MIN <= MAX` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nnodes {
    pub min: u32,
    pub max: u32,
}

impl Nnodes {
    /// A range torchrun would treat elastically (nodes may join up to MAX).
    pub fn is_range(&self) -> bool {
        self.min != self.max
    }
}

impl std::fmt::Display for Nnodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_range() {
            write!(f, "{}:{}", self.min, self.max)
        } else {
            write!(f, "{}", self.max)
        }
    }
}

impl std::str::FromStr for Nnodes {
    type Err = String;

    fn from_str(s: &str) -> Result<Nnodes, String> {
        let num = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{v}` is not a node count (N or MIN:MAX)"))
        };
        let (min, max) = match s.split(':').collect::<Vec<_>>()[..] {
            [n] => (num(n)?, num(n)?),
            [a, b] => (num(a)?, num(b)?),
            _ => return Err(format!("`{s}` is not in N or MIN:MAX form")),
        };
        if min == 0 || min > max {
            return Err(format!(
                "`{s}`: torchrun needs 0 < MIN <= MAX (got MIN={min}, MAX={max})"
            ));
        }
        Ok(Nnodes { min, max })
    }
}

/// `--nproc_per_node`: torchrun's `determine_local_world_size` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NprocPerNode {
    Count(u32),
    Auto,
    Cpu,
    Gpu,
}

impl std::fmt::Display for NprocPerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NprocPerNode::Count(n) => write!(f, "{n}"),
            NprocPerNode::Auto => write!(f, "auto"),
            NprocPerNode::Cpu => write!(f, "cpu"),
            NprocPerNode::Gpu => write!(f, "gpu"),
        }
    }
}

impl std::str::FromStr for NprocPerNode {
    type Err = String;

    fn from_str(s: &str) -> Result<NprocPerNode, String> {
        match s {
            "auto" => Ok(NprocPerNode::Auto),
            "cpu" => Ok(NprocPerNode::Cpu),
            "gpu" => Ok(NprocPerNode::Gpu),
            "xpu" => Err("`xpu`: accel-launch counts NVIDIA GPUs only (use a number)".into()),
            _ => match s.trim().parse::<u32>() {
                Ok(0) => Err("0 ranks: at least 1 is needed".into()),
                Ok(n) => Ok(NprocPerNode::Count(n)),
                Err(_) => Err(format!(
                    "`{s}` is not a rank count: a number, auto, cpu or gpu"
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    #[test]
    fn nnodes_as_torchrun_parses_it() {
        assert_eq!(Nnodes::from_str("2"), Ok(Nnodes { min: 2, max: 2 }));
        assert_eq!(Nnodes::from_str("1:4"), Ok(Nnodes { min: 1, max: 4 }));
        assert!(!Nnodes::from_str("3:3").unwrap().is_range());
        for bad in ["0", "4:1", "x", "1:2:3", "", "-1"] {
            assert!(Nnodes::from_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn nproc_values() {
        assert_eq!(NprocPerNode::from_str("8"), Ok(NprocPerNode::Count(8)));
        assert_eq!(NprocPerNode::from_str("auto"), Ok(NprocPerNode::Auto));
        assert_eq!(NprocPerNode::from_str("gpu"), Ok(NprocPerNode::Gpu));
        assert_eq!(NprocPerNode::from_str("cpu"), Ok(NprocPerNode::Cpu));
        assert!(NprocPerNode::from_str("0").is_err());
        assert!(NprocPerNode::from_str("xpu")
            .unwrap_err()
            .contains("NVIDIA"));
        assert!(NprocPerNode::from_str("two").is_err());
    }
}
