//! Tests of the data structures behind the passes: distinct rows, blocks, bounds, running sums.

use super::near::Visit;
use super::*;

fn random_set(r: &mut Random, n: usize, d: usize) -> Dataset {
    let mut set = Dataset::zeros(n, d);
    for v in &mut set.data {
        *v = f64::from(r.rand_float()) * 2.0 - 1.0;
    }
    for w in &mut set.weights {
        *w = f64::from(r.rand_float());
    }
    set
}

#[test]
fn sorted_search_equals_the_full_scan() {
    let mut r = Random::new(41);
    for trial in 0..200 {
        let k = 1 + trial % NEAR_MAX_K;
        let d = 1 + trial % 17;
        let mut centres = random_set(&mut r, k, d);
        if k > 3 {
            // Duplicate centres force ties in distance and in centre gaps.
            let row = centres.row(1).to_vec();
            centres.row_mut(k - 1).copy_from_slice(&row);
        }
        let err = distance_error(1.0, d);
        let mut near = Near::new(k, d);
        let mut half_gap = vec![0.0; k];
        near.load(&centres, err, &mut half_gap);
        for p in 0..30 {
            let y: Vec<f64> = match p % 3 {
                0 => centres.row(p % k).to_vec(),
                _ => (0..d)
                    .map(|_| f64::from(r.rand_float()) * 2.0 - 1.0)
                    .collect(),
            };
            let want = nearest2(&y, &centres);
            let want = Visit::Searched(want.0, want.1, want.2);
            let m = 4.0 * err;
            for a in [0, k / 2, k - 1] {
                let ua = dist2(&y, centres.row(a)).sqrt();
                let ninf = f64::NEG_INFINITY;
                assert_eq!(near.visit(a, &y, err, m, ninf), want, "k {k} d {d} a {a}");
                let (c, best, second) = near.nearest_from::<0>(a, &y, m);
                assert_eq!(Visit::Searched(c, best, second), want);
                assert_eq!(near.visit_lanes::<0>(a, &y, err, m, ninf), want);
                let keep = f64::INFINITY;
                assert_eq!(near.visit(a, &y, err, m, keep), Visit::Kept(ua));
                assert_eq!(near.visit_lanes::<0>(a, &y, err, m, keep), Visit::Kept(ua));
                if d == 15 {
                    // The build for a dimension known when compiling adds the same way.
                    let (c, best, second) = near.nearest_from::<15>(a, &y, m);
                    assert_eq!(Visit::Searched(c, best, second), want);
                    assert_eq!(near.visit_lanes::<15>(a, &y, err, m, ninf), want);
                    assert_eq!(near.visit_lanes::<15>(a, &y, err, m, keep), Visit::Kept(ua));
                }
            }
        }
    }
}

#[test]
fn own_distance_is_found_behind_a_block_of_coincident_centres() {
    let mut r = Random::new(3);
    let (k, d) = (20, 4);
    let mut centres = random_set(&mut r, k, d);
    let row = centres.row(0).to_vec();
    for c in 1..11 {
        centres.row_mut(c).copy_from_slice(&row);
    }
    let err = distance_error(1.0, d);
    let mut near = Near::new(k, d);
    let mut half_gap = vec![0.0; k];
    near.load(&centres, err, &mut half_gap);
    assert_eq!(near.self_pos[10], 10);
    let y: Vec<f64> = (0..d).map(|_| f64::from(r.rand_float())).collect();
    let ua = dist2(&y, centres.row(10)).sqrt();
    assert_eq!(
        near.visit(10, &y, err, 4.0 * err, f64::INFINITY),
        Visit::Kept(ua)
    );
    let (c, best, second) = nearest2(&y, &centres);
    assert_eq!(
        near.visit(10, &y, err, 4.0 * err, f64::NEG_INFINITY),
        Visit::Searched(c, best, second)
    );
}

#[test]
fn vector_exact_sums_equal_scalar_ones() {
    let mut r = Random::new(5);
    for d in [1, 3, 8, 9, 15, 16] {
        let mut set = random_set(&mut r, 3000, d);
        for i in 0..set.rows() {
            set.weights[i] = f64::from(r.rand_float());
            if i % 3 == 0 {
                // Repeated rows, so that a deduplicated set reads rows out of order.
                let prev = set.row(i / 2).to_vec();
                set.row_mut(i).copy_from_slice(&prev);
            }
        }
        let mut dedup = set.clone();
        dedup.dedup();
        for (points, k) in [(&set, 7), (&dedup, 7), (&set, 1)] {
            let distinct = Distinct::new(points);
            let n = distinct.first.len();
            // Runs of one label, as phases give, and scattered ones.
            let labels: Vec<u32> = (0..n)
                .map(|i| {
                    if i % 5 == 0 {
                        (r.rand_int() % k as i64) as u32
                    } else {
                        (i / 40 % k) as u32
                    }
                })
                .collect();
            let fast = Exact::new(points, &distinct, &labels, k);
            let slow = Exact::new_scalar(points, &distinct, &labels, k);
            assert_eq!(fast.sums, slow.sums, "d {d} k {k}");
            assert_eq!(fast.weights, slow.weights);
            assert_eq!(fast.rows, slow.rows);
        }
    }
}

