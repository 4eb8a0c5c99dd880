//! The hypervisor's heap: boot-time and partition (re)start allocations
//! (parsed host description, partition objects, stage-2 tables, generated
//! DTBs). It lives in BSS so it exists before the host DTB is parsed.
//! Nothing on a trap or interrupt hot path allocates.

use linked_list_allocator::LockedHeap;

const HEAP_SIZE: usize = 4 << 20;

#[repr(C, align(4096))]
struct HeapArea([u8; HEAP_SIZE]);

static mut HEAP_AREA: HeapArea = HeapArea([0; HEAP_SIZE]);

/// The allocator's lock is shared by all CPUs; it is taken only at boot and
/// when a partition is (re)started, never on a trap or interrupt path.
#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();

pub fn init() {
    let start = core::ptr::addr_of_mut!(HEAP_AREA) as *mut u8;
    // SAFETY: HEAP_AREA is used by nothing but the allocator, and init runs
    // once on the boot CPU before anything allocates.
    unsafe { HEAP.lock().init(start, HEAP_SIZE) };
}

pub fn free_bytes() -> usize {
    HEAP.lock().free()
}
