//! The similarity matrix: units (intervals, slices, launches) ordered by cluster, then by time,
//! averaged into at most [`MAX_BINS`] bins per side, each cell the similarity of two bins' mean
//! normalised vectors.
//!
//! Similarity is `1 - L1 / 2` of vectors normalised to sum 1 (1 = the same code in the same
//! proportions, 0 = no block in common), which for such vectors equals the sum over blocks of
//! the smaller share: computed that way it needs one pass over the second vector per pair.
//! Bins are built while the vectors stream past, so memory grows with bins, not units.

use std::collections::HashMap;

use rayon::prelude::*;

/// Largest side of the matrix, in cells.
pub const MAX_BINS: usize = 512;

/// A finished matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    /// Cells per side.
    pub bins: usize,
    /// Row-major similarities in [0, 1].
    pub cells: Vec<f32>,
    /// Per cluster in display order: (cluster, first position, end position) as fractions of
    /// the side.
    pub spans: Vec<(usize, f64, f64)>,
}

/// Builds a [`Matrix`] from vectors given in unit order.
pub struct MatrixBuilder {
    bin_of: Vec<u32>,
    members: Vec<u32>,
    sums: Vec<HashMap<u32, f64>>,
    spans: Vec<(usize, f64, f64)>,
    seen: usize,
}

impl MatrixBuilder {
    /// Prepares the bins for units with these cluster labels.
    pub fn new(labels: &[usize]) -> MatrixBuilder {
        let n = labels.len();
        let bins = n.min(MAX_BINS);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| (labels[i], i));
        let mut bin_of = vec![0u32; n];
        let mut members = vec![0u32; bins];
        for (pos, &i) in order.iter().enumerate() {
            let b = pos * bins / n.max(1);
            bin_of[i] = b as u32;
            members[b] += 1;
        }
        let mut spans: Vec<(usize, f64, f64)> = Vec::new();
        for (pos, &i) in order.iter().enumerate() {
            let (start, end) = (pos as f64 / n as f64, (pos + 1) as f64 / n as f64);
            match spans.last_mut() {
                Some(s) if s.0 == labels[i] => s.2 = end,
                _ => spans.push((labels[i], start, end)),
            }
        }
        MatrixBuilder {
            bin_of,
            members,
            sums: vec![HashMap::new(); bins],
            spans,
            seen: 0,
        }
    }

    /// Adds the next unit's vector (`(block, count)` pairs).
    pub fn add(&mut self, vector: impl Iterator<Item = (u32, f64)> + Clone) {
        let Some(&bin) = self.bin_of.get(self.seen) else {
            self.seen += 1;
            return;
        };
        self.seen += 1;
        let total: f64 = vector.clone().map(|(_, c)| c).sum();
        if total <= 0.0 {
            return;
        }
        let share = 1.0 / (total * f64::from(self.members[bin as usize]));
        let sums = &mut self.sums[bin as usize];
        for (id, c) in vector {
            *sums.entry(id).or_insert(0.0) += c * share;
        }
    }

    /// Units added so far.
    pub fn added(&self) -> usize {
        self.seen
    }

    /// Computes the cells.
    pub fn finish(self) -> Matrix {
        let bins = self.sums.len();
        let vectors: Vec<Vec<(u32, f32)>> = self
            .sums
            .into_iter()
            .map(|m| {
                let mut v: Vec<(u32, f32)> = m.into_iter().map(|(i, c)| (i, c as f32)).collect();
                v.sort_unstable_by_key(|&(i, _)| i);
                v
            })
            .collect();
        let width = vectors
            .iter()
            .flat_map(|v| v.last())
            .map(|&(i, _)| i as usize + 1)
            .max()
            .unwrap_or(0);
        let rows: Vec<Vec<f32>> = (0..bins)
            .into_par_iter()
            .map_init(
                || vec![0f32; width],
                |dense, a| {
                    for &(i, c) in &vectors[a] {
                        dense[i as usize] = c;
                    }
                    let row = (0..bins)
                        .map(|b| {
                            vectors[b]
                                .iter()
                                .map(|&(i, c)| c.min(dense[i as usize]))
                                .sum::<f32>()
                                .min(1.0)
                        })
                        .collect();
                    for &(i, _) in &vectors[a] {
                        dense[i as usize] = 0.0;
                    }
                    row
                },
            )
            .collect();
        Matrix {
            bins,
            cells: rows.concat(),
            spans: self.spans,
        }
    }
}

