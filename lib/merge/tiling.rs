//! Proof that a tensor's chunks tile it exactly: every box inside the shape, no two boxes overlapping,
//! and their volumes adding up to the whole. Together these mean no element is missing or written twice,
//! which is checked for every tensor before the first output byte is written.

/// Why a set of boxes does not tile a shape.
#[derive(Debug, PartialEq, Eq)]
pub enum TilingError {
    Rank { chunk: usize },
    OutOfBounds { chunk: usize },
    Overlap { a: usize, b: usize },
    Gap { covered: u128, total: u128 },
}

impl std::fmt::Display for TilingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TilingError::Rank { chunk } => {
                write!(f, "chunk {chunk} has a different number of dims")
            }
            TilingError::OutOfBounds { chunk } => {
                write!(f, "chunk {chunk} reaches outside the tensor")
            }
            TilingError::Overlap { a, b } => write!(f, "chunks {a} and {b} overlap"),
            TilingError::Gap { covered, total } => {
                write!(f, "the chunks cover {covered} of {total} elements")
            }
        }
    }
}

fn volume(sizes: &[u64]) -> u128 {
    sizes.iter().map(|&s| u128::from(s)).product()
}

/// Checks that `boxes` (offsets, sizes) tile `shape` exactly.
pub fn verify(shape: &[u64], boxes: &[(&[u64], &[u64])]) -> Result<(), TilingError> {
    let mut covered: u128 = 0;
    for (i, (o, s)) in boxes.iter().enumerate() {
        if o.len() != shape.len() || s.len() != shape.len() {
            return Err(TilingError::Rank { chunk: i });
        }
        for d in 0..shape.len() {
            if o[d].checked_add(s[d]).is_none_or(|e| e > shape[d]) {
                return Err(TilingError::OutOfBounds { chunk: i });
            }
        }
        covered += volume(s);
    }
    // Sweep along dim 0: only boxes whose dim-0 ranges intersect can overlap. Empty boxes cover nothing.
    let mut order: Vec<usize> = (0..boxes.len())
        .filter(|&i| volume(boxes[i].1) > 0)
        .collect();
    if !shape.is_empty() {
        order.sort_by_key(|&i| boxes[i].0[0]);
    }
    let mut active: Vec<usize> = Vec::new();
    for &i in &order {
        let (oi, si) = boxes[i];
        if !shape.is_empty() {
            active.retain(|&j| boxes[j].0[0] + boxes[j].1[0] > oi[0]);
        }
        for &j in &active {
            let (oj, sj) = boxes[j];
            let disjoint =
                (0..shape.len()).any(|d| oi[d] + si[d] <= oj[d] || oj[d] + sj[d] <= oi[d]);
            if !disjoint {
                return Err(TilingError::Overlap {
                    a: j.min(i),
                    b: j.max(i),
                });
            }
        }
        active.push(i);
    }
    let total = volume(shape);
    if covered != total {
        return Err(TilingError::Gap { covered, total });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_tilings_pass() {
        let shape = [5, 4];
        assert_eq!(
            verify(&shape, &[(&[0, 0], &[3, 4]), (&[3, 0], &[2, 4])]),
            Ok(())
        );
        assert_eq!(
            verify(&[3, 5], &[(&[0, 3], &[3, 2]), (&[0, 0], &[3, 3])]),
            Ok(())
        );
        assert_eq!(
            verify(&[1, 4], &[(&[0, 0], &[1, 4]), (&[1, 0], &[0, 4])]),
            Ok(())
        );
        assert_eq!(verify(&[], &[(&[], &[])]), Ok(()));
        assert_eq!(verify(&[0, 5], &[]), Ok(()));
    }

    #[test]
    fn gaps_overlaps_and_escapes_fail() {
        assert!(matches!(
            verify(&[5, 4], &[(&[0, 0], &[3, 4])]),
            Err(TilingError::Gap { .. })
        ));
        assert!(matches!(
            verify(&[5, 4], &[(&[0, 0], &[3, 4]), (&[2, 0], &[3, 4])]),
            Err(TilingError::Overlap { .. })
        ));
        // Same volume, but one overlaps and leaves a hole: caught as an overlap.
        assert!(matches!(
            verify(&[2, 2], &[(&[0, 0], &[1, 2]), (&[0, 0], &[1, 2])]),
            Err(TilingError::Overlap { .. })
        ));
        assert!(matches!(
            verify(&[5, 4], &[(&[4, 0], &[2, 4])]),
            Err(TilingError::OutOfBounds { .. })
        ));
        assert!(matches!(
            verify(&[5], &[(&[0, 0], &[5, 1])]),
            Err(TilingError::Rank { .. })
        ));
        assert!(matches!(verify(&[], &[]), Err(TilingError::Gap { .. })));
    }
}
