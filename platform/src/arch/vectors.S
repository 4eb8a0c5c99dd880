// EL2 exception vectors. Synchronous traps from guests save the guest's
// general purpose registers in a GuestFrame on this CPU's EL2 stack and hand
// a pointer to it to Rust (the core may read or write any of them). The IRQ
// paths read no guest register: they save only what the AAPCS64 lets the
// Rust code they call clobber (x0-x18, x30; ELR/SPSR_EL2 stay in their
// registers, as nothing on the path takes another exception), run whole in
// their vector slot, and reach the root interrupt handler through a
// one-instruction call site patched once at boot (runtime constant, see
// hv::rtconst): until then it calls pinfold_default_irq_handler, which
// reports and halts.

.equ FRAME_SIZE, 272                  // x0-x30, ELR_EL2, SPSR_EL2, pad
.equ IRQ_FRAME_SIZE, 160              // x0-x18, x30

// An IRQ call site. PINFOLD_IRQ_FNPTR (set by arch/mod.rs from the
// `ablate-irq-fnptr` cargo feature, 0 otherwise) swaps it for the
// conventional mechanism the runtime constant replaces: load the handler
// from the site's pointer in data (`ptr`, the default handler until boot
// stores the root handler) and `blr` it. docs/PERFORMANCE.md, Ablations.
.macro IRQ_CALL ptr
.if PINFOLD_IRQ_FNPTR
    adrp    x16, \ptr
    ldr     x16, [x16, :lo12:\ptr]
    blr     x16
.else
    bl      pinfold_default_irq_handler
.endif
.endm

