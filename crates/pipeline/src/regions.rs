//! Regions a simulator can reach: each simulation point as a start and an end marker (and a
//! warmup marker), and the files simulators read them from.

use std::io::Write;

use crate::markers::{Placed, Placer, Profile};
use crate::rundir::{Chosen, ImageRow, Marker, Point};
use crate::PipelineError;

/// Where warming starts when it would start before the program's first interval: the main
/// image's entry point, run once.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Main image file name.
    pub image: String,
    /// Link-time entry address.
    pub offset: u64,
}

/// Rounds a warmup in instructions to whole intervals (markers sit on interval cuts); any
/// warmup asked for is at least one interval.
pub fn warmup_intervals(warmup: u64, interval: u64) -> u64 {
    if warmup == 0 {
        return 0;
    }
    (warmup.saturating_add(interval / 2) / interval).max(1)
}

pub(crate) fn marker(placer: &Placer, p: &Placed) -> Result<Marker, PipelineError> {
    let row = placer
        .row(p.block)
        .ok_or_else(|| PipelineError::Invalid(format!("block {} is not in blocks.tsv", p.block)))?;
    Ok(Marker {
        image: row.image.clone().unwrap_or_default(),
        offset: format!("{:#x}", row.offset),
        count: p.count,
    })
}

/// Members of each chosen point's cluster that may stand in for its representative, nearest
/// the centre first (at most [`STAND_INS`]): `distances` are `simpoint.labels`' second column.
pub fn stand_ins(chosen: &[Chosen], labels: &[usize], distances: &[f64]) -> Vec<Vec<u64>> {
    chosen
        .iter()
        .map(|c| {
            let mut members: Vec<(f64, u64)> = labels
                .iter()
                .zip(distances)
                .enumerate()
                .filter(|&(i, (&l, _))| l == c.cluster && i as u64 != c.interval)
                .map(|(i, (_, &d))| (d, i as u64))
                .collect();
            members.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            members.truncate(STAND_INS);
            members.into_iter().map(|(_, i)| i).collect()
        })
        .collect()
}

/// How many cuts before its start or past its end a region may reach for a marker.
pub const REACH: u64 = 4;

/// How many of a cluster's members are tried when its representative has no marker.
pub const STAND_INS: usize = 4;

/// How many intervals after a point no marker delimits (nor its cluster's stand-ins, nor
/// [`REACH`]) are tried to stand in for it.
pub const FORWARD: u64 = 32;

/// What a point no marker delimits may fall back on.
#[derive(Clone, Debug, Default)]
pub struct Fallback {
    /// Per chosen point, its cluster's members nearest its centre ([`stand_ins`]).
    pub stand_ins: Vec<Vec<u64>>,
    /// Points (their intervals) that may stand in from up to [`FORWARD`] intervals after.
    pub forward: Vec<u64>,
}

/// Builds every point's markers. `labels` = the cluster of each interval. Without `fallback`
/// every point is its representative, delimited at its own cuts; with it, a representative no
/// marker delimits gives way to the first of its stand-ins (per chosen point, in order) that
/// one does, then (for the points `forward` names) to the first of the [`FORWARD`] intervals
/// after it that one does, each saying whom it stands in for; else it reaches up to [`REACH`]
/// cuts around.
pub fn build(
    placer: &Placer,
    profile: &Profile,
    chosen: &[Chosen],
    fallback: Option<&Fallback>,
    labels: &[usize],
    lengths: [u64; 2],
    entry: Option<&Entry>,
) -> Result<Vec<Point>, PipelineError> {
    let one = |c: &Chosen, reach| build_one(placer, profile, c, labels, lengths, entry, reach);
    let mut points = Vec::new();
    for (n, c) in chosen.iter().enumerate() {
        let point = match (one(c, 0), fallback) {
            (Err(PipelineError::NoMarker { .. }), Some(fallback)) => {
                let after = match fallback.forward.contains(&c.interval) {
                    true => {
                        c.interval + 1..(c.interval + 1 + FORWARD).min(profile.lengths.len() as u64)
                    }
                    false => 0..0,
                };
                let stood = fallback.stand_ins[n]
                    .iter()
                    .copied()
                    .chain(after)
                    .find_map(|other| {
                        let mut p = one(
                            &Chosen {
                                interval: other,
                                ..*c
                            },
                            0,
                        )
                        .ok()?;
                        p.stand_in_for = Some(c.interval);
                        Some(p)
                    });
                match stood {
                    Some(p) => p,
                    None => one(c, REACH)?,
                }
            }
            (point, _) => point?,
        };
        points.push(point);
    }
    Ok(points)
}

