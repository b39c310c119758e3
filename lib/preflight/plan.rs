//! Which collectives accel-test runs, on which tensors, and what every rank must get back. The input of
//! rank `r` at element `i` is a small integer, so every expected result (sums included) is exact in
//! every dtype checked, and a wrong byte anywhere shows up as a wrong element.

use serde::{Deserialize, Serialize};

/// Element types the checks use, by their torch names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Float32,
    Float64,
    Int32,
    Int64,
    BFloat16,
    Float16,
}

impl DType {
    pub fn name(self) -> &'static str {
        match self {
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::BFloat16 => "bfloat16",
            DType::Float16 => "float16",
        }
    }
    pub fn size(self) -> usize {
        match self {
            DType::Float64 | DType::Int64 => 8,
            DType::Float32 | DType::Int32 => 4,
            DType::BFloat16 | DType::Float16 => 2,
        }
    }
    pub fn is_float(self) -> bool {
        !matches!(self, DType::Int32 | DType::Int64)
    }
    /// Half types hold integers exactly only up to 256 (bf16) / 2048 (f16).
    fn narrow(self) -> bool {
        matches!(self, DType::BFloat16 | DType::Float16)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reduce {
    Sum,
    Max,
    Min,
    Avg,
}

impl Reduce {
    pub fn name(self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Max => "max",
            Reduce::Min => "min",
            Reduce::Avg => "avg",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    AllReduce(Reduce),
    /// Reduce (sum) to the root.
    Reduce {
        root: usize,
    },
    AllGather,
    /// Gather to the root.
    Gather {
        root: usize,
    },
    Broadcast {
        root: usize,
    },
    Barrier,
}

/// One check: a collective on one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    pub collective: Collective,
    pub dtype: DType,
    pub numel: usize,
}

impl Check {
    /// The name printed on its PASS/FAIL line, e.g. `all_reduce.sum float32[1009]`.
    pub fn name(&self) -> String {
        let op = match self.collective {
            Collective::AllReduce(r) => format!("all_reduce.{}", r.name()),
            Collective::Reduce { root } => format!("reduce.sum->{root}"),
            Collective::AllGather => "all_gather".into(),
            Collective::Gather { root } => format!("gather->{root}"),
            Collective::Broadcast { root } => format!("broadcast<-{root}"),
            Collective::Barrier => return "barrier".into(),
        };
        format!("{op} {}[{}]", self.dtype.name(), self.numel)
    }
}

/// What rank `rank` puts at element `i`.
pub fn input_value(dtype: DType, rank: usize, i: usize) -> f64 {
    if dtype.narrow() {
        ((rank + i) % 4) as f64
    } else {
        ((rank + 1) * (i % 7 + 1)) as f64
    }
}

/// The input of one rank, as f64s (converted to the dtype by the caller).
pub fn input(dtype: DType, rank: usize, numel: usize) -> Vec<f64> {
    (0..numel).map(|i| input_value(dtype, rank, i)).collect()
}

/// The result every rank must hold after reducing all ranks' inputs with `op`.
pub fn reduced(dtype: DType, op: Reduce, world: usize, numel: usize) -> Vec<f64> {
    (0..numel)
        .map(|i| {
            let vals = (0..world).map(|r| input_value(dtype, r, i));
            match op {
                Reduce::Sum => vals.sum(),
                Reduce::Max => vals.fold(f64::MIN, f64::max),
                Reduce::Min => vals.fold(f64::MAX, f64::min),
                Reduce::Avg => vals.sum::<f64>() / world as f64,
            }
        })
        .collect()
}

/// An element count that the world size does not divide, so uneven splits inside the backend are
/// exercised.
pub fn odd_size(world: usize) -> usize {
    [1009, 1013, 1019]
        .into_iter()
        .find(|n| world == 0 || n % world != 0)
        .unwrap_or(1021)
}

/// Every check, in the order all ranks run them.
pub fn plan(world: usize) -> Vec<Check> {
    let n = odd_size(world);
    let big = 262_144; // 1 MiB of float32
    let last = world.saturating_sub(1);
    let mut dtypes = vec![DType::Float32, DType::Float64, DType::Int32, DType::Int64];
    // Sums of up to 3 per rank must stay exact in the half types.
    if 3 * world <= 256 {
        dtypes.extend([DType::BFloat16, DType::Float16]);
    }
    let c = |collective, dtype, numel| Check {
        collective,
        dtype,
        numel,
    };
    let mut checks = Vec::new();
    for op in [Reduce::Sum, Reduce::Max, Reduce::Min] {
        for &d in &dtypes {
            checks.push(c(Collective::AllReduce(op), d, n));
        }
    }
    checks.push(c(Collective::AllReduce(Reduce::Sum), DType::Float32, 1));
    checks.push(c(Collective::AllReduce(Reduce::Sum), DType::Float32, big));
    for d in [DType::Float32, DType::Float64] {
        checks.push(c(Collective::AllReduce(Reduce::Avg), d, n));
    }
    for d in [DType::Float32, DType::Int64] {
        checks.push(c(Collective::Reduce { root: 0 }, d, n));
    }
    for (d, numel) in [
        (DType::Float32, n),
        (DType::Int32, 1),
        (DType::Float64, big / 2),
    ] {
        checks.push(c(Collective::AllGather, d, numel));
    }
    for d in [DType::Float32, DType::Int64] {
        checks.push(c(Collective::Gather { root: 0 }, d, n));
    }
    checks.push(c(Collective::Broadcast { root: 0 }, DType::Float32, n));
    checks.push(c(Collective::Broadcast { root: 0 }, DType::Int64, 1));
    checks.push(c(Collective::Broadcast { root: last }, DType::Float32, big));
    checks.push(c(Collective::Barrier, DType::Float32, 0));
    checks
}

/// Checks whose name starts with one of `only` (all when `only` is empty).
pub fn select(checks: Vec<Check>, only: &[String]) -> Vec<Check> {
    if only.is_empty() {
        return checks;
    }
    checks
        .into_iter()
        .filter(|c| {
            let name = c.name();
            only.iter().any(|o| name.starts_with(o.as_str()))
        })
        .collect()
}

/// The first element where `got` differs from `want`, as `(index, want, got)`. Averages are compared
/// with a relative tolerance (a division rounds); everything else must be exact.
pub fn first_mismatch(want: &[f64], got: &[f64], exact: bool) -> Option<(usize, f64, f64)> {
    if want.len() != got.len() {
        return Some((
            want.len().min(got.len()),
            want.len() as f64,
            got.len() as f64,
        ));
    }
    want.iter()
        .zip(got)
        .enumerate()
        .find(|(_, (w, g))| {
            if exact {
                w != g
            } else {
                (*w - *g).abs() > 1e-2 * w.abs().max(1.0)
            }
        })
        .map(|(i, (w, g))| (i, *w, *g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_values() {
        // rank r, element 0: r + 1; element 1: 2(r + 1).
        assert_eq!(reduced(DType::Float32, Reduce::Sum, 3, 2), vec![6.0, 12.0]);
        assert_eq!(reduced(DType::Int64, Reduce::Max, 3, 2), vec![3.0, 6.0]);
        assert_eq!(reduced(DType::Int64, Reduce::Min, 3, 2), vec![1.0, 2.0]);
        assert_eq!(reduced(DType::Float64, Reduce::Avg, 2, 1), vec![1.5]);
        assert_eq!(
            reduced(DType::BFloat16, Reduce::Sum, 2, 4),
            vec![1.0, 3.0, 5.0, 3.0]
        );
    }

    #[test]
    fn plan_covers_every_collective_and_an_uneven_size() {
        for world in [1, 2, 3, 4, 1009] {
            let checks = plan(world);
            let names: Vec<String> = checks.iter().map(Check::name).collect();
            for prefix in [
                "all_reduce.sum",
                "all_reduce.max",
                "all_reduce.min",
                "all_reduce.avg",
                "reduce.sum->0",
                "all_gather",
                "gather->0",
                "broadcast<-0",
                "barrier",
            ] {
                assert!(
                    names.iter().any(|n| n.starts_with(prefix)),
                    "{prefix} {world}"
                );
            }
            if world > 1 {
                assert!(checks.iter().any(|c| c.numel > 1 && c.numel % world != 0));
            }
            let mut unique = names.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "names must be unique");
        }
        assert!(plan(200).iter().all(|c| c.dtype != DType::BFloat16));
    }

    #[test]
    fn mismatch_reports_first_wrong_element() {
        assert_eq!(first_mismatch(&[1.0, 2.0], &[1.0, 2.0], true), None);
        assert_eq!(
            first_mismatch(&[1.0, 2.0], &[1.0, 3.0], true),
            Some((1, 2.0, 3.0))
        );
        assert_eq!(first_mismatch(&[1.5], &[1.5000001], false), None);
        assert_eq!(select(plan(2), &["barrier".into()]).len(), 1);
    }
}
