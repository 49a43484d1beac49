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

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own code, its heap and an address nothing maps, looked up in the test
    /// process's maps as the plugin looks up the guest's code in QEMU's.
    #[test]
    fn addresses_are_found_in_the_process_maps() {
        let code = addresses_are_found_in_the_process_maps as *const () as u64;
        let (idx, offset) = locate(code).expect("the test's code is mapped from its file");
        let exe = std::env::current_exe().unwrap();
        let exe = std::fs::canonicalize(exe).unwrap();
        assert_eq!(
            file_name(idx).as_deref(),
            exe.file_name().and_then(|n| n.to_str())
        );
        assert_eq!(path_at(code).as_deref(), exe.to_str());
        assert!(paths().iter().any(|p| Some(p.as_str()) == exe.to_str()));
        // The file offset lies inside the executable, below the code's own address span.
        assert!(offset < std::fs::metadata(&exe).unwrap().len());
        let (start, end) = area_at(code).unwrap();
        assert!(start <= code && code < end && start % 4096 == 0);
        // Heap memory is anonymous: found as an area, with no file.
        let heap = Box::new([0u8; 64]);
        let at = heap.as_ptr() as u64;
        assert!(area_at(at).is_some());
        assert_eq!(path_at(at), None);
        assert_eq!(locate(8), None, "page zero is never mapped");
    }
}
