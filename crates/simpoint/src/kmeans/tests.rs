//! Unit tests of k-means against plain Lloyd and SimPoint's arithmetic.

use super::blocked::nearest_lanes;
use super::*;

fn grid(n: usize, d: usize, seed: i64) -> Dataset {
    let mut r = Random::new(seed);
    let mut set = Dataset::zeros(n, d);
    for i in 0..n {
        let centre = (i % 4) as f64;
        for v in set.row_mut(i) {
            *v = centre + f64::from(r.rand_float()) * 0.3;
        }
        set.weights[i] = 1.0 / n as f64;
    }
    set
}

/// Plain Lloyd without pruning, as the reference for bit-identity.
fn naive(points: &Dataset, init: Dataset, max_iter: usize) -> (Dataset, usize) {
    let k = init.rows();
    let mut cur = init;
    for iter in 0..max_iter {
        let mut next = Dataset::zeros(k, points.cols);
        for p in 0..points.rows() {
            let (a, _, _) = nearest2(points.row(p), &cur);
            let w = points.weights[p];
            for (acc, &v) in next.row_mut(a).iter_mut().zip(points.row(p)) {
                *acc += v * w;
            }
            next.weights[a] += w;
        }
        for c in 0..k {
            let w = next.weights[c];
            if w > 0.0 {
                next.row_mut(c).iter_mut().for_each(|v| *v /= w);
            }
        }
        if next.data == cur.data {
            return (next, iter);
        }
        if iter + 1 == max_iter {
            return (cur, max_iter);
        }
        cur = next;
    }
    (cur, max_iter)
}

#[test]
fn vector_kernels_equal_the_scalar_scan() {
    let mut r = Random::new(99);
    for trial in 0..300 {
        let k = 1 + trial % 70;
        let d = 1 + trial % 19;
        let mut centres = Dataset::zeros(k, d);
        for v in &mut centres.data {
            *v = f64::from(r.rand_float()) * 2.0 - 1.0;
        }
        if k > 3 {
            // Duplicate centres force ties.
            let row = centres.row(1).to_vec();
            centres.row_mut(k - 2).copy_from_slice(&row);
        }
        let mut blocked = Blocked::new(k, d);
        blocked.load(&centres);
        for p in 0..40 {
            let y: Vec<f64> = match p % 4 {
                0 => centres.row(p % k).to_vec(),
                1 if k > 1 => centres
                    .row(0)
                    .iter()
                    .zip(centres.row(1))
                    .map(|(a, b)| (a + b) / 2.0)
                    .collect(),
                _ => (0..d)
                    .map(|_| f64::from(r.rand_float()) * 2.0 - 1.0)
                    .collect(),
            };
            let want = nearest2(&y, &centres);
            assert_eq!(blocked.nearest(&y), want, "k {k} d {d} p {p}");
            assert_eq!(nearest_lanes(&blocked.t, &y, blocked.blocks), want);
        }
    }
}

#[test]
fn pruned_equals_naive_bitwise() {
    // 15 dimensions take the build of the bounded pass for SimPoint's default dimension.
    for (seed, d) in [(5, 5), (77, 5), (1234, 5), (31, 15)] {
        let data = grid(2000, d, seed);
        for k in [1, 3, 7, 12] {
            for iters in [1, 2, 5, 100] {
                let mut rng = Random::new(seed + k as i64);
                let mut init = init_sample(&data, k, &mut rng);
                initial_weights(&data, &mut init);
                let (slow, it) = naive(&data, init.clone(), iters);
                for narrow in [false, true] {
                    let fast = lloyd_inflated(
                        &data,
                        &Distinct::new(&data),
                        init.clone(),
                        iters,
                        1.3,
                        &|| true,
                        1.0,
                        narrow,
                    );
                    let case = format!("seed {seed} k {k} iters {iters} narrow {narrow}");
                    assert_eq!(fast.centres, slow, "{case}");
                    assert_eq!(fast.iterations, it, "{case}");
                    // With one centre there is no second one: nothing is close.
                    if k == 1 {
                        assert_eq!(fast.close_calls, 0, "{case}");
                    }
                }
            }
        }
    }
}