impl Matrix {
    /// The smallest similarity: the colour ramp spans it to 1, since real programs' intervals
    /// seldom share no code at all and a fixed 0-1 ramp would show them in one hue.
    pub fn floor(&self) -> f64 {
        let lo = self.cells.iter().copied().fold(1.0f32, f32::min);
        f64::from(lo).min(0.999)
    }
}

/// The matrix as an RGB PNG, one pixel per cell, coloured from [`Matrix::floor`] to 1.
pub fn png(m: &Matrix) -> Vec<u8> {
    let lo = m.floor();
    let mut rgb = Vec::with_capacity(m.cells.len() * 3);
    for &s in &m.cells {
        rgb.extend_from_slice(&ramp((f64::from(s) - lo) / (1.0 - lo)));
    }
    crate::draw::png_rgb(m.bins as u32, m.bins as u32, &rgb)
}

/// A dark-blue to yellow ramp (perceptually ordered, readable in grey).
pub fn ramp(x: f64) -> [u8; 3] {
    const STOPS: [[f64; 3]; 5] = [
        [68.0, 1.0, 84.0],
        [59.0, 82.0, 139.0],
        [33.0, 145.0, 140.0],
        [94.0, 201.0, 98.0],
        [253.0, 231.0, 37.0],
    ];
    let x = x.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let t = x - i as f64;
    let mut out = [0u8; 3];
    for (c, o) in out.iter_mut().enumerate() {
        *o = (STOPS[i][c] + t * (STOPS[i + 1][c] - STOPS[i][c])).round() as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(labels: &[usize], vectors: &[Vec<(u32, f64)>]) -> Matrix {
        let mut b = MatrixBuilder::new(labels);
        for v in vectors {
            b.add(v.iter().copied());
        }
        b.finish()
    }

    #[test]
    fn identical_code_is_one_and_disjoint_code_is_zero() {
        let m = build(
            &[0, 1, 0],
            &[
                vec![(0, 2.0), (1, 2.0)],
                vec![(5, 1.0)],
                vec![(0, 10.0), (1, 10.0)],
            ],
        );
        assert_eq!(m.bins, 3);
        // Order by cluster: units 0, 2 (cluster 0), then 1.
        assert_eq!(m.cells[0], 1.0);
        assert_eq!(m.cells[1], 1.0);
        assert_eq!(m.cells[2], 0.0);
        assert_eq!(m.cells[8], 1.0);
        assert_eq!(m.spans, vec![(0, 0.0, 2.0 / 3.0), (1, 2.0 / 3.0, 1.0)]);
    }

    #[test]
    fn similarity_is_one_minus_half_the_l1_distance() {
        let m = build(
            &[0, 0],
            &[vec![(0, 3.0), (1, 1.0)], vec![(0, 1.0), (1, 1.0)]],
        );
        // L1 = |0.75 - 0.5| + |0.25 - 0.5| = 0.5.
        assert!((m.cells[1] - 0.75).abs() < 1e-6);
        assert!((m.cells[2] - 0.75).abs() < 1e-6);
    }

    #[test]
    fn many_units_are_averaged_into_at_most_max_bins() {
        let n = 2000;
        let labels: Vec<usize> = (0..n).map(|i| (i / 100) % 3).collect();
        let vectors: Vec<Vec<(u32, f64)>> = (0..n)
            .map(|i| vec![(labels[i] as u32, 1.0), (100 + (i % 7) as u32, 1.0)])
            .collect();
        let m = build(&labels, &vectors);
        assert_eq!(m.bins, MAX_BINS);
        assert_eq!(m.cells.len(), MAX_BINS * MAX_BINS);
        assert!(m.cells.iter().all(|c| (0.0..=1.0).contains(c)));
        // A bin wholly inside cluster 0 against one inside cluster 2 share only the noise
        // blocks: at most half.
        assert!(m.cells[MAX_BINS - 1] <= 0.5 + 1e-6);
        assert!(m.cells[0] > 0.99);
        assert_eq!(m.spans.len(), 3);
        assert_eq!(
            png(&m)[..8],
            [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]
        );
    }
}
