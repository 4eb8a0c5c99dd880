//! The hypervisor's heap: boot-time, partition (re)start and run-time
//! configuration allocations (parsed host description, partition objects,
//! stage-2 tables, generated DTBs; a destroyed partition's come back). It is the image's uninitialised tail after the payload
//! (`pinfold_hv::memmap::image_layout`), so it exists before the host DTB
//! is parsed without being part of the file or of the BSS cleared at
//! boot; the allocator writes its own free-list headers and assumes
//! nothing about the memory's contents (`alloc_zeroed` clears what it
//! hands out). Nothing on a trap or interrupt hot path allocates.

use linked_list_allocator::LockedHeap;

/// The allocator's lock is shared by all CPUs; it is taken only at boot,
/// when a partition is (re)started and by management calls, never on a
/// trap or interrupt path.
#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

/// Hands `[start, start + size)` to the allocator.
///
/// # Safety
///
/// The range is RAM that nothing else uses for as long as the hypervisor
/// runs (the heap part of the image's layout), and `init` runs once, on the
/// boot CPU, before anything allocates.
pub unsafe fn init(start: u64, size: u64) {
    // SAFETY: the caller gives the range to the allocator alone.
    unsafe { HEAP.lock().init(start as *mut u8, size as usize) };
}

/// Stage-2 tables in hypervisor heap memory (identity mapped at EL2, so a
/// table's address is its physical address).
pub struct HeapTables;

impl pinfold_hv::stage2::TableMemory for HeapTables {
    fn alloc_table(&mut self) -> Option<pinfold_hv::addr::PhysAddr> {
        alloc_zeroed(4096, 4096)
    }
    fn alloc_root(&mut self) -> Option<pinfold_hv::addr::PhysAddr> {
        alloc_zeroed(8192, 8192)
    }
    fn read(&self, table: pinfold_hv::addr::PhysAddr, index: usize) -> u64 {
        // SAFETY: `table` came from alloc_table/alloc_root and index is
        // within it (Stage2 only indexes its own tables).
        unsafe { (table.0 as *const u64).add(index).read_volatile() }
    }
    fn write(&mut self, table: pinfold_hv::addr::PhysAddr, index: usize, value: u64) {
        // SAFETY: as in `read`; one 64-bit store, so no torn descriptor.
        unsafe { (table.0 as *mut u64).add(index).write_volatile(value) }
    }
    fn free_table(&mut self, table: pinfold_hv::addr::PhysAddr) {
        free(table, 4096, 4096);
    }
    fn free_root(&mut self, root: pinfold_hv::addr::PhysAddr) {
        free(root, 8192, 8192);
    }
}

/// Give back what `alloc_zeroed(size, align)` returned.
pub(crate) fn free(at: pinfold_hv::addr::PhysAddr, size: usize, align: usize) {
    if let Ok(layout) = core::alloc::Layout::from_size_align(size, align) {
        // SAFETY: `at` came from `alloc_zeroed` with this layout (the core
        // frees a destroyed partition's tables once, after no CPU runs on
        // them: `Stage2::release`).
        unsafe { alloc::alloc::dealloc(at.0 as *mut u8, layout) };
    }
}

pub(crate) fn alloc_zeroed(size: usize, align: usize) -> Option<pinfold_hv::addr::PhysAddr> {
    let layout = core::alloc::Layout::from_size_align(size, align).ok()?;
    // SAFETY: non-zero size layout.
    let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        None
    } else {
        Some(pinfold_hv::addr::PhysAddr(ptr as u64))
    }
}
