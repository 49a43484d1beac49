//! Reading frequency vectors: L1 normalisation and random projection in one streaming pass.

use std::path::Path;

use bbv_profile::{BbvReader, Token};

use crate::dataset::Dataset;
use crate::rng::Random;
use crate::SimpointError;

/// How vectors are reduced before clustering.
#[derive(Clone, Debug)]
pub enum Projection {
    /// SimPoint's random projection to `dim` columns, matrix drawn from `seed`.
    Random {
        /// Target dimension.
        dim: usize,
        /// Generator seed (`-seedproj`).
        seed: i64,
    },
    /// A matrix given by the user (rows = block ids, columns = target dimension).
    Matrix(Dataset),
    /// No projection: L1-normalised vectors, one column per block id.
    None,
}

/// Vectors read from a BBV file.
#[derive(Debug)]
pub struct Loaded {
    /// Projected (or dense normalised) vectors; each row's weight is its share of all counts.
    pub vectors: Dataset,
    /// Largest block id seen (SimPoint's vector dimension).
    pub num_dims: usize,
    /// The projection matrix used, `num_dims` rows, when projecting.
    pub matrix: Option<Dataset>,
}

/// Rows of the random projection matrix, drawn lazily as larger block ids appear: the matrix is
/// filled row by row from one generator, so row r never depends on how many rows follow it.
struct LazyMatrix {
    rng: Random,
    dim: usize,
    rows: Vec<f64>,
}

impl LazyMatrix {
    fn ensure(&mut self, rows: usize) {
        while self.rows.len() < rows * self.dim {
            let v = f64::from(self.rng.rand_float()) * 2.0 - 1.0;
            self.rows.push(v);
        }
    }
}

/// Reads every vector of `reader`, normalising and projecting each as it is read.
pub fn load_vectors<R: std::io::BufRead>(
    reader: &mut BbvReader<R>,
    projection: &Projection,
    mut progress: impl FnMut(u64),
) -> Result<Loaded, SimpointError> {
    let mut tokens: Vec<Token> = Vec::new();
    let mut lazy = match projection {
        Projection::Random { dim, seed } => Some(LazyMatrix {
            rng: Random::new(*seed),
            dim: *dim,
            rows: Vec::new(),
        }),
        _ => None,
    };
    let out_dim = match projection {
        Projection::Random { dim, .. } => *dim,
        Projection::Matrix(m) => m.cols,
        Projection::None => 0,
    };
    let mut data: Vec<f64> = Vec::new();
    let mut sums: Vec<f64> = Vec::new();
    // Without projection the rows stay sparse until the dimension is known.
    let mut sparse: Vec<(u32, f64)> = Vec::new();
    let mut sparse_ends: Vec<usize> = Vec::new();
    let mut num_dims = 0usize;
    while reader.next_vector(&mut tokens)? {
        let mut s = 0.0;
        let mut line_max = 0;
        for t in &tokens {
            s += t.value;
            line_max = line_max.max(t.id as usize);
        }
        if s <= 0.0 {
            return Err(SimpointError::ZeroVector {
                path: reader.path().to_path_buf(),
                line: reader.line_number(),
            });
        }
        num_dims = num_dims.max(line_max);
        match projection {
            Projection::None => {
                for t in &tokens {
                    sparse.push((t.id, t.value / s));
                }
                sparse_ends.push(sparse.len());
            }
            _ => {
                let matrix: &[f64] = match (&mut lazy, projection) {
                    (Some(l), _) => {
                        l.ensure(line_max);
                        &l.rows
                    }
                    (None, Projection::Matrix(m)) => {
                        if line_max > m.rows() {
                            return Err(SimpointError::Invalid(format!(
                                "{}:{}: block id {} is beyond the {} rows of the loaded projection matrix",
                                reader.path().display(),
                                reader.line_number(),
                                line_max,
                                m.rows()
                            )));
                        }
                        &m.data
                    }
                    _ => unreachable!("projection without matrix"),
                };
                let base = data.len();
                data.resize(base + out_dim, 0.0);
                project(&tokens, s, matrix, &mut data[base..]);
            }
        }
        sums.push(s);
        if sums.len().is_multiple_of(65536) {
            progress(sums.len() as u64);
        }
    }
    let n = sums.len();
    if n == 0 {
        return Err(SimpointError::NoVectors(reader.path().to_path_buf()));
    }
    let total = sums.iter().fold(0.0, |a, &b| a + b);
    let mut weights = sums;
    weights.iter_mut().for_each(|s| *s /= total);
    let (mut vectors, matrix) = match projection {
        Projection::None => {
            let cells = n.checked_mul(num_dims).filter(|&c| c <= 1 << 32).ok_or_else(|| {
                SimpointError::Invalid(format!(
                    "-dim noProject needs a dense {n} x {num_dims} matrix; that is too large (use a projection)"
                ))
            })?;
            let mut dense = vec![0.0; cells];
            let mut start = 0;
            for (i, &end) in sparse_ends.iter().enumerate() {
                for &(id, v) in &sparse[start..end] {
                    dense[i * num_dims + id as usize - 1] += v;
                }
                start = end;
            }
            (Dataset::new(num_dims, dense, weights), None)
        }
        Projection::Random { dim, .. } => {
            let mut l = lazy.expect("lazy matrix");
            l.ensure(num_dims);
            l.rows.truncate(num_dims * dim);
            let matrix = Dataset::new(*dim, l.rows, vec![1.0 / num_dims as f64; num_dims]);
            (Dataset::new(*dim, data, weights), Some(matrix))
        }
        Projection::Matrix(m) => (Dataset::new(m.cols, data, weights), Some(m.clone())),
    };
    vectors.dedup();
    Ok(Loaded {
        vectors,
        num_dims,
        matrix,
    })
}