.macro SAVE_GUEST
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x19, [sp, #144]
    stp     x20, x21, [sp, #160]
    stp     x22, x23, [sp, #176]
    stp     x24, x25, [sp, #192]
    stp     x26, x27, [sp, #208]
    stp     x28, x29, [sp, #224]
    mrs     x0, elr_el2
    mrs     x1, spsr_el2
    stp     x30, x0, [sp, #240]
    str     x1, [sp, #256]
.endm

.macro VENTRY target
    .balign 0x80
    sub     sp, sp, #FRAME_SIZE
    stp     x0, x1, [sp, #0]
    b       \target
.endm

// An IRQ entry, whole, in its 32-instruction vector slot: no branch to or
// from a shared tail. `site` is the patched call site.
.macro IRQ_VECTOR site, ptr
    .balign 0x80
    sub     sp, sp, #IRQ_FRAME_SIZE
    stp     x0, x1, [sp, #0]
    SAVE_CALLER_SAVED
.global \site
\site:
    IRQ_CALL \ptr
    RESTORE_CALLER_SAVED
    eret
.endm

// The registers the AAPCS64 lets a callee clobber, x0/x1 already stored.
.macro SAVE_CALLER_SAVED
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x30, [sp, #144]
.endm

.macro RESTORE_CALLER_SAVED
    ldp     x18, x30, [sp, #144]
    ldp     x16, x17, [sp, #128]
    ldp     x14, x15, [sp, #112]
    ldp     x12, x13, [sp, #96]
    ldp     x10, x11, [sp, #80]
    ldp     x8, x9, [sp, #64]
    ldp     x6, x7, [sp, #48]
    ldp     x4, x5, [sp, #32]
    ldp     x2, x3, [sp, #16]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #IRQ_FRAME_SIZE
.endm

.section .text.vectors, "ax"
.balign 2048
.global pinfold_vectors
pinfold_vectors:
    // Current EL with SP_EL0 (never used by Pinfold)
    VENTRY  hv_fault
    VENTRY  hv_fault
    VENTRY  hv_fault
    VENTRY  hv_fault
    // Current EL with SP_ELx: the hypervisor itself
    VENTRY  hv_fault
    // An interrupt while the hypervisor itself runs with IRQs unmasked (idle).
    IRQ_VECTOR pinfold_irq_site_hv, pinfold_irq_handler_ptr_hv
    // The assembler refuses to move backwards: an IRQ entry that outgrew its
    // slot fails the build instead of shifting the vectors after it.
    .org    pinfold_vectors + 0x300
    VENTRY  hv_fault
    VENTRY  hv_fault
    // Lower EL, AArch64: guests
    VENTRY  guest_sync
    IRQ_VECTOR pinfold_irq_site_guest, pinfold_irq_handler_ptr_guest
    .org    pinfold_vectors + 0x500
    VENTRY  guest_fiq
    VENTRY  guest_serror
    // Lower EL, AArch32: not supported
    VENTRY  hv_fault
    VENTRY  hv_fault
    VENTRY  hv_fault
    VENTRY  hv_fault

.section .text, "ax"
hv_fault:
    SAVE_GUEST
    mov     x0, sp
    bl      pinfold_hv_fault
1:  wfe
    b       1b

// The synchronous entry's call is a runtime-constant site too: it calls the
// GICv3 host's entry (pinfold_guest_sync) as assembled, and boot patches
// it once to pinfold_guest_sync_v5 on a GICv5 host (irq.rs
// install_sync_entry). No guest runs before then.
guest_sync:
    SAVE_GUEST
    mov     x0, sp
.global pinfold_sync_site_guest
pinfold_sync_site_guest:
    bl      pinfold_guest_sync
    b       pinfold_restore_guest

guest_fiq:
guest_serror:
    SAVE_GUEST
    mov     x0, sp
    bl      pinfold_guest_serror
    b       pinfold_restore_guest

// Where a call site goes when its handler is out of BL range: boot code
// writes movz/movk x16 and `br x16` here (hv::rtconst::veneer_words).
// Unpatched, nothing calls it.
.balign 4
.global pinfold_irq_veneer
pinfold_irq_veneer:
    b       pinfold_default_irq_handler
    nop
    nop
    nop
    nop

.global pinfold_restore_guest
pinfold_restore_guest:
    ldp     x30, x0, [sp, #240]
    ldr     x1, [sp, #256]
    msr     elr_el2, x0
    msr     spsr_el2, x1
    ldp     x0, x1, [sp, #0]
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x19, [sp, #144]
    ldp     x20, x21, [sp, #160]
    ldp     x22, x23, [sp, #176]
    ldp     x24, x25, [sp, #192]
    ldp     x26, x27, [sp, #208]
    ldp     x28, x29, [sp, #224]
    add     sp, sp, #FRAME_SIZE
    eret

// pinfold_enter_guest(frame: *const GuestFrame, stack_top: u64) -> !
// Drops whatever is on this CPU's stack and erets into the guest with the
// registers in `frame` (which may itself live on that stack: it is read
// before anything is written).
.global pinfold_enter_guest
pinfold_enter_guest:
    ldp     x2, x3, [x0, #248]          // ELR, SPSR
    msr     elr_el2, x2
    msr     spsr_el2, x3
    mov     sp, x1
    ldr     x30, [x0, #240]
    ldp     x2, x3, [x0, #16]
    ldp     x4, x5, [x0, #32]
    ldp     x6, x7, [x0, #48]
    ldp     x8, x9, [x0, #64]
    ldp     x10, x11, [x0, #80]
    ldp     x12, x13, [x0, #96]
    ldp     x14, x15, [x0, #112]
    ldp     x16, x17, [x0, #128]
    ldp     x18, x19, [x0, #144]
    ldp     x20, x21, [x0, #160]
    ldp     x22, x23, [x0, #176]
    ldp     x24, x25, [x0, #192]
    ldp     x26, x27, [x0, #208]
    ldp     x28, x29, [x0, #224]
    ldp     x0, x1, [x0, #0]
    eret

.if PINFOLD_IRQ_FNPTR
.section .data.pinfold_irq_handler_ptr, "aw"
.balign 8
.global pinfold_irq_handler_ptr_guest
pinfold_irq_handler_ptr_guest:
    .quad   pinfold_default_irq_handler
.global pinfold_irq_handler_ptr_hv
pinfold_irq_handler_ptr_hv:
    .quad   pinfold_default_irq_handler
.section .text, "ax"
.endif

// pinfold_reset_stack_and_call(stack_top: u64, f: extern "C" fn() -> !) -> !
.global pinfold_reset_stack_and_call
pinfold_reset_stack_and_call:
    mov     sp, x0
    br      x1
