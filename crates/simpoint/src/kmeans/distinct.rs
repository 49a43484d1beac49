//! Identical rows found once, so that a pass assigns each distinct row once.

use std::borrow::Cow;

use crate::dataset::{Dataset, RowTable};

/// Identical rows of a point set, found once so that k-means assigns each distinct row once
/// (identical rows have identical distances, hence the same nearest centre).
#[derive(Clone, Debug)]
pub struct Distinct<'a> {
    /// Index of the first occurrence of each distinct row, ascending.
    pub first: Vec<u32>,
    /// For each row, the position of its distinct row in `first` (a deduplicated dataset's
    /// own index).
    pub slot: Cow<'a, [u32]>,
    /// Weight of each distinct row: the weights of its rows, summed in row order.
    pub weight: Vec<f64>,
    /// Number of rows of each distinct row.
    pub count: Vec<u32>,
}

impl<'a> Distinct<'a> {
    /// Groups bitwise-identical rows (open addressing over row hashes: small and temporary).
    pub fn new(points: &'a Dataset) -> Distinct<'a> {
        if let Some(ix) = &points.index {
            // Stored rows are distinct, numbered in order of first occurrence.
            let mut first = Vec::new();
            for (p, &s) in ix.iter().enumerate() {
                if s as usize == first.len() {
                    first.push(p as u32);
                }
            }
            let (weight, count) = totals(points, ix, first.len());
            return Distinct {
                first,
                slot: Cow::Borrowed(ix),
                weight,
                count,
            };
        }
        Distinct::hashed(points)
    }

    /// Groups identical rows by hashing them, whether or not `points` is deduplicated.
    pub fn hashed(points: &Dataset) -> Distinct<'static> {
        let n = points.rows();
        let mut table = RowTable::new(n);
        let mut first: Vec<u32> = Vec::new();
        let mut slot = Vec::with_capacity(n);
        for p in 0..n {
            let found = table.find_or_insert(points.row(p), first.len() as u32, |s| {
                points.row(first[s as usize] as usize)
            });
            slot.push(found.unwrap_or_else(|| {
                first.push(p as u32);
                first.len() as u32 - 1
            }));
        }
        first.shrink_to_fit();
        let (weight, count) = totals(points, &slot, first.len());
        Distinct {
            first,
            slot: Cow::Owned(slot),
            weight,
            count,
        }
    }
}

/// Weight (summed in row order) and row count of each of `distinct` distinct rows.
pub(super) fn totals(points: &Dataset, slot: &[u32], distinct: usize) -> (Vec<f64>, Vec<u32>) {
    let mut weight = vec![0.0; distinct];
    let mut count = vec![0u32; distinct];
    for (&s, &w) in slot.iter().zip(&points.weights) {
        weight[s as usize] += w;
        count[s as usize] += 1;
    }
    (weight, count)
}
