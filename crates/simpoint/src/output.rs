//! What SimPoint writes after clustering: simulation points, their weights and the labels.

use std::io::Write;

use crate::cfmt::push_g;
use crate::dataset::Dataset;
use crate::kmeans::Blocked;
use rayon::prelude::*;

/// Clusters that cover a fraction `p` of the weight, largest first (SimPoint's
/// getLargestClusters): weight descending, equal weights by descending index; stops once the
/// accumulated weight reaches `p` or at the first empty cluster.
pub fn largest_clusters(weights: &[f64], p: f64) -> Vec<usize> {
    let mut order: Vec<(f64, usize)> = weights.iter().copied().zip(0..).collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    order.reverse();
    let mut acc = 0.0;
    let mut chosen = Vec::new();
    for (w, c) in order {
        if !(acc < p && w > 0.0) {
            break;
        }
        acc += w;
        chosen.push(c);
    }
    chosen
}

/// Labels, distances and simulation points of one clustering of the whole dataset.
#[derive(Clone, Debug)]
pub struct PostResult {
    /// Cluster of each row.
    pub labels: Vec<u32>,
    /// Euclidean distance of each row to its centre.
    pub dists: Vec<f64>,
    /// Per cluster: the row closest to the centre (first on ties), or -1 when no row is in it.
    pub simpoints: Vec<i64>,
    /// Per cluster: the centre weight.
    pub weights: Vec<f64>,
}

impl PostResult {
    /// Labels every row of `data` with its nearest centre and picks each cluster's point.
    pub fn new(data: &Dataset, centres: &Dataset) -> PostResult {
        let n = data.rows();
        let k = centres.rows();
        let mut blocked = Blocked::new(k, data.cols);
        blocked.load(centres);
        // The nearest centre as `nearest2` finds it (same sums, ties to the lowest index), for
        // every vector at once; the simulation points are then picked in vector order.
        let (labels, dists): (Vec<u32>, Vec<f64>) = (0..n)
            .into_par_iter()
            .with_min_len(4096)
            .map(|i| {
                let (c, d2, _) = blocked.nearest(data.row(i));
                (c as u32, d2.sqrt())
            })
            .unzip();
        let mut simpoints = vec![-1i64; k];
        let mut closest = vec![f64::INFINITY; k];
        for (i, (&c, &d)) in labels.iter().zip(&dists).enumerate() {
            let c = c as usize;
            if d < closest[c] {
                closest[c] = d;
                simpoints[c] = i as i64;
            }
        }
        PostResult {
            labels,
            dists,
            simpoints,
            weights: centres.weights.clone(),
        }
    }

    /// The clusters written for coverage `p` (1.0: every non-empty cluster), ascending.
    pub fn selected(&self, p: f64) -> Vec<usize> {
        let mut sel = largest_clusters(&self.weights, p);
        sel.sort_unstable();
        sel
    }

    /// `-saveSimpoints`: `<row> <cluster>` per selected cluster.
    pub fn write_simpoints(&self, mut out: impl Write, p: f64) -> std::io::Result<()> {
        let mut text = String::new();
        for c in self.selected(p) {
            text.push_str(&format!("{} {}\n", self.simpoints[c], c));
        }
        out.write_all(text.as_bytes())?;
        out.flush()
    }

    /// `-saveSimpointWeights`: `<weight> <cluster>`, weights renormalised over the selection.
    pub fn write_weights(&self, mut out: impl Write, p: f64) -> std::io::Result<()> {
        let sel = self.selected(p);
        let total = sel.iter().fold(0.0, |a, &c| a + self.weights[c]);
        let mut text = String::new();
        for c in sel {
            push_g(&mut text, self.weights[c] / total, 6);
            text.push_str(&format!(" {c}\n"));
        }
        out.write_all(text.as_bytes())?;
        out.flush()
    }

    /// `-saveLabels`: `<cluster> <distance>` per row.
    pub fn write_labels(&self, mut out: impl Write) -> std::io::Result<()> {
        let mut text = String::with_capacity(64);
        for (l, d) in self.labels.iter().zip(&self.dists) {
            text.clear();
            text.push_str(&l.to_string());
            text.push(' ');
            push_g(&mut text, *d, 6);
            text.push('\n');
            out.write_all(text.as_bytes())?;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_first_ties_by_higher_index_and_stops_at_coverage() {
        let w = [0.25, 0.0, 0.25, 0.5];
        assert_eq!(largest_clusters(&w, 1.0), vec![3, 2, 0]);
        assert_eq!(largest_clusters(&w, 0.6), vec![3, 2]);
        assert_eq!(largest_clusters(&w, 0.5), vec![3]);
    }
}
