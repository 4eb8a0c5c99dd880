//! Builds the management partition image: Hermit 0.11 from crates.io, the std application on it, and our EL1 loader around both.
//!
//! Steps, each cached under `target/` so a second run only asks cargo
//! whether anything changed:
//!
//! 1. the pinned nightly (Hermit 0.11 builds only with it; kernel and
//!    application must share one compiler);
//! 2. `hermit-kernel-0.11.0.crate` from crates.io, checked against a pinned
//!    SHA-256 and unpacked into `target/hermit/`;
//! 3. the kernel as a static library for aarch64-unknown-none-softfloat;
//! 4. `libhermit.a` the way Hermit's own (unpublished) xtask makes it: every
//!    kernel symbol renamed with a `hermit` prefix except the entry points
//!    and the `sys_*` ABI, our C-library builtins appended, and EI_OSABI set
//!    to ELFOSABI_STANDALONE in every member (the linker copies it into the
//!    application, and hermit-entry checks it);
//! 5. the application (`manager/app`) for aarch64-unknown-hermit, linked
//!    against that library by its build.rs;
//! 6. the loader (`manager/loader`, stable toolchain) embedding the
//!    application, flattened to `target/pinfold/manager.bin`.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime};

/// The toolchain Hermit 0.11 builds with (its own rust-toolchain.toml).
pub const HERMIT_TOOLCHAIN: &str = "nightly-2025-03-15";
/// The last real Hermit kernel on crates.io (0.12 was never published,
/// 0.13 is an empty stub).
const KERNEL_CRATE: &str = "hermit-kernel-0.11.0";
/// The kernel as a dependency, for `cargo fetch` to download through the
/// ordinary registry client.
const KERNEL_DEPENDENCY: &str =
    "hermit-kernel = { version = \"=0.11.0\", default-features = false }";
