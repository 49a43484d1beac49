//! The inputs beside the vectors (weights, datasets, initial labels) and output names.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::cfmt::g;
use crate::{Dataset, SimpointError};

type Result<T> = std::result::Result<T, SimpointError>;

fn io(path: &Path, source: std::io::Error) -> SimpointError {
    SimpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(super) fn read_vector_weights(path: &Path, n: usize) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    let mut w = Vec::with_capacity(n);
    for (ln, line) in text.lines().enumerate() {
        for word in line.split_whitespace() {
            let v: f64 = word.parse().map_err(|_| {
                SimpointError::Invalid(format!(
                    "{}:{}: '{word}' is not a number",
                    path.display(),
                    ln + 1
                ))
            })?;
            if !(v.is_finite() && v >= 0.0) {
                bail!(
                    "{}:{}: weight {word} must be finite and not negative",
                    path.display(),
                    ln + 1
                );
            }
            w.push(v);
        }
    }
    if w.len() != n {
        bail!("{}: {} weights for {n} vectors", path.display(), w.len());
    }
    let total = w.iter().fold(0.0, |a, &b| a + b);
    if total <= 0.0 {
        bail!("{}: the weights sum to 0", path.display());
    }
    Ok(w.into_iter().map(|x| x / total).collect())
}

pub(super) fn read_dataset(path: &Path, binary: bool) -> Result<Dataset> {
    let file = File::open(path).map_err(|e| io(path, e))?;
    Ok(if binary {
        Dataset::read_binary(BufReader::new(file), path)?
    } else {
        Dataset::read_text(BufReader::new(file), path)?
    })
}

/// Centres as the weighted means of the rows carrying each label (`-loadInitLabels`).
pub(super) fn centres_from_labels(path: &Path, data: &Dataset) -> Result<Dataset> {
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    let mut labels = Vec::with_capacity(data.rows());
    for (ln, line) in text.lines().enumerate() {
        let Some(word) = line.split_whitespace().next() else {
            continue;
        };
        let l: usize = word.parse().map_err(|_| {
            SimpointError::Invalid(format!(
                "{}:{}: '{word}' is not a cluster number",
                path.display(),
                ln + 1
            ))
        })?;
        labels.push(l);
    }
    if labels.len() != data.rows() {
        bail!(
            "{}: {} labels for {} vectors",
            path.display(),
            labels.len(),
            data.rows()
        );
    }
    let k = labels.iter().max().map_or(0, |m| m + 1);
    let mut c = Dataset::zeros(k, data.cols);
    for (i, &l) in labels.iter().enumerate() {
        let w = data.weights[i];
        for (acc, &v) in c.row_mut(l).iter_mut().zip(data.row(i)) {
            *acc += v * w;
        }
        c.weights[l] += w;
    }
    for l in 0..k {
        let w = c.weights[l];
        if w > 0.0 {
            c.row_mut(l).iter_mut().for_each(|v| *v /= w);
        }
    }
    Ok(c)
}

pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `.lpt` suffix as SimPoint names it (`%g` of the coverage).
pub(super) fn lpt_suffix(coverage: f64) -> String {
    format!(".lpt{}", g(coverage))
}
