use super::*;

fn opts(rule: Rule) -> SampleOptions {
    SampleOptions {
        rule,
        max_k: 10,
        ..SampleOptions::default()
    }
}

fn launch(kernel: &str, insts: u64, ns: &[u64]) -> TimedLaunch {
    TimedLaunch {
        kernel: kernel.into(),
        grid: [insts.min(1000) as u32, 1, 1],
        block: [128, 1, 1],
        registers: 32,
        shared: 0,
        warp_insts: insts,
        ns: ns.to_vec(),
    }
}

/// Two kernels: `a` of two sizes (time follows instructions), `b` of one size whose time
/// varies.
fn workload() -> Vec<TimedLaunch> {
    let mut v = Vec::new();
    for i in 0..40u64 {
        v.push(launch("a", 1000, &[100, 101]));
        v.push(launch("a", 5000, &[500, 498]));
        v.push(launch("b", 300, &[200 + 10 * (i % 4), 205 + 10 * (i % 4)]));
    }
    v
}

#[test]
fn every_rule_estimates_an_easy_workload_closely_from_few_launches() {
    let w = workload();
    let vectors: Vec<Vector> = (w.iter())
        .map(|l| vec![(if l.kernel == "a" { 1 } else { 2 }, l.warp_insts)])
        .collect();
    let total: f64 = w.iter().map(|l| l.ns[1] as f64).sum();
    for rule in Rule::ALL {
        let s = score(&w, Some(&vectors), &opts(rule)).unwrap();
        assert!(!s.in_sample);
        assert_eq!(s.actual_ns, [total], "{s:?}");
        assert!(s.error.abs() < 0.03, "{s:?}");
        assert!(s.worst >= s.error.abs());
        // STEM samples by kernel name alone: kernel a's two sizes make its times spread too
        // widely for a sample to bound, so it takes all of a.
        let few = if rule == Rule::Stem {
            w.len()
        } else {
            w.len() / 2 - 1
        };
        assert!(s.picked >= 2 && s.picked <= few, "{s:?}");
        let sel = select(&w, Some(&vectors), &opts(rule)).unwrap();
        assert_eq!(sel.len(), s.picked);
        assert!((estimate(&w, &sel, 1) - s.estimate_ns[0]).abs() < 1e-6);
        // Every launch stands behind exactly one pick.
        let mut members: Vec<usize> = sel.iter().flat_map(|p| p.members.clone()).collect();
        members.sort_unstable();
        assert_eq!(members, (0..w.len()).collect::<Vec<_>>(), "{rule:?}");
        assert!(sel.iter().all(|p| p.members.contains(&p.launch)), "{sel:?}");
    }
    // Sieve's strata: a of 1000, a of 5000, b; each pick stands for its stratum's 40.
    let sel = select(&w, None, &opts(Rule::Sieve)).unwrap();
    assert_eq!(sel.len(), 3);
    assert!(
        sel.iter().all(|p| (p.weight - 40.0).abs() < 1e-9),
        "{sel:?}"
    );
}

#[test]
fn stem_samples_more_of_a_kernel_whose_time_varies() {
    let mut w = workload();
    // Kernel a of one size, its time steady.
    for l in w.iter_mut().filter(|l| l.kernel == "a") {
        (l.warp_insts, l.ns) = (1000, vec![100 + l.ns[0] % 3, 100]);
    }
    for (i, l) in w.iter_mut().enumerate().filter(|(_, l)| l.kernel == "b") {
        l.ns = vec![100 + (i as u64 * 37) % 300, 150];
    }
    let sel = select(&w, None, &opts(Rule::Stem)).unwrap();
    let of = |k: &str| sel.iter().filter(|p| w[p.launch].kernel == k).count();
    assert!(of("b") > of("a"), "{sel:?}");
    // Each of a kernel's picks stands for its launches over the sample size.
    let weight_b = 40.0 / of("b") as f64;
    assert!(sel
        .iter()
        .filter(|p| w[p.launch].kernel == "b")
        .all(|p| p.weight == weight_b));
    // The same picks every time (seeded).
    assert_eq!(sel, select(&w, None, &opts(Rule::Stem)).unwrap());
}