/// SHA-256 of the .crate file (equal to the `cksum` in the crates.io index).
const KERNEL_SHA256: &str = "e5a914a929e843e539267f5f8d1b6b53add9587db6caa5547b7bff16edba8e03";
/// Our edits to the kernel source, applied right after unpacking: (file,
/// text that must occur exactly once, replacement).
///
/// QEMU's `-device virtio-net-pci` on the virt machine's root bus is a
/// *transitional* device (PCI device ID 0x1000) unless given
/// `disable-legacy=on`; Hermit 0.11 skips every ID below 0x1040 although a
/// transitional device offers the modern (virtio 1.0) interface as well,
/// which is all Hermit's driver uses. So treat 0x1000 as the modern network
/// device 0x1041.
///
/// The other four fix a race in Hermit 0.11's scheduler that panicked the
/// manager under host load ("scheduler/task.rs:690: entered unreachable
/// code"): a futex waiter with a timeout is made ready by its timer but
/// stays in the futex's queue until it runs and removes itself; a
/// `futex_wake` in that window pops its handle and asks the blocked-task
/// list to wake a task that is no longer in it. Waking a task that is
/// already awake is now nothing (the waiter sees a wakeup, which futex
/// callers must tolerate anyway) instead of a panic.
///
/// The two after them make the NIC's start independent of what firmware (or the
/// manager's previous run) left in it. Hermit 0.11 writes device_status = 0
/// and goes on at once, while virtio 1.x (4.1.4.3.2) requires the driver to
/// wait until the reset reads back 0; and it programs the BARs with the
/// function's decoding still on and then ORs its bits into COMMAND, so an
/// INTx Disable (or a bus-master bit) firmware set would survive. Now
/// COMMAND is cleared before the BARs move and the reset is waited for.
/// (The hypervisor quiesces and resets the functions before the manager
/// starts as well; these keep Hermit right on its own.)
///
/// The next five are for throughput (docs/PERFORMANCE.md, "Manager upload
/// throughput"). Every virtio-net packet, received or sent, takes two
/// one-page buffers from `DeviceAlloc` (header and frame) and gives them
/// back once used; Hermit mapped each page afresh and unmapped it on free,
/// and each unmap is a broadcast TLB invalidation (`tlbi vale1is`; the
/// hypervisor's HCR_EL2.FB makes even a local one broadcast), which under
/// QEMU's multi-threaded TCG waits for every vCPU of the machine: 61% of
/// the manager's samples during an upload sat on that instruction. Freed
/// single pages now stay mapped in a small cache (at most
/// `DEVICE_PAGE_CACHE` of them, 4 MiB) that the next one-page allocation
/// takes first, so the steady state maps and invalidates nothing. And a
/// received frame is copied into its `Vec` with one `extend_from_slice`
/// per buffer instead of a byte-wise `flatten().collect()`. The
/// allocator no longer pads every allocation to a 128-byte cache line (one
/// CPU, no false sharing to avoid), and the virtio-net queues hold 256
/// buffers of 64 KiB instead of 2048 (8.5 MiB of NIC buffers, not 68 MiB).
///
/// The next four end the TCP close stall: Hermit 0.11's `Drop` of a TCP
/// socket blocked its thread until the close handshake was over, with no
/// timeout (`block_on(close, None)`), so a peer whose FIN crossed ours, or
/// that never answered, held the closing thread for seconds or for good,
/// and the manager's server with it. Now a drop never waits: a connection
/// still open is closed (smoltcp sends the FIN after what is queued) and
/// handed to the network task (`LINGERING`), which frees it once the
/// handshake is done and aborts it (RST) after `LINGER_MS` if it is not.
/// And `accept` no longer hands out a socket still in SYN-RECEIVED, which
/// smoltcp turns back into a listener when a RST comes (the connection the
/// server then holds is none).
///
/// The last one keeps a full send queue from killing the manager: Hermit
/// 0.11's `transmit` always hands smoltcp a token, and `send_packet`
/// unwrapped the virtqueue's `dispatch`, so when QEMU had not yet taken
/// the 128 frames the 256 descriptors hold (header and frame each), the
/// next one panicked ("Virtqs memory pool is exhausted!", seen once in the
/// `load` case with 100 clients at once). Now that frame is dropped (TCP
/// retransmits it) and the first drop is logged. Every frame takes two
/// descriptors, so a failed dispatch fails on its first and leaks none.
///
/// The next one seeds Hermit's entropy pool (`entropy::read`, behind
/// getrandom, std's HashMap keys, `sys_secure_rand*`) from the hypervisor:
/// Hermit 0.11's `seed_entropy` on aarch64 is `None`, so every read fell
/// back to a Park-Miller generator seeded from the boot time while
/// reporting success. It now asks ENTROPY (ABI 3.1, HVC #0, function
/// 0xC600_001A) for 32 bytes into a kernel static, found by its physical
/// address; Hermit reseeds from it every second. Without a source
/// (NOT_FOUND) it stays `None` and Hermit keeps its old fallback for
/// HashMap keys; the manager never makes a credential from that (it calls
/// ENTROPY itself and refuses without it).
///
/// Patch 24 lets the virtio-net driver accept VIRTIO_F_ACCESS_PLATFORM
/// when the device offers it (QEMU `iommu_platform=on`: the device's DMA
/// then goes through the SMMU instead of around it; docs/DEVICES.md). The
/// manager's addresses are its IPAs, which its stage 2 maps 1:1, so the
/// driver needs nothing else; a device that does not offer it is driven as
/// before.
///
/// The last one (25) drops a frame when the virtio-net send queue is
/// full instead of panicking (see the send-queue paragraph above).
const KERNEL_PATCHES: [(&str, &str, &str); 25] = [
    (
        "src/drivers/virtio/transport/pci.rs",
        "\tlet device_id = device.device_id();\n\n\tif device_id < 0x1040 {",
        "\tlet device_id = device.device_id();\n\
         \t// Pinfold: transitional virtio-net also speaks virtio 1.0; drive it as such.\n\
         \tlet device_id = if device_id == 0x1000 { 0x1041 } else { device_id };\n\n\
         \tif device_id < 0x1040 {",
    ),
    (
        "src/scheduler/task.rs",
        "\tpub fn custom_wakeup(&mut self, task: TaskHandle) -> Rc<RefCell<Task>> {",
        "\t// Pinfold: None when the task is not blocked (already woken by its timeout).\n\
         \tpub fn custom_wakeup(&mut self, task: TaskHandle) -> Option<Rc<RefCell<Task>>> {",
    ),
    (
        "src/scheduler/task.rs",
        "\t\t\t\treturn task_ref;",
        "\t\t\t\treturn Some(task_ref);",
    ),
    (
        "src/scheduler/task.rs",
        "\t\tunreachable!();\n\t}\n\n\t/// Wakes up all tasks whose wakeup time has elapsed.",
        "\t\tNone\n\t}\n\n\t/// Wakes up all tasks whose wakeup time has elapsed.",
    ),
    (
        "src/scheduler/mod.rs",
        "\t\twithout_interrupts(|| {\n\t\t\tlet task = self.blocked_tasks.custom_wakeup(task);\n\t\t\tself.ready_queue.push(task);",
        "\t\twithout_interrupts(|| {\n\t\t\tif let Some(task) = self.blocked_tasks.custom_wakeup(task) {\n\t\t\t\tself.ready_queue.push(task);\n\t\t\t}",
    ),
    (
        "src/drivers/virtio/transport/pci.rs",
        "\t\t\t.device_status()\n\t\t\t.write(DeviceStatus::empty());\n\t}",
        "\t\t\t.device_status()\n\t\t\t.write(DeviceStatus::empty());\n\
         \t\t// Pinfold: the reset is done once device_status reads back 0 (virtio 1.x 4.1.4.3.2).\n\
         \t\twhile !self.com_cfg.as_ptr().device_status().read().is_empty() {\n\
         \t\t\tcore::hint::spin_loop();\n\
         \t\t}\n\t}",
    ),
    (
        "src/arch/aarch64/kernel/pci.rs",
        "\t\t\t\t\t\t\t// Initializes BARs\n\t\t\t\t\t\t\tlet mut cmd = CommandRegister::empty();",
        "\t\t\t\t\t\t\t// Pinfold: from COMMAND's reset value, whatever firmware left: decoding off while the BARs move.\n\
         \t\t\t\t\t\t\tdev.header().update_command(dev.access(), |_| CommandRegister::empty());\n\
         \t\t\t\t\t\t\t// Initializes BARs\n\t\t\t\t\t\t\tlet mut cmd = CommandRegister::empty();",
    ),
    (
        "src/mm/device_alloc.rs",
        "unsafe impl Allocator for DeviceAlloc {\n\
         \tfn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {\n\
         \t\tassert!(layout.align() <= BasePageSize::SIZE as usize);\n\
         \t\tlet size = layout.size().align_up(BasePageSize::SIZE as usize);\n\
         \t\tlet ptr = super::allocate(size, true).as_mut_ptr::<u8>();",
        "/// Pinfold: device buffers given back, still mapped, for the next\n\
         /// allocation of the same size (no map, no unmap, no broadcast TLB invalidation).\n\
         const DEVICE_PAGE_CACHE: usize = 512;\n\
         struct PageCache {\n\
         \tblocks: [(usize, usize); DEVICE_PAGE_CACHE],\n\
         \tlen: usize,\n\
         }\n\
         static PAGE_CACHE: hermit_sync::InterruptTicketMutex<PageCache> =\n\
         \thermit_sync::InterruptTicketMutex::new(PageCache { blocks: [(0, 0); DEVICE_PAGE_CACHE], len: 0 });\n\
         \n\
         unsafe impl Allocator for DeviceAlloc {\n\
         \tfn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {\n\
         \t\tassert!(layout.align() <= BasePageSize::SIZE as usize);\n\
         \t\tlet size = layout.size().align_up(BasePageSize::SIZE as usize);\n\
         \t\t{\n\
         \t\t\tlet mut cache = PAGE_CACHE.lock();\n\
         \t\t\tlet len = cache.len;\n\
         \t\t\tif let Some(i) = cache.blocks[..len].iter().rposition(|b| b.1 == size) {\n\
         \t\t\t\tlet addr = cache.blocks[i].0;\n\
         \t\t\t\tcache.blocks[i] = cache.blocks[len - 1];\n\
         \t\t\t\tcache.len -= 1;\n\
         \t\t\t\tlet ptr = ptr::with_exposed_provenance_mut::<u8>(addr);\n\
         \t\t\t\treturn Ok(NonNull::new(ptr::slice_from_raw_parts_mut(ptr, size)).unwrap());\n\
         \t\t\t}\n\
         \t\t}\n\
         \t\tlet ptr = super::allocate(size, true).as_mut_ptr::<u8>();",
    ),
    (
        "src/mm/device_alloc.rs",
        "\t\tlet addr = ptr.as_ptr().expose_provenance().into();\n\
         \t\tsuper::deallocate(addr, size);",
        "\t\t{\n\
         \t\t\tlet mut cache = PAGE_CACHE.lock();\n\
         \t\t\tif cache.len < DEVICE_PAGE_CACHE {\n\
         \t\t\t\tlet len = cache.len;\n\
         \t\t\t\tcache.blocks[len] = (ptr.as_ptr().expose_provenance(), size);\n\
         \t\t\t\tcache.len += 1;\n\
         \t\t\t\treturn;\n\
         \t\t\t}\n\
         \t\t}\n\
         \t\tlet addr = ptr.as_ptr().expose_provenance().into();\n\
         \t\tsuper::deallocate(addr, size);",
    ),
    (
        "src/drivers/net/virtio/mod.rs",
        "\t\tlet vec_data = packets.into_iter().flatten().collect();",
        "\t\t// Pinfold: one copy per buffer, not a byte-wise collect.\n\
         \t\tlet mut vec_data = Vec::with_capacity(packets.iter().map(|p| p.len()).sum());\n\
         \t\tfor packet in &packets {\n\
         \t\t\tvec_data.extend_from_slice(packet);\n\
         \t\t}",
    ),
    (
        "src/mm/allocator.rs",
        "\t\tlet align = layout\n\
         \t\t\t.align()\n\
         \t\t\t.max(core::mem::align_of::<crossbeam_utils::CachePadded<u8>>());\n\
         \t\tLayout::from_size_align(layout.size(), align).unwrap()",
        "\t\t// Pinfold: one CPU (no `smp`), so no false sharing to pad against.\n\
         \t\tlayout",
    ),
    (
        "src/config.rs",
        "if cfg!(feature = \"pci\") { 2048 } else { 1024 }",
        "if cfg!(feature = \"pci\") { 256 } else { 1024 }",
    ),
    (
        "src/fd/socket/tcp.rs",
        "\t\t\t\tif s.is_active() {\n\t\t\t\t\tsocket_handle = Some(*handle);",
        "\t\t\t\t// Pinfold: not while SYN-RECEIVED (a RST would turn it back into a listener).\n\
         \t\t\t\tif s.is_active() && s.state() != tcp::State::SynReceived {\n\t\t\t\t\tsocket_handle = Some(*handle);",
    ),
    (
        "src/fd/socket/tcp.rs",
        "\tfn drop(&mut self) {\n\t\tlet _ = block_on(self.close(), None);\n\n\t\tlet mut guard = NIC.lock();\n\t\tfor h in self.handle.iter() {\n\t\t\tguard.as_nic_mut().unwrap().destroy_socket(*h);\n\t\t}\n\t}",
        "\tfn drop(&mut self) {\n\
         \t\t// Pinfold: never wait for the close handshake here; the network task finishes it.\n\
         \t\tlet mut guard = NIC.lock();\n\
         \t\tlet Ok(nic) = guard.as_nic_mut() else { return };\n\
         \t\tfor h in self.handle.iter() {\n\
         \t\t\tlet socket = nic.get_mut_socket::<tcp::Socket<'_>>(*h);\n\
         \t\t\tif socket.is_active() {\n\
         \t\t\t\tsocket.close();\n\
         \t\t\t\tcrate::executor::network::linger(*h);\n\
         \t\t\t} else {\n\
         \t\t\t\tnic.destroy_socket(*h);\n\
         \t\t\t}\n\
         \t\t}\n\
         \t}",
    ),
    (
        "src/executor/network.rs",
        "async fn network_run() {",
        "/// Pinfold: TCP connections dropped while still open, and when they are aborted.\n\
         static LINGERING: InterruptTicketMutex<alloc::vec::Vec<(Handle, Instant)>> =\n\
         \tInterruptTicketMutex::new(alloc::vec::Vec::new());\n\
         /// Pinfold: how long a dropped connection may take to close before it is aborted.\n\
         const LINGER_MS: u64 = 3000;\n\n\
         /// Pinfold: hands a closing connection to the network task (the NIC's lock is held).\n\
         pub(crate) fn linger(handle: Handle) {\n\
         \tLINGERING.lock().push((handle, now() + Duration::from_millis(LINGER_MS)));\n\
         }\n\n\
         /// Pinfold: frees the lingering connections that closed, aborts the overdue ones.\n\
         fn reap_lingering(nic: &mut NetworkInterface<'_>, now: Instant) {\n\
         \tLINGERING.lock().retain(|&(handle, deadline)| {\n\
         \t\tlet socket = nic.get_mut_socket::<tcp::Socket<'_>>(handle);\n\
         \t\tif !socket.is_active() {\n\
         \t\t\tnic.destroy_socket(handle);\n\
         \t\t\treturn false;\n\
         \t\t}\n\
         \t\tif now >= deadline {\n\
         \t\t\tsocket.abort();\n\
         \t\t}\n\
         \t\ttrue\n\
         \t});\n\
         }\n\n\
         async fn network_run() {",
    ),
    (
        "src/executor/network.rs",
        "\t\t\t\tNetworkState::Initialized(nic) => {\n\t\t\t\t\tnic.poll_common(now());\n\t\t\t\t\tPoll::Pending",
        "\t\t\t\tNetworkState::Initialized(nic) => {\n\t\t\t\t\tnic.poll_common(now());\n\
         \t\t\t\t\treap_lingering(nic, now());\n\t\t\t\t\tPoll::Pending",
    ),
    (
        "src/arch/aarch64/kernel/processor.rs",
        "pub fn seed_entropy() -> Option<[u8; 32]> {\n\tNone\n}",
        SEED_ENTROPY_FROM_HYPERVISOR,
    ),
    (
        "src/arch/aarch64/kernel/start.s",
        ".macro trap_exit\n",
        FPSIMD_MACROS,
    ),
    (
        "src/arch/aarch64/kernel/start.s",
        "      b.eq 1f\n      // switch to the next task\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n1:",
        "      b.eq 1f\n      // switch to the next task\n      fpsimd_save\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n      fpsimd_restore\n1:",
    ),
    (
        "src/arch/aarch64/kernel/start.s",
        "      b.eq 2f\n      // switch to the next task\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n2:",
        "      b.eq 2f\n      // switch to the next task\n      fpsimd_save\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n      fpsimd_restore\n2:",
    ),
    (
        "src/arch/aarch64/kernel/start.s",
        "      b.eq 3f\n      // switch to the next task\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n3:",
        "      b.eq 3f\n      // switch to the next task\n      fpsimd_save\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n      fpsimd_restore\n3:",
    ),
    (
        "src/arch/aarch64/kernel/start.s",
        "      b.eq 4f\n      // switch to the next task\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n4:",
        "      b.eq 4f\n      // switch to the next task\n      fpsimd_save\n      mov x1, sp\n      str x1, [x0]                  /* store old sp */\n      bl get_last_stack_pointer     /* get new sp   */\n      mov sp, x0\n      fpsimd_restore\n4:",
    ),
    (
        "src/arch/aarch64/kernel/scheduler.rs",
        "\t\t\t// Set the task's stack pointer entry to the stack we have just crafted.\n\t\t\tself.last_stack_pointer = stack;",
        "\t\t\t// Pinfold: below the State, the FP/SIMD frame a switch to this task restores (FPCR, FPSR, Q0-Q31; zero).\n\
         \t\t\tstack -= 528usize;\n\
         \t\t\tcore::ptr::write_bytes(stack.as_mut_ptr::<u8>(), 0, 528);\n\
         \t\t\t// Set the task's stack pointer entry to the stack we have just crafted.\n\t\t\tself.last_stack_pointer = stack;",
    ),
    (
        "src/drivers/net/virtio/mod.rs",
        "\t\tlet minimal_features = virtio::net::F::VERSION_1 | virtio::net::F::MAC;\n",
        "\t\tlet minimal_features = virtio::net::F::VERSION_1\n\
         \t\t\t| virtio::net::F::MAC\n\
         \t\t\t| (virtio::net::F::from(self.com_cfg.dev_features())\n\
         \t\t\t\t& virtio::net::F::ACCESS_PLATFORM);\n",
    ),
    (
        "src/drivers/net/virtio/mod.rs",
        "\t\tself.send_vqs.vqs[0]\n\t\t\t.dispatch(buff_tkn, false, BufferType::Direct)\n\t\t\t.unwrap();\n\n\t\tresult",
        "\t\t// Pinfold: a full send queue drops the frame (TCP sends it again), as a NIC would, instead of panicking.\n\
         \t\tif self.send_vqs.vqs[0]\n\t\t\t.dispatch(buff_tkn, false, BufferType::Direct)\n\t\t\t.is_err()\n\
         \t\t{\n\
         \t\t\tstatic DROPPED: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);\n\
         \t\t\tif DROPPED.fetch_add(1, core::sync::atomic::Ordering::Relaxed) == 0 {\n\
         \t\t\t\twarn!(\"virtio-net: send queue full, frame dropped (reported once)\");\n\
         \t\t\t}\n\
         \t\t}\n\n\t\tresult",
    ),
];