/// One point's markers, at interval `c.interval`; `lengths` = the interval and the warmup;
/// `reach` = how many cuts before or after the interval's own a marker may be taken from.
fn build_one(
    placer: &Placer,
    profile: &Profile,
    c: &Chosen,
    labels: &[usize],
    [interval, warmup]: [u64; 2],
    entry: Option<&Entry>,
    reach: u64,
) -> Result<Point, PipelineError> {
    let n_warm = warmup_intervals(warmup, interval);
    let i = c.interval;
    let missing = |j: u64, what: &str| PipelineError::NoMarker {
        interval: i,
        what: what.to_string(),
        cut: j,
    };
    // No marker at a cut of the interval (the start-up's intervals run in the loader): the
    // region reaches back or on to the nearest cut that has one; the multiplier follows its
    // length.
    let (from, s) = (i.saturating_sub(reach)..=i)
        .rev()
        .find_map(|j| placer.place(j).map(|p| (j, p)))
        .ok_or_else(|| missing(i, "start"))?;
    let last = (i + 1 + reach).min(profile.lengths.len() as u64);
    let (to, e) = (i + 1..=last)
        .find_map(|j| placer.place(j).map(|p| (j, p)))
        .ok_or_else(|| missing(i + 1, "end"))?;
    let start_position = profile.cut_at(from) + s.delta;
    let end_position = profile.cut_at(to) + e.delta;
    let length = end_position.saturating_sub(start_position).max(1);
    let cluster_instructions: u64 = labels
        .iter()
        .zip(&profile.lengths)
        .filter(|(l, _)| **l == c.cluster)
        .map(|(_, n)| n)
        .sum();
    // The end PC's executions before the start marker: before the cut, plus one if it
    // already ran between the cut and the start marker (more cannot be told apart).
    let end_before = placer
        .executions_before(from, e.block)
        .ok_or_else(|| missing(from, "end-relative"))?
        + u64::from(placer.seen_before(from, e.block, s.delta));
    let (warm, warmup_length) = if n_warm == 0 {
        (None, 0)
    } else {
        // The cut n_warm intervals back, or an earlier one when none of its blocks
        // qualifies (a little more warming does no harm); the entry point before cut 1.
        let back = from.checked_sub(n_warm).filter(|&w| w >= 1);
        let found = back.and_then(|w| {
            (w.saturating_sub(n_warm).max(1)..=w)
                .rev()
                .find_map(|w| placer.place(w).map(|p| (w, p)))
        });
        match (found, entry) {
            (Some((w, p)), _) => (
                Some(marker(placer, &p)?),
                start_position - (profile.cut_at(w) + p.delta),
            ),
            (None, Some(entry)) => (
                Some(Marker {
                    image: entry.image.clone(),
                    offset: format!("{:#x}", entry.offset),
                    count: 1,
                }),
                start_position,
            ),
            (None, None) => return Err(missing(back.unwrap_or(0), "warmup")),
        }
    };
    Ok(Point {
        cluster: c.cluster,
        interval: i,
        weight: c.weight,
        start_instruction: profile.cut_at(from),
        start: marker(placer, &s)?,
        end: marker(placer, &e)?,
        warmup: warm,
        length,
        start_position,
        warmup_length,
        multiplier: cluster_instructions as f64 / length as f64,
        end_relative: e.count.saturating_sub(end_before),
        thread_instructions: Vec::new(),
        functions: Vec::new(),
        stand_in_for: None,
    })
}

/// The run-time (or, for fixed-address executables, link-time) address of a marker: what
/// PC-based tools compare against.
pub fn pc_of(m: &Marker, images: &[ImageRow]) -> Result<u64, PipelineError> {
    let off = m.offset_value()?;
    let image = images.iter().find(|i| i.name == m.image);
    Ok(match image {
        Some(i) if !i.fixed => i.bias.wrapping_add(off),
        _ => off,
    })
}

/// Region ids as PinPoints numbers them: cluster + 1.
pub fn region_id(p: &Point) -> usize {
    p.cluster + 1
}