#[test]
fn close_calls_go_to_the_double_precision_search() {
    // Mirrored pairs keep the two clusters' border at x0 = 0.5; points within 1e-9 of it
    // are beyond single precision's resolution but not double precision's.
    let (n, d) = (1200, 15);
    let mut r = Random::new(9);
    let mut data = Dataset::zeros(n, d);
    for i in (0..n).step_by(2) {
        let x0 = if i % 6 == 0 {
            0.5 + (f64::from(r.rand_float()) - 0.5) * 2e-9
        } else {
            f64::from(r.rand_float()) * 0.4
        };
        let rest: Vec<f64> = (1..d).map(|_| f64::from(r.rand_float()) * 0.2).collect();
        for (row, x) in [(i, x0), (i + 1, 1.0 - x0)] {
            data.row_mut(row)[0] = x;
            data.row_mut(row)[1..].copy_from_slice(&rest);
            data.weights[row] = 1.0 / n as f64;
        }
    }
    // Mirrored starting centres keep the clusters mirrored.
    for xs in [&[0.2, 0.8][..], &[0.1, 0.9, 0.3, 0.7]] {
        let k = xs.len();
        let mut init = Dataset::zeros(k, d);
        for (c, &x) in xs.iter().enumerate() {
            init.row_mut(c).fill(0.1);
            init.row_mut(c)[0] = x;
        }
        let (slow, it) = naive(&data, init.clone(), 100);
        for narrow in [false, true] {
            let fast = lloyd_inflated(
                &data,
                &Distinct::new(&data),
                init.clone(),
                100,
                1.0,
                &|| true,
                1.0,
                narrow,
            );
            assert_eq!(fast.centres, slow, "k {k} narrow {narrow}");
            assert_eq!(fast.iterations, it, "k {k} narrow {narrow}");
            if !narrow {
                assert_eq!(fast.close_calls, 0);
            } else if cpu::avx512() {
                assert!(fast.close_calls > 0, "k {k}: no close call");
            }
        }
    }
}

#[test]
fn ties_go_to_lowest_index_and_empty_clusters_move_to_origin() {
    let data = Dataset::new(1, vec![0.0, 1.0, 1.0, 2.0], vec![0.25; 4]);
    let init = Dataset::new(1, vec![1.0, 1.0], vec![0.5, 0.5]);
    let distinct = Distinct::new(&data);
    let r = lloyd(&data, &distinct, init, 100, 2.0, &|| true);
    // Pass 1 puts every point in cluster 0 (tie) and moves the empty cluster 1 to the
    // origin, which then captures the point at 0.
    let labels = r.labels.unwrap();
    let all: Vec<u32> = distinct.slot.iter().map(|&s| labels[s as usize]).collect();
    assert_eq!(all, vec![1, 0, 0, 0]);
    assert_eq!(r.centres.row(0), &[4.0 / 3.0]);
    assert_eq!(r.centres.row(1), &[0.0]);
    assert_eq!(r.centres.weights, vec![0.75, 0.25]);
}

#[test]
fn inflated_running_bounds_fall_back_to_simpoints_sums() {
    // Bounds inflated until the running centres settle little (1e9) or nothing (1e13):
    // every open decision must go to SimPoint's own sums, with the same results.
    let tie = Dataset::new(1, vec![0.0, 1.0, 1.0, 2.0, 2.0, 3.0], vec![1.0 / 6.0; 6]);
    for seed in [5, 77] {
        let data = grid(1500, 4, seed);
        for inflate in [1e9, 1e13] {
            let mut refreshed = 0;
            for k in [2, 5, 9] {
                for iters in [2, 7, 100] {
                    let mut rng = Random::new(seed + k as i64);
                    let init = init_sample(&data, k, &mut rng);
                    let split = |_| true;
                    let r = lloyd_inflated(
                        &data,
                        &Distinct::new(&data),
                        init.clone(),
                        iters,
                        1.3,
                        &|| split(()),
                        inflate,
                        true,
                    );
                    let (slow, it) = naive(&data, init, iters);
                    assert_eq!(
                        r.centres, slow,
                        "seed {seed} k {k} iters {iters} x{inflate}"
                    );
                    assert_eq!(r.iterations, it);
                    refreshed += r.refreshes;
                }
            }
            assert!(refreshed > 0, "inflate {inflate}: no fallback taken");
        }
        let init = Dataset::new(1, vec![1.0, 1.0, 2.5], vec![0.0; 3]);
        let r = lloyd_inflated(
            &tie,
            &Distinct::new(&tie),
            init.clone(),
            50,
            3.0,
            &|| false,
            1e9,
            true,
        );
        assert_eq!(r.centres, naive(&tie, init, 50).0);
    }
}
