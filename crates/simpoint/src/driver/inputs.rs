//! The inputs beside the vectors (weights, datasets, initial labels) and output names.

use std::io::BufReader;

use bbv_files::input::{quote, Lines};
use std::path::{Path, PathBuf};

use crate::cfmt::g;
use crate::{Dataset, SimpointError};

type Result<T> = std::result::Result<T, SimpointError>;

/// The longest line of a weights or labels file read: a few numbers.
const SIDE_LINE: usize = 64 << 10;

fn format(path: &Path, line: u64, message: String) -> SimpointError {
    SimpointError::Format {
        path: path.to_path_buf(),
        line,
        message,
    }
}

/// One weight per vector of `vectors` (`n` of them), normalised.
pub(super) fn read_vector_weights(path: &Path, n: usize, vectors: &Path) -> Result<Vec<f64>> {
    let mut lines = Lines::open(path, SIDE_LINE)?;
    let mut w = Vec::with_capacity(n);
    while let Some((ln, line)) = lines.next_line()? {
        for word in line.split_whitespace() {
            let v: f64 = word.parse().map_err(|_| {
                format(
                    path,
                    ln,
                    format!("'{}' is not a number", quote(word.as_bytes())),
                )
            })?;
            if !(v.is_finite() && v >= 0.0) {
                return Err(format(
                    path,
                    ln,
                    format!("weight {word} must be finite and not negative"),
                ));
            }
            if w.len() == n {
                bail!(
                    "{}:{ln}: more weights than the {n} vectors of {}",
                    path.display(),
                    vectors.display()
                );
            }
            w.push(v);
        }
    }
    if w.len() != n {
        bail!(
            "{}: {} weights for {n} vectors of {}",
            path.display(),
            w.len(),
            vectors.display()
        );
    }
    let total = w.iter().fold(0.0, |a, &b| a + b);
    if total <= 0.0 {
        bail!("{}: the weights sum to 0", path.display());
    }
    Ok(w.into_iter().map(|x| x / total).collect())
}

pub(super) fn read_dataset(path: &Path, binary: bool) -> Result<Dataset> {
    let file = bbv_files::input::open(path)?;
    Ok(if binary {
        Dataset::read_binary(BufReader::new(file), path)?
    } else {
        Dataset::read_text(BufReader::new(file), path)?
    })
}

/// Centres as the weighted means of the rows carrying each label (`-loadInitLabels`).
pub(super) fn centres_from_labels(path: &Path, data: &Dataset) -> Result<Dataset> {
    let mut lines = Lines::open(path, SIDE_LINE)?;
    let mut labels = Vec::with_capacity(data.rows());
    while let Some((ln, line)) = lines.next_line()? {
        let Some(word) = line.split_whitespace().next() else {
            continue;
        };
        let l: usize = word.parse().map_err(|_| {
            format(
                path,
                ln,
                format!("'{}' is not a cluster number", quote(word.as_bytes())),
            )
        })?;
        // A cluster per vector at most: a larger number would size the centres by it.
        if l >= data.rows() {
            return Err(format(
                path,
                ln,
                format!(
                    "cluster {l}: more clusters than the {} vectors",
                    data.rows()
                ),
            ));
        }
        if labels.len() == data.rows() {
            bail!(
                "{}:{ln}: more labels than the {} vectors",
                path.display(),
                data.rows()
            );
        }
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
