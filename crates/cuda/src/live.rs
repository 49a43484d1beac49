//! The raw output of bbv's CUPTI injection library (`tools/cupti/bbv_cupti.cc`): `launches.txt`,
//! one record per line, and the cubins it names.

use std::path::{Path, PathBuf};

use bbv_files::input::Lines;

use crate::CudaError;

/// The longest line accepted (a kernel name can be long; nothing else is).
const MAX_LINE: usize = 1 << 20;

/// The counts CUPTI gave for one SASS instruction in one launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcCount {
    /// CRC of the cubin (names `cubins/CRC.cubin`).
    pub crc: u32,
    /// CUPTI's function index in the module.
    pub function_index: u32,
    /// CUPTI's function name (the kernel, or a subroutine).
    pub function: String,
    /// Offset of the instruction in that function.
    pub offset: u64,
    /// One value per collected metric, in [`LiveRun::metrics`]' order.
    pub values: Vec<u64>,
}

/// One counted launch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    /// 0-based launch number in the process (all launches, counted or not).
    pub number: u64,
    /// Kernel name, mangled.
    pub name: String,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Dynamic shared memory.
    pub shmem: u64,
    /// Stream handle.
    pub stream: u64,
    /// Microseconds from the launch call to the end of the kernel (instrumented).
    pub micros: u64,
    /// Per-instruction counts.
    pub pcs: Vec<PcCount>,
}

/// A launch run but not counted (outside --launches or --kernels, or any launch of a timing
/// run).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// 0-based launch number in the process.
    pub number: u64,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Kernel name, mangled.
    pub name: String,
}

/// A kernel's run on the GPU, from CUPTI's activity records (timing runs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelTime {
    /// CUPTI's correlation id: the launch's (or, for a graph's kernels, the graph launch's).
    pub correlation: u32,
    /// Start and end on the GPU's clock, in nanoseconds.
    pub start: u64,
    /// See `start`.
    pub end: u64,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory per block, in bytes.
    pub static_shared: u64,
    /// Dynamic shared memory per block, in bytes.
    pub dynamic_shared: u64,
}

/// Everything one `bbv gpu run` collected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveRun {
    /// The GPU's chip name.
    pub chip: Option<String>,
    /// The collected metrics' names, in the values' order.
    pub metrics: Vec<String>,
    /// Counted launches in order.
    pub launches: Vec<Launch>,
    /// Launches run but not counted (outside --launches or --kernels; in a timing run, all).
    pub skipped: Vec<Skipped>,
    /// Graph launches seen (their kernels are not counted).
    pub graphs: u64,
    /// A timing run (`BBV_GPU_TIMES=1`): nothing counted, every kernel timed.
    pub timing: bool,
    /// Launch numbers and their CUPTI correlation ids (timing runs).
    pub correlations: Vec<(u64, u32)>,
    /// Graph launches' correlation ids (timing runs).
    pub graph_correlations: Vec<u32>,
    /// Kernels' runs on the GPU (timing runs), in the order CUPTI delivered them.
    pub kernels: Vec<KernelTime>,
    /// Modules loaded: cubin CRC and size.
    pub modules: Vec<(u32, u64)>,
    /// What CUPTI refused, in order.
    pub errors: Vec<String>,
    /// The process reached its exit handler (`done` line): the file is complete.
    pub complete: bool,
}

impl LiveRun {
    /// The column of metric `name`, if collected.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.metrics.iter().position(|m| m == name)
    }

    /// The cubin file of `crc` in the raw folder `dir`.
    pub fn cubin(dir: &Path, crc: u32) -> PathBuf {
        dir.join("cubins").join(format!("{crc:08x}.cubin"))
    }
}

/// Reads `launches.txt`.
pub fn read(path: &Path) -> Result<LiveRun, CudaError> {
    let mut lines = Lines::open(path, MAX_LINE)?;
    let mut run = LiveRun::default();
    let mut open: Option<Launch> = None;
    let mut first = true;
    while let Some((no, line)) = lines.next_line()? {
        let err = |message: String| CudaError::Parse {
            path: path.to_path_buf(),
            line: no,
            message,
        };
        if first {
            if line != "bbv-cupti 1" {
                return Err(err(format!(
                    "not a bbv-cupti file (first line {})",
                    bbv_files::input::quote(line.as_bytes())
                )));
            }
            first = false;
            continue;
        }
        record(line, &mut run, &mut open, &err)?;
    }
    if first {
        return Err(CudaError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: "empty file".into(),
        });
    }
    if let Some(l) = open {
        // The process died inside a launch: that launch's counts are incomplete.
        run.errors.push(format!(
            "launch {} has no end: its counts were cut off",
            l.number
        ));
        run.complete = false;
    }
    Ok(run)
}