#[test]
fn records_that_cannot_be_scored_are_refused() {
    let e = score(&[], None, &opts(Rule::Stem)).unwrap_err();
    assert!(
        e.to_string().contains("no kernel launch to pick from"),
        "{e}"
    );
    let untimed: Vec<TimedLaunch> = (workload().into_iter())
        .map(|mut l| {
            l.ns.clear();
            l
        })
        .collect();
    let e = score(&untimed, None, &opts(Rule::Sieve)).unwrap_err();
    assert!(
        e.to_string().contains("no launch with a measured time"),
        "{e}"
    );
    let mut w = workload();
    w[3].ns.pop();
    let e = score(&w, None, &opts(Rule::Stem)).unwrap_err();
    assert!(
        e.to_string().contains("launch 3 has 1 times, launch 0 2"),
        "{e}"
    );
    let w = workload();
    let e = score(&w, None, &opts(Rule::Bbv)).unwrap_err();
    assert!(e.to_string().contains("needs the launches' vectors"), "{e}");
    let e = score(&w, Some(&[vec![(0, 1)]]), &opts(Rule::Sieve)).unwrap_err();
    assert!(
        e.to_string()
            .contains("1 basic-block vectors for 120 launches"),
        "{e}"
    );
    // One run: scored in-sample, and said so.
    let one: Vec<TimedLaunch> = (w.into_iter())
        .map(|mut l| {
            l.ns.truncate(1);
            l
        })
        .collect();
    assert!(score(&one, None, &opts(Rule::Pka)).unwrap().in_sample);
    // Without times, the rules that read them read instructions instead: on kernel a's two
    // sizes and b's one, STEM takes every launch of a (its counts spread widely) and few of b.
    for rule in Rule::ALL {
        let got = select(&untimed, None, &opts(rule));
        match rule {
            Rule::Bbv => assert!(got.is_err()),
            _ => assert!(!got.unwrap().is_empty(), "{rule:?}"),
        }
    }
    let sel = select(&untimed, None, &opts(Rule::Stem)).unwrap();
    assert_eq!(
        sel.iter()
            .filter(|p| untimed[p.launch].kernel == "b")
            .count(),
        1
    );
}

#[test]
fn methods_are_named_and_unknown_names_refused() {
    for rule in Rule::ALL {
        assert_eq!(rule.name().parse::<Rule>(), Ok(rule));
    }
    let e = "simpoint".parse::<Rule>().unwrap_err();
    assert_eq!(
        e,
        "unknown method \"simpoint\": one of bbv, sieve, pka, stem"
    );
}

#[test]
fn stem_members_are_the_launches_nearest_each_pick() {
    // One kernel, times spread widely: several picks, each with the launches around it.
    let w: Vec<TimedLaunch> = (0..50u64)
        .map(|i| launch("k", 100, &[1000 + (i * 53) % 400, 100]))
        .collect();
    let sel = select(&w, None, &opts(Rule::Stem)).unwrap();
    assert!(sel.len() > 1 && sel.len() < 50, "{sel:?}");
    for (i, p) in sel.iter().enumerate() {
        for &m in &p.members {
            let d = m.abs_diff(p.launch);
            assert!(
                sel.iter().all(|q| q.launch.abs_diff(m) >= d),
                "{i}: {m} in {p:?}"
            );
        }
    }
}

#[test]
fn bbv_splits_sieve_strata_only_where_the_block_mix_differs() {
    // Kernel a: 30 launches of one size; ten place their instructions in another block (a
    // phase Sieve cannot see), and the rest differ by 2% of their mix (noise, not split).
    // Kernel b: two sizes, one block.
    let mut w = Vec::new();
    let mut vectors: Vec<Vector> = Vec::new();
    for i in 0..30u64 {
        w.push(launch("a", 1000, &[100, 100]));
        vectors.push(match i % 3 {
            0 => vec![(1, 200), (2, 800)],
            _ => vec![(1, 980 - 20 * (i % 2)), (3, 20 + 20 * (i % 2))],
        });
    }
    for i in 0..20u64 {
        let n = if i % 2 == 0 { 500 } else { 5000 };
        w.push(launch("b", n, &[n / 10, n / 10]));
        vectors.push(vec![(9, n)]);
    }
    let sel = select(&w, Some(&vectors), &opts(Rule::Bbv)).unwrap();
    let groups: Vec<Vec<usize>> = sel.iter().map(|p| p.members.clone()).collect();
    assert_eq!(sel.len(), 4, "{groups:?}");
    let phase_a: Vec<usize> = (0..30).step_by(3).collect();
    assert!(groups.contains(&phase_a), "{groups:?}");
    // Sieve keeps kernel a's phases together.
    let sieve = select(&w, Some(&vectors), &opts(Rule::Sieve)).unwrap();
    assert_eq!(sieve.len(), 3);
    // Every pick's weight is its group's instructions over its own.
    for p in &sel {
        let total: u64 = p.members.iter().map(|&m| w[m].warp_insts).sum();
        assert!((p.weight * w[p.launch].warp_insts as f64 - total as f64).abs() < 1e-6);
    }
}

#[test]
fn a_group_is_represented_by_its_launch_of_typical_size() {
    // One kernel, sizes 950 to 1,045 (one stratum): the pick is the launch nearest the mean
    // (997.5), the middle one among the tied 995 and 1,000.
    let w: Vec<TimedLaunch> = (0..20u64)
        .map(|i| launch("k", 950 + 5 * i, &[1, 1]))
        .collect();
    let vectors: Vec<Vector> = w.iter().map(|l| vec![(1, l.warp_insts)]).collect();
    for rule in [Rule::Bbv, Rule::Sieve] {
        let sel = select(&w, Some(&vectors), &opts(rule)).unwrap();
        assert_eq!(sel.len(), 1, "{rule:?}");
        assert_eq!(sel[0].launch, 9, "{sel:?}");
    }
}
