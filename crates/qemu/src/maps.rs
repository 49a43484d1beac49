//! Which mapped file (and offset in it) a host address belongs to, from `/proc/self/maps`.
//!
//! In user mode the guest's code is mapped into QEMU's own address space, so QEMU's maps list
//! the main binary, ld.so and every shared library the guest mapped.

use std::sync::Mutex;

struct Region {
    start: u64,
    end: u64,
    offset: u64,
    /// Index into `Maps::paths`, or `None` for anonymous memory (JIT code, the vDSO, ...).
    path: Option<u32>,
}

#[derive(Default)]
struct Maps {
    regions: Vec<Region>,
    paths: Vec<String>,
}

static MAPS: Mutex<Maps> = Mutex::new(Maps {
    regions: Vec::new(),
    paths: Vec::new(),
});

impl Maps {
    fn find(&self, addr: u64) -> Option<&Region> {
        let i = self.regions.partition_point(|r| r.start <= addr);
        let r = self.regions.get(i.checked_sub(1)?)?;
        (addr < r.end).then_some(r)
    }

    fn reload(&mut self) {
        let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        self.regions.clear();
        for line in text.lines() {
            let mut f = line.splitn(6, ' ');
            let (Some(range), Some(_perms), Some(offset), Some(_dev), Some(_inode)) =
                (f.next(), f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let path = f.next().unwrap_or("").trim_start();
            let Some((s, e)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end), Ok(offset)) = (
                u64::from_str_radix(s, 16),
                u64::from_str_radix(e, 16),
                u64::from_str_radix(offset, 16),
            ) else {
                continue;
            };
            let path = if path.starts_with('/') {
                let idx = match self.paths.iter().position(|p| p == path) {
                    Some(i) => i,
                    None => {
                        self.paths.push(path.to_string());
                        self.paths.len() - 1
                    }
                };
                Some(idx as u32)
            } else {
                None
            };
            self.regions.push(Region {
                start,
                end,
                offset,
                path,
            });
        }
    }
}

/// The file a host address is mapped from and the offset in that file, re-reading the maps when
/// the address is not in a known region (a library mapped since the last look).
pub fn locate(haddr: u64) -> Option<(u32, u64)> {
    let mut maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    if maps.find(haddr).is_none() {
        maps.reload();
    }
    let r = maps.find(haddr)?;
    Some((r.path?, haddr - r.start + r.offset))
}

/// The path of the file mapped at host address `haddr`.
pub fn path_at(haddr: u64) -> Option<String> {
    let mut maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    maps.reload();
    let r = maps.find(haddr)?;
    maps.paths.get(r.path? as usize).cloned()
}

/// The host mapping holding `haddr`: (start, end).
pub fn area_at(haddr: u64) -> Option<(u64, u64)> {
    let mut maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    maps.reload();
    maps.find(haddr).map(|r| (r.start, r.end))
}

/// Paths of the mapped files, indexed as [`locate`] returns them.
pub fn paths() -> Vec<String> {
    MAPS.lock().unwrap_or_else(|e| e.into_inner()).paths.clone()
}

/// The file name (last path component) of mapped file `idx`, as markers name images.
pub fn file_name(idx: u32) -> Option<String> {
    let maps = MAPS.lock().unwrap_or_else(|e| e.into_inner());
    let p = maps.paths.get(idx as usize)?;
    Some(p.rsplit('/').next().unwrap_or(p).to_string())
}