/// The PinPoints / LoopPoint `pcregions` CSV (gem5's `LooppointCsvLoader`, Sniper, Pin's
/// `-pcregions:in`).
pub fn write_csv(
    out: &mut impl Write,
    points: &[Point],
    images: &[ImageRow],
) -> Result<(), PipelineError> {
    let io = |e| PipelineError::io("regions.csv", e);
    writeln!(out, "# comment,thread-id,region-id,start-pc, start-image-name, start-image-offset, start-pc-count,end-pc, end-image-name, end-image-offset, end-pc-count,end-pc-relative-count, region-length, region-weight, region-multiplier, region-type").map_err(io)?;
    let k = points.iter().map(region_id).max().unwrap_or(0);
    for p in points {
        let r = region_id(p);
        writeln!(
            out,
            "cluster {} from slice {},global,{r},{:#x},{},{},{},{:#x},{},{},{},{},{},{},{},simulation",
            p.cluster,
            p.interval,
            pc_of(&p.start, images)?,
            csv_field(&p.start.image),
            p.start.offset,
            p.start.count,
            pc_of(&p.end, images)?,
            csv_field(&p.end.image),
            p.end.offset,
            p.end.count,
            p.end_relative,
            p.length,
            p.weight,
            p.multiplier
        )
        .map_err(io)?;
    }
    for p in points {
        let Some(w) = &p.warmup else { continue };
        let r = region_id(p);
        writeln!(
            out,
            "Warmup for regionid {r},global,{},{:#x},{},{},{},{:#x},{},{},{},0,{},0.0,0.0,warmup:{r}",
            k + r,
            pc_of(w, images)?,
            csv_field(&w.image),
            w.offset,
            w.count,
            pc_of(&p.start, images)?,
            csv_field(&p.start.image),
            p.start.offset,
            p.start.count,
            p.warmup_length
        )
        .map_err(io)?;
    }
    Ok(())
}

/// A marker as gem5's loader reads it: its run-time PC, image and link-time offset, and its
/// count under the key the loader expects (`global` for the simulated region, `count` for the
/// warmup's), with the end's count relative to the start beside it.
#[derive(serde::Serialize)]
struct JsonMarker {
    pc: u64,
    image: String,
    offset: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    global: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    relative: Option<u64>,
}

impl JsonMarker {
    fn of(m: &Marker, images: &[ImageRow], global: bool) -> Result<JsonMarker, PipelineError> {
        Ok(JsonMarker {
            pc: pc_of(m, images)?,
            image: m.image.clone(),
            offset: m.offset.clone(),
            global: global.then_some(m.count),
            count: (!global).then_some(m.count),
            relative: None,
        })
    }
}

#[derive(serde::Serialize)]
struct JsonSimulation {
    start: JsonMarker,
    end: JsonMarker,
}

#[derive(serde::Serialize)]
struct JsonWarmup {
    start: JsonMarker,
    end: JsonMarker,
    length: u64,
}

#[derive(serde::Serialize)]
struct JsonThread {
    thread: usize,
    instructions: u64,
}

#[derive(serde::Serialize)]
struct JsonFunction {
    name: String,
    instructions: u64,
}

/// One region of `regions.json`.
#[derive(serde::Serialize)]
struct JsonRegion {
    simulation: JsonSimulation,
    multiplier: f64,
    cluster: usize,
    weight: f64,
    interval: u64,
    length: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    threads: Option<Vec<JsonThread>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    functions: Option<Vec<JsonFunction>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warmup: Option<JsonWarmup>,
}

/// The layout gem5's `LooppointJsonLoader` reads, with bbvkit's own fields beside it: an
/// object of regions by id, every object's keys in sorted order.
pub fn write_json(
    out: &mut impl Write,
    points: &[Point],
    images: &[ImageRow],
) -> Result<(), PipelineError> {
    let mut doc = std::collections::BTreeMap::new();
    for p in points {
        let mut end = JsonMarker::of(&p.end, images, true)?;
        end.relative = Some(p.end_relative);
        let multi = !p.thread_instructions.is_empty();
        let region = JsonRegion {
            simulation: JsonSimulation {
                start: JsonMarker::of(&p.start, images, true)?,
                end,
            },
            multiplier: p.multiplier,
            cluster: p.cluster,
            weight: p.weight,
            interval: p.interval,
            length: p.length,
            threads: multi.then(|| {
                (p.thread_instructions.iter().enumerate())
                    .map(|(t, &n)| JsonThread {
                        thread: t + 1,
                        instructions: n,
                    })
                    .collect()
            }),
            functions: multi.then(|| {
                (p.functions.iter())
                    .map(|(f, n)| JsonFunction {
                        name: f.clone(),
                        instructions: *n,
                    })
                    .collect()
            }),
            warmup: match &p.warmup {
                Some(w) => Some(JsonWarmup {
                    start: JsonMarker::of(w, images, false)?,
                    end: JsonMarker::of(&p.start, images, false)?,
                    length: p.warmup_length,
                }),
                None => None,
            },
        };
        doc.insert(region_id(p).to_string(), region);
    }
    // Through a JSON value, whose objects keep their keys sorted: the order bbv has always
    // written and gem5's reader does not care about.
    let doc = serde_json::to_value(&doc).map_err(|e| PipelineError::Invalid(e.to_string()))?;
    serde_json::to_writer_pretty(&mut *out, &doc)
        .map_err(|e| PipelineError::io(bbv_rundir::files::REGIONS_JSON, e.into()))?;
    writeln!(out).map_err(|e| PipelineError::io(bbv_rundir::files::REGIONS_JSON, e))
}