/// One record after the header.
fn record(
    line: &str,
    run: &mut LiveRun,
    open: &mut Option<Launch>,
    err: &impl Fn(String) -> CudaError,
) -> Result<(), CudaError> {
    let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
    let mut f = Fields::new(rest, err);
    match kind {
        "chip" => run.chip = Some(rest.to_string()),
        "metric" => {
            let column: usize = f.num()?;
            if column != run.metrics.len() {
                return Err(err(format!("metric column {column} out of order")));
            }
            run.metrics.push(f.rest()?.to_string());
        }
        "module" => {
            let crc = f.hex()?;
            run.modules.push((crc, f.num()?));
        }
        "launch" => {
            if open.is_some() {
                return Err(err("a launch inside another".into()));
            }
            *open = Some(Launch {
                number: f.num()?,
                grid: [f.num()?, f.num()?, f.num()?],
                block: [f.num()?, f.num()?, f.num()?],
                shmem: f.num()?,
                stream: f.num()?,
                micros: f.num()?,
                name: f.rest()?.to_string(),
                pcs: Vec::new(),
            });
        }
        "pc" => {
            let l = open
                .as_mut()
                .ok_or_else(|| err("a pc line outside a launch".into()))?;
            let crc = f.hex()?;
            let function_index = f.num()?;
            let offset = f.num()?;
            let values = (0..run.metrics.len())
                .map(|_| f.num())
                .collect::<Result<Vec<u64>, _>>()?;
            l.pcs.push(PcCount {
                crc,
                function_index,
                function: f.rest()?.to_string(),
                offset,
                values,
            });
        }
        "end" => {
            let l = open
                .take()
                .ok_or_else(|| err("an end outside a launch".into()))?;
            let n: u64 = f.num()?;
            let records: usize = f.num()?;
            if n != l.number || records != l.pcs.len() {
                return Err(err(format!(
                    "launch {} ends as {n} with {records} records, {} read",
                    l.number,
                    l.pcs.len()
                )));
            }
            run.launches.push(l);
        }
        "skipped" => run.skipped.push(Skipped {
            number: f.num()?,
            grid: [f.num()?, f.num()?, f.num()?],
            block: [f.num()?, f.num()?, f.num()?],
            name: f.rest()?.to_string(),
        }),
        "graph" => {
            f.num::<u64>()?;
            if !f.is_empty() {
                run.graph_correlations.push(f.num()?);
            }
            run.graphs += 1;
        }
        "timing" => run.timing = true,
        "corr" => run.correlations.push((f.num()?, f.num()?)),
        "kernel" => run.kernels.push(kernel_time(&mut f, err)?),
        "error" => run.errors.push(rest.to_string()),
        "done" => run.complete = true,
        _ => {
            return Err(err(format!(
                "unknown record {}",
                bbv_files::input::quote(kind.as_bytes())
            )))
        }
    }
    Ok(())
}

/// A `kernel` record's fields.
fn kernel_time<E: Fn(String) -> CudaError>(
    f: &mut Fields<'_, E>,
    err: &E,
) -> Result<KernelTime, CudaError> {
    let k = KernelTime {
        correlation: f.num()?,
        start: f.num()?,
        end: f.num()?,
        registers: f.num()?,
        static_shared: f.num()?,
        dynamic_shared: f.num()?,
    };
    if k.end <= k.start {
        return Err(err(format!(
            "kernel of correlation {} ends ({}) no later than it starts ({}): no duration",
            k.correlation, k.end, k.start
        )));
    }
    Ok(k)
}

/// Space-separated fields of one record.
struct Fields<'a, E: Fn(String) -> CudaError> {
    rest: &'a str,
    err: &'a E,
}

impl<'a, E: Fn(String) -> CudaError> Fields<'a, E> {
    fn new(rest: &'a str, err: &'a E) -> Self {
        Fields { rest, err }
    }

    fn word(&mut self) -> Result<&'a str, CudaError> {
        let (w, r) = self.rest.split_once(' ').unwrap_or((self.rest, ""));
        if w.is_empty() {
            return Err((self.err)("a field is missing".into()));
        }
        self.rest = r;
        Ok(w)
    }

    fn num<T: std::str::FromStr>(&mut self) -> Result<T, CudaError> {
        let w = self.word()?;
        w.parse().map_err(|_| {
            (self.err)(format!(
                "{} is not a number in range",
                bbv_files::input::quote(w.as_bytes())
            ))
        })
    }

    fn hex(&mut self) -> Result<u32, CudaError> {
        let w = self.word()?;
        u32::from_str_radix(w, 16).map_err(|_| {
            (self.err)(format!(
                "{} is not a CRC",
                bbv_files::input::quote(w.as_bytes())
            ))
        })
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn rest(&mut self) -> Result<&'a str, CudaError> {
        if self.rest.is_empty() {
            return Err((self.err)("a name is missing".into()));
        }
        Ok(std::mem::take(&mut self.rest))
    }
}