/// `y += (value / s) * P[id - 1]` for every token, in token order (SimPoint's arithmetic: the
/// quotient, then the product, then the sum, each rounded).
#[inline]
fn project(tokens: &[Token], s: f64, matrix: &[f64], y: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        if !y.is_empty() && y.len() <= 16 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked just above); the dimension fits.
            unsafe { project_avx2(tokens, s, matrix, y) };
            return;
        }
    }
    let d = y.len();
    for t in tokens {
        let v = t.value / s;
        let row = &matrix[(t.id as usize - 1) * d..t.id as usize * d];
        for (acc, &p) in y.iter_mut().zip(row) {
            *acc += v * p;
        }
    }
}

/// The projected row stays in registers across the line's tokens (no FMA: same roundings).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn project_avx2(tokens: &[Token], s: f64, matrix: &[f64], y: &mut [f64]) {
    use std::arch::x86_64::*;
    let d = y.len();
    let lane = |j: usize| if j < d { -1i64 } else { 0 };
    let masks = [
        _mm256_setr_epi64x(lane(0), lane(1), lane(2), lane(3)),
        _mm256_setr_epi64x(lane(4), lane(5), lane(6), lane(7)),
        _mm256_setr_epi64x(lane(8), lane(9), lane(10), lane(11)),
        _mm256_setr_epi64x(lane(12), lane(13), lane(14), lane(15)),
    ];
    let chunks = d.div_ceil(4);
    let mut acc = [_mm256_setzero_pd(); 4];
    for t in tokens {
        let row = (t.id as usize - 1) * d;
        assert!(row + d <= matrix.len());
        let p = matrix.as_ptr().add(row);
        let v = _mm256_set1_pd(t.value / s);
        for c in 0..chunks {
            let m = _mm256_maskload_pd(p.add(4 * c), masks[c]);
            acc[c] = _mm256_add_pd(acc[c], _mm256_mul_pd(v, m));
        }
    }
    let out = y.as_mut_ptr();
    for c in 0..chunks {
        _mm256_maskstore_pd(out.add(4 * c), masks[c], acc[c]);
    }
}

/// Opens and loads a BBV file.
pub fn load_file(
    path: &Path,
    projection: &Projection,
    progress: impl FnMut(u64),
) -> Result<Loaded, SimpointError> {
    let mut reader = BbvReader::open(path)?;
    load_vectors(&mut reader, projection, progress)
}