/// Sniper's region-of-interest controls, one region per line.
pub fn write_sniper(out: &mut impl Write, points: &[Point]) -> std::io::Result<()> {
    writeln!(
        out,
        "# region cluster weight multiplier: Sniper's --trace-args controls (run with -ssimuserroi --roi-script)"
    )?;
    for p in points {
        let control = |kind: &str, m: &Marker| {
            let value = format!(
                "{kind}:address:{}+{}:count{}:global",
                m.image, m.offset, m.count
            );
            shell_word(&value).into_owned()
        };
        writeln!(
            out,
            "{} {} {} {} -control {} -control {}",
            region_id(p),
            p.cluster,
            p.weight,
            p.multiplier,
            control("start", &p.start),
            control("stop", &p.end),
        )?;
    }
    Ok(())
}

/// A CSV field as RFC 4180 has it: as is, or in double quotes (inner ones doubled) when it
/// holds a comma, a quote or a line break, so that an image named `g,st` stays one field.
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// A word as a POSIX shell reads it: as is when it holds only characters no shell treats
/// specially, else in single quotes (inner ones written '\''), so that Sniper's command line
/// keeps an image named `g st` in one argument.
fn shell_word(s: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-+.,:/@%=".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.into()
    } else {
        format!("'{}'", s.replace('\'', "'\\''")).into()
    }
}