#[test]
fn vector_bound_checks_equal_scalar_ones() {
    let mut r = Random::new(77);
    let (k, n) = (13, 1001);
    let centres = random_set(&mut r, k, 3);
    let blocked = Blocked::new(k, 3);
    let points = random_set(&mut r, 1, 3);
    let drift: Vec<f64> = (0..k).map(|_| f64::from(r.rand_float()) * 0.1).collect();
    let half_gap: Vec<f64> = (0..k).map(|_| f64::from(r.rand_float())).collect();
    let builds = [(false, false), (true, false), (true, true)];
    let here = builds
        .into_iter()
        .filter(|&(a, b)| (!a || cpu::avx2()) && (!b || cpu::avx512()));
    for ((avx2, avx512), max_drift_c) in here.flat_map(|b| [(b, usize::MAX), (b, 0), (b, 5)]) {
        let pass = Pass {
            points: &points,
            first: &[],
            cur: &centres,
            blocked: &blocked,
            near: None,
            #[cfg(target_arch = "x86_64")]
            narrow: None,
            direct: false,
            half_gap: &half_gap,
            drift: &drift,
            max_drift: 0.1,
            second_drift: 0.05,
            max_drift_c,
            err: 1e-9,
            margin: 4e-9,
            spread: 0.0,
            round2: 0.0,
            full: false,
            avx2,
            avx512,
        };
        let labels: Vec<u32> = (0..n).map(|_| (r.rand_int() % k as i64) as u32).collect();
        let upper: Vec<f32> = (0..n).map(|_| r.rand_float()).collect();
        let lower: Vec<f32> = (0..n).map(|_| r.rand_float()).collect();
        let (mut u1, mut l1, mut t1) = (upper.clone(), lower.clone(), vec![0u32; n]);
        let (mut u2, mut l2, mut t2) = (upper, lower, vec![0u32; n]);
        for (from, to) in [(0, n), (3, 10), (7, 7), (500, 1001)] {
            let f1 = pass.check_bounds(from, to, &labels, &mut u1, &mut l1, &mut t1);
            let f2 = pass.check_bounds_scalar(from, to, &labels, &mut u2, &mut l2, &mut t2);
            assert_eq!((f1, &t1[..f1], &u1, &l1), (f2, &t2[..f2], &u2, &l2));
        }
    }
}

#[test]
fn deduplicated_sets_cluster_exactly_like_plain_ones() {
    let mut r = Random::new(12);
    let n = 4000;
    let mut plain = Dataset::zeros(n, 3);
    for p in 0..n {
        let v = f64::from(r.rand_int() as i32 % 900) / 900.0;
        plain.row_mut(p).copy_from_slice(&[v, v * v, 1.0 - v]);
        plain.weights[p] = 1.0 / n as f64;
    }
    let mut dedup = plain.clone();
    dedup.dedup();
    let ix = dedup.index.as_ref().expect("rows repeat");
    assert!(dedup.data.len() < plain.data.len());
    assert_eq!(ix.len(), n);
    for p in 0..n {
        assert_eq!(dedup.row(p), plain.row(p));
    }
    let (dp, dd) = (Distinct::new(&plain), Distinct::new(&dedup));
    assert_eq!(dp.first, dd.first);
    assert_eq!(dp.slot, dd.slot);
    assert_eq!((&dp.weight, &dp.count), (&dd.weight, &dd.count));
    for k in [1, 5, 12] {
        let mut rng = Random::new(k as i64);
        let init = init_sample(&plain, k, &mut rng);
        let a = lloyd(&plain, &dp, init.clone(), 100, 1.0, &|| true);
        let b = lloyd(&dedup, &dd, init.clone(), 100, 1.0, &|| false);
        assert_eq!(a.centres, b.centres);
        assert_eq!(a.iterations, b.iterations);
        assert_eq!(a.labels, b.labels);
        // Rows grouped by hashing a deduplicated set: distinct rows are found through its
        // index, not read in place.
        let h = Distinct::hashed(&dedup);
        let c = lloyd(&dedup, &h, init, 100, 1.0, &|| true);
        assert_eq!(a.centres, c.centres);
        assert_eq!(a.iterations, c.iterations);
        assert_eq!(a.labels, c.labels);
    }
    // Distinct rows only: nothing to deduplicate, no index.
    let mut distinct_rows = Dataset::zeros(3, 1);
    distinct_rows.data.copy_from_slice(&[1.0, 2.0, 3.0]);
    distinct_rows.dedup();
    assert!(distinct_rows.index.is_none());
}
