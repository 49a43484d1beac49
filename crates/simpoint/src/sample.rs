//! `-sampleSize`: a weighted sample of rows drawn without repetition.

use crate::dataset::Dataset;
use crate::rng::Random;
use crate::SimpointError;

/// Draws `size` distinct rows with probability proportional to their weight, as SimPoint does,
/// and returns them in index order with weights renormalised over the sample.
pub fn sample_rows(data: &Dataset, size: usize, seed: i32) -> Result<Dataset, SimpointError> {
    let n = data.rows();
    let positive = data.weights.iter().filter(|&&w| w > 0.0).count();
    if size == 0 || size > positive {
        return Err(SimpointError::Invalid(format!(
            "-sampleSize {size}: must be between 1 and the number of vectors with a positive weight ({positive})"
        )));
    }
    let mut order: Vec<(f64, usize)> = data.weights.iter().copied().zip(0..n).collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    order.reverse();
    let mut cum = Vec::with_capacity(n);
    let mut acc = 0.0;
    for &(w, _) in &order {
        acc += w;
        cum.push(acc);
    }
    *cum.last_mut().expect("non-empty") = 1.0;
    let mut rng = Random::new(i64::from(seed));
    let mut chosen = vec![false; n];
    let mut count = 0;
    while count < size {
        let r = f64::from(rng.rand_float());
        let bucket = cum.partition_point(|&c| c < r).min(n - 1);
        let idx = order[bucket].1;
        if !chosen[idx] {
            chosen[idx] = true;
            count += 1;
        }
    }
    let mut out = Dataset::new(
        data.cols,
        Vec::with_capacity(size * data.cols),
        Vec::with_capacity(size),
    );
    for i in (0..n).filter(|&i| chosen[i]) {
        out.data.extend_from_slice(data.row(i));
        out.weights.push(data.weights[i]);
    }
    let total = out.weights.iter().fold(0.0, |a, &b| a + b);
    for w in &mut out.weights {
        *w /= total;
    }
    Ok(out)
}