/// gem5's instructions for the classic SimPoint flow and the marker flow.
pub fn gem5_readme(
    program: &str,
    args: &[String],
    interval: u64,
    warmup: u64,
    count_rep: &str,
) -> String {
    let args = args.join(" ");
    format!(
        "gem5 hand-off written by bbv (tested against gem5 v24.1's option names)

Program: {program} {args}
Interval: {interval} instructions; warmup: {warmup} instructions; rep string instructions
counted per {count_rep}.

1. By markers (recommended: they survive ASLR, environment changes and counting rules).
   ../regions.json is the layout gem5's LoopPoint loader reads; ../regions.csv the PinPoints
   CSV. With the gem5 standard library:

     from gem5.resources.looppoint import LooppointJsonLoader
     looppoint = LooppointJsonLoader(looppoint_file=\"regions.json\")
     # board.set_se_looppoint_workload(..., looppoint=looppoint) and the
     # LoopPoint checkpoint / restore example configs of gem5 v24.1

   PCs of position-independent images are the addresses of the profiling run under QEMU;
   fixed-address (non-PIE, e.g. static) executables give link-time addresses, which is what
   gem5 SE runs see.

2. By instruction counts (SimPoint checkpoints): simpoints and weights here are SimPoint's
   files, which gem5 reads line by line:

     build/X86/gem5.opt configs/deprecated/example/se.py --cpu-type=AtomicSimpleCPU \\
       --take-simpoint-checkpoints=simpoints,weights,{interval},{warmup} \\
       --cmd={program} --options=\"{args}\"
     build/X86/gem5.opt configs/deprecated/example/se.py --restore-simpoint-checkpoint \\
       -r N --checkpoint-dir m5out --cmd={program} --options=\"{args}\"

   gem5 counts instructions its own way (rep string instructions once per iteration, and its
   own environment), so count-based starts drift; profile with --count-rep iteration to
   narrow the gap, or use the markers.
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundir::{BlockRow, Window};
    use std::collections::{BTreeSet, HashSet};
    use std::path::PathBuf;

    /// Five intervals of 10 instructions (block 3 twice each); every cut has a marker but
    /// cut 2, in whose window nothing qualifies.
    fn placer_parts(dir: &std::path::Path) -> (Vec<BlockRow>, Vec<ImageRow>, Vec<Window>, Profile) {
        let path = dir.join("bb");
        std::fs::write(&path, "T:3:10\n".repeat(5)).unwrap();
        // Rows are indexed by id - 1; blocks 1 and 2 never run.
        let blocks = (1..=3)
            .map(|id| BlockRow {
                id,
                image: Some("prog".into()),
                offset: 0x40 * u64::from(id),
                instructions: 5,
                function: "f".into(),
                bytes: 0x14,
                rep: false,
                varies: false,
            })
            .collect();
        let images = vec![ImageRow {
            name: "prog".into(),
            path: PathBuf::from("/x/prog"),
            fixed: false,
            build_id: None,
            bias: 0,
        }];
        let windows = [0, 1, 3, 4]
            .iter()
            .map(|&j| Window {
                index: j,
                cut_at: 10 * j,
                events: vec![(3, 0)],
            })
            .collect();
        let cuts: BTreeSet<u64> = (0..=5).collect();
        let profile = Profile::read(&path, 3, &cuts, &BTreeSet::new()).unwrap();
        (blocks, images, windows, profile)
    }

    #[test]
    fn a_representative_without_a_marker_gives_way_to_the_nearest_member_then_reaches() {
        let dir = tempfile::tempdir().unwrap();
        let (blocks, images, windows, profile) = placer_parts(dir.path());
        let placer = Placer::new(&blocks, &images, &windows, HashSet::new(), &profile, 1000);
        let chosen = [Chosen {
            cluster: 1,
            interval: 2,
            weight: 0.6,
        }];
        // Interval 2 (no start marker) is nearest the centre; 3 comes next, then 1.
        let distances = [0.0, 0.3, 0.1, 0.2, 0.0];
        let place = |labels: &[usize]| {
            let alts = Fallback {
                stand_ins: stand_ins(&chosen, labels, &distances),
                forward: Vec::new(),
            };
            let p = build(
                &placer,
                &profile,
                &chosen,
                Some(&alts),
                labels,
                [10, 0],
                None,
            );
            (alts.stand_ins, p.unwrap())
        };
        // Interval 2 (no start marker) is nearest the centre; 3 comes next, then 1.
        let (alts, p) = place(&[0, 1, 1, 1, 2]);
        assert_eq!(alts, vec![vec![3, 1]]);
        assert_eq!((p[0].interval, p[0].stand_in_for), (3, Some(2)));
        assert_eq!((p[0].start_instruction, p[0].length), (30, 10));
        assert!((p[0].multiplier - 3.0).abs() < 1e-9);
        // Alone in its cluster, it reaches back to cut 1: a region of two intervals, whose
        // multiplier follows.
        let (alts, p) = place(&[0, 2, 1, 2, 2]);
        assert_eq!(alts, vec![Vec::<u64>::new()]);
        assert_eq!((p[0].interval, p[0].stand_in_for), (2, None));
        assert_eq!((p[0].start_instruction, p[0].length), (10, 20));
        assert!((p[0].multiplier - 0.5).abs() < 1e-9);
        // Allowed forward (a pass found no marker for it even so), the first interval after
        // it that one delimits stands in for it, before any reaching.
        let forward = Fallback {
            stand_ins: vec![Vec::new()],
            forward: vec![2],
        };
        let labels = [0, 2, 1, 2, 2];
        let p = build(
            &placer,
            &profile,
            &chosen,
            Some(&forward),
            &labels,
            [10, 0],
            None,
        );
        let p = p.unwrap();
        assert_eq!((p[0].interval, p[0].stand_in_for), (3, Some(2)));
        assert_eq!((p[0].start_instruction, p[0].length), (30, 10));
    }

    /// Names with commas, quotes, spaces and non-ASCII stay one CSV field and one shell word:
    /// the shell itself reads each word back as it was.
    #[test]
    fn hand_off_names_are_quoted_as_their_readers_parse_them() {
        assert_eq!(csv_field("gzip"), "gzip");
        assert_eq!(csv_field("g,st"), "\"g,st\"");
        assert_eq!(csv_field("a\"b"), "\"a\"\"b\"");
        let plain = "start:address:libc.so.6+0x1a2b:count3:global";
        assert_eq!(shell_word(plain), plain);
        for name in ["g st", "it's", "a\"b;c", "ünï", "$(x)", "", "a\\b"] {
            let word = shell_word(name);
            let o = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s' {word}"))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&o.stdout), name, "{word}");
        }
    }
}