/// The FP/SIMD frame of a task switch (patches 18-23): every switch on
/// aarch64 happens on the way out of an IRQ or FIQ (`do_irq` returns where
/// to store the old stack pointer), so the old task's FPCR, FPSR and
/// Q0-Q31 go on its stack (528 bytes under its trap frame) right before
/// its stack pointer is stored, and the new task's come off its stack
/// right after the switch; a new task's stack is made with a zeroed frame
/// there (`create_stack_frame`). The kernel itself is softfloat and never
/// touches these registers, so the application's state survives
/// everything else untouched. Hermit 0.11 saved none of them: two threads
/// using NEON (memcpy, hashing, serde) corrupted each other's registers.
const FPSIMD_MACROS: &str = r#".arch_extension fp
.arch_extension simd
// Pinfold: FP/SIMD state of the task being switched out, on its stack.
.macro fpsimd_save
     sub sp, sp, #528
     mrs x2, fpcr
     mrs x3, fpsr
     stp x2, x3, [sp, #0]
     stp q0, q1, [sp, #16]
     stp q2, q3, [sp, #48]
     stp q4, q5, [sp, #80]
     stp q6, q7, [sp, #112]
     stp q8, q9, [sp, #144]
     stp q10, q11, [sp, #176]
     stp q12, q13, [sp, #208]
     stp q14, q15, [sp, #240]
     stp q16, q17, [sp, #272]
     stp q18, q19, [sp, #304]
     stp q20, q21, [sp, #336]
     stp q22, q23, [sp, #368]
     stp q24, q25, [sp, #400]
     stp q26, q27, [sp, #432]
     stp q28, q29, [sp, #464]
     stp q30, q31, [sp, #496]
.endm

// Pinfold: and the new task's, from its stack.
.macro fpsimd_restore
     ldp x2, x3, [sp, #0]
     msr fpcr, x2
     msr fpsr, x3
     ldp q0, q1, [sp, #16]
     ldp q2, q3, [sp, #48]
     ldp q4, q5, [sp, #80]
     ldp q6, q7, [sp, #112]
     ldp q8, q9, [sp, #144]
     ldp q10, q11, [sp, #176]
     ldp q12, q13, [sp, #208]
     ldp q14, q15, [sp, #240]
     ldp q16, q17, [sp, #272]
     ldp q18, q19, [sp, #304]
     ldp q20, q21, [sp, #336]
     ldp q22, q23, [sp, #368]
     ldp q24, q25, [sp, #400]
     ldp q26, q27, [sp, #432]
     ldp q28, q29, [sp, #464]
     ldp q30, q31, [sp, #496]
     add sp, sp, #528
.endm

.macro trap_exit
"#;

/// Hermit's `seed_entropy` for aarch64 (the eighth patch): ENTROPY into a
/// kernel static, at its physical address (the buffer's IPA).
const SEED_ENTROPY_FROM_HYPERVISOR: &str = r#"// Pinfold: 32 bytes from the hypervisor's ENTROPY call (ABI 3.1); None without a source.
pub fn seed_entropy() -> Option<[u8; 32]> {
    static BUF: hermit_sync::InterruptTicketMutex<[u8; 32]> =
        hermit_sync::InterruptTicketMutex::new([0; 32]);
    let mut buf = BUF.lock();
    let virt = memory_addresses::VirtAddr::from_ptr(buf.as_ptr());
    let ipa = crate::arch::mm::paging::virtual_to_physical(virt)?.as_u64();
    let mut status: u64 = 0xC600_001A;
    // SAFETY: ENTROPY writes at most x2 = 32 bytes at the IPA in x1, which is
    // BUF (held locked, so no one else reads it meanwhile); x0-x5 are the
    // only registers the call changes.
    unsafe {
        asm!(
            "hvc #0",
            inout("x0") status,
            inout("x1") ipa => _,
            inout("x2") 32u64 => _,
            inout("x3") 0u64 => _,
            inout("x4") 0u64 => _,
            inout("x5") 0u64 => _,
            options(nostack)
        );
    }
    if status != 0 {
        return None;
    }
    // SAFETY: BUF is a valid, aligned [u8; 32] we hold locked; volatile
    // because the hypervisor, not Rust, wrote it.
    let seed = unsafe { core::ptr::read_volatile(buf.as_ptr().cast::<[u8; 32]>()) };
    *buf = [0; 32];
    Some(seed)
}"#;
/// Bumped whenever [`KERNEL_PATCHES`] changes, so the source is unpacked
/// and patched afresh.
const KERNEL_PATCH_REVISION: u32 = 12;
/// Only what the manager needs: virtio-net over PCI, TCP, DHCP. No `smp`:
/// Hermit 0.11 on aarch64 runs on one CPU anyway.
const KERNEL_FEATURES: &str = "pci,tcp,dhcpv4";
/// `-Zmutable-noalias=no` as upstream builds it (its issue #200), PIC
/// because the kernel is linked into a static-PIE application.
const KERNEL_RUSTFLAGS: [&str; 2] = ["-Zmutable-noalias=no", "-Crelocation-model=pic"];
const KERNEL_TARGET: &str = "aarch64-unknown-none-softfloat";
const APP_TARGET: &str = "aarch64-unknown-hermit";
/// Kernel symbols the application links against besides `sys_*`.
const KERNEL_EXPORTS: [&str; 4] = ["_start", "__bss_start", "mcount", "runtime_entry"];
const EI_OSABI: usize = 7;
const ELFOSABI_STANDALONE: u8 = 255;
/// The loader reads the application's path from this at build time.
const APP_ELF_ENV: &str = "PINFOLD_MANAGER_APP_ELF";
/// The application's build.rs reads libhermit.a's directory from this.
const LIBHERMIT_DIR_ENV: &str = "PINFOLD_LIBHERMIT_DIR";
/// Tells the application's build.rs that nothing will be linked (a clippy
/// run), so it needs no `libhermit.a`.
const CHECK_ONLY_ENV: &str = "PINFOLD_MANAGER_CHECK_ONLY";
/// The application's build.rs embeds the web UI's files from this.
const WEB_UI_DIST_ENV: &str = "PINFOLD_WEB_UI_DIST";

/// Builds everything and returns the path of the loader's raw image,
/// `target/pinfold/manager.bin`: boot it as a QEMU `-kernel` (arm64 Image
/// header, text_offset 0x80000, entered at EL1 with x0 = DTB).
pub fn build_manager(root: &Path) -> Result<PathBuf, String> {
    let paths = Paths::new(root);
    for dir in [&paths.hermit, &paths.dist, &paths.out] {
        fs::create_dir_all(dir).map_err(|err| format!("creating {}: {err}", dir.display()))?;
    }
    timed("toolchain", ensure_toolchain)?;
    let tools = LlvmTools::locate()?;
    let source = timed("kernel source", || fetch_kernel_source(&paths))?;
    let kernel = timed("kernel", || build_kernel(&paths, &source))?;
    let builtins = timed("builtins", || build_builtins(&paths))?;
    let libhermit = timed("libhermit.a", || {
        link_library(&paths, &tools, &kernel, &builtins)
    })?;
    let web_ui = timed("web UI", || build_web_ui(&paths))?;
    let app = timed("app", || build_app(&paths, &libhermit, &web_ui))?;
    let loader = timed("loader", || build_loader(&paths, &app))?;
    let image = paths.out.join("manager.bin");
    run(Command::new(&tools.objcopy)
        .args(["-O", "binary"])
        .arg(&loader)
        .arg(&image))?;
    let size = fs::metadata(&image)
        .map_err(|err| format!("{}: {err}", image.display()))?
        .len();
    println!("xtask: {} ({size} bytes)", image.display());
    Ok(image)
}

/// Where each step reads and writes.
struct Paths {
    root: PathBuf,
    /// `target/hermit`: the crate, its source and the nightly builds.
    hermit: PathBuf,
    /// The post-processed `libhermit.a`.
    dist: PathBuf,
    /// `target/pinfold`, where the final image goes.
    out: PathBuf,
    app: PathBuf,
    builtins: PathBuf,
}

impl Paths {
    fn new(root: &Path) -> Self {
        let hermit = root.join("target/hermit");
        Self {
            root: root.to_path_buf(),
            dist: hermit.join("dist"),
            hermit,
            out: root.join("target/pinfold"),
            app: root.join("manager/app"),
            builtins: root.join("manager/app/builtins"),
        }
    }
}

/// Runs one step and prints how long it took.
fn timed<T>(step: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let start = Instant::now();
    let result = f();
    println!(
        "xtask: hermit {step}: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    result
}

fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `cmd` with inherited output; fails unless it exits 0.
fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd
        .status()
        .map_err(|err| format!("cannot start `{}`: {err}", describe(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", describe(cmd)))
    }
}

/// Runs `cmd` and returns its stdout; fails unless it exits 0.
fn stdout_of(cmd: &mut Command) -> Result<String, String> {
    let output = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|err| format!("cannot start `{}`: {err}", describe(cmd)))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!("`{}` failed ({})", describe(cmd), output.status))
    }
}

/// `program` (cargo, rustc) of the Hermit nightly, in an environment
/// cleaned of what the outer (stable) cargo set: its CARGO_*/RUST*
/// variables would pick the wrong toolchain or leak flags into the builds.
fn nightly(program: &str) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", HERMIT_TOOLCHAIN, program]);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        let keep = key == "CARGO_HOME" || key == "RUSTUP_HOME";
        if !keep && (key.starts_with("CARGO") || key.starts_with("RUST")) {
            cmd.env_remove(&*key);
        }
    }
    cmd
}

/// What the pinned nightly needs: rust-src for build-std, llvm-tools for the
/// archive work, clippy and rustfmt because the host tier lints the
/// application with this toolchain.
const TOOLCHAIN_COMPONENTS: [&str; 4] = ["rust-src", "llvm-tools", "clippy", "rustfmt"];

/// Installs the pinned nightly with [`TOOLCHAIN_COMPONENTS`], or adds the
/// components it lacks.
fn ensure_toolchain() -> Result<(), String> {
    let installed = stdout_of(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        HERMIT_TOOLCHAIN,
    ]));
    let Ok(installed) = installed else {
        return run(Command::new("rustup")
            .args(["toolchain", "install", HERMIT_TOOLCHAIN])
            .args(["--profile", "minimal", "--component"])
            .arg(TOOLCHAIN_COMPONENTS.join(",")));
    };
    let missing: Vec<&str> = TOOLCHAIN_COMPONENTS
        .into_iter()
        .filter(|name| !installed.lines().any(|line| line.starts_with(name)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    run(Command::new("rustup")
        .args(["component", "add", "--toolchain", HERMIT_TOOLCHAIN])
        .args(missing))
}

/// The nightly's LLVM binutils (component llvm-tools).
struct LlvmTools {
    nm: PathBuf,
    objcopy: PathBuf,
    ar: PathBuf,
}

impl LlvmTools {
    fn locate() -> Result<Self, String> {
        let sysroot = stdout_of(nightly("rustc").args(["--print", "sysroot"]))?;
        let version = stdout_of(nightly("rustc").arg("-vV"))?;
        let host = version
            .lines()
            .find_map(|line| line.strip_prefix("host: "))
            .ok_or("rustc -vV names no host")?;
        let bin = Path::new(sysroot.trim())
            .join("lib/rustlib")
            .join(host)
            .join("bin");
        let tools = Self {
            nm: bin.join("llvm-nm"),
            objcopy: bin.join("llvm-objcopy"),
            ar: bin.join("llvm-ar"),
        };
        for tool in [&tools.nm, &tools.objcopy, &tools.ar] {
            if !tool.exists() {
                return Err(format!(
                    "{} is missing (component llvm-tools)",
                    tool.display()
                ));
            }
        }
        Ok(tools)
    }
}

/// Downloads, verifies and unpacks the kernel crate; returns the source dir.
fn fetch_kernel_source(paths: &Paths) -> Result<PathBuf, String> {
    let source = paths.hermit.join(KERNEL_CRATE);
    let stamp = source.join(".pinfold-unpacked");
    let stamp_text = format!("{KERNEL_SHA256} patches {KERNEL_PATCH_REVISION}");
    if fs::read_to_string(&stamp).is_ok_and(|text| text.trim() == stamp_text) {
        return Ok(source);
    }
    let archive = paths.hermit.join(format!("{KERNEL_CRATE}.crate"));
    if crate::cmd::sha256_file(&archive).ok().as_deref() != Some(KERNEL_SHA256) {
        crate::cmd::registry_crate(
            &paths.hermit.join("fetch"),
            KERNEL_DEPENDENCY,
            KERNEL_CRATE,
            KERNEL_SHA256,
            &archive,
        )?;
    }
    if source.exists() {
        fs::remove_dir_all(&source)
            .map_err(|err| format!("removing {}: {err}", source.display()))?;
    }
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&paths.hermit))?;
    // The source lies inside our workspace's directory tree; without a
    // [workspace] table of its own cargo would take it for an unlisted
    // member of ours and refuse to build it.
    let manifest = source.join("Cargo.toml");
    fs::OpenOptions::new()
        .append(true)
        .open(&manifest)
        .and_then(|mut file| file.write_all(b"\n[workspace]\n"))
        .map_err(|err| format!("{}: {err}", manifest.display()))?;
    for (file, find, replace) in KERNEL_PATCHES {
        let path = source.join(file);
        let text = fs::read_to_string(&path).map_err(|err| format!("{}: {err}", path.display()))?;
        let patched =
            patch_once(&text, find, replace).map_err(|why| format!("{}: {why}", path.display()))?;
        fs::write(&path, patched).map_err(|err| format!("{}: {err}", path.display()))?;
    }
    fs::write(&stamp, stamp_text).map_err(|err| format!("{}: {err}", stamp.display()))?;
    Ok(source)
}

/// `text` with the one occurrence of `find` replaced; an error if `find`
/// occurs zero or several times (the source is not what the patch expects).
fn patch_once(text: &str, find: &str, replace: &str) -> Result<String, String> {
    match text.matches(find).count() {
        1 => Ok(text.replacen(find, replace, 1)),
        count => Err(format!(
            "patch anchor found {count} times, expected once: {find:?}"
        )),
    }
}

/// Builds the kernel static library; returns its path.
fn build_kernel(paths: &Paths, source: &Path) -> Result<PathBuf, String> {
    let target_dir = paths.hermit.join("kernel");
    run(nightly("cargo")
        .current_dir(source)
        // Hermit logs its whole DTB and every boot step at `info`: ~20 KB
        // through the emulated UART, each byte a trap. Warnings are enough.
        .env("HERMIT_LOG_LEVEL_FILTER", "warn")
        .env("CARGO_ENCODED_RUSTFLAGS", KERNEL_RUSTFLAGS.join("\x1f"))
        .args(["build", "--release", "--locked", "--target", KERNEL_TARGET])
        .args([
            "-Zbuild-std=core,alloc",
            "-Zbuild-std-features=compiler-builtins-mem",
        ])
        .args(["--no-default-features", "--features", KERNEL_FEATURES])
        .arg("--target-dir")
        .arg(&target_dir))?;
    Ok(target_dir.join(KERNEL_TARGET).join("release/libhermit.a"))
}

/// Builds `manager/app/builtins` (math.h and mem* for std); returns the
/// static library's path.
fn build_builtins(paths: &Paths) -> Result<PathBuf, String> {
    let target_dir = paths.hermit.join("builtins");
    run(nightly("cargo")
        .current_dir(&paths.builtins)
        .args(["build", "--release", "--locked", "--target", APP_TARGET])
        .args([
            "-Zbuild-std=core",
            "-Zbuild-std-features=compiler-builtins-mem",
        ])
        .arg("--target-dir")
        .arg(&target_dir))?;
    Ok(target_dir
        .join(APP_TARGET)
        .join("release/libhermit_builtins.a"))
}

fn modified(path: &Path) -> Result<SystemTime, String> {
    fs::metadata(path)
        .and_then(|meta| meta.modified())
        .map_err(|err| format!("{}: {err}", path.display()))
}

/// Makes `dist/libhermit.a` from the kernel and builtins archives unless it
/// is newer than all of its inputs.
fn link_library(
    paths: &Paths,
    tools: &LlvmTools,
    kernel: &Path,
    builtins: &Path,
) -> Result<PathBuf, String> {
    let out = paths.dist.join("libhermit.a");
    let exports_file = paths.builtins.join("exports");
    if let Ok(built) = modified(&out) {
        let inputs = [
            modified(kernel)?,
            modified(builtins)?,
            modified(&exports_file)?,
        ];
        if inputs.iter().all(|input| *input < built) {
            return Ok(out);
        }
    }

    let work = paths.dist.join("libhermit.a.partial");
    fs::copy(kernel, &work).map_err(|err| format!("copying {}: {err}", kernel.display()))?;
    let symbols = defined_symbols(tools, &work)?;
    let syscalls: Vec<&str> = symbols
        .iter()
        .filter(|symbol| symbol.member.starts_with("hermit-") && symbol.name.starts_with("sys_"))
        .map(|symbol| symbol.name.as_str())
        .collect();
    if syscalls.is_empty() {
        return Err(format!(
            "{}: no sys_* symbols in the kernel's own objects",
            kernel.display()
        ));
    }
    let keep: HashSet<&str> = KERNEL_EXPORTS.into_iter().chain(syscalls).collect();
    rename_symbols(tools, &work, "hermit", &symbols, &keep)?;

    let builtins_copy = paths.dist.join("libhermit_builtins.a");
    fs::copy(builtins, &builtins_copy)
        .map_err(|err| format!("copying {}: {err}", builtins.display()))?;
    let exports = fs::read_to_string(&exports_file)
        .map_err(|err| format!("{}: {err}", exports_file.display()))?;
    let keep: HashSet<&str> = exports
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let symbols = defined_symbols(tools, &builtins_copy)?;
    rename_symbols(tools, &builtins_copy, "hermit_builtins", &symbols, &keep)?;
    // `L`: append the members of the other archive, not the archive itself.
    run(Command::new(&tools.ar)
        .arg("qL")
        .arg(&work)
        .arg(&builtins_copy))?;

    let mut bytes = fs::read(&work).map_err(|err| format!("{}: {err}", work.display()))?;
    let members = set_osabi(&mut bytes).map_err(|why| format!("{}: {why}", work.display()))?;
    fs::write(&work, &bytes).map_err(|err| format!("{}: {err}", work.display()))?;
    fs::rename(&work, &out).map_err(|err| format!("{}: {err}", out.display()))?;
    println!(
        "xtask: {} ({members} objects, EI_OSABI = {ELFOSABI_STANDALONE})",
        out.display()
    );
    Ok(out)
}

/// A global symbol defined by one archive member.
#[derive(Debug, PartialEq, Eq)]
struct DefinedSymbol {
    member: String,
    name: String,
}

/// Parses one line of `llvm-nm -A -g --defined-only` on an archive:
/// `path:member: value type name`.
fn parse_nm_line(line: &str) -> Option<DefinedSymbol> {
    let (location, rest) = line.rsplit_once(": ")?;
    let (_, member) = location.rsplit_once(':')?;
    let name = rest.split_whitespace().last()?;
    Some(DefinedSymbol {
        member: member.to_owned(),
        name: name.to_owned(),
    })
}

fn defined_symbols(tools: &LlvmTools, archive: &Path) -> Result<Vec<DefinedSymbol>, String> {
    let listing = stdout_of(
        Command::new(&tools.nm)
            .args(["-A", "-g", "--defined-only"])
            .arg(archive),
    )?;
    Ok(listing.lines().filter_map(parse_nm_line).collect())
}

/// The new name of `symbol` under `prefix`: legacy-mangled Rust names get
/// `prefix` as a leading path component (`_ZN4core..` -> `_ZN6hermit4core..`),
/// so they still demangle; all others get `prefix_`.
fn prefixed(symbol: &str, prefix: &str) -> String {
    match symbol.strip_prefix("_ZN") {
        Some(rest) => format!("_ZN{}{prefix}{rest}", prefix.len()),
        None => format!("{prefix}_{symbol}"),
    }
}

/// Renames every symbol defined in `archive` except those in `keep`, in
/// definitions and references alike (llvm-objcopy --redefine-syms).
fn rename_symbols(
    tools: &LlvmTools,
    archive: &Path,
    prefix: &str,
    symbols: &[DefinedSymbol],
    keep: &HashSet<&str>,
) -> Result<(), String> {
    let mut seen = HashSet::new();
    let mut map = String::new();
    for symbol in symbols {
        let name = symbol.name.as_str();
        if !keep.contains(name) && seen.insert(name) {
            map.push_str(name);
            map.push(' ');
            map.push_str(&prefixed(name, prefix));
            map.push('\n');
        }
    }
    let map_file = archive.with_extension("redefine-syms");
    fs::write(&map_file, map).map_err(|err| format!("{}: {err}", map_file.display()))?;
    let mut arg = std::ffi::OsString::from("--redefine-syms=");
    arg.push(&map_file);
    run(Command::new(&tools.objcopy).arg(arg).arg(archive))?;
    fs::remove_file(&map_file).map_err(|err| format!("{}: {err}", map_file.display()))
}

/// Sets EI_OSABI to ELFOSABI_STANDALONE in every ELF member of a GNU/SysV
/// `ar` archive in place; returns how many members it changed.
fn set_osabi(archive: &mut [u8]) -> Result<usize, String> {
    const MAGIC: &[u8] = b"!<arch>\n";
    const HEADER: usize = 60;
    if !archive.starts_with(MAGIC) {
        return Err("not an ar archive".into());
    }
    let mut offset = MAGIC.len();
    let mut changed = 0;
    while offset + HEADER <= archive.len() {
        let header = &archive[offset..offset + HEADER];
        if &header[58..60] != b"`\n" {
            return Err(format!("bad member header at offset {offset}"));
        }
        let size: usize = std::str::from_utf8(&header[48..58])
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .ok_or_else(|| format!("bad member size at offset {offset}"))?;
        let data = offset + HEADER;
        let end = data.checked_add(size).filter(|end| *end <= archive.len());
        let Some(end) = end else {
            return Err(format!("member at offset {offset} runs past the end"));
        };
        // The symbol table ("/") and long-name table ("//") are not ELF.
        if archive[data..end].starts_with(b"\x7fELF") && size > EI_OSABI {
            archive[data + EI_OSABI] = ELFOSABI_STANDALONE;
            changed += 1;
        }
        // Members start on even offsets.
        offset = end + (end & 1);
    }
    if changed == 0 {
        return Err("no ELF members".into());
    }
    Ok(changed)
}

/// Newest modification time of the files under `dir` (recursively).
fn newest(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for entry in fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let t = if path.is_dir() {
            newest_dir_skip(&path)
        } else {
            entry.metadata().ok().and_then(|m| m.modified().ok())
        };
        newest = newest.max(t);
    }
    newest
}

fn newest_dir_skip(path: &Path) -> Option<std::time::SystemTime> {
    let name = path.file_name()?.to_str()?;
    if matches!(name, "node_modules" | "dist" | "test-output") {
        None
    } else {
        newest(path)
    }
}

/// `web-ui/dist`, where the web UI's build puts its files.
fn web_ui_dist(paths: &Paths) -> PathBuf {
    paths.root.join("web-ui/dist")
}

/// Whether `web-ui/node_modules` is missing or older than the committed
/// lock file (a dependency was added since the last `npm ci`).
pub fn web_ui_modules_stale(ui: &Path) -> bool {
    let installed = fs::metadata(ui.join("node_modules/.package-lock.json"))
        .and_then(|m| m.modified())
        .ok();
    let locked = fs::metadata(ui.join("package-lock.json"))
        .and_then(|m| m.modified())
        .ok();
    installed.is_none() || locked > installed
}

/// Builds the web UI (`npm ci` when its lock file changed, then `npm run
/// build` when its sources or the REST contract it generates its types from,
/// `manager/api/openapi.json`, changed); returns `web-ui/dist`.
fn build_web_ui(paths: &Paths) -> Result<PathBuf, String> {
    let ui = paths.root.join("web-ui");
    let dist = web_ui_dist(paths);
    if web_ui_modules_stale(&ui) {
        run(Command::new("npm")
            .current_dir(&ui)
            .args(["ci", "--no-audit", "--no-fund"]))?;
    }
    let built = fs::metadata(dist.join("index.html"))
        .and_then(|m| m.modified())
        .ok();
    let contract = fs::metadata(paths.root.join("manager/api/openapi.json"))
        .and_then(|m| m.modified())
        .ok();
    if built.is_none() || newest(&ui) > built || contract > built {
        run(Command::new("npm").current_dir(&ui).args(["run", "build"]))?;
    }
    Ok(dist)
}

/// `cargo <subcommand>` of the pinned nightly on the Hermit application,
/// with the target, build-std and target directory of the real build (so a
/// lint run shares its std and dependency builds).
fn app_cargo(paths: &Paths, subcommand: &str) -> Command {
    let mut cmd = nightly("cargo");
    cmd.current_dir(&paths.app)
        .args([subcommand, "--release", "--locked", "--target", APP_TARGET])
        .arg("-Zbuild-std=std,panic_abort")
        .arg("--target-dir")
        .arg(paths.hermit.join("app"))
        // ring (rustls's crypto) compiles C and assembly through the cc
        // crate, which knows no compiler for aarch64-unknown-hermit: the
        // Debian cross gcc builds freestanding objects that link into the
        // Hermit image (a `cargo check` never runs it, only a build does).
        .env("CC_aarch64_unknown_hermit", CROSS_CC)
        .env("AR_aarch64_unknown_hermit", CROSS_AR);
    cmd
}

/// Read by manager/app/build.rs: the directory of `libpinfold_ring_asm.a`.
const RING_ASM_DIR_ENV: &str = "PINFOLD_RING_ASM_DIR";

/// ring's aarch64 assembly, assembled for the Hermit application.
///
/// ring's build script assembles its pregenerated ELF assembly only for the
/// operating systems it lists (Linux and the BSDs), not Hermit, while its
/// Rust and C code for aarch64 call those routines all the same: the app
/// then fails to link (`undefined symbol: ring_core_..._p256_point_double`;
/// a `cargo check` never gets that far). Hermit's objects are ELF with the
/// AAPCS64 ABI, so the Linux flavour (`*-linux64.S`, in ring's package)
/// is the right one: each is assembled with the cross gcc into
/// `target/hermit/ring-asm/libpinfold_ring_asm.a`.
fn ring_asm(paths: &Paths) -> Result<PathBuf, String> {
    let lock = fs::read_to_string(paths.app.join("Cargo.lock"))
        .map_err(|e| format!("manager/app/Cargo.lock: {e}"))?;
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"ring\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim_matches('"').to_string())
        .ok_or("manager/app/Cargo.lock names no ring")?;
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let registry = home.join("registry/src");
    let source = fs::read_dir(&registry)
        .map_err(|e| format!("{}: {e}", registry.display()))?
        .flatten()
        .map(|d| d.path().join(format!("ring-{version}")))
        .find(|p| p.is_dir())
        .ok_or_else(|| {
            format!(
                "ring-{version} is not unpacked under {}",
                registry.display()
            )
        })?;
    let out = paths.hermit.join("ring-asm");
    fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let archive = out.join("libpinfold_ring_asm.a");
    let pregenerated = source.join("pregenerated");
    let mut sources: Vec<PathBuf> = fs::read_dir(&pregenerated)
        .map_err(|e| format!("{}: {e}", pregenerated.display()))?
        .flatten()
        .map(|d| d.path())
        .filter(|p| p.to_string_lossy().ends_with("-linux64.S"))
        .collect();
    sources.sort();
    if archive.is_file() {
        return Ok(out);
    }
    let mut objects = Vec::new();
    for src in &sources {
        let obj = out.join(
            src.file_name()
                .map(|n| n.to_string_lossy().replace(".S", ".o"))
                .unwrap_or_default(),
        );
        run(Command::new(CROSS_CC)
            .arg("-c")
            .arg("-I")
            .arg(source.join("include"))
            .arg("-I")
            .arg(&pregenerated)
            .arg("-o")
            .arg(&obj)
            .arg(src))?;
        objects.push(obj);
    }
    run(Command::new(CROSS_AR)
        .arg("crs")
        .arg(&archive)
        .args(&objects))?;
    Ok(out)
}

/// Read by manager/app/build.rs: the directory of the certificate and key
/// (DER) the manager embeds.
const TLS_DIR_ENV: &str = "PINFOLD_MANAGER_TLS_DIR";

/// The Debian cross compiler (package gcc-aarch64-linux-gnu) for ring's C
/// and assembly in the Hermit application.
pub const CROSS_CC: &str = "aarch64-linux-gnu-gcc";
/// Its archiver (package binutils-aarch64-linux-gnu).
pub const CROSS_AR: &str = "aarch64-linux-gnu-ar";

/// Builds the Hermit application with the web UI embedded; returns its ELF.
fn build_app(paths: &Paths, libhermit: &Path, web_ui: &Path) -> Result<PathBuf, String> {
    let lib_dir = libhermit.parent().ok_or("libhermit.a has no directory")?;
    let names: Vec<String> = std::env::var("PINFOLD_MANAGER_HOSTNAMES")
        .unwrap_or_default()
        .split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    let cert = crate::tls::ensure(&paths.root, &names)?;
    println!(
        "xtask: manager TLS certificate {} (SHA-256 fingerprint {})",
        cert.dir.join("cert.pem").display(),
        cert.fingerprint
    );
    // What this process's clients trust from now on: hvctl
    // (`$PINFOLD_CACERT`), node (`NODE_EXTRA_CA_CERTS`) and Chromium (the
    // web UI tests pass `$PINFOLD_SPKI` as --ignore-certificate-errors-spki-list).
    let pem = cert.dir.join("cert.pem");
    std::env::set_var(hvctl::tls::CACERT_ENV, &pem);
    std::env::set_var("NODE_EXTRA_CA_CERTS", &pem);
    std::env::set_var("PINFOLD_SPKI", &cert.spki_sha256);
    let ring_asm = ring_asm(paths)?;
    run(app_cargo(paths, "build")
        .env(LIBHERMIT_DIR_ENV, lib_dir)
        .env(WEB_UI_DIST_ENV, web_ui)
        .env(TLS_DIR_ENV, &cert.dir)
        .env(RING_ASM_DIR_ENV, &ring_asm))?;
    Ok(paths
        .hermit
        .join("app")
        .join(APP_TARGET)
        .join("release/pinfold-manager-app"))
}

/// The house's lints on the Hermit application (its own workspace, the
/// pinned nightly): `cargo fmt --check` and `cargo clippy -D warnings` for
/// aarch64-unknown-hermit, in the real build's target directory. The build
/// script gets the environment the real build gives it when `libhermit.a`
/// and the web UI are there (so neither run invalidates the other's build
/// script output); before the first manager build it is told that nothing
/// will be linked.
pub fn lint_app(root: &Path) -> Result<(), String> {
    let paths = Paths::new(root);
    ensure_toolchain()?;
    run(nightly("cargo")
        .current_dir(&paths.app)
        .args(["fmt", "--check"]))
    .map_err(|err| format!("{err} (run `cargo fmt` in manager/app)"))?;
    let mut clippy = app_cargo(&paths, "clippy");
    if paths.dist.join("libhermit.a").is_file() {
        clippy.env(LIBHERMIT_DIR_ENV, &paths.dist);
        // Named, not needed: a lint run links nothing.
        clippy.env(RING_ASM_DIR_ENV, paths.hermit.join("ring-asm"));
    } else {
        clippy.env(CHECK_ONLY_ENV, "1");
    }
    let web_ui = web_ui_dist(&paths);
    if web_ui.join("index.html").is_file() {
        clippy.env(WEB_UI_DIST_ENV, web_ui);
    }
    run(clippy.args(["--", "-D", "warnings"]))
}

/// Builds the loader (stable toolchain, root workspace) around `app`;
/// returns the loader ELF.
fn build_loader(paths: &Paths, app: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(Command::new(cargo)
        .current_dir(&paths.root)
        .env(APP_ELF_ENV, app)
        .args([
            "build",
            "--release",
            "-p",
            "pinfold-manager-loader",
            "--target",
            KERNEL_TARGET,
        ]))?;
    Ok(paths
        .root
        .join("target")
        .join(KERNEL_TARGET)
        .join("release/pinfold-manager-loader"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut bytes = b"!<arch>\n".to_vec();
        for (name, data) in members {
            bytes.extend(
                format!(
                    "{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                    0,
                    0,
                    0,
                    644,
                    data.len()
                )
                .as_bytes(),
            );
            bytes.extend_from_slice(data);
            if data.len() % 2 == 1 {
                bytes.push(b'\n');
            }
        }
        bytes
    }

    fn elf_ident(osabi: u8) -> Vec<u8> {
        let mut ident = b"\x7fELF\x02\x01\x01".to_vec();
        ident.push(osabi);
        ident.extend_from_slice(&[0; 9]);
        ident
    }

    #[test]
    fn set_osabi_marks_every_elf_member_standalone() {
        let odd = [elf_ident(0), vec![0xaa]].concat();
        let mut bytes = archive(&[("a.o/", &elf_ident(0)), ("b.o/", &odd)]);

        let changed = set_osabi(&mut bytes);

        assert_eq!(changed, Ok(2));
        let first = 8 + 60;
        let second = first + 17 + 1 + 60;
        assert_eq!(bytes[first + EI_OSABI], ELFOSABI_STANDALONE);
        assert_eq!(bytes[second + EI_OSABI], ELFOSABI_STANDALONE);
    }

    #[test]
    fn set_osabi_leaves_the_symbol_table_alone() {
        let table = [0u8; 24];
        let mut bytes = archive(&[("/", &table), ("a.o/", &elf_ident(0))]);
        let original_table = bytes[68..68 + 24].to_vec();

        let changed = set_osabi(&mut bytes);

        assert_eq!(changed, Ok(1));
        assert_eq!(bytes[68..68 + 24], original_table[..]);
    }

    #[test]
    fn set_osabi_rejects_a_truncated_member() {
        let mut bytes = archive(&[("a.o/", &elf_ident(0))]);
        bytes.truncate(bytes.len() - 4);

        assert!(set_osabi(&mut bytes).is_err());
    }

    #[test]
    fn patch_once_replaces_a_unique_anchor() {
        assert_eq!(patch_once("a b c", "b", "x").as_deref(), Ok("a x c"));
    }

    #[test]
    fn patch_once_rejects_a_repeated_anchor() {
        assert!(patch_once("b b", "b", "x").is_err());
    }

    #[test]
    fn patch_once_rejects_a_missing_anchor() {
        assert!(patch_once("a c", "b", "x").is_err());
    }

    #[test]
    fn prefixed_adds_a_path_component_to_mangled_rust_names() {
        assert_eq!(
            prefixed("_ZN4core3fmt5write17h0123E", "hermit"),
            "_ZN6hermit4core3fmt5write17h0123E"
        );
    }

    #[test]
    fn prefixed_adds_an_underscored_prefix_to_c_names() {
        assert_eq!(
            prefixed("memcpy", "hermit_builtins"),
            "hermit_builtins_memcpy"
        );
    }

    #[test]
    fn parse_nm_line_splits_member_and_symbol() {
        let line = "/t/libhermit.a:hermit-1a.hermit.2b-cgu.02.rcgu.o: 0000000000000000 T sys_read";

        let symbol = parse_nm_line(line);

        let expected = DefinedSymbol {
            member: "hermit-1a.hermit.2b-cgu.02.rcgu.o".into(),
            name: "sys_read".into(),
        };
        assert_eq!(symbol, Some(expected));
    }

    /// The whole pipeline: minutes on a cold cache, network on first run.
    /// `cargo test -p xtask hermit -- --ignored --nocapture`
    #[test]
    #[ignore = "builds the Hermit kernel, the application and the loader"]
    fn build_manager_writes_an_arm64_image() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("workspace root");

        let image = build_manager(root).expect("build_manager");

        let bytes = fs::read(&image).expect("reading the image");
        assert_eq!(&bytes[56..60], b"ARM\x64");
    }
}
